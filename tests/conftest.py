from __future__ import annotations

import pytest
from loguru import logger


@pytest.fixture
def caplog_loguru():
    """Loguru records emitted during the test, as dicts with level and message."""
    records: list[dict] = []
    handler = logger.add(
        lambda message: records.append({"level": message.record["level"].name, "message": message.record["message"]}),
        level="DEBUG",
    )
    yield records
    logger.remove(handler)


# ---- shared fixtures for whole-run tests --------------------------------------------------
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
INFERENCE = REPO / "inference"
TREE_IGNORE = shutil.ignore_patterns("onnxs", "result", "__pycache__")


@pytest.fixture(scope="session")
def digits_data_dir(tmp_path_factory) -> Path:
    """The digits data set, prepared once per test session."""
    from benchmarks.digits.pytorch.prepare import prepare_digits

    out = tmp_path_factory.mktemp("digits_data")
    prepare_digits(out)
    return out


def copy_inference_tree(target: Path, source: Path = INFERENCE, cheap: bool = True) -> Path:
    """A copy of inference/ (without caches and results) that a test may change; ``cheap``: its
    cases measure under tests/measure_config.py's loose precision and short caps."""
    shutil.copytree(source, target, ignore=TREE_IGNORE)
    if cheap:
        from tests.measure_config import cheapen_tree

        cheapen_tree(target)
    return target


def ps_lines(marker: str) -> list[str]:
    """Processes of ours (pipeline or monitor) whose command line contains ``marker``."""
    ps = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in ps.splitlines() if marker in line and ("run_inference.py" in line or "monitor" in line)]


def wait_no_processes(marker: str, timeout: float = 20.0) -> list[str]:
    """Wait until no pipeline or monitor process mentions ``marker``; return what is left."""
    deadline = time.monotonic() + timeout
    left = ps_lines(marker)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = ps_lines(marker)
    return left


def run_py(perf: Path, config: Path, *extra: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "run.py", "--config", str(config), *extra],
        cwd=perf,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# A case's hooks measure through contract/measuring.py, whose functions the container side installs when
# tools.measure is imported (the pipeline does before it loads a case). Tests that call a case's functions
# directly stand where the pipeline would, so every test session has them installed, whatever ran first;
# tests/test_lifecycle_units.py checks the line a case gets without them.
import tools.measure  # noqa: E402,F401

# One real PostgreSQL server for the whole session, and a fresh database of it per test (tests/infra/postgres.py).
from tests.infra.postgres import postgres_server, postgres_url  # noqa: E402,F401

# One real Slurm cluster for the whole session (tests/infra/slurm.py), shared by every module.
from tests.infra.slurm import slurm_cluster  # noqa: E402,F401


def long_running_tree(target: Path) -> Path:
    """A copy of inference/ whose digits case runs for a very long time (repeat 1e6)."""
    import yaml

    perf = copy_inference_tree(target, cheap=False)  # the framework's caps: long running
    path = perf / "configs" / "digits" / "configurations.yaml"
    config = yaml.safe_load(path.read_text())
    config["repeat"] = 1_000_000
    path.write_text(yaml.safe_dump(config))
    return perf


def local_host_yaml(tmp_path: Path, perf: Path, data: Path | str, **overrides) -> Path:
    """A MODE local host.yaml running digits from ``perf`` into tmp_path/result."""
    import yaml

    config = {
        "MODE": "local",
        "VENDOR": "cpu",
        "FLAGPERF_PATH": str(perf),
        "FLAGPERF_LOG_PATH": str(tmp_path / "result"),
        "HOSTS": ["127.0.0.1"],
        "CASES": {"digits:pytorch": str(data)},
        **overrides,
    }
    path = tmp_path / "host.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


# The typed keys of a minimal CaseConfig, for tests that build one directly.
TYPED_CASE_CONFIG = dict(
    vendor="acme",
    case="toy",
    framework="pytorch",
    perf_dir="/perf",
    data_dir="/data",
    log_dir="/logs",
    batch_size=8,
    input_size=None,
    fp16=False,
    compiler="onnxruntime",
    num_workers=0,
    log_freq=10,
    repeat=1,
    no_validation=False,
    exist_onnx_path=None,
    exist_compiler_path=None,
)


# ---- parallel runs (scripts/test.sh: pytest-xdist, --dist loadgroup) ----------------------
# tryfirst: xdist's own hook turns the xdist_group markers into node ids; it must see ours.
# (pytest 9.2 stopped reading the node id xdist 3.8 writes, so pyproject.toml keeps pytest < 9.2.)
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Each test file runs on one worker (its module and session fixtures are built once).
    The Slurm tests run on one worker, one after another: they share one session cluster.
    Docker's tests may run beside each other: each checks only its own runs' containers
    (tests/infra/docker_session.py::assert_nothing_left)."""
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        module = item.nodeid.split("::", 1)[0]
        slurm = "slurm_cluster" in getattr(item, "fixturenames", ()) or "slurm" in module
        item.add_marker(pytest.mark.xdist_group("slurm" if slurm else module))


# ---- skips under CI (CI=true): each one declared ---------------------------------------------------
# A skip in CI is a test that never ran while the run reads green. Under CI=true a skip fails its test
# unless (file, text in its reason) is declared here: what CI's machine cannot have.
CI_SKIPS: tuple[tuple[str, str], ...] = (
    ("tests/test_nvidia.py", "needs an NVIDIA GPU"),
    ("tests/test_nvidia.py", "needs TensorRT and a GPU"),
    ("tests/test_llama_case.py", "needs an NVIDIA GPU"),
    # the assisted test beside it covers the same kill without waiting out Slurm's minute
    ("tests/test_slurm_client.py", "60-90 s of waiting for Slurm's own minute"),
    # the engines' own images (vLLM's, llama.cpp's) take 6 and 12-15 min to build from nothing on 2 cores
    ("tests/test_vllm_vendor.py", "is not built on this engine, and a fresh build takes"),
    ("tests/test_llamacpp_vendor.py", "is not built on this engine, and a fresh build takes"),
)


def undeclared_ci_skip(path: str, reason: str) -> str | None:
    """The line that fails a skip of ``path`` (relative to the repo) under CI=true, or None where it is
    declared or CI is not set."""
    from tests.infra.docker_env import is_ci

    if not is_ci() or any(path == file and text in reason for file, text in CI_SKIPS):
        return None
    return f"{path}: skipped under CI=true, and tests/conftest.py CI_SKIPS does not declare this skip: {reason}"


def _fail_undeclared_skip(report) -> None:
    if not report.skipped or hasattr(report, "wasxfail") or not isinstance(report.longrepr, tuple):
        return
    path = report.nodeid.split("::", 1)[0]
    reason = report.longrepr[2].removeprefix("Skipped: ")
    line = undeclared_ci_skip(path, reason)
    if line is not None:
        report.outcome = "failed"
        report.longrepr = line


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    _fail_undeclared_skip(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    """A module that skips whole (pytest.importorskip, allow_module_level) is held to the same list."""
    report = yield
    _fail_undeclared_skip(report)
    return report
