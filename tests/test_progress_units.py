"""tools/measure/phase_progress.py and utils/run_progress.py without a pipeline: the stop-rule estimate, the
PROGRESS line the measured loops write (on fake clocks, so every line is known), the parser and the live display's
state."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest

from contract.phase import ContentionReading
from tools.measure import loop as forward
from tools.measure.phase_progress import INTERVAL_NS, PhaseProgress, estimate
from tools.measure.scenarios import ScenarioSpec, run_scenario
from utils import run_progress as prog
from utils.run_progress import ProgressConsole, RunProgress, parse_line

S = 1_000_000_000


def progress_lines(text: str) -> list[dict]:
    return [parse_line(line).progress for line in text.splitlines() if parse_line(line).kind == "progress"]


# ---- the estimate follows the loop's stop rule ------------------------------------------------


def test_estimate_counts_whole_passes_until_repeat_queries_and_duration():
    rule = dict(min_queries=24, min_duration_s=0.0, max_duration_s=600.0, repeat=1, per_pass=8)
    assert estimate(4, 4.0, **rule) == (24, 20.0)  # 3 passes of 8 for 24 queries
    assert estimate(4, 4.0, **{**rule, "repeat": 5}) == (40, 36.0)  # repeat passes first
    # 100 queries/s: 2 s are 200 queries = 20 passes of 10
    assert estimate(50, 0.5, min_queries=1, min_duration_s=2.0, max_duration_s=600.0, repeat=1, per_pass=10) == (
        200,
        1.5,
    )


def test_estimate_is_capped_by_max_duration_and_never_stops_mid_pass():
    # min_duration 100 s, but max_duration 1 s at 100 queries/s: the pass boundary after 100 queries
    assert estimate(50, 0.5, min_queries=1, min_duration_s=100.0, max_duration_s=1.0, per_pass=10) == (100, 0.5)
    # already past the estimate: the pass under way is finished
    assert estimate(55, 0.5, min_queries=1, min_duration_s=0.0, max_duration_s=600.0, per_pass=10) == (
        60,
        pytest.approx(5 / 110),
    )


def test_estimate_of_a_scenario_run_stops_between_queries():
    assert estimate(10, 1.0, min_queries=64, min_duration_s=2.0, max_duration_s=600.0) == (64, 5.4)
    assert estimate(1000, 1.0, min_queries=64, min_duration_s=2.0, max_duration_s=600.0) == (2000, 1.0)
    assert estimate(0, 1.0, min_queries=64, min_duration_s=2.0, max_duration_s=600.0) == (None, None)


def test_phase_progress_lines_are_compact_json_on_stdout(capsys, caplog_loguru):
    p = PhaseProgress("inference", min_queries=64, min_duration_s=2.0, max_duration_s=600.0)
    assert p.begin(7 * S) == 7 * S + INTERVAL_NS
    assert p.update(100, 8 * S) == 8 * S + INTERVAL_NS
    p.finish(300, 3.0)
    out = capsys.readouterr().out.splitlines()
    assert out == [
        'PROGRESS {"phase": "inference", "done": 100, "target": 200, "elapsed_s": 1.0, "eta_s": 1.0}',
        'PROGRESS {"phase": "inference", "done": 300, "target": 300, "elapsed_s": 3.0, "eta_s": 0.0}',
    ]
    assert caplog_loguru == []  # never through the logger: container.out.log keeps the pipeline's lines


# ---- the measured loops report at most every INTERVAL_S, from the clock they read anyway -------------


class FakeClock:
    def __init__(self) -> None:
        self.t = 10**12

    def __call__(self) -> int:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += int(seconds * 1e9)


# 24 queries of exactly 0.1 s against min_query_count 24 and min_duration_s 2: (done, target, elapsed_s,
# eta_s) of a line at 0.5, 1.0, 1.5 and 2.0 s, then the last one at 2.4 s
HALF_SECONDS_OF_24 = [(5, 24, 0.5, 1.9), (10, 24, 1.0, 1.4), (15, 24, 1.5, 0.9), (20, 24, 2.0, 0.4), (24, 24, 2.4, 0.0)]


def test_timed_forward_reports_every_half_second_with_the_pass_rule(monkeypatch, capsys):
    clock = FakeClock()
    monkeypatch.setattr(forward.time, "perf_counter_ns", clock)
    monkeypatch.setattr(forward, "sync_for_config", lambda config: lambda: None)

    class Quiet:
        def __init__(self, device):
            pass

        def start(self):
            return self

        def stop(self):
            return ContentionReading(0.0, 2, 1.0, None)

    monkeypatch.setattr(forward, "CpuContention", Quiet)

    def step(inputs):
        clock.t += S // 10  # 0.1 s a query
        return [inputs[0]], 0.0

    loader = [([i], [0]) for i in range(8)]
    # precision None: the minimums alone stop the loop (a precision would measure on until drift can be judged)
    config = SimpleNamespace(
        repeat=1, warmup=0, min_query_count=24, min_duration_s=2.0, max_duration_s=600.0, precision=None
    )
    result = forward.timed_forward(step, loader, None, config, "validation")
    assert result.batches == 24 and result.passes == 3
    lines = progress_lines(capsys.readouterr().out)
    # 2.4 s of queries: a line at 0.5, 1.0, ... 2.0 s (5 of them), then the last one
    assert [(l["done"], l["target"], l["elapsed_s"], l["eta_s"]) for l in lines] == HALF_SECONDS_OF_24
    assert {l["phase"] for l in lines} == {"validation"}


def run_on_a_fake_clock(cost_ns: int, **kwargs):
    """``run_scenario`` at batch size 1 on a fake clock, each engine call costing ``cost_ns``."""
    clock = FakeClock()

    def step(inputs):
        clock.t += cost_ns
        return [inputs[0]], 0.0

    return run_scenario(step, [[1], [2]], ScenarioSpec(batch_size=1, clock=clock, sleep=clock.sleep, **kwargs))


@pytest.mark.parametrize(
    "scenario, clients, extra",
    [
        ("offline", 1, {}),
        ("single_stream", 1, {}),
        ("offline", 2, {}),
        ("server", 1, {"target_qps": 20.0}),
        ("server", 2, {"target_qps": 20.0}),
    ],
)
def test_scenario_runs_report_and_end_with_a_last_line(capsys, scenario, clients, extra):
    run = run_on_a_fake_clock(
        S // 20,
        scenario=scenario,
        clients=clients,
        min_query_count=10,
        min_duration_s=1.0,
        max_duration_s=60.0,
        **extra,
    )
    lines = progress_lines(capsys.readouterr().out)
    assert lines and lines[-1]["done"] == lines[-1]["target"] == run.queries and lines[-1]["eta_s"] == 0.0
    assert len(lines) <= run.duration_s / 0.5 + 1
    assert {l["phase"] for l in lines} == {f"performance bs=1 {scenario} clients={clients}"}
    for line in lines[:-1]:
        assert line["elapsed_s"] >= 0.5 and line["target"] >= 10 and 0 <= line["eta_s"] <= 60


@pytest.mark.parametrize(
    "scenario, extra", [("offline", {}), ("single_stream", {}), ("multi_stream", {"samples_per_query": 1})]
)
def test_one_client_scenario_runs_report_on_the_half_second_itself(capsys, scenario, extra):
    # Queries of exactly 0.1 s: the 5th ends at 0.5 s, the moment a line is due, and that query's line is
    # the first (the same lines as timed_forward's above, from each one-client runner's own clock reading).
    run = run_on_a_fake_clock(
        S // 10, scenario=scenario, min_query_count=24, min_duration_s=2.0, max_duration_s=600.0, **extra
    )
    assert run.queries == 24
    lines = progress_lines(capsys.readouterr().out)
    assert [(l["done"], l["target"], l["elapsed_s"], l["eta_s"]) for l in lines] == HALF_SECONDS_OF_24


def test_a_scenario_run_s_last_line_is_its_window_in_seconds(capsys):
    # one query of 2.345000001 s: its window in seconds rounds up to 2.35 (a divisor one off would give 2.34)
    run = run_on_a_fake_clock(
        2_345_000_001, scenario="single_stream", min_query_count=1, min_duration_s=0.0, max_duration_s=600.0
    )
    assert run.queries == 1
    assert progress_lines(capsys.readouterr().out)[-1]["elapsed_s"] == 2.35


# ---- the host side: parsing and the display's state -----------------------------------------------

ECHOED = [
    "[127.0.0.1 digits:pytorch] 2026-11-23 04:49:36.903 | INFO    | [1/7 init] start",
    "[127.0.0.1 digits:pytorch] 2026-11-23 04:49:36.906 | WARNING | something to look at",
    "[127.0.0.1 digits:pytorch] 2026-11-23 04:49:38.092 | INFO    | [1/7 init] done in 1.19 s",
    "[127.0.0.1 digits:pytorch] 2026-11-23 04:49:41.366 | INFO    | [3/7 framework_validation] start",
    '[127.0.0.1 digits:pytorch] PROGRESS {"phase": "validation", "done": 547, "target": 2208, "elapsed_s": 0.5, '
    '"eta_s": 1.5}',
]


def test_parse_line_with_and_without_the_session_prefix():
    event = parse_line(ECHOED[0])
    assert (event.kind, event.host, event.case, event.step) == (
        "step",
        "127.0.0.1",
        "digits:pytorch",
        (1, 7, "init", "start"),
    )
    assert parse_line("2026-11-23 04:49:41.365 | INFO    | [2/7 dataset_and_model] done in 3.27 s").step == (
        2,
        7,
        "dataset_and_model",
        "done",
    )
    assert parse_line("x | INFO    | [4/7 onnx_export] skipped (exist_onnx_path is set)").step[3] == "skipped"
    assert parse_line(ECHOED[4]).progress == {
        "phase": "validation",
        "done": 547,
        "target": 2208,
        "elapsed_s": 0.5,
        "eta_s": 1.5,
    }
    assert parse_line(ECHOED[1]).kind == "warning"
    assert parse_line("PROGRESS {not json").kind == "line"
    assert parse_line("a line that says [2/7 nothing").kind == "line"


def test_run_progress_tracks_step_and_phase_per_case_and_host():
    state = RunProgress()
    for line in ECHOED:
        case, _ = state.feed(line)
    assert (case.step_text, case.phase, case.done, case.target, case.eta_s, case.warnings) == (
        "3/7 framework_validation",
        "validation",
        547,
        2208,
        1.5,
        1,
    )
    case, _ = state.feed("[127.0.0.1 digits:pytorch] t | INFO    | [6/7 engine_inference] start")
    assert case.phase is None and case.done == 0  # a new step forgets the last phase
    case, _ = state.feed("[127.0.0.1 digits:pytorch] t | INFO    | [7/7 summary] done in 0.03 s")
    assert case.finished
    other, _ = state.feed("[10.0.0.2 digits:pytorch] t | INFO    | [1/7 init] start")
    assert other is not case and len(state.cases) == 2


def test_progress_console_draws_cases_and_builds_and_drops_finished_ones():
    from rich.console import Console

    display = ProgressConsole(2, console=Console(file=io.StringIO(), force_terminal=True, width=160))
    for line in ECHOED:
        display.echo(line)
    display.log("host 10.0.0.2: building image inferperf-cpu:abc from docker_images/cpu/pytorch/Dockerfile\n")
    texts = [t.description for t in display.progress.tasks]
    assert any("127.0.0.1 digits:pytorch" in t and "3/7 framework_validation" in t and "validation" in t for t in texts)
    assert any("building image inferperf-cpu:abc (the first time: minutes)" in t for t in texts)
    task = next(t for t in display.progress.tasks if "digits" in t.description)
    assert (task.completed, task.total, task.fields["count"], task.fields["eta"]) == (547, 2208, "547/2208", "ETA 2s")
    display.log("host 10.0.0.2: built image inferperf-cpu:abc\n")
    display.log("host 127.0.0.1: digits:pytorch success\n")
    assert [t.description for t in display.progress.tasks] == [display._overall_text()]
    assert display.finished == 1 and "1/2" in display._overall_text()
    display.echo(
        '[127.0.0.1 digits:pytorch] PROGRESS {"phase": "x", "done": 1, "target": 2, "elapsed_s": 1, "eta_s": 1}'
    )
    assert len(display.progress.tasks) == 1  # a finished case is not drawn again


def test_progress_console_start_and_stop_leave_no_log_sink():
    from loguru import logger
    from rich.console import Console

    display = ProgressConsole(1, console=Console(file=io.StringIO(), force_terminal=True)).start()
    logger.info("host 127.0.0.1: running digits:pytorch")
    assert any("digits:pytorch" in t.description for t in display.progress.tasks)
    display.stop()
    assert display._sink_id is None


def test_duration_text():
    assert (prog._duration(None), prog._duration(4.4), prog._duration(75)) == ("", "4s", "1m15s")
