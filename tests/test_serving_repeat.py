"""run.py --endpoint --repeat N and run.py ab --endpoint: a serving run's step plan run N times, and two
variants of its options interleaved on the same server, then decided as run.py ab decides for cases.

The runs are real: run.py's entry (``entry/endpoint.py``) drives tools/serving/cli.py against the loopback
server (``tools/serving/loopback.py``) on 127.0.0.1, in this process. Its script reads the request's body:
a request that carries ``"slow": true`` (run.py ab's ``--set-b extra_body=...``) gets every token four
times as late, so the tests assert decisions (and counts, orders, files), never timings. ab runs 4
repetitions per side: with 2, the paired t-interval has one degree of freedom (t = 12.7).

The two ab tests are ``serial`` (run alone, after the parallel part), as run.py ab's tests for cases are:
a window of A's is a quarter of a second, and where other tests load the two cores a stall of its client
can move A's throughput by more than 2x between repetitions, which widens the paired interval past what
these tests decide on.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from entry.endpoint import run_endpoint
from run import main as run_main
from tools.serving.loopback import LoopbackServer, Plan

SLOWER = 4.0
INFERENCE = Path(__file__).resolve().parents[1] / "inference"


def _script(index: int, body: dict, in_flight: int) -> Plan:
    """20 ms to the first token, 5 ms between tokens; four times as long for a body with ``slow``."""
    slow = SLOWER if body.get("slow") else 1.0
    tokens = max(int(body.get("max_tokens") or 16), 1)
    return Plan(ttft_s=0.02 * slow, gaps_s=[0.005 * slow] * (tokens - 1))


LOAD = ["--served-model", "m", "--concurrency", "2", "--num-requests", "8", "--warmup", "0", "--output-len", "8"]


@pytest.fixture(scope="module")
def server():
    with LoopbackServer(_script, model="m") as running:
        yield running


def _endpoint(server: LoopbackServer, out: Path, *extra: str, ab: bool = False) -> int:
    return run_endpoint([*(["ab"] if ab else []), "--endpoint", server.url, *LOAD, "--output-dir", str(out), *extra])


def _only_run(out: Path) -> Path:
    (run,) = out.glob("run*")
    return run


def test_repeat_runs_the_step_plan_n_times_and_the_rows_carry_their_repetitions(server, tmp_path):
    out = tmp_path / "out"
    assert _endpoint(server, out, "--concurrency", "1,2", "--repeat", "3") == 0
    run = _only_run(out)
    assert sorted(p.name for p in run.glob("rep[0-9]*")) == ["rep1", "rep2", "rep3"]
    summary = json.loads((run / "summary.json").read_text())
    block = summary["repetitions"]
    assert block["count"] == 3 and block["log_dirs"] == [str(run / f"rep{k}") for k in (1, 2, 3)]
    figures = {(f["row"], f["figure"]): f for f in block["figures"]}
    assert ("concurrency 2", "output tokens/s") in figures and ("concurrency 1", "TPOT p50 ms") in figures
    tokens = figures[("concurrency 2", "output tokens/s")]
    assert len(tokens["values"]) == 3 and tokens["ci95"] is not None
    each = [json.loads((run / f"rep{k}" / "summary.json").read_text()) for k in (1, 2, 3)]
    from_reps = [next(r for r in s["rows"] if r["label"] == "concurrency 2") for s in each]
    assert tokens["values"] == [r["throughput"]["output_tokens_per_s"]["value"] for r in from_reps]
    # the row's headline is the repetitions' geometric mean, its interval theirs
    (row,) = [r for r in summary["rows"] if r["label"] == "concurrency 2"]
    assert row["throughput"]["output_tokens_per_s"]["value"] == pytest.approx(tokens["geomean"])
    assert row["throughput"]["output_tokens_per_s"]["ci95"] == tokens["ci95"]
    # summary.md: run.py's one summary writer, each step's figure with its spread across the repetitions
    text = (run / "summary.md").read_text()
    assert text.startswith("# serving: m at ") and "geometric mean of the 3 repetitions" in text
    (line,) = [ln for ln in text.splitlines() if "| concurrency 2 | output tokens/s | 3 |" in ln]
    assert f"| {tokens['spread']:.1%} |" in line
    assert (run / "report.html").is_file() and text.rstrip().splitlines()[-1].startswith("history: ")
    # the history holds one point per figure, with its three repetitions
    from utils.history.store import Store

    store = Store.open(f"sqlite:///{out / 'history.sqlite'}", create=False)
    try:
        series = {s.key.row + " " + s.key.figure: s for s in store.all_series()}
        points = store.points([series["concurrency 2 output tokens/s"]])
        ((point,),) = points.values()
        assert point.n == 3 and point.value == pytest.approx(tokens["geomean"])
    finally:
        store.close()


def test_compare_decides_two_repeated_serving_runs_on_their_repetitions(server, tmp_path):
    from utils.results.compare import compare_runs

    runs = []
    for name in ("a", "b"):
        assert _endpoint(server, tmp_path / name, "--repeat", "2") == 0
        runs.append(_only_run(tmp_path / name))
    comparison = compare_runs(runs[0], runs[1], 5.0, 0.5, allow_invalid=True)
    (line,) = [ln for ln in comparison.lines if ln.figure == "output tokens/s"]
    assert (line.row, line.n_a, line.n_b) == ("concurrency 2", 2, 2)


@pytest.mark.parametrize("value", ["0", "x", "1001"])
def test_a_bad_repeat_is_one_line_and_exit_2_with_nothing_written(server, tmp_path, capsys, value):
    assert _endpoint(server, tmp_path / "out", "--repeat", value) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --repeat: ") and "\n" not in err
    assert not (tmp_path / "out").exists()


def test_a_bad_option_of_a_repeated_run_leaves_no_run_folder(server, tmp_path, capsys):
    assert _endpoint(server, tmp_path / "out", "--repeat", "2", "--concurrency", "0") == 2
    assert "--concurrency: '0' must be a positive integer" in capsys.readouterr().err
    assert not list((tmp_path / "out").glob("run*"))


@pytest.mark.serial
def test_ab_finds_the_variant_that_makes_the_server_slower(server, tmp_path):
    out = tmp_path / "out"
    server.bodies.clear()
    code = _endpoint(server, out, "--repeat", "4", "--set-b", 'extra_body={"slow": true}', ab=True)
    assert code == 1  # a regression of B
    run = _only_run(out)
    for side in ("A", "B"):
        assert sorted(p.name for p in (run / side).glob("rep[0-9]*")) == ["rep1", "rep2", "rep3", "rep4"]
        summary = json.loads((run / side / "summary.json").read_text())
        assert summary["run_id"].endswith(f"-{side}") and summary["repetitions"]["count"] == 4
    # interleaved on the one server in ABBA order: A B B A A B B A (utils/run_plan.py)
    sides = ["B" if body.get("slow") else "A" for body in server.bodies]
    assert [s for k, s in enumerate(sides) if k == 0 or s != sides[k - 1]] == ["A", "B", "A", "B", "A"]
    assert sides.count("A") == sides.count("B") == 32
    result = json.loads((run / "B" / "compare_A.json").read_text())
    assert result["exit_code"] == 1
    lines = {line["figure"]: line for line in result["lines"] if line["row"] == "concurrency 2"}
    assert lines["output tokens/s"]["paired"] and lines["output tokens/s"]["verdict"] == "worse"
    assert lines["output tokens/s"]["high"] < 1 / (SLOWER / 2)  # B at least twice as slow, decided so
    assert lines["TPOT p50 ms"]["verdict"] == "worse" and lines["TPOT p50 ms"]["low"] > SLOWER / 2
    # both sides in the history beside the run folder, as a run of cases' ab
    assert (out / "history.sqlite").is_file() and not (run / "history.sqlite").exists()


def test_ab_without_two_variants_is_one_line_and_exit_2(server, tmp_path, capsys):
    assert _endpoint(server, tmp_path / "out", "--set-a", "seed=1", "--set-b", "seed=1", ab=True) == 2
    assert "--set-a and --set-b are the same variant" in capsys.readouterr().err
    assert _endpoint(server, tmp_path / "out", "--set-b", "nonsense=1", ab=True) == 2
    assert "unknown entry 'nonsense'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# ---- host.yaml's ENDPOINT ---------------------------------------------------------------------------------
def _host_yaml(tmp_path: Path, endpoint: dict) -> Path:
    path = tmp_path / "host.yaml"
    path.write_text(f'MODE: "local"\nFLAGPERF_LOG_PATH: "{tmp_path / "result"}"\nENDPOINT: {json.dumps(endpoint)}\n')
    return path


def _entries(server: LoopbackServer, **more: object) -> dict:
    return {"url": server.url, "served_model": "m", "concurrency": [2], "num_requests": 8, "warmup": 0,
            "output_len": 8, **more}  # fmt: skip


def test_host_yaml_endpoint_repeat_entry_and_run_py_repeat(server, tmp_path):
    path = _host_yaml(tmp_path, _entries(server, repeat=2))
    assert run_main(["--config", str(path)]) == 0
    (run,) = (tmp_path / "result").glob("run*")
    assert json.loads((run / "summary.json").read_text())["repetitions"]["count"] == 2
    assert run_main(["--config", str(path), "--repeat", "3"]) == 0  # the command line wins
    (newer,) = [r for r in (tmp_path / "result").glob("run*") if r != run]
    assert json.loads((newer / "summary.json").read_text())["repetitions"]["count"] == 3


def test_host_yaml_endpoint_bad_repeat_names_the_entry(server, tmp_path, capsys):
    path = _host_yaml(tmp_path, _entries(server, repeat=0))
    assert run_main(["--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: key 'ENDPOINT.repeat': must be from 1 to" in err and "Traceback" not in err


def test_run_py_strict_gates_a_host_yaml_endpoint_as_it_gates_cases(tmp_path, capsys):
    """Every reply cut short (3 of 8 tokens): the step is INVALID. run.py --strict exits 3 with the run
    written, as for cases; without it the run exits 0. Before, run.py refused --strict beside ENDPOINT."""
    with LoopbackServer(lambda i, body, n: Plan(gaps_s=[0.0] * 2), model="m") as cut:
        path = _host_yaml(tmp_path, _entries(cut))
        assert run_main(["--config", str(path), "--strict"]) == 3
        assert "--strict" in capsys.readouterr().err
        assert run_main(["--config", str(path)]) == 0
    runs = sorted((tmp_path / "result").glob("run*"))
    assert len(runs) == 2
    for run in runs:
        (step,) = json.loads((run / "summary.json").read_text())["rows"]
        assert step["errors"] == {"cut_short": 8} and not step["verdict"]["valid"]


@pytest.mark.serial
def test_run_py_ab_with_host_yaml_endpoint(server, tmp_path):
    path = _host_yaml(tmp_path, _entries(server))
    code = run_main(["ab", "--config", str(path), "--repeat", "4", "--set-b", 'extra_body={"slow": true}'])
    assert code == 1
    (run,) = (tmp_path / "result").glob("run*")
    result = json.loads((run / "B" / "compare_A.json").read_text())
    assert any(line["figure"] == "output tokens/s" and line["verdict"] == "worse" for line in result["lines"])


def test_summary_md_is_run_py_s_not_the_serving_tool_s(server, tmp_path):
    from tools.serving.cli import main as serving_main

    assert serving_main(["--endpoint", server.url, *LOAD, "--output-dir", str(tmp_path / "tool")]) == 0
    alone = _only_run(tmp_path / "tool")
    assert (alone / "summary.json").is_file() and not (alone / "summary.md").exists()
    assert _endpoint(server, tmp_path / "run") == 0  # one repetition: the folder as before, completed by run.py
    run = _only_run(tmp_path / "run")
    assert not list(run.glob("rep[0-9]*")) and "repetitions" not in json.loads((run / "summary.json").read_text())
    text = (run / "summary.md").read_text()
    assert "| concurrency 2 | 8/8 | 0 | — |" in text and "Repetitions (" not in text


def test_an_endpoint_run_logs_in_run_pys_console_format(server, tmp_path):
    done = subprocess.run(
        [sys.executable, "run.py", "--endpoint", server.url, *LOAD, "--output-dir", str(tmp_path)],
        cwd=INFERENCE,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    history = [line for line in done.stderr.splitlines() if "history:" in line]
    assert history and all(re.fullmatch(r"\d\d:\d\d:\d\d \| INFO +\| history: .*", line) for line in history)
