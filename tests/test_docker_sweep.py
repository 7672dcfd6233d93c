"""The end-of-run sweep of a host's containers, against a real Docker engine, when a container
goes away while the sweep is under way (another run's cleanup, a container's own removal).

Both races are produced for real: the container is really removed from the engine at the moment
the race would fall, between the engine's listing and the SDK's per-container inspection, or
between the listing and the removal. A stale id must neither stop the sweep nor leave the rest.
"""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest
from docker.errors import NotFound
from docker.models.containers import ContainerCollection

from tests.infra.docker_session import docker_client  # noqa: F401 - the session's engine and base image
from utils.executors.containers import LABEL_RUN
from utils.executors.docker import DockerSession

IMAGE = "inferperf/debian-python:bookworm"


def session_on(client, run_id: str) -> DockerSession:
    """A DockerSession holding only what ``sweep_run`` reads: the engine, the run and the host."""
    session = DockerSession.__new__(DockerSession)
    session.client = client
    session.run_id = run_id
    session.host = SimpleNamespace(label="sweephost")
    return session


def make_containers(client, run_id: str, count: int) -> list[str]:
    names = [f"inferperf-{run_id}-sweephost-{i}" for i in range(count)]
    for name in names:
        client.containers.create(IMAGE, ["true"], name=name, labels={LABEL_RUN: run_id})
    return names


def left(client, run_id: str) -> list[str]:
    return sorted(
        c["Names"][0].lstrip("/") for c in client.api.containers(all=True, filters={"label": f"{LABEL_RUN}={run_id}"})
    )


@pytest.fixture
def run_id(docker_client):  # noqa: F811
    run = f"sweep{uuid.uuid4().hex[:10]}"
    yield run
    for c in docker_client.api.containers(all=True, filters={"label": f"{LABEL_RUN}={run}"}):
        try:
            docker_client.api.remove_container(c["Id"], force=True)
        except NotFound:
            pass


@pytest.mark.docker
def test_a_container_gone_between_the_listing_and_its_inspection_does_not_stop_the_sweep(
    docker_client,  # noqa: F811
    run_id,
    monkeypatch,
):
    names = make_containers(docker_client, run_id, 3)
    real = docker_client.api.containers
    gone: list[str] = []

    def listing_then_removal(*args, **kwargs):  # the engine's listing, then one of them goes away for real
        rows = real(*args, **kwargs)
        if rows and not gone:
            docker_client.api.remove_container(rows[0]["Id"], force=True)
            gone.append(rows[0]["Names"][0].lstrip("/"))
        return rows

    monkeypatch.setattr(docker_client.api, "containers", listing_then_removal)
    session_on(docker_client, run_id).sweep_run()
    monkeypatch.undo()
    assert gone and gone[0] in names
    assert left(docker_client, run_id) == []


@pytest.mark.docker
def test_a_container_gone_between_the_listing_and_its_removal_does_not_stop_the_sweep(
    docker_client,  # noqa: F811
    run_id,
    monkeypatch,
):
    make_containers(docker_client, run_id, 3)
    real = ContainerCollection.list
    gone: list[str] = []

    def listed_then_removed(self, *args, **kwargs):  # the SDK's handles, then the first goes away for real
        handles = real(self, *args, **kwargs)
        if handles and not gone:
            docker_client.api.remove_container(handles[0].id, force=True)
            gone.append(handles[0].name)
        return handles

    monkeypatch.setattr(ContainerCollection, "list", listed_then_removed)  # a new collection per access
    session_on(docker_client, run_id).sweep_run()
    monkeypatch.undo()
    assert len(gone) == 1
    assert left(docker_client, run_id) == []
