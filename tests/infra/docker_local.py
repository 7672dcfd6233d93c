"""run.py in MODE docker on this machine's engine without SSH (HOSTS: ["localhost"]): its host.yaml,
the run, and ``local_workdir``, the folder that stands for the host's REMOTE_WORKDIR."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.infra.docker_session import docker_keys
from tests.measure_config import CHEAP_SET

INFERENCE = Path(__file__).resolve().parents[2] / "inference"


def write_local_yaml(tmp_path: Path, data: Path, workdir: Path, wheels: Path, **overrides) -> Path:
    known_hosts = tmp_path / "known_hosts"  # host.yaml requires one in MODE docker; nothing reads it here
    known_hosts.touch()
    config = {
        "MODE": "docker",
        "VENDOR": "cpu",
        "FLAGPERF_LOG_PATH": str(tmp_path / "result"),
        "HOSTS": ["localhost"],
        "KNOWN_HOSTS": str(known_hosts),
        **docker_keys(data, workdir, wheels),
    }
    config.update(overrides)
    path = tmp_path / "host.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def run_py(config: Path, perf: Path = INFERENCE, timeout: float = 1200) -> tuple[int, str]:
    cheap = (
        CHEAP_SET if perf == INFERENCE else ()
    )  # the shipped tree measures cheaply; a test's own tree keeps its settings
    proc = subprocess.run(
        [sys.executable, "run.py", "--config", str(config), *cheap],
        cwd=perf,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )
    return proc.returncode, proc.stdout


@pytest.fixture
def local_workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("local_remote")
