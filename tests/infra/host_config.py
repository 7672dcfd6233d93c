"""host.yaml as ``utils/host_config.py::HostConfig``'s fields, for tests that build one directly."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import INFERENCE


def host_fields(tmp_path: Path, **overrides) -> dict:
    fields = dict(
        path=tmp_path / "host.yaml",
        flagperf_path=INFERENCE,
        log_path=tmp_path / "result",
        vendor="cpu",
        log_level="INFO",
        mode="local",
        hosts=["127.0.0.1"],
        cases={"digits:pytorch": "/data"},
        shm_size="1G",
        container_opt="",
        pip_source=None,
        clear_caches=False,
        visible_device_env=None,
        ssh_user="bench",
        ssh_key_file=None,
        known_hosts="~/.ssh/known_hosts",
        trust_on_first_use=False,
        case_timeout=3600,
        monitor_interval=1.0,
        base_image=None,
        pip_wheels_dir=None,
        ca_bundle=None,
        remote_workdir="/var/tmp/x",
    )
    fields.update(overrides)
    return fields
