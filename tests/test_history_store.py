"""The results history's store (inference/utils/history/store.py) on both of its backends: a SQLite file
and a real PostgreSQL server (tests/infra/postgres.py, a fresh database per test).

Runs are added and read back in their series, oldest first; adding a run twice, or importing its
folder twice, adds nothing; a corrupt or partial folder is skipped with one line naming it; a series
is what must be equal for two figures to be compared (a changed config key is another series, the
run's own folders are not); a schema newer or older than the code is one line naming the store and
docs/history.md; a bad ``HISTORY`` URL is one line. The run folders are written by the host's own
summary path (tests/infra/history_runs.py). The decisions made on a history are tests/test_history.py;
the store's faults, tests/test_history_faults.py; its scale, bench/history_scale.py (smoke-tested here).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.infra.history_runs import store_url, write_case_run  # noqa: F401 - store_url: a fixture
from tests.infra.series_runs import at
from utils.history.cli import main as history_main
from utils.history.ingest import record_runs
from utils.history.points import run_entries
from utils.history.store import HistoryError, Store, resolve_url, shown_url

INFERENCE = Path(__file__).resolve().parents[1] / "inference"
FIGURES = 8  # a digits run's: inference core qps, p50/p90/p99 ms; its bs 16 row's qps, p50/p90/p99 ms
PROJECT = {"inferperf": "test", "commit": "0123456789ab"}


@pytest.fixture
def store(store_url):
    opened = Store.open(store_url)
    yield opened
    opened.close()


def entries(*run_dirs: Path) -> list:
    return [entry for run_dir in run_dirs for entry in run_entries(run_dir, PROJECT)]


def core_qps(store: Store) -> list:
    (series,) = [s for s in store.all_series() if (s.key.row, s.key.figure) == ("inference", "core qps")]
    return store.points([series])[series.id]


def test_runs_added_are_read_back_in_their_series_oldest_first(store, tmp_path):
    runs = [
        write_case_run(tmp_path / "runs", "run3", qps=90.0, started_at=at(3)),
        write_case_run(tmp_path / "runs", "run1", qps=110.0, started_at=at(1)),
        write_case_run(tmp_path / "runs", "run2", qps=100.0, started_at=at(2), valid=False),
    ]
    assert store.add_runs(entries(*runs)) == (3, 3 * FIGURES)
    assert store.count() == (3, FIGURES, 3 * FIGURES)
    every = store.all_series()
    latencies = ("p50 ms", "p90 ms", "p99 ms")
    assert sorted((s.key.row, s.key.figure) for s in every) == sorted(
        [("inference", f) for f in ("core qps", *latencies)] + [("bs 16 offline x1", f) for f in ("qps", *latencies)]
    )
    for s in every:  # what the series is, as stored and read back
        assert (s.key.case, s.host, s.key.vendor, s.key.compiler) == (
            "digits:pytorch",
            "127.0.0.1",
            "cpu",
            "onnxruntime",
        )
        assert (s.unit, s.higher_is_better) == (("samples/s", True) if "qps" in s.key.figure else ("ms", False))
        assert s.config["batch_size"] == 16 and s.config["hardware"]["cpu_model"] == "AMD EPYC"
    points = core_qps(store)
    assert [(p.run_key, p.at, p.valid) for p in points] == [
        ("run1", at(1), True), ("run2", at(2), False), ("run3", at(3), True)
    ]  # fmt: skip
    assert [p.value for p in points] == pytest.approx([110.0, 100.0, 90.0])
    assert [(p.low, p.high) for p in points] == [
        pytest.approx((q * 0.98, q * 1.02)) for q in (110.0, 100.0, 90.0)
    ]  # the window's own interval
    assert all(p.n == 1 and p.report is None for p in points)
    assert points[0].software["commit"] == "0123456789ab" and points[0].software["packages"]["onnxruntime"] == "1.31.1"
    (entry, _), *_ = entries(runs[1])
    assert (entry.run_key, entry.run_dir, entry.mode) == ("run1", str(runs[1].resolve()), "local")


def test_adding_the_same_run_twice_adds_nothing(store, tmp_path):
    first = write_case_run(tmp_path / "runs", "run1", qps=100.0, started_at=at(1))
    second = write_case_run(tmp_path / "runs", "run2", qps=101.0, started_at=at(2))
    assert store.add_runs(entries(first)) == (1, FIGURES)
    assert store.add_runs(entries(first)) == (0, 0)
    assert store.add_runs(entries(first, second)) == (1, FIGURES)  # the new one of a batch only
    assert store.add_runs(entries(first, second), batch=1) == (0, 0)
    assert store.count() == (2, FIGURES, 2 * FIGURES)
    assert [p.run_key for p in core_qps(store)] == ["run1", "run2"]


def test_a_run_named_twice_in_one_import_is_added_once(store_url, tmp_path, capsys):
    run = write_case_run(tmp_path / "result", "run1", qps=100.0, started_at=at(1))
    argv = ["import", str(run), str(tmp_path / "result"), "--history", store_url, "--config", str(tmp_path / "no.yaml")]
    assert history_main(argv, INFERENCE) == 0  # the folder, and the folder of runs it is in: one batch
    assert capsys.readouterr().out == (
        f"history {shown_url(store_url)}: 1 run(s), {FIGURES} figure(s) added; 0 folder(s) skipped\n"
    )


def test_history_import_of_a_folder_twice_adds_nothing(store_url, tmp_path, capsys):
    root = tmp_path / "result"
    for k in range(3):
        write_case_run(root, f"run{k}", qps=100.0 + k, started_at=at(k))
    argv = ["import", str(root), "--history", store_url, "--config", str(tmp_path / "no-host.yaml")]
    assert history_main(argv, INFERENCE) == 0
    assert capsys.readouterr().out == (
        f"history {shown_url(store_url)}: 3 run(s), {3 * FIGURES} figure(s) added; 0 folder(s) skipped\n"
    )
    assert history_main(argv, INFERENCE) == 0
    assert (
        capsys.readouterr().out == f"history {shown_url(store_url)}: 0 run(s), 0 figure(s) added; 0 folder(s) skipped\n"
    )
    store = Store.open(store_url, create=False)
    try:
        assert store.count() == (3, FIGURES, 3 * FIGURES)
    finally:
        store.close()


def test_a_corrupt_or_partial_run_folder_is_skipped_with_one_line_naming_it(store_url, tmp_path, capsys):
    root = tmp_path / "result"
    good = write_case_run(root, "run1", qps=100.0, started_at=at(1))
    partial = root / "run2"  # killed before its summary: its case's folder only
    (partial / "digits:pytorch" / "127.0.0.1_noderank0").mkdir(parents=True)
    corrupt = write_case_run(root, "run3", qps=100.0, started_at=at(3))
    (corrupt / "summary.json").write_bytes(b"\x00\xffgarbage{" * 40)
    misshapen = write_case_run(root, "run4", qps=100.0, started_at=at(4))
    summary = json.loads((misshapen / "summary.json").read_text())
    (misshapen / "summary.json").write_text(json.dumps({**summary, "results": "not a list"}))
    lonely = tmp_path / "run5"  # named itself, not found in a folder of runs
    lonely.mkdir()
    argv = ["import", str(root), str(lonely), "--history", store_url, "--config", str(tmp_path / "no-host.yaml")]
    assert history_main(argv, INFERENCE) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == f"history {shown_url(store_url)}: 1 run(s), {FIGURES} figure(s) added; 4 folder(s) skipped"
    skipped = lines[:-1]
    assert len(skipped) == 4  # one line each, each naming its folder (or the file in it) and why
    for line, folder, why in (
        (skipped[0], partial, "no summary.json (not a finished run)"),
        (skipped[1], corrupt, "unreadable or not a JSON object"),
        (skipped[2], misshapen, "'results' is not a list"),
        (skipped[3], lonely, "no summary.json (not a finished run)"),
    ):
        assert line.startswith(f"skipped {folder}") and line.endswith(why), line
    store = Store.open(store_url, create=False)
    try:
        assert store.count() == (1, FIGURES, FIGURES) and [p.run_key for p in core_qps(store)] == ["run1"]
    finally:
        store.close()
    assert good.is_dir()


def test_a_series_is_what_must_be_equal_and_a_runs_own_folders_do_not_split_it(store, tmp_path):
    root = tmp_path / "runs"
    a = write_case_run(root, "run1", qps=100.0, started_at=at(1))
    moved = {  # the same case run from another clone, into other folders, repeated another number of times
        "log_dir": "/elsewhere/log", "data_dir": "/elsewhere/data", "perf_dir": "/elsewhere/inference",
        "cache_dir": "/elsewhere/onnxs", "engine_path": "/elsewhere/onnxs/digits.ort.onnx", "repetitions": 3,
    }  # fmt: skip
    b = write_case_run(root, "run2", qps=101.0, started_at=at(2), config=moved)
    store.add_runs(entries(a, b))
    assert store.count() == (2, FIGURES, 2 * FIGURES)
    assert [p.run_key for p in core_qps(store)] == ["run1", "run2"]  # one series, both points
    c = write_case_run(root, "run3", qps=99.0, started_at=at(3), config={"graph_optimization_level": "basic"})
    store.add_runs(entries(c))
    assert store.count() == (3, 2 * FIGURES, 3 * FIGURES)  # a changed config key: every figure another series
    changed = [s for s in store.all_series() if s.config.get("graph_optimization_level") == "basic"]
    assert len(changed) == FIGURES
    assert all(len(pts) == 1 and pts[0].run_key == "run3" for pts in store.points(changed).values())
    d = write_case_run(root, "run4", qps=99.0, started_at=at(4), config={"exist_onnx_path": "/models/other.onnx"})
    store.add_runs(entries(d))  # a file the user chose is kept by its name
    assert store.count() == (4, 3 * FIGURES, 4 * FIGURES)
    assert {s.key.config_hash for s in store.all_series()} == {
        p.series.key.config_hash for run in (a, c, d) for _, pts in entries(run) for p in pts
    }


@pytest.mark.parametrize("stored, side", [(2, "newer"), (0, "older")])
def test_a_schema_newer_or_older_than_the_code_is_one_line_naming_the_store(store_url, tmp_path, capsys, stored, side):
    from sqlalchemy import update

    from utils.history.store import _schema

    Store.open(store_url).close()
    meta = _schema()[1]
    store = Store.open(store_url)
    with store.engine.begin() as conn:
        conn.execute(update(meta).where(meta.c.key == "schema_version").values(value=str(stored)))
    store.close()
    expected = (
        f"history {shown_url(store_url)}: schema version {stored} is {side} than this InferPerf's (1); "
        "see docs/history.md, 'Schema versions', for the migration"
    )
    with pytest.raises(HistoryError) as raised:
        Store.open(store_url)
    assert str(raised.value) == expected
    run = write_case_run(tmp_path / "runs", "run1", qps=100.0)
    assert record_runs([run], store_url) == (
        f"history not updated: {expected}; `run.py history import {run}` adds this run later"
    )
    assert history_main(["--history", store_url, "--config", str(tmp_path / "no.yaml")], INFERENCE) == 2
    assert capsys.readouterr().err == expected + "\n"


@pytest.mark.parametrize(
    "value, says",
    [
        ("postgresql://db.example:port/inferperf", "is not a database URL (invalid literal for int()"),
        ("postgresql://bench:hunter2@db.example/inferperf", "holds a password: a secret does not belong in host.yaml"),
        ("mysql://db.example/inferperf", "names the backend 'mysql': use postgresql://… or sqlite:///…"),
        ("postgresql://db.example:70000/inferperf", "has port 70000, outside 1-65535"),
        ("postgresql:///inferperf", "names no PostgreSQL host"),
        ("sqlite://", "names no SQLite file"),
    ],
)
def test_a_bad_history_url_is_one_line(tmp_path, capsys, value, says):
    with pytest.raises(ValueError) as raised:
        resolve_url(value, tmp_path)
    assert says in str(raised.value) and "\n" not in str(raised.value) and "hunter2" not in str(raised.value)
    assert history_main(["--history", value, "--config", str(tmp_path / "no.yaml")], INFERENCE) == 2
    err = capsys.readouterr().err
    assert err.startswith("--history ") and says in err and err.count("\n") == 1 and "hunter2" not in err
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_the_scale_bench_runs_at_tiny_settings(tmp_path):
    """bench/history_scale.py end to end at 40 runs of 20 figures (its timings are the bench's, not asserted)."""
    from bench.history_scale import main as bench_main

    figures = bench_main(["--runs", "40", "--page-points", "30", "--workdir", str(tmp_path)])
    assert (figures["runs"], figures["figures_per_run"], figures["points"]) == (40, 20, 800)
    assert figures["added"] == [40, 800] and figures["import_line"].endswith(
        "40 run(s), 800 figure(s) added; 0 folder(s) skipped"
    )
    assert figures["series"] == 20 and figures["series_shown"] == 20
    assert figures["page_points_per_figure"] == 30 and figures["page_bytes"] > 0
    assert {"import_s", "history_s", "add_runs_s"} <= set(figures)
