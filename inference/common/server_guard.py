"""Run a server so that nothing of it outlives the process that launched it, even one killed by SIGKILL.

``python -I server_guard.py LAUNCHER_PID REPORT_FD -- ARGV...`` is how ``common/launch.py::LaunchedServer``
starts every server, in a session (and process group) of its own. This process:

1. checks that LAUNCHER_PID is still its parent, and takes a pidfd of it and of itself;
2. forks a watchdog (twice, so that it is no child of the server: the server's own handling of its
   children never meets it) in a process group of its own;
3. becomes the server with ``exec``: its pid, process group and exit status are the server's, as
   if the launcher had started it directly. A command that cannot be started is written to
   REPORT_FD (the launcher reads it: ``LaunchedServer.start``'s error); a started one closes it.

The watchdog waits, without polling, on the two pidfds:

- the launcher ended (even by SIGKILL, which no handler sees): SIGTERM to the server's whole
  group (vLLM's API server and its engine core alike), SIGKILL after ``GRACE_S``;
- the server ended: the same for what is left of its group (workers it started).

Either way it exits once the group is empty. The launcher's own ``stop`` signals the same group.
Linux only (pidfd, Linux 5.3); where pidfds cannot be had, the watchdog polls every ``POLL_S``.
Run as a file with ``-I`` (nothing of the caller's environment or folder on its path), it
imports the standard library only.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time

GRACE_S = 10.0  # as common/launch.py's STOP_GRACE_S: SIGTERM, then SIGKILL
POLL_S = 0.05  # while the group is stopping; and the watch itself where there are no pidfds
NOT_STARTED = 127  # the exit status of a command that cannot be started, as a shell's


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):  # no such process, or no pidfds here
        return None


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def _members(group: int) -> bool:
    """Whether a process of ``group`` still runs (zombies, dead but not yet reaped, do not count)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[2] == str(group).encode() and fields[0] != b"Z":
            return True
    return False


def _stop_group(group: int) -> None:
    """SIGTERM to ``group``, SIGKILL after ``GRACE_S``; returns once none of it runs."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(group, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline:
            time.sleep(POLL_S)
            if not _members(group):
                return


def _watch(launcher: int, server: int, fds: list[int]) -> None:
    os.setpgid(0, 0)  # out of the server's group: the group's end is then the server's
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, signal.SIG_IGN)
    try:
        if len(fds) == 2:
            select.select(fds, [], [])
        else:
            while _alive(launcher) and _alive(server):
                time.sleep(POLL_S)
        if not _alive(launcher):
            print(f"inferperf server_guard: the launcher (pid {launcher}) ended: stopping the server", flush=True)
        _stop_group(server)  # the server leads its group (its own session: start_new_session)
    finally:
        os._exit(0)


def main(argv: list[str]) -> None:
    launcher, report, command = int(argv[1]), int(argv[2]), argv[4:]
    os.set_inheritable(report, False)  # closed by a successful exec: the launcher then reads its end
    fds = [fd for fd in (_pidfd(launcher), _pidfd(os.getpid())) if fd is not None]
    if os.getppid() != launcher:  # the launcher is gone already: start nothing
        os._exit(NOT_STARTED)
    server = os.getpid()
    first = os.fork()
    if first == 0:
        os.close(report)
        if os.fork() == 0:
            _watch(launcher, server, fds)
        os._exit(0)
    os.waitpid(first, 0)
    for fd in fds:
        os.close(fd)
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        os.write(report, (exc.strerror or str(exc)).encode())
        os._exit(NOT_STARTED)


if __name__ == "__main__":
    main(sys.argv)
