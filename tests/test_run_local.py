"""run.py in MODE local (the shipped default): merged summary, monitors, host.yaml
validation, timeouts, Ctrl-C, and a vendor monitor that breaks its contract."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from common.errors import ConfigError
from tests.conftest import copy_inference_tree, local_host_yaml, wait_no_processes
from utils.executors.containers import parse_container_options
from utils.host_config import load_host_config

REPO = Path(__file__).resolve().parents[1]
INFERENCE = REPO / "inference"


@pytest.fixture(scope="session")
def digits_data(digits_data_dir) -> Path:
    return digits_data_dir


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """A copy of inference/ whose caches persist across this module's tests."""
    perf = tmp_path_factory.mktemp("run_local") / "inference"
    copy_inference_tree(perf)
    return perf


def host_yaml(tmp_path: Path, perf: Path, data: Path, **overrides) -> Path:
    return local_host_yaml(tmp_path, perf, data, **overrides)


def run(config: Path, perf: Path, *extra: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "run.py", "--config", str(config), *extra],
        cwd=perf,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def summary(tmp_path: Path) -> dict:
    files = sorted((tmp_path / "result").glob("run*/summary.json"))
    assert files, "no summary.json"
    return json.loads(files[-1].read_text())


def no_leftover_processes(marker: str) -> None:
    """None left once they had time to exit (polled up to 20 s: a fixed half-second wait raced a loaded machine)."""
    leftovers = wait_no_processes(marker)
    assert not leftovers, leftovers


def test_local_run_merges_results_and_monitors(tmp_path, tree, digits_data):
    proc = run(host_yaml(tmp_path, tree, digits_data), tree)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = summary(tmp_path)
    assert data["succeeded"] == 1 and data["failed"] == 0 and data["mode"] == "local"
    record = data["results"][0]
    assert record["status"] == "success" and record["host"] == "127.0.0.1"
    assert record["infer_average_acc"] >= 0.95
    assert record["sys_monitor"]["samples"] >= 1 and record["sys_monitor"]["mem_total_gib"] > 0
    assert 0 < record["vendor_usage(GiB)"] <= record["vendor_max_mem(GiB)"]
    assert record["peak_flops"] > 0 and 0 < record["MFU"] < 1
    assert record["MFU"] == pytest.approx(record["flops"] * record["*p_inference_core(qps)"] / record["peak_flops"])
    log_dir = Path(record["log_dir"])
    assert log_dir.name == "127.0.0.1_noderank0" and log_dir.parent.name == "digits:pytorch"
    for name in ("result.json", "container.out.log", "stdout.log", "sys_monitor.jsonl", "cpu_monitor.jsonl"):
        assert (log_dir / name).is_file(), name
    table = (log_dir.parents[1] / "summary.md").read_text()
    verdict = "valid" if record["verdict"]["valid"] else f"INVALID ({len(record['verdict']['reasons'])})"
    unjudged = len(record["verdict"].get("not_judged") or [])  # a busy machine may leave a check not judged
    verdict += f", {unjudged} not judged" if unjudged else ""
    assert f"| digits:pytorch | 127.0.0.1 | success | {verdict} | fp32 | 16 |" in table
    assert "| digits:pytorch | 127.0.0.1 | success" in proc.stdout
    no_leftover_processes(str(tmp_path))


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"MODE": "cloud"}, "key 'MODE' must be one of local, docker"),
        ({"VENDOR": "acme"}, "key 'VENDOR' unknown vendor 'acme'"),
        ({"HOSTS": "127.0.0.1"}, "key 'HOSTS' must be a non-empty list"),
        ({"HOSTS": ["127.0.0.1", "127.0.0.2"]}, "key 'HOSTS' must list exactly one host in MODE local"),
        ({"SSH_PORT": "ssh"}, "key 'SSH_PORT' must be a TCP port number"),
        ({"CASES": {"digits": "/data"}}, "key CASES entry 'digits' must look like"),
        (
            {"CASES": {"nosuchcase:pytorch": "/data"}},
            "key CASES entry 'nosuchcase:pytorch': no benchmarks/nosuchcase/pytorch/",
        ),
        ({"CASE_TIMEOUT": -1}, "key 'CASE_TIMEOUT' must be a positive number"),
        ({"SSH_PASSWORD": "hunter2"}, "unknown key 'SSH_PASSWORD'"),
        (
            {"MODE": "docker", "KNOWN_HOSTS": "/nonexistent/known_hosts"},
            "key 'KNOWN_HOSTS' /nonexistent/known_hosts does not exist",
        ),
    ],
)
def test_bad_host_yaml_is_one_line_and_exit_2(tmp_path, tree, digits_data, overrides, message):
    config = host_yaml(tmp_path, tree, digits_data, **overrides)
    proc = run(config, tree)
    assert proc.returncode == 2, proc.stderr
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and message in lines[0] and str(config) in lines[0], proc.stderr
    assert not (tmp_path / "result").exists()
    assert "hunter2" not in proc.stderr


def test_bad_case_config_is_caught_before_anything_runs(tmp_path, tree, digits_data):
    broken = tmp_path / "tree"
    shutil.copytree(tree, broken, ignore=shutil.ignore_patterns("onnxs"))
    (broken / "configs" / "digits" / "vendor_config" / "cpu_configurations.yaml").write_text("batch_size: 16\n")
    proc = run(host_yaml(tmp_path, broken, digits_data), broken)
    assert proc.returncode == 2
    assert "cpu_configurations.yaml: key 'batch_size' repeats the value 16" in proc.stderr
    assert not (tmp_path / "result").exists()


def test_unknown_case_filter(tmp_path, tree, digits_data):
    proc = run(host_yaml(tmp_path, tree, digits_data), tree, "--cases", "resnet50")
    assert proc.returncode == 2 and "--cases: 'resnet50' is not in CASES" in proc.stderr


def test_missing_data_dir_names_host_and_step(tmp_path, tree):
    proc = run(host_yaml(tmp_path, tree, tmp_path / "nowhere"), tree)
    assert proc.returncode == 1
    record = summary(tmp_path)["results"][0]
    assert record["status"] == "failed" and record["failed_step"] == "preflight"
    assert f"host 127.0.0.1: data dir {tmp_path / 'nowhere'} for digits:pytorch does not exist" == record["error"]
    assert "FAILED digits:pytorch on host 127.0.0.1 at step preflight" in proc.stderr


def long_tree(tmp_path: Path, tree: Path) -> Path:
    perf = tmp_path / "long"
    shutil.copytree(tree, perf)
    path = perf / "configs" / "digits" / "configurations.yaml"
    config = yaml.safe_load(path.read_text())
    config["repeat"] = 1_000_000
    path.write_text(yaml.safe_dump(config))
    return perf


def test_case_timeout_stops_the_pipeline(tmp_path, tree, digits_data):
    perf = long_tree(tmp_path, tree)
    proc = run(host_yaml(tmp_path, perf, digits_data, CASE_TIMEOUT=8), perf)
    assert proc.returncode == 1
    record = summary(tmp_path)["results"][0]
    assert record["status"] == "timeout" and record["failed_step"] == "timeout"
    assert "exceeded CASE_TIMEOUT of 8 s" in record["error"]
    no_leftover_processes(str(perf))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_to_run_py_stops_everything(tmp_path, tree, digits_data, sig):
    perf = long_tree(tmp_path, tree)
    proc = subprocess.Popen(
        [sys.executable, "run.py", "--config", str(host_yaml(tmp_path, perf, digits_data))],
        cwd=perf,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list(
        (tmp_path / "result").glob("run*/digits:pytorch/*/container.out.log")
    ):
        time.sleep(0.2)
    time.sleep(3)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    record = summary(tmp_path)["results"][0]
    assert record["status"] == "interrupted"
    no_leftover_processes(str(perf))


def test_vendor_monitor_that_exits_at_once_is_named(tmp_path, tree, digits_data):
    perf = tmp_path / "tree"
    shutil.copytree(tree, perf)
    (perf / "docker_images" / "cpu" / "cpu_monitor.py").write_text("import sys\nsys.exit('no device here')\n")
    proc = run(host_yaml(tmp_path, perf, digits_data), perf)
    assert proc.returncode == 1
    record = summary(tmp_path)["results"][0]
    assert record["failed_step"] == "monitors"
    assert record["error"] == "docker_images/cpu/cpu_monitor.py exited at once with status 1: no device here"
    no_leftover_processes(str(perf))


@pytest.mark.parametrize(
    "text, expected",
    [
        ("--gpus all", {"device_requests": [{"Count": -1, "DeviceIDs": [], "Capabilities": [["gpu"]]}]}),
        ("--gpus 2", {"device_requests": [{"Count": 2, "DeviceIDs": [], "Capabilities": [["gpu"]]}]}),
        (
            "--gpus device=0,1 --ipc host",
            {"device_requests": [{"Count": 0, "DeviceIDs": ["0", "1"], "Capabilities": [["gpu"]]}], "ipc_mode": "host"},
        ),
        (
            "--device /dev/davinci0 -e ASCEND=1 --cap-add SYS_PTRACE",
            {"devices": ["/dev/davinci0"], "environment": {"ASCEND": "1"}, "cap_add": ["SYS_PTRACE"]},
        ),
        ("", {}),
    ],
)
def test_container_options_map_to_sdk_arguments(text, expected):
    mapped = parse_container_options(text, "host.yaml")
    keys = ("Count", "DeviceIDs", "Capabilities")
    mapped = {
        k: ([{key: d[key] for key in keys} for d in v] if k == "device_requests" else v) for k, v in mapped.items()
    }
    assert mapped == expected


@pytest.mark.parametrize(
    "text, message",
    [
        ("--privileged", "--privileged is not allowed from host.yaml"),
        ("--net=bridge", "option '--net=bridge' cannot be mapped"),
        ("--gpus", "option --gpus needs a value"),
    ],
)
def test_unmappable_container_options_are_errors(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_container_options(text, "host.yaml")


def test_host_yaml_flagperf_style_values(tmp_path, digits_data):
    path = tmp_path / "host.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "FLAGPERF_PATH": str(INFERENCE),
                "VENDOR": "cpu",
                "MODE": "docker",
                "HOSTS": ["10.1.2.155", "node-2:2222"],
                "SSH_PORT": "22",
                "TRUST_ON_FIRST_USE": True,
                "LOG_CALL_INFORMATION": True,
                "MASTER_PORT": "29501",
                "ACCE_CONTAINER_OPT": " --gpus all",
                "CASES": {"digits:pytorch": "/raid/digits"},
            }
        )
    )
    config = load_host_config(path, INFERENCE)
    assert [(h.address, h.port) for h in config.hosts] == [("10.1.2.155", 22), ("node-2", 2222)]
    assert config.cases[0].data_dir == "/raid/digits" and config.container_opt == "--gpus all"
