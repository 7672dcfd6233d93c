"""A container on a host's engine as the Docker executors hold it, and the calls on it.

``ContainerHandle``: a container being started or started, and how its exit is learnt
(the case container: a thread waiting on the engine; a monitor: asked when the lifecycle
asks). ``Background``: a call on its own thread (starts, stops, removals overlap). The
rest are single engine calls that never raise: a container already gone is no error.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable

import requests
from docker.errors import APIError, NotFound
from docker.models.containers import Container
from loguru import logger

from common.errors import HostError

WAIT_SLICE_S = 60  # one engine wait call; repeated while the engine answers
STOP_TIMEOUT_S = 10  # SIGTERM, then SIGKILL after this
JOIN_S = STOP_TIMEOUT_S + 30  # how long teardown waits for a stop or removal still under way


def stop_handle(handle: ContainerHandle) -> None:
    try:
        handle.started()
    except HostError:
        pass  # it never started; end_case removes what was created
    if handle.container is not None:
        stop_container(handle.container)


def stop_container(container: Container) -> None:
    try:
        container.stop(timeout=STOP_TIMEOUT_S)
    except (NotFound, APIError, requests.RequestException):
        pass


def remove_container(container: Container) -> None:
    try:
        container.remove(force=True)
    except (NotFound, APIError, requests.RequestException):
        pass


def stream_logs(handle: ContainerHandle, echo: Callable[[str], None]) -> None:
    """--verbose: copy the pipeline's output to stdout.log and the console as it comes."""
    container, stdout = handle.container, handle.stdout
    if container is None or stdout is None:  # started with its stdout.log only (the pipeline)
        return
    try:
        with open(stdout, "ab") as sink:
            buffer = b""
            for chunk in container.logs(stream=True, follow=True):
                sink.write(chunk)
                sink.flush()
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    echo(line.decode(errors="replace"))
        handle.logs_saved = True
    except (APIError, requests.RequestException, OSError):
        pass


def save_logs(handle: ContainerHandle) -> None:
    """The pipeline's output into stdout.log with one request once it has exited (or was
    stopped): no connection held open for the whole run. Not streamed: docker-py's
    stream reader takes the connection's socket over, which then cannot go back to the
    pool cleanly."""
    container, stdout = handle.container, handle.stdout
    if handle.logs_saved or container is None or stdout is None:
        return
    try:
        data = container.logs(stdout=True, stderr=True, stream=False)
        with open(stdout, "ab") as sink:
            sink.write(data)
        handle.logs_saved = True
    except (NotFound, APIError, requests.RequestException, OSError) as exc:
        logger.warning(f"host {handle.label}: could not save the pipeline's output: {reason(exc)}")


class Background:
    """A call on its own thread; ``join`` returns the exception it raised (or None)."""

    def __init__(self, target: Callable[[Background], Any], name: str) -> None:
        self.step: str | None = None  # what the call is doing now, for messages
        self.value: Any = None
        self.error: BaseException | None = None
        self._target = target
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.value = self._target(self)
        except BaseException as exc:  # handed to the joining thread
            self.error = exc

    def join(self, timeout: float | None = None) -> BaseException | None:
        self._thread.join(timeout)
        if self._thread.is_alive():
            return TimeoutError(f"{self._thread.name} still running after {timeout:.0f} s")
        return self.error


class ContainerHandle:
    """A container being started or started, and how its exit is learnt.

    The case container has a thread that waits for its exit: the engine's wait call,
    repeated in bounded slices (the SDK's HTTP timeout would otherwise end it); a
    dropped connection ends it with an error, which ``result`` reports as the host
    being lost, never as a timeout. A monitor is asked (one inspect) only when the
    lifecycle asks, so it holds no connection (over SSH: no channel) while it runs."""

    def __init__(self, label: str, role: str, poll: bool) -> None:
        self.label = label
        self.role = role
        self.poll = poll
        self.container: Container | None = None
        self.starting: Background | None = None
        self.stdout: Path | None = None
        self.streamer: threading.Thread | None = None
        self.logs_saved = False
        self._done = threading.Event()
        self._code: int | None = None
        self._error: str | None = None

    @property
    def name(self) -> str:
        return self.container.name if self.container is not None else self.role

    @property
    def created(self) -> Container:
        """The container; waiting and inspecting come only after it was created."""
        if self.container is None:
            raise HostError(f"host {self.label}: the {self.role} container was never created")
        return self.container

    def started(self) -> None:
        """Wait for a background start; raise its HostError (a failed start)."""
        if self.starting is None:
            return
        error = self.starting.join(timeout=JOIN_S + 120)
        if isinstance(error, TimeoutError):
            raise HostError(f"host {self.label}: starting the {self.role} container did not finish")
        if error is not None:
            raise error

    def watch(self) -> None:
        threading.Thread(target=self._wait, name=f"wait-{self.name}", daemon=True).start()

    def _wait(self) -> None:
        try:
            while True:
                try:
                    status = self.created.wait(timeout=WAIT_SLICE_S)
                    self._code = int(status.get("StatusCode", -1))
                    return
                except (requests.RequestException, OSError) as exc:
                    # The slice ran out (requests reports a read timeout as a ReadTimeout or,
                    # mid-response, as a ConnectionError), or the connection is gone: the
                    # engine answering a plain request tells which.
                    if not self._engine_answers():
                        raise exc
        except NotFound:
            self._error = "the container disappeared"
        except (APIError, requests.RequestException, OSError) as exc:
            self._error = f"connection to the Docker engine lost ({reason(exc)})"
        except HostError:  # watched before it was created
            self._error = "the container was never created"
        finally:
            self._done.set()

    def _engine_answers(self) -> bool:
        try:
            self.created.reload()
        except NotFound:
            raise
        except (APIError, requests.RequestException, OSError):
            return False
        return True

    def done(self) -> bool:
        return self._done.is_set()

    def _inspect(self) -> None:
        container = self.created
        try:
            container.reload()
        except NotFound:
            self._error = "the container disappeared"
            self._done.set()
            return
        except (APIError, requests.RequestException, OSError) as exc:
            raise HostError(
                f"host {self.label}: connection to the Docker engine lost ({reason(exc)}) while {self.name} ran"
            ) from None
        state = container.attrs.get("State", {})
        if state.get("Status") in ("exited", "dead"):
            self._code = int(state.get("ExitCode", -1))
            self._done.set()

    def result(self, timeout: float) -> int | None:
        if self.poll and not self._done.is_set():
            deadline = time.monotonic() + timeout
            self._inspect()
            while not self._done.is_set() and time.monotonic() < deadline:
                time.sleep(min(0.25, max(0.0, deadline - time.monotonic())))
                self._inspect()
        if not self._done.wait(timeout if not self.poll else 0):
            return None
        if self._error:
            raise HostError(f"host {self.label}: {self._error} while {self.name} ran")
        return self._code


def reason(exc: Exception) -> str:
    text = getattr(exc, "explanation", None) or str(exc) or type(exc).__name__
    return " ".join(str(text).split())[:300]
