"""run.py --endpoint against real loopback servers: sweeps, workloads, warm-up not counted, the
capacity search against a server whose latency rises at a known rate, and every bad input as one
line with its documented exit status and nothing written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.infra.serving_summary import summary_md
from tools.serving.cli import main
from tools.serving.loopback import LoopbackServer, Plan, steady

INFERENCE = Path(__file__).resolve().parents[1] / "inference"
FIXTURES = Path(__file__).parent / "fixtures" / "serving"


def _run(tmp_path: Path, url: str, *extra: str, model: str = "m") -> int:
    return main(["--endpoint", url, "--served-model", model, "--output-dir", str(tmp_path / "out"), *extra])


def _result(tmp_path: Path) -> dict:
    (run,) = (tmp_path / "out").iterdir()
    return json.loads((run / "serving" / "result.json").read_text())


def test_a_concurrency_sweep_writes_its_steps_and_leaves_the_warmup_out(tmp_path, capsys):
    with LoopbackServer(steady(2.0, 1.0), model="m") as server:
        code = _run(
            tmp_path,
            server.url,
            "--concurrency",
            "1,2",
            "--num-requests",
            "8",
            "--warmup",
            "3",
            "--input-len",
            "6",
            "--output-len",
            "4",
            "--slo",
            "ttft_ms=1000,tpot_ms=500",
        )
        assert code == 0
        assert server.requests == 2 * (3 + 8)
    result = _result(tmp_path)
    assert [s["label"] for s in result["steps"]] == ["concurrency 1", "concurrency 2"]
    assert all(s["requests"] == 8 and s["completed"] == 8 and s["output_tokens"] == 32 for s in result["steps"])
    assert all(s["input_tokens"] == 8 * 6 for s in result["steps"])  # the loopback's usage: a token a word
    assert result["token_source"] == ["usage"]
    assert result["steps"][0]["slo"]["met"] == 8
    assert len(result["records"]["concurrency 1"]) == 8
    (run,) = (tmp_path / "out").iterdir()
    summary = summary_md(run)
    assert "| concurrency 2 | 8/8 |" in summary and "tokens counted by usage" in summary
    assert json.loads((run / "summary.json").read_text())["rows"][1]["label"] == "concurrency 2"


def test_the_same_seed_sends_the_same_requests(tmp_path):
    bodies = []
    for attempt in range(2):
        with LoopbackServer(steady(0.0, 0.0), model="m") as server:
            assert (
                _run(
                    tmp_path / str(attempt),
                    server.url,
                    "--num-requests",
                    "5",
                    "--warmup",
                    "0",
                    "--input-len",
                    "uniform:2:30",
                    "--output-len",
                    "uniform:1:9",
                )
                == 0
            )
            bodies.append([(b["prompt"], b["max_tokens"]) for b in server.bodies])
    assert bodies[0] == bodies[1] and len({p for p, _ in bodies[0]}) == 5


def test_a_rate_sweep_with_gamma_arrivals_and_a_cap(tmp_path):
    with LoopbackServer(steady(5.0, 1.0), model="m") as server:
        code = _run(
            tmp_path,
            server.url,
            "--request-rate",
            "50,inf",
            "--arrival",
            "gamma",
            "--burstiness",
            "0.5",
            "--max-concurrency",
            "3",
            "--num-requests",
            "10",
            "--warmup",
            "0",
            "--output-len",
            "3",
        )
        assert code == 0 and server.max_in_flight <= 3
    steps = _result(tmp_path)["steps"]
    assert [s["load"]["request_rate"] for s in steps] == [50.0, "inf"]
    assert steps[0]["load"]["burstiness"] == 0.5 and steps[0]["schedule_lag_ms_p99"] is not None


@pytest.mark.parametrize(
    "options, api",
    [
        (["--prompt-file", str(FIXTURES / "sharegpt_tiny.json")], "completions"),
        (["--prompt-file", str(FIXTURES / "prompts_tiny.jsonl"), "--output-len", "3"], "completions"),
        (["--shared-prefix", "2:10", "--input-len", "4"], "completions"),
        (["--multi-turn", "2", "--prompt-file", str(FIXTURES / "sharegpt_tiny.json")], "chat"),
        (["--multi-turn", "3", "--input-len", "5"], "chat"),
        (["--api", "chat", "--input-len", "5"], "chat"),
        (["--trace", str(FIXTURES / "trace_tiny.jsonl")], "completions"),
    ],
)
def test_each_workload_runs_end_to_end(tmp_path, options, api):
    with LoopbackServer(steady(0.0, 0.0), model="m") as server:
        assert _run(tmp_path, server.url, "--num-requests", "4", "--warmup", "0", *options) == 0
    result = _result(tmp_path)
    assert result["api"] == api
    step = result["steps"][0]
    assert step["failed"] == 0 and step["completed"] >= 4


def test_capacity_search_against_a_server_whose_latency_rises_with_its_load(tmp_path):
    # TTFT = 10 ms + 400 ms per other request in flight: concurrency 2 gives 410 ms, 3 gives 810 ms.
    # Sleeps are never early, so 3 and above surely miss a 600 ms bound; 2 meets it unless the machine
    # delays a token by 190 ms (the server and the client share this process). Bisection over 1..8:
    # 1 meets, 8 misses, 4 misses, 2 meets, 3 misses.
    with LoopbackServer(steady(10.0, 1.0, slope_ms=400.0), model="m") as server:
        code = _run(
            tmp_path,
            server.url,
            "--capacity",
            "concurrency:1:8",
            "--slo",
            "ttft_ms=600,percentile=75",
            "--num-requests",
            "12",
            "--warmup",
            "0",
            "--output-len",
            "2",
        )
        assert code == 0
    capacity = _result(tmp_path)["capacity"]
    assert capacity["capacity"] == 2 and capacity["interval"] == [2, 3]
    assert capacity["probes"] == 5 and [p["load"] for p in capacity["probed"]] == [1, 8, 4, 2, 3]
    (run,) = (tmp_path / "out").iterdir()
    # each probe is a row of summary.json, with its timeslices for the run's report.html
    rows = json.loads((run / "summary.json").read_text())["rows"]
    assert [(row["phase"], row["concurrency"]) for row in rows] == [("capacity", n) for n in (1, 8, 4, 2, 3)]
    assert all(row["timeslices"]["items"] for row in rows) and not (run / "serving" / "report.html").exists()


# ---- bad input: one line, the documented status, nothing written ---------------------------------
def _bad(tmp_path, capsys, url, *extra, model="m") -> tuple[int, str]:
    code = _run(tmp_path, url, *extra, model=model)
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    return code, err


def test_an_unreachable_endpoint_exits_5_naming_it(tmp_path, capsys):
    with LoopbackServer(model="m") as server:
        url = server.url
    code, err = _bad(tmp_path, capsys, url)
    assert code == 5 and url in err and "unreachable" in err


def test_an_endpoint_that_answers_in_no_http_exits_4_naming_it(tmp_path, capsys):
    """--endpoint at an SSH port: a real socket that answers GET /models with an SSH banner."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"

    def answer() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.sendall(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n")
            connection.recv(65536)

    server = threading.Thread(target=answer, daemon=True)
    server.start()
    try:
        code, err = _bad(tmp_path, capsys, url)
    finally:
        server.join(30)
        listener.close()
    assert code == 4 and f"--endpoint {url}: not an OpenAI-compatible server (GET {url}/models: BadStatusLine " in err
    assert "SSH-2.0-OpenSSH_9.2p1 Debian-2" in err


def test_a_server_that_is_not_openai_compatible_exits_4(tmp_path, capsys):
    with LoopbackServer(model="m", openai=False) as server:
        code, err = _bad(tmp_path, capsys, server.url)
    assert code == 4 and "not an OpenAI-compatible server" in err and server.url in err


def test_an_endpoint_without_v1_is_told_where_the_routes_usually_are(tmp_path, capsys):
    with LoopbackServer(model="m") as server:
        code, err = _bad(tmp_path, capsys, server.url[: -len("/v1")])
    assert code == 4 and "answered HTTP 404; the OpenAI routes usually sit under /v1" in err


def test_a_model_the_server_does_not_serve_exits_2_naming_what_it_serves(tmp_path, capsys):
    with LoopbackServer(model="m") as server:
        code, err = _bad(tmp_path, capsys, server.url, model="llama-9000")
        assert server.requests == 0
    assert code == 2 and "--served-model 'llama-9000'" in err and "serves 'm'" in err


@pytest.mark.parametrize(
    "extra, code, words",
    [
        (["--concurrency", "0"], 2, "--concurrency: '0' must be a positive integer"),
        (["--slo", "ttft_ms=-5"], 2, "--slo.ttft_ms: -5.0 is negative"),
        (
            ["--prompt-file", str(FIXTURES / "trace_tiny.jsonl").replace("trace_tiny.jsonl", "missing.jsonl")],
            2,
            "is not a file",
        ),
        (["--capacity", "concurrency:1:8"], 2, "--capacity needs --slo"),
        (["--request-rate", "-1"], 2, "--request-rate: '-1' must be positive"),
    ],
)
def test_bad_options_exit_2_before_any_request(tmp_path, capsys, extra, code, words):
    with LoopbackServer(model="m") as server:
        got, err = _bad(tmp_path, capsys, server.url, *extra)
        assert server.requests == 0
    assert got == code and words in err


def test_an_invalid_prompt_file_exits_3_naming_the_line(tmp_path, capsys):
    bad = tmp_path / "prompts.jsonl"
    bad.write_text('{"prompt": "fine"}\n{oops\n')
    with LoopbackServer(model="m") as server:
        code, err = _bad(tmp_path, capsys, server.url, "--prompt-file", str(bad))
        assert server.requests == 0
    assert code == 3 and f"{bad}:2: not valid JSON or JSONL" in err


def test_failed_requests_are_counted_and_the_run_completes(tmp_path):
    plans = [Plan(gaps_s=[0.0]), Plan(status=429), Plan(gaps_s=[0.0] * 3, fault="drop", fault_at=1), Plan(gaps_s=[0.0])]
    with LoopbackServer(lambda i, body, n: plans[i % 4], model="m") as server:
        assert _run(tmp_path, server.url, "--num-requests", "8", "--warmup", "0", "--output-len", "2") == 0
    step = _result(tmp_path)["steps"][0]
    assert (step["completed"], step["failed"], step["errors"]) == (4, 4, {"http_429": 2, "dropped": 2})


def test_run_py_hands_endpoint_runs_to_the_serving_client(tmp_path):
    with LoopbackServer(steady(0.0, 0.0), model="m") as server:
        done = subprocess.run(
            [
                sys.executable,
                "run.py",
                "--endpoint",
                server.url,
                "--served-model",
                "m",
                "--num-requests",
                "3",
                "--warmup",
                "0",
                "--output-dir",
                str(tmp_path / "out"),
            ],
            cwd=INFERENCE,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert server.requests == 3
    assert "| concurrency 1 | 3/3 |" in done.stdout


def test_precision_keeps_measuring_past_the_minimum_and_says_why_it_stopped(tmp_path):
    with LoopbackServer(steady(1.0, 0.5), model="m") as server:
        code = _run(
            tmp_path,
            server.url,
            "--num-requests",
            "4",
            "--warmup",
            "0",
            "--output-len",
            "4",
            "--precision",
            "0.5",
            "--concurrency",
            "2",
            "--max-duration-s",
            "20",
        )
        assert code == 0
    result = _result(tmp_path)
    step = result["steps"][0]
    assert step["requests"] >= 16  # an interval needs 16 requests: the minimum of 4 was not enough
    assert step["stopped"] in (
        "precision reached",
        "max_duration_s reached",
        "precision out of reach",
        "all 200 requests issued",
    )
    assert result["client_location"] == "same host (loopback)"
    for name in ("requests_per_s", "output_tokens_per_s"):
        width = step["throughput"][name]["plus_minus"]
        imprecise = any(reason.startswith(f"not precise enough: {name}") for reason in step["verdict"]["reasons"])
        assert imprecise == (width is None or width > 0.5)  # the verdict says so exactly when the figure missed ±50 %


@pytest.mark.parametrize("sig, code, word", [("SIGINT", 130, "interrupted"), ("SIGTERM", 143, "terminated")])
def test_an_interrupted_or_terminated_run_writes_nothing(tmp_path, sig, code, word):
    import signal
    import time

    with LoopbackServer(
        steady(0.0, 200.0), model="m"
    ) as server:  # a token every 200 ms: the run is mid-stream when interrupted
        proc = subprocess.Popen(
            [
                sys.executable,
                "run.py",
                "--endpoint",
                server.url,
                "--served-model",
                "m",
                "--num-requests",
                "50",
                "--warmup",
                "0",
                "--output-dir",
                str(tmp_path / "out"),
            ],
            cwd=INFERENCE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60
        while server.requests == 0 and time.monotonic() < deadline:  # waits for the run, not for a duration
            time.sleep(0.05)
        proc.send_signal(getattr(signal, sig))
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == code
    assert err.strip().splitlines() == [f"{word}: nothing written"]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_stop_at_any_moment_of_a_busy_run_ends_in_its_one_line(tmp_path):
    """12 real signals, SIGINT and SIGTERM in turn, 0-77 ms after a trial's first request, each into a run
    whose event loop is always busy (16 streams, replies at once): a stop raised where the signal landed
    could be taken by asyncio (a traceback, "Task exception was never retrieved"), by a weakref's
    callback (the run went on), or by aiohttp (a cancelled stream sent more requests)."""
    trials = 12
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(INFERENCE), str(INFERENCE.parent)]))
    proc = subprocess.run(
        [sys.executable, "-m", "tests.infra.serving_stops", str(tmp_path), str(trials)],
        cwd=INFERENCE.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = [json.loads(line) for line in (tmp_path / "trials.jsonl").read_text().splitlines()]
    word = {"SIGINT": "interrupted", "SIGTERM": "terminated"}
    assert [(r["signal"], r["code"], r["written"]) for r in results] == [
        (("SIGINT", "SIGTERM")[k % 2], (130, 143)[k % 2], False) for k in range(trials)
    ]
    assert proc.stderr.splitlines() == [f"{word[r['signal']]}: nothing written" for r in results]


def test_capacity_probes_run_enough_requests_for_their_percentile(tmp_path):
    with LoopbackServer(steady(0.0, 0.0), model="m") as server:
        assert (
            _run(
                tmp_path,
                server.url,
                "--capacity",
                "concurrency:1:2",
                "--slo",
                "ttft_ms=5000",
                "--num-requests",
                "8",
                "--warmup",
                "0",
            )
            == 0
        )
        assert server.requests == 2 * 35  # 8 could never show 90 % attainment; 35 met requests can
    capacity = _result(tmp_path)["capacity"]
    assert (capacity["capacity"], capacity["above_range"]) == (2, True)


def test_a_rate_capacity_search_above_and_below_its_range(tmp_path):
    with LoopbackServer(steady(0.0, 0.0), model="m") as server:
        assert (
            _run(
                tmp_path / "a",
                server.url,
                "--capacity",
                "rate:5:40",
                "--slo",
                "e2e_ms=5000,percentile=50",
                "--num-requests",
                "6",
                "--warmup",
                "0",
            )
            == 0
        )
    capacity = _result(tmp_path / "a")["capacity"]
    assert (capacity["kind"], capacity["capacity"], capacity["above_range"], capacity["probes"]) == (
        "rate",
        40.0,
        True,
        2,
    )
    with LoopbackServer(lambda i, body, n: Plan(status=500), model="m") as server:
        assert (
            _run(
                tmp_path / "b",
                server.url,
                "--capacity",
                "rate:5:40",
                "--slo",
                "e2e_ms=5000,percentile=50",
                "--num-requests",
                "6",
                "--warmup",
                "0",
            )
            == 0
        )
    capacity = _result(tmp_path / "b")["capacity"]
    assert (capacity["capacity"], capacity["interval"], capacity["probes"]) == (None, [None, 5.0], 1)


# ---- --launch: start the server, benchmark it, stop it -----------------------------------------------
def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _alive(marker: str) -> list[str]:
    out = subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if marker in line and "ps -ww -eo" not in line]


def _left_after_stop(marker: str, bound_s: float = 30.0) -> list[str]:
    """What still runs with ``marker`` once the guard's watchdog has had its time: the server is gone
    when ``main`` returns, but the watchdog (whose command line names it too) exits only once it has
    been scheduled after the server's end (common/server_guard.py), milliseconds on a quiet machine."""
    left = _alive(marker)
    assert not [line for line in left if "server_guard.py" not in line], left  # the server itself: at once
    deadline = time.monotonic() + bound_s
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = _alive(marker)
    return left


def test_launch_starts_the_server_benchmarks_it_and_leaves_nothing_running(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(INFERENCE))  # the launched command imports tools.serving
    port = _free_port()
    marker = f"launch-test-{port}"
    command = f"{sys.executable} -m tools.serving.loopback --port {port} --model {marker} --ttft-ms 1"
    code = main(
        [
            "--endpoint",
            f"http://127.0.0.1:{port}/v1",
            "--served-model",
            marker,
            "--launch",
            command,
            "--num-requests",
            "3",
            "--warmup",
            "0",
        ]
        + ["--output-dir", str(tmp_path / "out"), "--launch-log", str(tmp_path / "server.log")],
        results_root=tmp_path / "unused",
    )
    assert code == 0
    assert _result(tmp_path)["steps"][0]["completed"] == 3
    assert "PORT" in (tmp_path / "server.log").read_text()
    assert _left_after_stop(marker) == []


def test_a_launched_server_that_exits_at_once_is_an_engine_error_naming_its_status(tmp_path, capsys):
    command = f"{sys.executable} -c \"print('cannot bind'); raise SystemExit(3)\""
    code, err = _bad(
        tmp_path, capsys, "http://127.0.0.1:9/v1", "--launch", command, "--launch-log", str(tmp_path / "s.log")
    )
    assert code == 4 and "exited with status 3 before it was ready" in err and "last log line: cannot bind" in err


def test_a_launched_server_never_ready_is_stopped_after_its_timeout(tmp_path, capsys):
    marker = f"never-ready-{_free_port()}"
    command = f'{sys.executable} -c "import time; time.sleep(120)" {marker}'
    code, err = _bad(
        tmp_path,
        capsys,
        "http://127.0.0.1:9/v1",
        "--launch",
        command,
        "--launch-timeout-s",
        "1",
        "--launch-log",
        str(tmp_path / "s.log"),
    )
    assert code == 4 and "was not ready at http://127.0.0.1:9/v1 after 1 s" in err
    assert _left_after_stop(marker) == []
