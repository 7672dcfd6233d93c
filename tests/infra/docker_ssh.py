"""run.py in MODE docker against real OpenSSH servers on loopback addresses (tests/infra/sshd.py):
two hosts, their host.yaml, the run started and finished, and the case container waited for.
The fixtures: ``remote_workdir`` (one per session, so the code upload and ONNX caches are reused)
and ``hosts`` (two sshd hosts per test)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.infra.docker_env import require
from tests.infra.docker_session import docker_keys
from tests.infra.sshd import SshdError, start_sshd_hosts, stop_all
from tests.measure_config import CHEAP_SET

INFERENCE = Path(__file__).resolve().parents[2] / "inference"


@pytest.fixture(scope="session")
def remote_workdir(tmp_path_factory) -> Path:
    """Shared by every test so the code upload and ONNX caches are reused."""
    path = tmp_path_factory.mktemp("remote")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def hosts(tmp_path, docker_client):
    try:
        started = start_sshd_hosts(tmp_path / "ssh", 2, first_octet=2)
    except SshdError as exc:
        require(False, f"OpenSSH server unavailable: {exc}")
    yield started
    stop_all(started)


def write_host_yaml(tmp_path: Path, hosts, data: Path, workdir: Path, wheels: Path, **overrides) -> Path:
    first = hosts[0]
    config = {
        "MODE": "docker",
        "VENDOR": "cpu",
        "FLAGPERF_LOG_PATH": str(tmp_path / "result"),
        "HOSTS": [f"{h.address}:{h.port}" for h in hosts],
        "SSH_USER": first.user,
        "SSH_KEY_FILE": first.client_key_path,
        "KNOWN_HOSTS": first.known_hosts_path,
        **docker_keys(data, workdir, wheels),
    }
    config.update(overrides)
    path = tmp_path / "host.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def start_run(config: Path, perf: Path = INFERENCE) -> subprocess.Popen:
    cheap = (
        CHEAP_SET if perf == INFERENCE else ()
    )  # the shipped tree measures cheaply; a test's own tree keeps its settings
    return subprocess.Popen(
        [sys.executable, "run.py", "--config", str(config), *cheap],
        cwd=perf,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(proc: subprocess.Popen, timeout: float = 1200) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


def wait_for_container(docker_client, name_part: str, timeout: float = 600) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for container in docker_client.containers.list(ignore_removed=True, filters={"label": "inferperf.role=case"}):
            if name_part in container.name:
                return container
        time.sleep(0.5)
    raise AssertionError(f"no case container matching {name_part} appeared")
