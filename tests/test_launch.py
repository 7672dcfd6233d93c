"""common/launch.py and common/server_guard.py: a launched server leaves nothing running, even when
the process that launched it is killed by SIGKILL (no handler of its own runs then).

Real processes throughout: the launcher is a real Python process holding a ``LaunchedServer`` of
the loopback server (tools/serving/loopback.py), which starts a worker of its own, as vLLM's API
server starts its engine core. Waits are bounded polls of the process table, never a sleep
that assumes how long something takes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from common.errors import EngineError
from common.launch import LaunchedServer, serving

INFERENCE = Path(__file__).resolve().parents[1] / "inference"
BOUND_S = 60.0  # the most any poll below waits: the guard's grace (10 s) twice, on a busy machine


def runs(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def marked(marker: str) -> list[psutil.Process]:
    """The running processes whose command line holds ``marker``."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if marker in " ".join(process.info["cmdline"] or []) and process.pid != os.getpid() and runs(process):
            found.append(process)
    return found


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + BOUND_S
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


LAUNCHER = """
import json, sys, time
from pathlib import Path
from common.launch import LaunchedServer

command, url, log = json.loads(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
server = LaunchedServer(command, url, log, 60.0)
server.start()
server.wait_ready()
print(server.proc.pid, flush=True)
time.sleep(3600)
"""


def test_a_sigkill_of_the_launcher_stops_the_server_and_its_workers(tmp_path):
    marker = f"guard-test-{uuid.uuid4().hex}"
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    # The server starts a worker in its group, then becomes the loopback server.
    worker_command = f"{sys.executable} -c 'import time; time.sleep(3600)' {marker}"
    server_command = f"{sys.executable} -m tools.serving.loopback --port {port} --model {marker}"
    command = ["sh", "-c", f"{worker_command} & exec {server_command}"]
    env = dict(os.environ, PYTHONPATH=str(INFERENCE))
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, json.dumps(command), url, str(tmp_path / "server.log")],
        cwd=INFERENCE,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert launcher.stdout is not None
        pid = int(launcher.stdout.readline())
        server = psutil.Process(pid)
        assert server.ppid() == launcher.pid and os.getpgid(pid) == pid and serving(url)
        assert "tools.serving.loopback" in server.cmdline()  # the guard became the server: same pid
        wait_until(lambda: len(server.children()) == 1, "the server's worker")
        (worker,) = server.children()
        assert os.getpgid(worker.pid) == pid
        (watchdog,) = [p for p in marked(marker) if "server_guard.py" in " ".join(p.cmdline())]
        assert os.getpgid(watchdog.pid) != pid and watchdog.ppid() != pid  # no child of the server, nor in its group
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait(timeout=BOUND_S)
        wait_until(lambda: not runs(server) and not runs(worker), "the server and its worker outlived their launcher")
        wait_until(lambda: not marked(marker), "something of the server is left")
        assert not serving(url)
        assert f"the launcher (pid {launcher.pid}) ended" in (tmp_path / "server.log").read_text()
    finally:
        if launcher.poll() is None:
            launcher.kill()
        for process in marked(marker):
            process.kill()


def test_the_server_keeps_its_pid_and_exit_status_and_stop_leaves_nothing(tmp_path):
    marker = f"guard-status-{uuid.uuid4().hex}"
    done = LaunchedServer(
        [sys.executable, "-c", "raise SystemExit(3)", marker], "http://127.0.0.1:9/v1", tmp_path / "a"
    )
    done.start()
    assert done.proc is not None and done.proc.wait(BOUND_S) == 3  # the command's own status, through the guard
    wait_until(lambda: not marked(marker), "the guard's watchdog outlived a server that ended")
    waiting = LaunchedServer(
        [sys.executable, "-c", "import time; time.sleep(3600)", marker], "http://127.0.0.1:9/v1", tmp_path / "b"
    )
    waiting.start()
    assert waiting.proc is not None
    assert psutil.Process(waiting.proc.pid).cmdline()[1:3] == ["-c", "import time; time.sleep(3600)"]  # exec'd
    assert waiting.stop() == -signal.SIGTERM
    wait_until(lambda: not marked(marker), "stop left something running")


def test_a_command_that_cannot_start_is_one_engine_error_and_nothing_runs(tmp_path):
    missing = tmp_path / f"no-such-server-{uuid.uuid4().hex}"
    server = LaunchedServer([str(missing), "--port", "1"], "http://127.0.0.1:9/v1", tmp_path / "log", what="--launch")
    with pytest.raises(EngineError) as info:
        server.start()
    assert str(info.value) == f"--launch: cannot start '{missing}' (No such file or directory)"
    wait_until(lambda: not marked(missing.name), "the guard or its watchdog is left")


# A server whose completion answer breaks off after its headers (Content-Length 836, no body), killing
# itself first when told to, as a server killed while it answers does. GET /v1/models answers, so it is ready.
BREAKING_SERVER = """
import http.server, os, signal, sys

port, dies = int(sys.argv[1]), sys.argv[2] == "dies"

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'{"data": [{"id": "m"}]}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Length", "836")
        self.end_headers()
        self.wfile.flush()
        print("broke off a completion", flush=True)
        if dies:
            os.kill(os.getpid(), signal.SIGKILL)
        self.close_connection = True

    def log_message(self, *args):
        pass

http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


@pytest.mark.parametrize("dies", [True, False])
def test_an_answer_broken_off_is_one_engine_error_naming_the_servers_exit(tmp_path, dies):
    from contract.serving_base import VllmEngine, free_port

    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    script = tmp_path / "server.py"
    script.write_text(BREAKING_SERVER)
    server = LaunchedServer(
        [sys.executable, str(script), str(port), "dies" if dies else "lives"], url, tmp_path / "server.log"
    )
    engine = object.__new__(VllmEngine)  # its greedy request and error lines only: no vLLM here
    engine.url, engine.served_model, engine.server = url, "m", server
    engine.label = f"{VllmEngine.SOURCE}: the vLLM server"
    with server:
        with pytest.raises(EngineError) as info:
            engine._greedy([1, 2, 3], 4)
    message = str(info.value)
    assert "\n" not in message
    if dies:
        assert message == (
            "contract/serving_base.py: the vLLM server exited with status -9; last log line: broke off a completion"
        )
    else:
        assert message.startswith(f"contract/serving_base.py: a greedy completion at {url} failed: ")
        assert "IncompleteRead" in message


def test_a_server_that_asks_for_an_api_key_is_serving_and_one_that_fails_is_not():
    """vLLM started with --api-key answers /v1/models with 401 until the client sends the key: it is up.
    A 500 is no server ready to measure."""
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        status = 401

        def do_GET(self):  # noqa: N802 - http.server's name
            self.send_response(Handler.status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/v1"
        assert serving(url)
        Handler.status = 403
        assert serving(url)
        Handler.status = 500
        assert not serving(url)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=BOUND_S)
