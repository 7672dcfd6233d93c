"""A FlagPerf-style vendor monitor (a double-forking daemon driven by ``-o start|stop -l DIR``)
in MODE docker, unmodified: it runs in the monitor container under common/daemon_monitor.py,
``-o stop`` runs when the container is stopped, and its log reaches ``analysis_log``. Real
local Docker engine (HOSTS: ["localhost"]), real digits case."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import copy_inference_tree
from tests.infra.docker_local import local_workdir, run_py, write_local_yaml  # noqa: F401 - a fixture
from tests.infra.docker_session import assert_nothing_left, digits_data, docker_client, summary_of, wheels_dir  # noqa: F401
from tests.infra.monitors import install_flagperf_monitor

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_flagperf_daemon_monitor_runs_unmodified_in_its_container(
    tmp_path, digits_data, local_workdir, wheels_dir, docker_client
):  # noqa: F811
    perf = copy_inference_tree(tmp_path / "inference")
    install_flagperf_monitor(perf)
    config = write_local_yaml(tmp_path, digits_data, local_workdir, wheels_dir, FLAGPERF_PATH=str(perf))
    code, out = run_py(config, perf)
    assert code in (0, 3), out[-4000:]
    record = summary_of(tmp_path)["results"][0]
    assert record["status"] == "success", record
    log_dir = Path(record["log_dir"])
    log = log_dir / "cpu_monitor.log"
    used = [float(line.split()[1]) / 1000 for line in log.read_text().splitlines()]
    assert len(used) >= 3, "the daemon did not sample inside its container"
    assert record["vendor_usage(GiB)"] == pytest.approx(max(used)) and record["vendor_max_mem(GiB)"] == 16.0
    assert not (log_dir / "cpu_monitor.pid").exists(), "-o stop was not run when the container stopped"
    assert_nothing_left(docker_client, local_workdir)
