"""Serving runs decided across time at compare's defaults: the noise of each figure learned from a
history of real serving runs made one after another (a loopback server, its own port each time).

The false-alarm rate itself is a measurement, not a test: bench/serving_compare_noise.py
--history-runs fills such a history and bench/history_calibration.py counts compare's false alarms
at its defaults out of sample (docs/measurement.md, "Decisions across time"). Here: the default
decides (no constant, no "not decided"), an unchanged run is no change, and a slower server is worse.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import pytest

from tools.serving.cli import main as serving_main
from tools.serving.loopback import LoopbackServer, steady
from utils.history.ingest import record_runs
from utils.history.noise import MIN_POINTS
from utils.results import decide as d
from utils.results.compare import main as compare_main

LOAD = ["--served-model", "loopback-llama", "--concurrency", "4", "--num-requests", "64", "--warmup", "2",
        "--input-len", "8", "--output-len", "4"]  # fmt: skip
FAST, SLOW = (20.0, 10.0), (20.0, 40.0)  # TTFT, ITL in ms: the slow server's tokens come 4x apart


def _serving_run(root: Path, speed: tuple[float, float], url: str) -> Path:
    """One real serving run against a fresh loopback server of this speed; its folder, in the history."""
    written: list[Path] = []
    with LoopbackServer(steady(*speed), model="loopback-llama") as server, contextlib.redirect_stdout(io.StringIO()):
        code = serving_main(
            ["--endpoint", server.url, *LOAD, "--output-dir", str(root)],
            on_written=lambda folder: (written.append(folder), record_runs([folder], url)),
        )
    assert code == 0 and len(written) == 1
    return written[0]


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> tuple[Path, list[Path]]:
    """MIN_POINTS + 5 runs of the fast server, one after another: the history of each step's figures (the
    margin: a busy machine's slow minute can cut a series into two levels, each with fewer runs)."""
    root = tmp_path_factory.mktemp("serving-history")
    url = f"sqlite:///{root / 'history.sqlite'}"
    return root, [_serving_run(root, FAST, url) for _ in range(MIN_POINTS + 5)]


def test_an_unchanged_serving_run_at_compares_defaults_is_no_change_with_the_learned_noise(history, capsys):
    root, runs = history
    copy = root / "copy"
    shutil.copytree(runs[-1], copy)  # the same figures: what an unchanged server would give, without its noise
    # --allow-invalid: on a busy machine a step may miss its precision (exit 3); the decision is what is tested
    assert compare_main([str(runs[-1]), str(copy), "--allow-invalid"], root) == 0
    out = capsys.readouterr().out
    data = json.loads((copy / f"compare_{runs[-1].name}.json").read_text())
    assert data["between_run_cv"] is None and not data["undecided"] and data["exit_code"] == 0
    assert len(data["lines"]) == 6  # concurrency 4: tokens/s, requests/s, TTFT p50 and p90, TPOT p50, E2E p90
    # ratio 1: no change, or inconclusive where this machine's noise between runs reaches past 5 %
    assert {line["ratio"] for line in data["lines"]} == {1.0}
    assert {line["verdict"] for line in data["lines"]} <= {d.NO_CHANGE, d.INCONCLUSIVE}
    assert "learned from the history" in out and "(this series, " in out


def test_a_slower_server_at_compares_defaults_is_worse(history, capsys):
    root, runs = history
    slow = _serving_run(root / "slow", SLOW, f"sqlite:///{root / 'slow-history.sqlite'}")
    argv = [str(runs[-1]), str(slow), "--history", str(root / "history.sqlite"), "--allow-invalid"]
    assert compare_main(argv, root) == 1
    data = json.loads((slow / f"compare_{runs[-1].name}.json").read_text())
    verdicts = {line["figure"]: line["verdict"] for line in data["lines"]}
    assert verdicts["TPOT p50 ms"] == d.WORSE and verdicts["output tokens/s"] == d.WORSE
    assert "**WORSE**" in capsys.readouterr().out
