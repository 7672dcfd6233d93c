"""run.py and run_inference.py end without the interpreter's teardown (``common/process_exit.py::leave``):
what that teardown would have done for the run must still be done, and with another thread alive the
process ends as usual."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

INFERENCE = Path(__file__).resolve().parents[1] / "inference"


def _leave_in_child(body: str, code: int, tmp_path: Path) -> subprocess.CompletedProcess:
    script = "\n".join(
        [
            "import sys",
            f"sys.path.insert(0, {str(INFERENCE)!r})",
            "import common.process_exit",
            body,
            f"common.process_exit.leave({code})",
        ]
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # the container's own streams
    return subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_the_exit_status_and_the_last_buffered_output_survive(tmp_path):
    # A pipe is block-buffered: without the flush the line would be lost with the process.
    done = _leave_in_child("print('last line', end='')\nsys.stderr.write('err line')", 7, tmp_path)
    assert done.returncode == 7
    assert done.stdout == "last line"
    assert done.stderr == "err line"


def test_exit_handlers_run_and_the_last_log_line_is_kept(tmp_path):
    marker, log = tmp_path / "atexit.txt", tmp_path / "sink.log"
    body = "\n".join(
        [
            "import atexit",
            f"atexit.register(lambda: open({str(marker)!r}, 'w').write('ran'))",
            "from loguru import logger",
            "logger.remove()",
            f"logger.add({str(log)!r}, format='{{message}}', buffering=65536)",
            "logger.info('the last log line')",
        ]
    )
    done = _leave_in_child(body, 0, tmp_path)
    assert done.returncode == 0, done.stderr
    assert marker.read_text() == "ran"
    assert log.read_text() == "the last log line\n"


def test_a_thread_still_alive_is_joined_as_a_normal_exit_would(tmp_path):
    out = tmp_path / "thread.txt"
    body = "\n".join(
        [
            "import threading",
            "gate = threading.Event()",
            f"t = threading.Thread(target=lambda: (gate.wait(0.3), open({str(out)!r}, 'w').write('done')))",
            "t.start()",
        ]
    )
    done = _leave_in_child(body, 3, tmp_path)
    assert done.returncode == 3, done.stderr
    assert out.read_text() == "done"


def test_a_daemon_thread_does_not_keep_the_interpreters_teardown(tmp_path):
    # As run_inference.py's lifetime watch: a normal exit abandons a daemon thread too, so it must not
    # send the process through the interpreter's teardown, whose first act (threading._shutdown) is
    # patched here to leave a mark.
    mark = tmp_path / "shutdown.txt"
    body = "\n".join(
        [
            "import threading",
            "threading.Thread(target=threading.Event().wait, daemon=True).start()",
            "original = threading._shutdown",
            f"threading._shutdown = lambda: (open({str(mark)!r}, 'w').write('teardown'), original())",
        ]
    )
    done = _leave_in_child(body, 5, tmp_path)
    assert done.returncode == 5, done.stderr
    assert not mark.exists()
