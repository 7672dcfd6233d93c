"""Every script in bench/ still runs: each at its smallest settings, as ``python3 -m bench.NAME``.

A bench is the source of a figure the README or docs quote; a refactor of what it calls (a typed
record, a moved function) must fail here, not the next time someone measures. The test judges that
the script ran to its end, never its figures: on a shared 2-core machine a target may be missed, and
a bench says so with exit 1 (``allowed``); a traceback is always a failure. The fast ones take about
25 s together; the ones marked ``slow`` start real processes, Docker containers or sshd (their cost is
in each entry's comment).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[1]
INFERENCE = REPO / "inference"


@dataclass(frozen=True)
class Bench:
    module: str
    args: tuple[str, ...] = ()
    allowed: tuple[int, ...] = (0,)  # 1: the bench ran and says a target was missed (its figure, not a breakage)
    timeout_s: float = 120.0


# a bench running a shipped case: each measured phase at most 5 s (a loaded machine holds one to its 60 s)
CAPPED = ("--set", "max_duration_s=5", "--set", "settle_max_s=2")

FAST = [
    Bench("interval_coverage", ("--windows", "2", "--stop-windows", "2")),  # ~3 s
    Bench(
        "scenario_overhead",
        ("--queries", "2000", "--rated-queries", "100", "--rounds", "1"),
        allowed=(0, 1),  # ~2 s; the rated server misses its 2 % on a busy machine
    ),
    Bench("serving_client_capacity", ("--streams", "1,2", "--rounds", "1", "--output-len", "4")),  # ~2 s
    Bench("history_scale", ("--runs", "20", "--page-points", "10")),  # ~8 s
    Bench("history_calibration", ("--trials", "10")),  # ~3 s
    Bench("noise_floor", ("--case", "digits", "--batch", "16", "--seconds", "1", "--min-duration", "0.2")),  # ~6 s
    Bench("container_exit", ("--rounds", "2")),  # ~4 s: six processes importing torch
    Bench("record_codec", ("--repeats", "1", "--number", "5")),  # <1 s (the old codec left out without git)
]

SLOW = [
    Bench("baseline_crosscheck", ("--size", "128", "--array-mib", "8", "--rounds", "1", "--seconds", "0.2")),  # ~20 s
    Bench("serving_compare_noise", ("--rounds", "1")),  # ~25 s: three loopback servers and run.py --endpoint
    Bench(
        "loadgen_crosscheck",
        ("--case", "digits", "--rounds", "1", "--min-duration", "0.5", "--max-duration", "2"),
        allowed=(0, 1),  # ~30 s: export, compile and three scenarios twice
    ),
    Bench(  # ~25 s quiet
        "harness_overhead",
        ("--case", "digits", "--rounds", "1", "--repeat", "1", "--images", "16", *CAPPED),
        (0, 1),
        600,
    ),
]

DOCKER = [  # as root, with the Docker engine and the base image (tests/infra/docker_env.py); a minute or more each
    Bench("scaling", ("--mode", "docker", "--hosts", "1", "--sleep", "0.5", "--rounds", "1"), (0, 1), 900),
    # ~20 s each quiet; each measured phase capped at 5 s, as harness_overhead's; 4 hosts would add 3 min
    Bench("orchestration_overhead", ("--rounds", "1", "--hosts", "1", *CAPPED), (0, 1), 900),
    Bench("orchestration_profile", ("--runs", "1", "--local", *CAPPED), (0, 1), 900),
]


def run_bench(bench: Bench, *extra: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, "-m", f"bench.{bench.module}", *bench.args, *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=bench.timeout_s,
        env={**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{INFERENCE}"},
    )
    tail = f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    assert "Traceback (most recent call last)" not in done.stderr, tail
    assert done.returncode in bench.allowed, f"exit {done.returncode}\n{tail}"
    return done


@pytest.mark.parametrize("bench", FAST, ids=lambda b: b.module)
def test_bench_runs(bench, digits_data_dir):
    # noise_floor reads a prepared data set: the session's digits, so a fresh clone needs no data/
    run_bench(bench, *(("--data", str(digits_data_dir)) if bench.module == "noise_floor" else ()))


@pytest.mark.slow
@pytest.mark.parametrize("bench", SLOW, ids=lambda b: b.module)
def test_slow_bench_runs(bench):
    run_bench(bench)


@pytest.mark.slow
@pytest.mark.docker
@pytest.mark.parametrize("bench", DOCKER, ids=lambda b: b.module)
def test_docker_bench_runs(bench):
    if os.geteuid() != 0 or shutil.which("docker") is None:
        pytest.skip("needs root and docker")
    run_bench(bench)


def test_analyses_of_kept_folders_run(tmp_path):
    """The benches that analyse what another kept: an empty folder is one clear line, no traceback."""
    done = run_bench(Bench("compare_calibration", ("--analyse", str(tmp_path))))
    assert "| kind | N |" in done.stdout
    done = run_bench(Bench("calibration_analysis", (str(tmp_path),), allowed=(1,)))
    assert done.stderr.strip().splitlines() == [f"{tmp_path}: no pair kept there (bench.compare_calibration --keep)"]


def test_report_cost_runs_on_a_run_folder(tmp_path):
    from utils.results.summary import write_summary

    config = SimpleNamespace(mode="local", vendor="cpu", hosts=[], flagperf_path=INFERENCE)
    write_summary(tmp_path / "run1", "run1", config, [], datetime(2026, 1, 1, tzinfo=timezone.utc))
    done = run_bench(Bench("report_cost", (str(tmp_path / "run1"), "--processes", "1", "--repeats", "1")))
    assert "report.html" in done.stdout


def test_scaling_stub_writes_the_record_the_host_reads(tmp_path):
    """bench/scaling.py's stand-in for run_inference.py writes a result.json that ``CaseResult.from_json``
    reads (it failed at step summary once the records were typed: no schema_version)."""
    from bench.scaling import STUB
    from common.record import CaseResult, read_result

    perf = tmp_path / "perf"
    shutil.copytree(INFERENCE / "common", perf / "common", ignore=shutil.ignore_patterns("__pycache__"))
    (perf / "run_inference.py").write_text(STUB.format(sleep=0.0))
    log = tmp_path / "log"
    log.mkdir()
    args = ["--log_dir", str(log), "--vendor", "cpu", "--case", "sleepy", "--framework", "pytorch"]
    subprocess.run([sys.executable, str(perf / "run_inference.py"), *args], check=True, capture_output=True)
    result = read_result(log)
    assert isinstance(result, CaseResult) and (result.case, result.vendor, result.status) == (
        "sleepy",
        "cpu",
        "success",
    )


def test_the_tracer_wraps_what_run_py_calls(tmp_path):
    """bench/_trace_run.py (orchestration_profile's tracer) wraps run.py's functions by name: one that
    moved fails here, as ``make_session`` did, instead of in the Docker bench."""
    trace = tmp_path / "trace.json"
    tracer = REPO / "bench" / "_trace_run.py"
    done = subprocess.run(
        [sys.executable, str(tracer), str(trace), "--", "--help"], cwd=INFERENCE, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    names = [event["name"] for event in json.loads(trace.read_text())["events"]]
    assert names[0] == "import run.py" and "run.main" in names


def test_the_vllm_crosscheck_reads_the_servers_own_ttft_and_the_gap_of_streamed_rounds():
    """bench/vllm_crosscheck.py's figures beside the clients': the server's mean TTFT from its histogram's
    sum and count over one client's run, and each client's mean less it in the rounds that streamed."""
    from bench.vllm_crosscheck import server_side, summary

    before = {"prompt": 100.0, "generated": 50.0, "ttft_sum_s": 1.0, "ttft_count": 10.0}
    after = {"prompt": 356.0, "generated": 178.0, "ttft_sum_s": 1.05, "ttft_count": 14.0}
    side = server_side(before, after, 2)
    assert side["server_tokens_per_request"] == {"prompt": 128.0, "generated": 64.0}
    assert side["server_ttft_ms_mean"] == pytest.approx(12.5)  # 0.05 s over 4 requests
    assert server_side(before, before, 2)["server_ttft_ms_mean"] is None

    def client(mean: float, server: float, one_event: int) -> dict:
        return {
            "ttft_ms_p50": mean, "ttft_ms_mean": mean, "tpot_ms_p50": 2.0, "tpot_ms_p50_streamed": 2.0,
            "output_tokens_per_s": 300.0, "one_event_replies": one_event, "process_cpu_s": 1.0,
            "server_tokens_per_request": {"prompt": 128.0, "generated": 64.0}, "server_ttft_ms_mean": server,
            "main_cpu_s": 0.5, "completed": 32,
        }  # fmt: skip

    rounds = [
        {"inferperf": client(13.0, 11.0, 0), "vllm": client(14.0, 11.0, 0)},
        {"inferperf": client(60.0, 11.0, 5), "vllm": client(14.5, 11.5, 0)},
    ]
    table = summary(rounds)
    assert table["inferperf_client_minus_server_ttft_ms_streamed_rounds"] == pytest.approx(2.0)
    assert table["inferperf_streamed_rounds"] == 1  # the round with a stall is left out
    assert table["vllm_client_minus_server_ttft_ms_streamed_rounds"] == pytest.approx(3.0)
    assert table["inferperf_client_minus_server_ttft_ms"] == pytest.approx(25.5)  # median of 2.0 and 49.0


def test_the_overhead_bench_reports_wall_less_pipeline_for_each_tree(capsys):
    from bench.orchestration_overhead import report

    rows = {
        ("this tree", 1): [(8.0, 6.0), (7.5, 6.0), (9.0, 6.5)],
        ("this tree", 4): [(20.0, 16.0), (22.0, 18.0), (21.0, 17.0)],
        ("abc", 1): [(9.0, 6.0), (9.5, 6.5), (8.5, 6.0)],
        ("abc", 4): [(24.0, 18.0), (23.0, 18.0), (25.0, 19.0)],
    }
    report(rows, 3)
    printed = capsys.readouterr().out
    # The median wall less the median pipeline: 8.0 - 6.0 and 9.0 - 6.0; the rounds' own overheads beside.
    assert "this tree     1     8.00        6.00        2.00   rounds [1.50, 2.50]" in printed
    assert "      abc     1     9.00        6.00        3.00   rounds [2.50, 3.00]" in printed
    assert "abc: 4-host wall / 1-host wall 2.67" in printed
    assert "floor" not in printed  # none measured, none printed


def test_the_overhead_bench_reports_each_tree_less_the_floor(capsys):
    from bench.orchestration_overhead import FLOOR, FLOOR_PARTS, report

    rows = {("this tree", 1): [(8.0, 6.0), (7.5, 6.0), (9.0, 6.5)], ("abc", 1): [(9.0, 6.0), (9.5, 6.5), (8.5, 6.0)]}
    report(rows, 3, {FLOOR: [1.2, 1.0, 1.4], FLOOR_PARTS[0]: [0.5, 0.4, 0.45]})
    printed = capsys.readouterr().out
    # The floor's median 1.2 s: 2.00 - 1.2 and 3.00 - 1.2; a part is printed, never subtracted.
    assert "Python imports 1.20 s (median of 3, rounds [1.00, 1.40])" in printed
    assert "part: ssh HOST true 0.45 s (median of 3, rounds [0.40, 0.50])" in printed
    assert "this tree: 1-host overhead less the floor 0.80 s" in printed
    assert "abc: 1-host overhead less the floor 1.80 s" in printed


def test_the_floor_runs_the_image_the_last_run_reused(tmp_path):
    import os

    from bench.orchestration_overhead import case_image

    older, newer = tmp_path / "run1", tmp_path / "run2"
    older.mkdir()
    newer.mkdir()
    (older / "build_h.log").write_text("reused image old:1, built earlier from D\n")
    (newer / "build_h.log").write_text("reused image base:2, built earlier from D\n")
    (newer / "build_h_cases.log").write_text("reused image case:3, built earlier from requirements/x.txt on top of b\n")
    (newer / "build_z.log").write_text("reused image base:2, built earlier from D\n")  # a second host's
    os.utime(older, (1, 1))
    assert case_image(tmp_path) == "case:3"  # the case layer, whatever the hosts' names
    (newer / "build_h_cases.log").unlink()
    (newer / "build_z.log").unlink()
    assert case_image(tmp_path) == "base:2"
    (newer / "build_h.log").write_text("building image x:1 from D\n")
    with pytest.raises(SystemExit, match=f"no 'reused image' line in {newer}/build_"):
        case_image(tmp_path)
