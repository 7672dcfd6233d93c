"""common/stop_signals.py in a child process of its own, with real signals: a stop that lands inside a
``__del__``, where Python cannot raise it (lost there, the run would exit 0 as if never stopped), is raised again
from the code that runs next; an unrelated unraisable error still goes to the hook from before. And
run.py's handler of a stop that comes while stopping, whose line must not meet the logger's lock."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.conftest import INFERENCE

# A child's first lines: the framework on its path, and a stop that raises Stop (a KeyboardInterrupt).
PRELUDE = textwrap.dedent(
    """
    import os, signal, sys, traceback
    sys.path.insert(0, {inference!r})
    from common.stop_signals import ImportSafeStop

    class Stop(KeyboardInterrupt):
        pass

    def stop(signum):
        raise Stop(signum)
    """
)
CHILD = PRELUDE + textwrap.dedent(
    """
    guard = ImportSafeStop(stop) if {guarded} else None
    if guard is None:
        def raising(signum, frame):
            raise Stop(signum)
        signal.signal(signal.SIGINT, raising)
    else:
        signal.signal(signal.SIGINT, guard.handle)

    class Collected:
        def __del__(self):
            {body}

    try:
        Collected()  # collected at once: its __del__ runs here
        for _ in range(10**8):  # the code that runs next, where the stop must arrive
            pass
        print("ran to the end", flush=True)
    except Stop:
        print("stopped", flush=True)
    if guard is not None:
        guard.end()
        print("hook restored" if sys.unraisablehook is sys.__unraisablehook__ else "hook left", flush=True)
    """
)
SIGNAL_INSIDE = "os.kill(os.getpid(), signal.SIGINT); sum(range(1000))  # the handler runs before __del__ returns"
OTHER_ERROR = "raise ValueError('a broken finaliser')"


def child(body: str, guarded: bool) -> subprocess.CompletedProcess:
    source = CHILD.format(inference=str(INFERENCE), guarded=guarded, body=body)
    return subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, timeout=120)


def test_without_the_hook_a_stop_inside_a_finaliser_is_lost():
    """The fault itself, with a plain raising handler: Python prints it and the program goes on."""
    done = child(SIGNAL_INSIDE, guarded=False)
    assert done.stdout == "ran to the end\n"
    assert "Exception ignored in" in done.stderr and "Stop" in done.stderr


def test_a_stop_inside_a_finaliser_is_raised_again_and_nothing_is_printed():
    done = child(SIGNAL_INSIDE, guarded=True)
    assert done.stdout == "stopped\nhook restored\n", done.stdout + done.stderr
    assert done.stderr == ""


def test_another_unraisable_error_goes_to_the_hook_from_before():
    done = child(OTHER_ERROR, guarded=True)
    assert done.stdout == "ran to the end\nhook restored\n", done.stdout + done.stderr
    assert "Exception ignored in" in done.stderr and "ValueError: a broken finaliser" in done.stderr


def test_a_stop_waits_for_an_import_less_than_the_host_waits_before_sigkill():
    """The import grace must end before the host's SIGKILL, or a hung import loses its failure.json."""
    from common.stop_signals import IMPORT_GRACE_S
    from utils.executors.container_handle import STOP_TIMEOUT_S
    from utils.executors.local import STOP_GRACE_S

    assert 3.7 * 2 < IMPORT_GRACE_S < min(STOP_GRACE_S, STOP_TIMEOUT_S) - 1  # torch's import at load 8, twice


SECOND_STOP = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, {inference!r})
    from loguru import logger
    from utils.cli.stops import ignore_while_stopping

    logger.remove()
    sent = []

    def sink(message):
        sys.stderr.write(message)
        if not sent:  # the second Ctrl-C, while this (main) thread is inside the logger
            sent.append(1)
            os.kill(os.getpid(), signal.SIGINT)  # its handler runs at the next bytecode: here

    logger.add(sink, format="{{message}}", level="INFO")
    signal.signal(signal.SIGINT, ignore_while_stopping)
    logger.error("interrupted: stopping containers and monitors on every host")
    """
)


def test_a_second_stop_inside_a_log_line_is_said_after_it_without_a_logging_error():
    """run.py's handler for a stop signal while stopping: a second Ctrl-C may land while the first one's
    line is being written, and the handler's own line must not meet loguru's lock on the same thread."""
    child = subprocess.run(
        [sys.executable, "-c", SECOND_STOP.format(inference=str(INFERENCE))],
        cwd=INFERENCE,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == 0, child.stderr
    assert child.stderr.splitlines() == [
        "interrupted: stopping containers and monitors on every host",
        "SIGINT again: already stopping, cleanup and summary follow",
    ], child.stderr


STOP_IN_THE_LOGGER = PRELUDE + textwrap.dedent(
    """
    from loguru import logger

    guard = ImportSafeStop(stop)
    signal.signal(signal.SIGINT, guard.handle)
    logger.remove()
    sent = []

    def sink(message):  # inside loguru's handler, its lock held
        if not sent:
            sent.append(1)
            os.kill(os.getpid(), signal.SIGINT)
            sum(range(1000))  # the handler runs here, inside the log call
        sys.stdout.write(message)

    logger.add(sink, format="{{message}}")
    try:
        logger.info("a line under way")
        for _ in range(10**9):  # the code after the log call, where the stop must arrive
            pass
        print("ran to the end")
    except Stop:
        frames = [frame.filename for frame in traceback.extract_tb(sys.exc_info()[2])]
        print("stopped inside the logger" if any("/loguru/" in f for f in frames) else "stopped after the line")
    guard.end()
    logger.info("the stop's own report")  # the handler's lock is free
    """
)


def test_a_stop_inside_a_log_call_waits_for_its_end_and_the_logger_stays_usable():
    """A stop raised inside loguru's handler can leave its lock held (raised after the lock is taken and
    before its ``with`` block is entered): run_inference.py would then hang reporting that stop."""
    child = subprocess.run(
        [sys.executable, "-c", STOP_IN_THE_LOGGER.format(inference=str(INFERENCE))],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.splitlines() == ["a line under way", "stopped after the line", "the stop's own report"], (
        child.stdout + child.stderr
    )


class _Stop(KeyboardInterrupt):
    pass


def test_a_stop_that_lands_while_the_loop_is_made_cancels_its_task_at_its_first_await(monkeypatch):
    """The stop comes inside ``asyncio.new_event_loop`` (there, raised, it left a half-made loop whose
    finaliser failed): it is kept, the task is cancelled at its first ``await``, and run_async raises it."""
    import asyncio

    from common.stop_signals import raise_stop
    from tools.serving.session import run_async

    ran: list[int] = []
    made = asyncio.new_event_loop

    def new_event_loop() -> asyncio.AbstractEventLoop:
        raise_stop(_Stop())
        return made()

    async def body() -> None:
        await asyncio.sleep(0)
        ran.append(1)

    monkeypatch.setattr(asyncio, "new_event_loop", new_event_loop)
    try:
        run_async(body())
        raised = None
    except _Stop as exc:
        raised = exc
    assert isinstance(raised, _Stop) and ran == []


def test_a_task_that_swallows_its_cancel_is_stopped_after_the_grace(monkeypatch):
    """A stop while the loop runs cancels the task; one that takes the cancel and goes on (as a library
    may) is stopped ``SHUTDOWN_S`` later, and run_async still raises the stop instead of waiting for it."""
    import asyncio

    from common.stop_signals import raise_stop
    from tools.serving import session

    turns: list[int] = []

    async def stubborn() -> None:
        asyncio.get_running_loop().call_soon(raise_stop, _Stop())
        while len(turns) < 10_000:
            try:
                await asyncio.sleep(0.001)
            except asyncio.CancelledError:
                turns.append(-1)
            turns.append(1)

    monkeypatch.setattr(session, "SHUTDOWN_S", 0.05)
    try:
        session.run_async(stubborn())
        raised = None
    except _Stop as exc:
        raised = exc
    assert isinstance(raised, _Stop)
    assert turns.count(-1) == 2  # cancelled by the stop, then once more by the unwind of what was left
    assert len(turns) < 10_000  # stopped: the task did not run to its end


def test_a_stop_outside_any_guard_is_raised_where_it_lands():
    from common.stop_signals import raise_stop

    try:
        raise_stop(_Stop())
        raised = None
    except _Stop as exc:
        raised = exc
    assert isinstance(raised, _Stop)
