"""The base tier (issue 29): kernels measured until precise (tools/measure/baseline.py), the base
cases (benchmarks/base_common.py), measured peaks cached per host fingerprint and used as MFU's
denominator (utils/results/baselines.py, utils/results/summary.py), and their bad input."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from benchmarks.base_common import (
    check_base_config,
    gemm_bytes,
    gemm_stage,
    last_level_cache_bytes,
    stream_stage,
    transfer_stage,
)
from common.errors import ConfigError
from common.mfu import plausible_mfu
from common.summary_record import Summary, SummaryLLM, SummaryRecord
from contract.config.case import CaseConfig
from contract.kernels import KernelSettings, TorchKernels, allreduce_bandwidth, gemm_flop, stream_bytes
from tests.conftest import INFERENCE, TYPED_CASE_CONFIG
from tests.result_records import case_result, write_result
from tools.measure.baseline import measure_kernel
from utils.case_specs import CaseSpec
from utils.executors.base import CaseOutcome
from utils.results import baselines
from utils.results.summary import markdown_table, merge_outcome


class FakeClock:
    """Advances ``step_ns`` at every kernel call (and not otherwise)."""

    def __init__(self, step_ns: int) -> None:
        self.now = 0
        self.step_ns = step_ns

    def __call__(self) -> int:
        return self.now

    def kernel(self, real=None):
        def call():
            if real is not None:
                real()
            self.now += self.step_ns

        return call


NO_CONTENTION = type("NoContention", (), {"start": lambda self: self, "stop": lambda self: None})()


def settings(**changes) -> KernelSettings:
    return KernelSettings(
        **{
            "warmup": 1,
            "min_queries": 16,
            "min_duration_s": 0.05,
            "max_duration_s": 5.0,
            "precision": 0.02,
            "settle_max_s": 0.0,
            **changes,
        }
    )


def base_config(case: str, **keys) -> CaseConfig:
    typed = {**TYPED_CASE_CONFIG, "vendor": "cpu", "case": case, "compiler": None, "batch_size": 1}
    extra = {"dtypes": ["fp32"], "sizes": [64], "sweep_s": 0.0, **keys.pop("extra", {})}
    return CaseConfig(
        **typed,
        extra=extra,
        **{"min_query_count": 16, "min_duration_s": 0.0, "max_duration_s": 5.0, "settle_max_s": 0.0, **keys},
    )


# ---- the arithmetic ------------------------------------------------------------------------------
def test_a_gemm_of_known_flops_on_a_fake_clock_gives_the_exact_tflops():
    flop = gemm_flop(4096, 4096, 4096)
    assert flop == 2 * 4096**3
    clock = FakeClock(step_ns=1_000_000)  # 1 ms per GEMM
    rate = measure_kernel(clock.kernel(), flop, settings(), clock=clock, contention=NO_CONTENTION)
    assert rate.value == pytest.approx(flop / 1e-3, rel=1e-12)  # 137.4 TFLOP/s exactly
    assert rate.value / 1e12 == pytest.approx(137.438953472)
    assert rate.ci95[0] == pytest.approx(rate.value) and rate.ci95[1] == pytest.approx(rate.value)
    assert rate.verdict.valid and rate.precision["stop_reason"] == "precision reached"
    assert rate.calls >= 50  # min_duration_s 0.05 s at 1 ms a call


def test_a_rate_that_halves_mid_window_drifts_and_is_invalid():
    clock = FakeClock(step_ns=1_000_000)
    calls = {"n": 0}

    def call():
        calls["n"] += 1
        clock.now += 1_000_000 if calls["n"] < 40 else 2_000_000

    rate = measure_kernel(call, 1e9, settings(max_duration_s=0.5, warmup=0), clock=clock, contention=NO_CONTENTION)
    assert not rate.verdict.valid
    assert any("drifting: rate fell" in r for r in rate.verdict.reasons) or any(
        "not precise enough" in r for r in rate.verdict.reasons
    )


def ramping(until_s: float, slower: float, persists: bool = False) -> tuple[FakeClock, object]:
    """A kernel on a fake clock: 1 ms a call, each call +-10 % at random (seeded), its time ``slower`` x
    at the start and falling linearly to 1 ms over the first ``until_s`` s (a chip warming up, a
    frequency settling) and steady after; ``persists``: rising by (``slower`` - 1) every ``until_s`` s
    without end (a leak, ongoing throttling)."""
    import random

    clock, noise = FakeClock(step_ns=0), random.Random(0)

    def call():
        t = clock.now / 1e9 / until_s
        factor = 1 + (slower - 1) * (t if persists else max(0.0, 1 - t))
        clock.now += int(1_000_000 * factor * (1 + 0.1 * noise.uniform(-1, 1)))

    return clock, call


def test_a_rate_that_ramps_then_settles_is_measured_once_more_and_valid(monkeypatch):
    from tools.measure import baseline

    measure = dict(settings=settings(warmup=0, min_duration_s=1.0, max_duration_s=20.0), contention=NO_CONTENTION)
    clock, call = ramping(until_s=1.0, slower=1.06)
    rate = measure_kernel(call, 1e9, measure["settings"], clock=clock, contention=measure["contention"])
    assert rate.verdict.valid, rate.verdict.reasons
    first = rate.precision["remeasured"]  # the first window rose over 2 % from its first to its last third
    assert first["drift"]["rate"] > 0.02 and any(r.startswith("drifting: rate rose") for r in first["reasons"])
    assert rate.precision["drift"]["rate"]["drifting"] is False
    # without the second window the same kernel's figure is the drifting one: INVALID
    monkeypatch.setattr(baseline, "measured_once_more_on_drift", lambda window, *_, **__: window())
    clock, call = ramping(until_s=1.0, slower=1.06)
    once = measure_kernel(call, 1e9, measure["settings"], clock=clock, contention=measure["contention"])
    assert not once.verdict.valid and any(r.startswith("drifting: rate rose") for r in once.verdict.reasons)
    assert "remeasured" not in once.precision


def test_a_window_with_no_precision_asked_is_information_and_measured_once():
    clock, call = ramping(until_s=1.0, slower=1.06)  # the kernel that drifts in its first window above
    rate = measure_kernel(
        call, 1e9, settings(warmup=0, min_duration_s=1.0, precision=None), clock=clock, contention=NO_CONTENTION
    )
    assert "remeasured" not in rate.precision and rate.precision["stop_reason"] == "minimums met"
    assert clock.now < 1.2e9  # one window of about min_duration_s (a GEMM's sweep row costs its sweep_s once)


def test_a_drifted_window_invalid_for_another_reason_too_is_not_measured_again():
    from contract.phase import ContentionReading

    class Contended:  # other processes took half the CPUs in every window
        def start(self):
            return self

        def stop(self):
            return ContentionReading(share=0.5, cpus=2, seconds=1.0)

    clock, call = ramping(until_s=1.0, slower=1.06)
    rate = measure_kernel(
        call, 1e9, settings(warmup=0, min_duration_s=1.0, max_duration_s=20.0), clock=clock, contention=Contended()
    )
    assert any(r.startswith("drifting: rate rose") for r in rate.verdict.reasons)  # the first window's, kept
    assert any(r.startswith("contention:") for r in rate.verdict.reasons) and "remeasured" not in rate.precision


def test_a_rate_that_keeps_falling_stays_invalid_after_its_second_window():
    clock, call = ramping(until_s=1.0, slower=1.06, persists=True)
    rate = measure_kernel(
        call, 1e9, settings(warmup=0, min_duration_s=1.0, max_duration_s=20.0), clock=clock, contention=NO_CONTENTION
    )
    assert not rate.verdict.valid
    assert any(r.startswith("drifting: rate fell") for r in rate.verdict.reasons), rate.verdict.reasons
    assert rate.precision["remeasured"]["drift"]["rate"] < -0.02  # both windows fell


def test_a_slow_kernels_window_holds_enough_calls_for_its_drift_to_be_judged():
    from tools.measure.baseline import JUDGED_CALLS

    clock = FakeClock(step_ns=100_000_000)  # 100 ms a call: min_duration_s alone would stop at 16 calls
    rate = measure_kernel(
        clock.kernel(), 1e9, settings(min_duration_s=1.0, max_duration_s=20.0), clock=clock, contention=NO_CONTENTION
    )
    assert rate.calls == JUDGED_CALLS == 48 and rate.verdict.valid
    assert rate.precision["drift"]["rate"] is not None and not rate.verdict.not_judged
    # cut by max_duration_s before it: the drift is not judged, and the verdict says so
    clock = FakeClock(step_ns=100_000_000)
    cut = measure_kernel(
        clock.kernel(), 1e9, settings(min_duration_s=1.0, max_duration_s=2.0), clock=clock, contention=NO_CONTENTION
    )
    assert cut.calls == 20 and cut.precision["drift"]["rate"] is None
    assert cut.verdict.not_judged == [
        "drift of rate: not judged (a third of the window is too short for its own interval)"
    ]


def test_a_minority_of_slowed_calls_lowers_the_sustained_rate_not_the_figure():
    """Every tenth call 5 ms instead of 1 ms (something else on the host took the core): the figure
    is the median call's rate, 1 GFLOP per ms exactly; the mean (about 10 calls per 14 ms) is kept
    as ``sustained``."""
    clock = FakeClock(step_ns=0)
    calls = {"n": 0}

    def call():
        calls["n"] += 1
        clock.now += 5_000_000 if calls["n"] % 10 == 0 else 1_000_000

    rate = measure_kernel(call, 1e9, settings(), clock=clock, contention=NO_CONTENTION)
    assert rate.value == pytest.approx(1e12, rel=1e-12)
    assert rate.verdict.valid and rate.precision["stop_reason"] == "precision reached"
    assert rate.relative is not None and rate.relative <= 0.02
    assert rate.sustained["value"] == pytest.approx(1e9 * rate.calls / rate.seconds, rel=1e-12)
    assert rate.sustained["value"] < 0.8e12  # at least 4 slow calls in the window's 48 or more
    assert rate.sustained["ci95"][0] < rate.sustained["value"] < rate.sustained["ci95"][1]
    assert rate.to_dict()["sustained"] == rate.sustained
    assert rate.precision["method"].startswith("rate of the median call")


def test_the_median_calls_rate_and_interval_are_the_median_call_times_inverted():
    from common.stats import percentile, percentile_ci
    from tools.measure.baseline import median_call_rate

    durations = [1_000_000 + 10_000 * (i * 37 % 101) for i in range(400)]  # 1.00-2.00 ms, shuffled
    value, interval = median_call_rate(durations, 2e9)
    ordered = sorted(durations)
    middle = percentile(ordered, 50.0)
    low_ns, high_ns = percentile_ci(durations, ordered, 50.0, 2)
    assert value == pytest.approx(2e9 / middle * 1e9) and value == interval.value
    assert interval.lo == pytest.approx(2e9 / high_ns * 1e9) and interval.hi == pytest.approx(2e9 / low_ns * 1e9)
    assert interval.lo < value < interval.hi  # a longer call time is a lower rate
    assert median_call_rate(durations[:10], 2e9) == (
        pytest.approx(2e9 / percentile(sorted(durations[:10]), 50) * 1e9),
        None,
    )
    assert median_call_rate([], 2e9) == (None, None) and median_call_rate([0] * 20, 2e9) == (None, None)


def test_a_window_on_a_fake_clock_reads_no_contention_from_the_real_machine():
    """Its instant windows say nothing of the machine's load: a stage test on a fake clock must not
    turn INVALID, and choose another size, because the machine running it is busy."""
    clock = FakeClock(step_ns=1_000_000)
    rate = measure_kernel(clock.kernel(), 1e9, settings(), clock=clock)
    assert rate.contention is None and rate.verdict.valid
    real = measure_kernel(lambda: time.sleep(0.0005), 1e9, settings(min_duration_s=0.05, precision=None))
    assert real.contention is not None  # the real clock still reads the machine


def test_stream_counts_copy_as_two_arrays_and_triad_as_three():
    assert stream_bytes("copy", 1000, 8) == 16_000
    assert stream_bytes("triad", 1000, 8) == 24_000
    assert stream_bytes("add", 10, 4) == 120 and stream_bytes("scale", 10, 4) == 80
    clock = FakeClock(step_ns=2_000_000)
    rate = measure_kernel(
        clock.kernel(), stream_bytes("triad", 2**20, 8), settings(), clock=clock, contention=NO_CONTENTION
    )
    assert rate.value == pytest.approx(3 * 2**20 * 8 / 2e-3)


def test_allreduce_bus_bandwidth_is_nccl_tests_formula():
    algbw, busbw = allreduce_bandwidth(1e9, 0.5, 2)
    assert algbw == 2e9 and busbw == 2e9  # 2 ranks: 2(n-1)/n = 1
    assert allreduce_bandwidth(1e9, 0.5, 4) == (2e9, 3e9)  # 4 ranks: x 1.5
    assert allreduce_bandwidth(8e6, 1e-3, 8)[1] == pytest.approx(8e9 * 14 / 8)
    assert allreduce_bandwidth(1e9, 1.0, 1)[1] == 0.0
    with pytest.raises(ValueError):
        allreduce_bandwidth(1e9, 0.0, 2)


# ---- real kernels on small sizes ----------------------------------------------------------------
def test_a_real_small_gemm_is_within_a_factor_of_the_bare_torch_loop():
    import torch

    n = 256
    a, b = torch.randn(n, n), torch.randn(n, n)
    out = torch.empty(n, n)
    measured, bare = [], []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the same threads for both; one thread, as a busy core stalls a 2-thread GEMM 10-100x
    try:
        for _ in range(3):  # side by side, interleaved; the best of each: a shared machine's bursts hit either one
            report = gemm_stage(
                base_config("base_gemm", extra={"sizes": [n]}, precision=None, min_duration_s=0.2), TorchKernels()
            )
            measured.append(report.figures[0]["value"])
            calls, start = 50, time.perf_counter()
            for _ in range(calls):
                torch.mm(a, b, out=out)
            bare.append(calls * gemm_flop(n, n, n) / (time.perf_counter() - start))
    finally:
        torch.set_num_threads(threads)
    measured, bare = max(measured), max(bare)
    assert bare / 4 < measured < bare * 4, (measured, bare)
    assert report.figures[0]["size"] == [n, n, n] and report.figures[0]["unit"] == "FLOP/s"


def test_the_gemm_sweep_reports_every_size_and_measures_the_best():
    clock_ns = {"now": 0}

    class Timed(TorchKernels):
        def gemm(self, dtype, m, n, k, device):  # a fake chip: 1 TFLOP/s at 128, 2 TFLOP/s at 256
            rate = 1e12 if m == 128 else 2e12

            def call():
                clock_ns["now"] += int(gemm_flop(m, n, k) / rate * 1e9)

            return call

    config = base_config("base_gemm", extra={"sizes": [128, 256]}, min_duration_s=0.001)
    report = gemm_stage(config, Timed(), clock=lambda: clock_ns["now"])
    found = report.figures[0]
    assert [row["size"] for row in found["sweep"]] == [128, 256]
    assert found["size"] == [256, 256, 256]
    assert found["value"] == pytest.approx(2e12, rel=1e-3)


def test_a_size_whose_sweep_row_would_outlast_max_duration_is_not_swept():
    """A chip at 1 GFLOP/s (an emulated dtype): 256³ at 128³'s rate takes 34 ms a call, 17 calls 0.57 s,
    under max_duration_s (1 s), and is swept; 512³ would take 0.27 s a call, 4.6 s, and is not, nor
    built: the figure is the best swept size's."""
    clock_ns = {"now": 0}
    built: list[int] = []

    class Emulated(TorchKernels):
        def gemm(self, dtype, m, n, k, device):
            built.append(m)

            def call():
                clock_ns["now"] += int(gemm_flop(m, n, k) / 1e9 * 1e9)

            return call

    config = base_config("base_gemm", extra={"sizes": [512, 128, 256]}, max_duration_s=1.0)
    report = gemm_stage(config, Emulated(), clock=lambda: clock_ns["now"])
    found = report.figures[0]
    assert built == [128, 256]
    assert [row["size"] for row in found["sweep"]] == [128, 256]
    assert found["value"] == pytest.approx(1e9, rel=1e-3)
    assert any(
        note.startswith("fp32 GEMM: sizes from 512^3 up not swept: one call would take about 0.27 s")
        for note in report.notes
    )


def test_the_best_size_is_measured_on_the_kernel_its_sweep_built():
    built = []

    class Counted(TorchKernels):
        def gemm(self, dtype, m, n, k, device):
            built.append(m)
            return lambda: None

    report = gemm_stage(base_config("base_gemm", extra={"sizes": [32, 16]}, precision=None), Counted())
    assert built == [16, 32]  # each size once: no second build (and cold start) before the judged window
    assert report.figures[0]["size"][0] in (16, 32)


def test_a_figure_measured_once_more_says_so_in_the_notes():
    from benchmarks.base_common import BaselineReport, _judged

    report = BaselineReport("base_gemm", "k")
    verdict = {"valid": True, "reasons": []}
    found = {"name": "fp32 GEMM", "unit": "FLOP/s", "value": 5e11, "relative_half_width": 0.01, "verdict": verdict}
    report.figures.append({**found, "precision": {"drift": {"rate": None}}})
    _judged(report)
    assert report.notes == []
    report.figures.append({**found, "precision": {"remeasured": {"drift": {"rate": 0.041}, "reasons": ["x"]}}})
    _judged(report)
    assert report.notes == [
        "fp32 GEMM: its first window drifted (+4.1% from the first to the last third) and was measured once more; "
        "the figure is the second window's"
    ]


def test_stream_on_real_arrays_reports_copy_and_triad_and_the_arrays_size():
    report = stream_stage(base_config("base_stream", extra={"array_mib": 8}))
    assert [f["name"] for f in report.figures] == ["STREAM copy", "STREAM triad"]
    assert all(f["value"] > 0 and f["unit"] == "B/s" and f["array_bytes"] == 8 * 2**20 for f in report.figures)


def test_transfer_is_not_applicable_on_cpu_and_measures_nothing():
    report = transfer_stage(base_config("base_transfer", extra={"transfer_mib": 1}))
    assert report.figures == [] and "no device memory" in report.not_applicable


def test_the_last_level_cache_is_summed_once_per_shared_cache(tmp_path):
    for cpu, shared in ((0, "0-1"), (1, "0-1"), (2, "2-3")):
        for index, (level, size) in enumerate(((2, "1024K"), (3, "32768K"))):
            folder = tmp_path / f"cpu{cpu}" / "cache" / f"index{index}"
            folder.mkdir(parents=True)
            (folder / "level").write_text(f"{level}\n")
            (folder / "shared_cpu_list").write_text(shared if level == 3 else str(cpu))
            (folder / "size").write_text(size)
    assert last_level_cache_bytes(tmp_path) == 2 * 32 * 2**20
    assert last_level_cache_bytes(tmp_path / "none") == 0


# ---- bad input: one line naming the key ------------------------------------------------------
def test_bad_base_inputs_name_their_key():
    with pytest.raises(ConfigError, match=r"key 'dtypes': 'int8' is not supported by vendor cpu"):
        check_base_config(base_config("base_gemm", extra={"dtypes": ["int8"]}), TorchKernels())
    for sizes in ([0], [-5], [256, 0], ["big"]):
        with pytest.raises(ConfigError, match=r"key 'sizes' must be a positive integer"):
            check_base_config(base_config("base_gemm", extra={"sizes": sizes}), TorchKernels())
    with pytest.raises(ConfigError, match=r"key 'sizes': a 1000000\^3 fp32 GEMM .* needs 1.12e\+04 GiB"):
        check_base_config(base_config("base_gemm", extra={"sizes": [1_000_000]}), TorchKernels())
    with pytest.raises(ConfigError, match=r"key 'array_mib'"):
        check_base_config(base_config("base_stream", extra={"array_mib": 0}), TorchKernels())
    with pytest.raises(ConfigError, match=r"key 'array_mib': STREAM's three arrays"):
        check_base_config(base_config("base_stream", extra={"array_mib": 10**8}), TorchKernels())
    assert gemm_bytes("int8", 1000) == 2 * 10**6 + 4 * 10**6


def _run_py(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    config = tmp_path / "host.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "MODE": "local",
                "VENDOR": "cpu",
                "FLAGPERF_LOG_PATH": str(tmp_path / "result"),
                "HOSTS": ["127.0.0.1"],
                "CASES": {"digits:pytorch": "/tmp"},
            }
        )
    )
    return subprocess.run(
        [sys.executable, "run.py", "--config", str(config), *extra],
        cwd=INFERENCE,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("setting", "key"),
    [("dtypes=[int8]", "dtypes"), ("sizes=[0]", "sizes"), ("sizes=[-1024]", "sizes"), ("sizes=[4000000]", "sizes")],
)
def test_run_py_cases_base_rejects_bad_input_with_one_line_and_exit_2(tmp_path, setting, key):
    done = _run_py(tmp_path, "--cases", "base", "--set", setting)
    assert done.returncode == 2, done.stderr
    errors = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert len(errors) == 1 and f"key '{key}'" in errors[0] and "Traceback" not in done.stderr
    assert not (tmp_path / "result").exists()  # nothing written


# ---- measured peaks: the cache and MFU ------------------------------------------------------------
ENV = {"cpu_model": "AMD EPYC 9B45", "cpus_usable": 2, "accelerator": None}


def _outcome(tmp_path: Path, case: str, result: dict) -> CaseOutcome:
    """A successful outcome whose result is a complete result.json (tests/result_records.py) with ``result``'s keys."""
    local = tmp_path / "result" / "run20260101" / f"{case}:pytorch" / "127.0.0.1_noderank0"
    local.mkdir(parents=True)
    outcome = CaseOutcome(CaseSpec(case, "pytorch", "/tmp"), "127.0.0.1", 0, local, status="success")
    outcome.result = case_result(
        {"vendor": "cpu", "env": ENV, "config": {"device": "cpu"}, "finished_at": "2026-01-01T00:00:00+00:00", **result}
    )
    return outcome


def _gemm_result(value: float, valid: bool = True, reasons: list[str] | None = None, width: float = 0.02) -> dict:
    figure = {
        "name": "fp32 GEMM",
        "kind": "compute",
        "dtype": "fp32",
        "unit": "FLOP/s",
        "value": value,
        "ci95": [value * (1 - width), value * (1 + width)],
    }
    reasons = reasons if reasons is not None else [] if valid else ["contention: ..."]
    figure.update(size=[1024] * 3, calls=100, verdict={"valid": not reasons, "reasons": reasons})
    return {"case": "base_gemm", "precision": "fp32", "baseline": {"figures": [figure], "not_applicable": None}}


def _model_result(qps: float, env: dict = ENV) -> dict:
    return {"case": "resnet50", "precision": "fp32", "flops": 8e9, "*p_inference_core(qps)": qps, "env": env}


def test_a_cases_mfu_uses_the_cached_measured_peak_when_the_fingerprint_matches(tmp_path):
    baselines.store_outcomes([_outcome(tmp_path, "base_gemm", _gemm_result(500e9))], "cpu", "run1")
    cached = json.loads(next((tmp_path / "result" / "baselines").glob("*.json")).read_text())
    assert cached["compute"]["fp32"]["value"] == 500e9 and cached["fingerprint"]["cpu_model"] == "AMD EPYC 9B45"
    record = merge_outcome(_outcome(tmp_path, "resnet50", _model_result(50.0)), INFERENCE, "cpu")
    assert record.mfu == pytest.approx(50 * 8e9 / 500e9) and record.mfu_is_estimate is False
    assert record.peak_measured == "measured fp32 GEMM peak (500 GFLOP/s ±2.0%)"
    table = markdown_table([record])
    assert "80.00% of measured fp32 GEMM peak (500 GFLOP/s ±2.0%)" in table


def test_another_fingerprint_keeps_the_estimate(tmp_path):
    baselines.store_outcomes([_outcome(tmp_path, "base_gemm", _gemm_result(500e9))], "cpu", "run1")
    other = {**ENV, "cpu_model": "Intel Xeon"}
    record = merge_outcome(_outcome(tmp_path, "resnet50", _model_result(50.0, other)), INFERENCE, "cpu")
    assert record.peak_measured is None and record.peak_flops != 500e9


def test_an_invalid_baseline_is_not_cached(tmp_path):
    baselines.store_outcomes([_outcome(tmp_path, "base_gemm", _gemm_result(500e9, valid=False))], "cpu", "run1")
    assert not (tmp_path / "result" / "baselines").exists()


IMPRECISE = "not precise enough: rate ±3.1% after 20 s (precision 2%)"


def _cached_fp32(tmp_path) -> dict:
    return json.loads(next((tmp_path / "result" / "baselines").glob("*.json")).read_text())["compute"]["fp32"]


def test_a_peak_invalid_for_its_precision_alone_is_used_with_its_interval_and_says_so(tmp_path):
    imprecise = _gemm_result(500e9, reasons=[IMPRECISE], width=0.031)
    baselines.store_outcomes([_outcome(tmp_path, "base_gemm", imprecise)], "cpu", "run1")
    assert _cached_fp32(tmp_path)["valid"] is False and _cached_fp32(tmp_path)["reasons"] == [IMPRECISE]
    record = merge_outcome(_outcome(tmp_path, "resnet50", _model_result(50.0)), INFERENCE, "cpu")
    assert record.mfu == pytest.approx(50 * 8e9 / 500e9) and record.mfu_is_estimate is False
    source = "measured fp32 GEMM peak (500 GFLOP/s ±3.1%, INVALID: not precise enough)"
    assert record.peak_measured == source and f"80.00% of {source}" in markdown_table([record])


@pytest.mark.parametrize(
    "reasons, width",
    [
        ([IMPRECISE, "drifting: rate fell 5% from the first to the last third"], 0.031),
        ([IMPRECISE, "contention: other processes used 40% of the CPUs"], 0.031),
        (["not precise enough: rate has no interval after 20 s"], None),
    ],
    ids=["imprecise-and-drifting", "imprecise-under-contention", "no-interval"],
)
def test_a_peak_invalid_for_more_than_its_precision_is_not_cached(tmp_path, reasons, width):
    figure = _gemm_result(500e9, reasons=reasons, width=width or 0.0)
    if width is None:
        figure["baseline"]["figures"][0]["ci95"] = None
    baselines.store_outcomes([_outcome(tmp_path, "base_gemm", figure)], "cpu", "run1")
    assert not (tmp_path / "result" / "baselines").exists()


def test_an_imprecise_peak_never_replaces_a_valid_one_and_a_valid_one_replaces_it(tmp_path):
    def store(value: float, **imprecise) -> None:
        outcome = _outcome(tmp_path / str(value), "base_gemm", _gemm_result(value, **imprecise))
        baselines.MeasuredPeaks(tmp_path / "result" / "baselines").store(outcome.result, "cpu", "run", "h")

    store(400e9, reasons=[IMPRECISE], width=0.031)
    store(420e9, reasons=[IMPRECISE], width=0.031)  # the later imprecise one replaces the earlier
    assert _cached_fp32(tmp_path)["value"] == 420e9
    store(500e9)
    store(300e9, reasons=[IMPRECISE], width=0.031)
    assert _cached_fp32(tmp_path)["value"] == 500e9 and _cached_fp32(tmp_path)["valid"] is True


def test_over_100_percent_of_a_measured_peak_gives_its_reason(tmp_path):
    baselines.store_outcomes([_outcome(tmp_path, "base_gemm", _gemm_result(100e9))], "cpu", "run1")
    record = merge_outcome(
        _outcome(tmp_path, "resnet50", _model_result(50.0)), INFERENCE, "cpu"
    )  # 400 GFLOP/s achieved
    assert record.mfu is None
    assert record.mfu_note.startswith("400% of the measured fp32 GEMM peak (100 GFLOP/s ±2.0%): the baseline is wrong")
    table = markdown_table([record])
    assert (
        "n/a (over 100% of the measured peak: the baseline is wrong, see below)" in table and record.mfu_note in table
    )
    assert plausible_mfu(1.5, False, "measured x")[1].startswith("150% of the measured x")
    assert plausible_mfu(1.5, True)[1].startswith("150% of the estimated peak")


def test_the_fingerprint_covers_the_hardware_and_the_vendor():
    one = baselines.fingerprint(ENV, "cpu", "cpu")
    assert one == baselines.fingerprint({**ENV, "hostname": "other", "python": "3.12"}, "cpu", "cpu")
    for env, vendor, device in (
        (ENV, "nvidia", "cuda:0"),
        ({**ENV, "cpus_usable": 4}, "cpu", "cpu"),
        ({**ENV, "accelerator": {"name": "H100"}}, "cpu", "cpu"),
    ):
        assert baselines.fingerprint(env, vendor, device)[0] != one[0]
    assert baselines.fingerprint(None, "cpu", "cpu") is None
    assert baselines.format_rate(485e9, "FLOP/s") == "485 GFLOP/s" and baselines.format_rate(2.1e13, "B/s") == "21 TB/s"


# ---- a base case through the pipeline ------------------------------------------------------------
def test_base_gemm_runs_through_run_inference_and_writes_its_figures(tmp_path):
    log = tmp_path / "log"
    command = [
        sys.executable,
        "run_inference.py",
        "--perf_dir",
        ".",
        "--data_dir",
        "/nonexistent",
        "--log_dir",
        str(log),
    ]
    command += [
        "--vendor",
        "cpu",
        "--case",
        "base_gemm",
        "--framework",
        "pytorch",
        "--set",
        "sizes=[64,128]",
        "--set",
        "dtypes=[fp32]",
    ]
    command += [
        "--set",
        "min_duration_s=0.1",
        "--set",
        "max_duration_s=2.0",
        "--set",
        "precision=null",
        "--set",
        "settle_max_s=0",
    ]
    done = subprocess.run(command, cwd=INFERENCE, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((log / "result.json").read_text())
    (found,) = result["baseline"]["figures"]
    assert found["name"] == "fp32 GEMM" and found["value"] > 0 and [row["size"] for row in found["sweep"]] == [64, 128]
    assert (
        result["steps"]["dataset_and_model"]["status"] == "skipped"
        and result["steps"]["engine_inference"]["status"] == "done"
    )
    # the cpu vendor's own file (inference_engine/cpu/base/kernels.py): its engine's library, ONNX Runtime, for fp32
    assert result["baseline"]["kernels"] == "onnxruntime MLAS (fp32), torch (bf16, fp16)"


def test_the_cpu_vendors_fp32_gemm_holds_b_constant_as_a_models_weights_are(monkeypatch):
    """ONNX Runtime packs a constant B once, as it packs a model's weights, and an input B on every
    call: measured 8 % slower, which resnet50's convolutions beat (105 % MFU). The GEMM must be
    the engine's, B an initializer, and still compute A @ B."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    from inference_engine.cpu.base.kernels import Kernels

    built = []
    real = ort.InferenceSession

    def capture(model_bytes, *args, **kwargs):
        built.append(onnx.load_from_string(model_bytes))
        return real(model_bytes, *args, **kwargs)

    monkeypatch.setattr(ort, "InferenceSession", capture)
    call = Kernels().gemm("fp32", 8, 4, 16, "cpu")
    (model,) = built
    assert [value.name for value in model.graph.input] == ["A"]
    (weights,) = model.graph.initializer
    assert weights.name == "B" and list(weights.dims) == [16, 4]
    call()  # runs
    session = real(model.SerializeToString(), providers=["CPUExecutionProvider"])
    a = np.random.default_rng(1).standard_normal((8, 16), dtype=np.float32)
    (again,) = session.run(None, {"A": a})
    assert np.allclose(again, a @ onnx.numpy_helper.to_array(weights), atol=1e-4)


# ---- the interconnect ------------------------------------------------------------------------------
def test_a_collective_stops_when_the_ranks_agree_and_every_rank_makes_the_same_calls():
    from contract.kernels import group_decision
    from tools.measure.baseline import measure_collective

    assert group_decision([True, False], [False, False]) is True
    assert group_decision([False, False], [False, False]) is False
    assert group_decision([True, True], [False, True]) is False  # one rank out of time stops all
    clock = FakeClock(step_ns=1_000_000)
    decisions = []

    def agree(more: bool, late: bool) -> bool:  # a peer that wants two rounds more than this rank
        decisions.append(more)
        return group_decision([more, len(decisions) < 6], [late, False])

    rate = measure_collective(
        clock.kernel(), 2**20, settings(min_queries=8, min_duration_s=0.0), agree, clock=clock, contention=NO_CONTENTION
    )
    assert rate.calls == 6 * 8 and rate.value == pytest.approx(2**20 / 1e-3)
    assert rate.sustained is None  # ranks call in lock step: the figure is the mean rate itself
    assert decisions[:2] == [True, False]  # precise after its first 16 calls; it went on for its peer


def test_the_rendezvous_reads_the_hosts_and_derives_the_port_from_the_run():
    from benchmarks.base_common import rendezvous

    config = base_config("base_allreduce", extra={"sizes_mib": [1], "master_addr": None, "master_port": 0})
    environ = {"INFERPERF_HOSTS": "10.0.0.1,10.0.0.2", "INFERPERF_NODERANK": "1", "INFERPERF_RUN_ID": "r1"}
    hosts, rank, address, port = rendezvous(config, environ)
    assert hosts == ["10.0.0.1", "10.0.0.2"] and rank == 1 and address == "10.0.0.1" and 20000 <= port < 50000
    assert rendezvous(config, {**environ, "INFERPERF_RUN_ID": "r2"})[3] != port
    with pytest.raises(ConfigError, match=r"key 'HOSTS' lists 1 host: base_allreduce"):
        rendezvous(config, {**environ, "INFERPERF_HOSTS": "10.0.0.1"})


def test_an_interconnect_case_with_one_host_is_one_line_and_exit_2(tmp_path):
    config = tmp_path / "host.yaml"
    host = {"MODE": "local", "VENDOR": "cpu", "FLAGPERF_LOG_PATH": str(tmp_path / "result"), "HOSTS": ["127.0.0.1"]}
    host["CASES"] = {"base_allreduce:pytorch": "/tmp"}
    config.write_text(yaml.safe_dump(host))
    done = subprocess.run(
        [sys.executable, "run.py", "--config", str(config)], cwd=INFERENCE, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stderr
    errors = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert len(errors) == 1 and f"{config}: key 'HOSTS' lists 1 host: base_allreduce" in errors[0]
    assert not (tmp_path / "result").exists()


# ---- the roofline in report.html --------------------------------------------------------------------
def _roofline_records(tmp_path: Path) -> list[SummaryRecord]:
    gemm = _gemm_result(400e9)["baseline"]["figures"][0]
    stream = {
        "name": "STREAM triad",
        "kind": "bandwidth",
        "kernel": "triad",
        "unit": "B/s",
        "value": 40e9,
        "ci95": [39e9, 41e9],
        "verdict": {"valid": True},
    }
    base = {
        "case": "base_gemm",
        "framework": "pytorch",
        "host": "h",
        "noderank": 0,
        "status": "success",
        "baseline": {"figures": [gemm, stream]},
    }
    log = tmp_path / "resnet50"
    log.mkdir()
    write_result(log, engine={"onnx_bytes": 100_000_000})
    model = {"case": "resnet50", "framework": "pytorch", "host": "h", "noderank": 1, "status": "success", "flops": 8e9}
    model.update({"batchsize": 8, "*p_inference_core(qps)": 25.0, "log_dir": str(log)})
    return [SummaryRecord.from_json(r) for r in (base, model)]


def test_the_roofline_has_the_measured_roofs_and_each_case_at_its_intensity(tmp_path):
    from utils.results.report.roofline import roofline_plot

    figure, note = roofline_plot(_roofline_records(tmp_path), "cpu")
    roof, cases = figure["data"]
    assert roof["x"][1] == pytest.approx(10.0) and roof["y"][1] == pytest.approx(400e9)  # ridge: 400 GFLOP/s / 40 GB/s
    assert roof["y"][0] == pytest.approx(40e9 * roof["x"][0])  # the bandwidth slope left of the ridge
    assert cases["x"] == [pytest.approx(8e9 * 8 / 1e8)] and cases["y"] == [
        pytest.approx(8e9 * 25)
    ]  # 640 FLOP/B, 200 GFLOP/s
    assert "compute-bound" in cases["hovertext"][0] and "upper bound" in note


def test_a_roof_from_an_imprecise_cached_peak_says_so(tmp_path):
    from utils.results.report.roofline import roofs

    stream = {"name": "STREAM triad", "kind": "bandwidth", "kernel": "triad", "unit": "B/s", "value": 40e9}
    stream.update(ci95=[39e9, 41e9], verdict={"valid": True, "reasons": []})
    base = _gemm_result(400e9, reasons=[IMPRECISE], width=0.031)
    base["baseline"]["figures"].append(stream)
    baselines.store_outcomes([_outcome(tmp_path, "base_gemm", base)], "cpu", "run1")
    model = _outcome(tmp_path, "resnet50", _model_result(25.0))  # its run folder beside the cached peaks
    write_result(model.local_dir, {"env": ENV, "config": {"device": "cpu"}, "vendor": "cpu", "precision": "fp32"})
    compute, memory, source = roofs([merge_outcome(model, INFERENCE, "cpu")], "cpu")
    assert compute == {"fp32": 400e9} and memory == 40e9
    assert source.endswith("(fp32 GEMM: INVALID, not precise enough)"), source


def test_no_roofline_without_measured_peaks_and_the_page_shows_it_when_there_are(tmp_path):
    from utils.results.report.page import render
    from utils.results.report.roofline import roofline_plot

    records = _roofline_records(tmp_path)
    assert roofline_plot(records[1:], "cpu")[0] is None
    html = render(Summary(tuple(records), run_id="r", mode="local", vendor="cpu", hosts=["h"]))
    assert 'id="roofline"' in html and "Roofline: 40 GB/s STREAM bandwidth roof" in html


# ---- MBU of LLM decode --------------------------------------------------------------------------------
MODEL = {
    "precision": "fp32",
    "params": 19_000_000,
    "embedding_params": 1_000_000,
    "layers": 4,
    "kv_heads": 2,
    "head_dim": 64,
    "bytes_per_kv_value": 4,
}


def test_decode_bytes_per_token_are_the_weights_over_the_batch_plus_the_kv_cache_at_the_mean_context():
    weights = 18_000_000 * 4
    kv_per_position = 2 * 4 * 2 * 64 * 4  # K and V x layers x kv heads x head_dim x bytes
    assert baselines.decode_bytes_per_token(MODEL, 1, 128, 32) == weights + kv_per_position * 144
    assert baselines.decode_bytes_per_token(MODEL, 4, 128, 32) == weights / 4 + kv_per_position * 144
    assert (
        baselines.decode_bytes_per_token({**MODEL, "precision": "fp16", "bytes_per_kv_value": None}, 1, 0, 0)
        == 18_000_000 * 2
    )
    assert baselines.decode_bytes_per_token({**MODEL, "precision": "fp8"}, 1, 0, 0) is None


def _llm_block(decode_tokens_per_s: float) -> SummaryLLM:
    cell = {"scenario": "offline", "batch_size": 1, "input_length": 0, "output_length": 0, "verdict": {"reasons": []}}
    model = {**MODEL, "embedding_params": 0, "params": 10_000_000}
    block = {"model": model, "table": [{**cell, "decode_tokens_per_s": decode_tokens_per_s}], "server": []}
    llm = SummaryLLM.from_json(block)
    assert llm is not None
    return llm


def test_mbu_is_decode_bytes_per_second_over_the_measured_bandwidth_and_over_100_percent_a_note():
    llm = baselines.add_mbu(_llm_block(100.0), {"triad": {"value": 8e9, "ci95": [7.8e9, 8.2e9]}})
    assert llm is not None and llm.table[0].mbu is not None
    assert (
        llm.table[0].mbu.mbu == pytest.approx(40e6 * 100 / 8e9)
        and llm.mbu_bandwidth == "measured STREAM triad (8 GB/s ±2.5%)"
    )
    llm = baselines.add_mbu(_llm_block(400.0), {"copy": {"value": 8e9}})
    mbu = llm.table[0].mbu if llm is not None else None
    assert (
        mbu is not None and mbu.mbu is None and (mbu.note or "").startswith("200% of the measured STREAM copy (8 GB/s)")
    )
    record = SummaryRecord(case="llama", framework="f", host="h", noderank=0, status="success", llm=llm)
    lines = baselines.mbu_lines([record])
    assert "decode MBU n/a (200% of the measured STREAM copy" in lines[-1]
    untouched = _llm_block(100.0)
    assert baselines.add_mbu(untouched, None) is untouched and "decode_mbu" not in untouched.table[0].to_json()


def test_an_llm_record_gets_decode_mbu_from_the_cached_bandwidth_of_its_host(tmp_path):
    triad = {
        "name": "STREAM triad",
        "kind": "bandwidth",
        "kernel": "triad",
        "unit": "B/s",
        "value": 40e9,
        "ci95": [39e9, 41e9],
    }
    triad.update(array_bytes=2**27, calls=50, verdict={"valid": True, "reasons": []})
    stream = {"case": "base_stream", "precision": "fp32", "baseline": {"figures": [triad], "not_applicable": None}}
    baselines.store_outcomes([_outcome(tmp_path, "base_stream", stream)], "cpu", "run1")
    cell = {
        "scenario": "offline",
        "batch_size": 1,
        "input_length": 0,
        "output_length": 0,
        "decode_tokens_per_s": 50.0,
        "verdict": {"valid": True},
    }
    llm = {"model": {**MODEL, "embedding_params": 0, "params": 10_000_000}, "table": [cell], "server": []}
    record = merge_outcome(
        _outcome(tmp_path, "llama", {"case": "llama", "precision": "fp32", "llm": llm}), INFERENCE, "cpu"
    )
    mbu = record.llm.table[0].mbu if record.llm else None
    assert mbu is not None and mbu.mbu == pytest.approx(40e6 * 50 / 40e9)
    assert "Decode MBU" in markdown_table([record])


def test_the_nvidia_kernels_build_every_dtype_they_declare_on_any_device():
    """Their GPU run is unproven here (no GPU); the factories and the int8 path run on the CPU."""
    from benchmarks.base_common import vendor_kernels

    kernels = vendor_kernels("nvidia")
    assert kernels.gemm_dtypes == ("fp32", "tf32", "bf16", "fp16", "int8") and kernels.transfer_not_applicable is None
    results = {dtype: kernels.gemm(dtype, 32, 16, 64, "cpu")() for dtype in ("fp32", "bf16", "fp16", "int8")}
    assert {d: (tuple(r.shape), str(r.dtype)) for d, r in results.items()} == {
        "fp32": ((32, 16), "torch.float32"),
        "bf16": ((32, 16), "torch.bfloat16"),
        "fp16": ((32, 16), "torch.float16"),
        "int8": ((32, 16), "torch.int32"),  # int8 x int8 accumulated in int32, as gemm_bytes counts it
    }
