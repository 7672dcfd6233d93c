"""SLURM_CONTAINER in host.yaml: its values, where it may appear, and what it switches
(utils/host_config.py::HostConfig.in_container, the executor utils/executors/__init__.py::create picks)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from common.errors import ConfigError
from tests.conftest import INFERENCE
from tests.infra.host_config import host_fields


def slurm_fields(tmp_path: Path, **overrides) -> dict:
    return host_fields(
        tmp_path, mode="slurm", hosts=["node01"], slurm_shared_dir=str(tmp_path), slurm_partition="debug", **overrides
    )


@pytest.mark.parametrize("value, in_container", [("none", False), ("docker", True)])
def test_values_and_what_they_switch(tmp_path, value, in_container):
    from utils.host_config import HostConfig

    config = HostConfig(**slurm_fields(tmp_path, slurm_container=value), inference_dir=INFERENCE)
    assert config.slurm_container == value and config.in_container is in_container


@pytest.mark.parametrize("value", ["podman", "Docker", "", 1, None, ["docker"]])
def test_other_values_are_one_line_naming_the_key(tmp_path, value):
    from utils.host_config import HostConfig

    with pytest.raises(ConfigError) as info:
        HostConfig(**slurm_fields(tmp_path, slurm_container=value), inference_dir=INFERENCE)
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'host.yaml'}: key 'SLURM_CONTAINER' ") and "\n" not in message


def test_it_belongs_to_mode_slurm_only(tmp_path):
    from utils.host_config import HostConfig

    with pytest.raises(ConfigError, match="SLURM_CONTAINER"):
        HostConfig(**host_fields(tmp_path, mode="local", slurm_container="docker"), inference_dir=INFERENCE)
    known = tmp_path / "known_hosts"
    known.touch()
    docker_fields = host_fields(tmp_path, mode="docker", hosts=["127.0.0.2"], known_hosts=str(known))
    assert HostConfig(**docker_fields, inference_dir=INFERENCE).in_container
    assert not HostConfig(**host_fields(tmp_path), inference_dir=INFERENCE).in_container


@pytest.mark.parametrize("value, expected", [("none", "SlurmSession"), ("docker", "SlurmDockerSession")])
def test_the_registry_picks_the_executor(tmp_path, value, expected):
    from utils import executors
    from utils.host_config import HostConfig

    config = HostConfig(**slurm_fields(tmp_path, slurm_container=value), inference_dir=INFERENCE)
    session = executors.create(config, 0, "20260101-000000-abcd", threading.Event(), tmp_path)
    assert type(session).__name__ == expected
    assert session.node == "node01"


def test_the_engine_is_reached_through_an_unbuffered_step_of_the_current_job(tmp_path):
    """srun forwards a step's stdout by lines unless --unbuffered: a Docker API response
    without a final newline would never arrive."""
    from utils import executors
    from utils.host_config import HostConfig

    config = HostConfig(**slurm_fields(tmp_path, slurm_container="docker"), inference_dir=INFERENCE)
    session = executors.create(config, 0, "20260101-000000-abcd", threading.Event(), tmp_path)
    assert session.workdir == str(tmp_path)  # code/, onnxs/, runs/ in SLURM_SHARED_DIR
    session.job_id = "42"
    argv = session.step_argv("docker", unbuffered=True)
    assert argv[:3] == ["srun", "--jobid=42", "--overlap"] and "--unbuffered" in argv and "--nodelist=node01" in argv
    assert argv[-1] == "--"
    assert "--unbuffered" not in session.step_argv("case")


@pytest.mark.parametrize("value", ["none", "docker"])
def test_clear_caches_drops_the_nodes_page_cache_in_a_step_of_the_job(tmp_path, monkeypatch, value):
    """CLEAR_CACHES on Slurm is a step of the node's job (never this machine's cache); a
    refusal (not root on the node) is one warning."""
    import subprocess

    from loguru import logger

    import utils.executors.slurm as slurm_session
    from utils import executors
    from utils.host_config import HostConfig

    config = HostConfig(**slurm_fields(tmp_path, slurm_container=value, clear_caches=True), inference_dir=INFERENCE)
    session = executors.create(config, 0, "20260101-000000-abcd", threading.Event(), tmp_path)
    session.job_id = "7"
    calls, warnings = [], []
    sink = logger.add(lambda message: warnings.append(str(message)), level="WARNING")
    try:
        for status in (0, 1):
            monkeypatch.setattr(
                slurm_session.subprocess,
                "run",
                lambda argv, **kw: calls.append(argv) or subprocess.CompletedProcess(argv, status),
            )
            if value == "docker":
                session.drop_page_cache()  # in the prepare job
            else:
                session.drop_node_page_cache()
    finally:
        logger.remove(sink)
    assert len(calls) == 2
    argv = calls[0]
    assert argv[:2] == ["srun", "--jobid=7"] and "--nodelist=node01" in argv
    assert argv[argv.index("--") + 1 :] == ["sh", "-c", "sync && echo 3 > /proc/sys/vm/drop_caches"]
    assert len(warnings) == 1 and "node node01: CLEAR_CACHES: cannot drop the page cache" in warnings[0]
