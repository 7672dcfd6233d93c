"""Slurm client for ``MODE: slurm``: check the cluster, submit, watch, cancel.

Every call is a Slurm client command (``sinfo``, ``sbatch``, ``squeue``,
``scontrol``, ``sacct``, ``scancel``) run as an argument list -- never through a
shell with interpolated strings -- under a bounded timeout, with ``env``
(typically ``SLURM_CONF``) added to this process's environment.  Every failure
is one line naming the job id, the node and the Slurm state, or the key of
host.yaml at fault:

* :meth:`SlurmClient.check` before anything is submitted: the commands are on
  PATH (:class:`HostError`), the controller answers ``sinfo`` and the partition
  exists (:class:`ConfigError`, exit status 2).
* :meth:`SlurmClient.submit` -> job id (``sbatch --parsable``).  Slurm's time
  limits are whole minutes: ``time_limit_s`` is rounded UP to the next minute
  (61 s -> 2 min, 1 s -> 1 min), so a job may run up to 59 s longer than asked.
  Jobs are submitted ``--no-requeue`` (a node failure ends the job NODE_FAIL
  instead of silently running it again) and ``--export=ALL`` with ``env`` added.
* :meth:`SlurmClient.state` -> :class:`JobState` from ``squeue``; ``scontrol
  show job`` supplies the exit code (slurmctld keeps finished jobs MinJobAge
  seconds, 300 by default); after that ``sacct`` (slurmdbd, or the
  ``jobcomp/filetxt`` log via ``sacct --completion`` when accounting storage is
  disabled).
* :meth:`SlurmClient.wait` -> the final :class:`JobState`; cancels the job and
  raises :class:`SlurmJobError` when it stays PENDING too long, outlives
  ``timeout_s`` or ``abort_event`` is set; ``check=True`` also raises when the
  job did not end COMPLETED with exit code 0.
* :meth:`SlurmClient.cancel` / :meth:`SlurmClient.cancel_all` (``scancel``;
  cancelling a finished or unknown job is not an error).
"""

from __future__ import annotations

import math
import os
import re
import shlex
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from common.errors import ConfigError, HostError

COMMANDS = ("sbatch", "squeue", "scancel", "sinfo", "scontrol")
QUERY_TIMEOUT_S = 30.0  # sinfo / squeue / scontrol / sacct / scancel
SUBMIT_TIMEOUT_S = 60.0  # sbatch (a busy controller can be slow to accept)
POLL_S = 1.0
CANCEL_GRACE_S = 60.0  # after scancel, how long wait() waits for the job to end

# Job states after which Slurm does nothing more with the job.
FINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "TIMEOUT",
        "CANCELLED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
        "PREEMPTED",
        "SPECIAL_EXIT",
        "REVOKED",
    }
)
_UNLIMITED = {"UNLIMITED", "INFINITE", "NOT_SET", "N/A", "PARTITION_LIMIT", ""}
_NO_NODE = {"", "(null)", "None assigned", "n/a"}


class SlurmJobError(HostError):
    """A job that did not end well.  ``why`` is one of ``failed`` (ended in a
    final state other than COMPLETED with exit code 0), ``pending_timeout``,
    ``timeout``, ``interrupted`` or ``lost``; ``state`` its last known state."""

    def __init__(self, message: str, why: str, state: "JobState | None" = None) -> None:
        super().__init__(message)
        self.why = why
        self.state = state


@dataclass(frozen=True)
class JobState:
    job_id: str
    state: str  # Slurm's base state: PENDING, RUNNING, COMPLETED, TIMEOUT ...
    node: str = ""  # node list ("" while pending)
    exit_code: int | None = None  # the batch script's exit status, once known
    signal: int | None = None  # the signal that ended it (0: none), once known
    reason: str = ""  # Slurm's reason (pending reason, TimeLimit, NonZeroExitCode ...)
    time_limit_s: int | None = None  # None: unlimited / unknown
    source: str = "squeue"  # squeue, scontrol, sacct

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def ok(self) -> bool:
        return self.state == "COMPLETED" and not self.exit_code and not self.signal

    @property
    def where(self) -> str:
        return f"slurm job {self.job_id}" + (f" on node {self.node}" if self.node else "")

    def describe(self) -> str:
        """One line: ``slurm job 12 on node n1 ended TIMEOUT (time limit 1 min)``."""
        if not self.final:
            reason = f" (reason: {self.reason})" if self.reason and self.reason != "None" else ""
            return f"{self.where} is {self.state}{reason}"
        detail = ""
        if self.state == "TIMEOUT":
            detail = f"time limit {_minutes(self.time_limit_s)}" if self.time_limit_s else "time limit"
        elif self.signal:
            detail = f"killed by signal {self.signal}"
        elif self.exit_code:
            detail = f"exit code {self.exit_code}"
        elif self.state not in ("COMPLETED", "CANCELLED") and self.reason and self.reason != "None":
            detail = f"reason: {self.reason}"
        return f"{self.where} ended {self.state}" + (f" ({detail})" if detail else "")


def _minutes(seconds: int) -> str:
    minutes = seconds // 60
    return f"{minutes} min" if seconds % 60 == 0 else f"{seconds} s"


def time_limit_minutes(time_limit_s: float) -> int:
    """Slurm's ``--time`` in minutes: ``time_limit_s`` rounded UP, at least 1
    (``--time=0`` would mean *no* limit)."""
    if not time_limit_s > 0:
        raise ValueError(f"time limit must be positive, got {time_limit_s}")
    return max(1, math.ceil(time_limit_s / 60))


def parse_time_limit(text: str) -> int | None:
    """Seconds of a Slurm duration: ``1:00`` (squeue, M:SS), ``00:01:00``,
    ``2-00:00:00``, ``30`` (minutes); None for UNLIMITED and the like."""
    text = text.strip()
    if text.upper() in _UNLIMITED:
        return None
    days = 0
    if "-" in text:
        head, text = text.split("-", 1)
        days = int(head)
    parts = [int(p) for p in text.split(":")]
    if len(parts) == 1:
        seconds = parts[0] * 60
    elif len(parts) == 2:
        seconds = parts[0] * 60 + parts[1]
    else:
        seconds = parts[0] * 3600 + parts[1] * 60 + parts[2]
    return days * 86400 + seconds


def _exit_pair(text: str) -> tuple[int | None, int | None]:
    """Slurm's ``ExitCode=3:0`` -> (3, 0)."""
    match = re.fullmatch(r"\s*(\d+):(\d+)\s*", text or "")
    return (int(match.group(1)), int(match.group(2))) if match else (None, None)


def _base_state(text: str) -> str:
    """``CANCELLED by 0`` / ``CANCELLED+`` -> ``CANCELLED``."""
    return (text.split() or [""])[0].rstrip("+").upper()


def _node(text: str) -> str:
    text = text.strip()
    return "" if text in _NO_NODE else text


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def read_conf_value(conf_path: str, key: str) -> str | None:
    """First ``key=value`` of a slurm.conf (case-insensitive key), or None."""
    try:
        text = Path(conf_path).read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        name, sep, value = line.partition("=")
        if sep and name.strip().lower() == key.lower():
            return value.strip().split()[0] if value.strip() else None
    return None


@dataclass(frozen=True)
class BatchJob:
    """A batch job for ``SlurmClient.submit``.

    ``command``: the path of a batch script (str or PathLike, read by
    sbatch on this machine) or an argument list (run with ``--wrap``,
    quoted with shlex).  ``time_limit_s`` is rounded UP to whole minutes
    (Slurm's unit; None: the partition's limit).  ``env`` is added to the
    job's environment (``--export=ALL``).  stdout and stderr both go to
    ``output_path``.
    """

    command: str | os.PathLike | Sequence[str]
    job_name: str
    output_path: str
    workdir: str
    partition: str | None = None
    account: str | None = None
    time_limit_s: float | None = None
    gpus_per_node: int = 0
    nodes: int = 1
    nodelist: str | None = None
    env: Mapping[str, str] | None = None
    extra_args: Sequence[str] = ()

    def sbatch_args(self) -> list[str]:
        """sbatch's command line for this job, its values checked first."""
        command = self.command
        if isinstance(command, (str, os.PathLike)):
            script = os.fspath(command)
            if not os.path.isfile(script):
                raise HostError(f"MODE slurm: batch script {script} not found")
            payload = [script]
        else:
            argv = [str(a) for a in command]
            if not argv:
                raise ValueError("empty command")
            payload = [f"--wrap={shlex.join(argv)}"]
        for name, value in (("job_name", self.job_name), ("output_path", self.output_path), ("workdir", self.workdir)):
            if not value or "\n" in str(value):
                raise ValueError(f"{name} must be a non-empty single line, got {value!r}")
        if self.nodes < 1 or self.gpus_per_node < 0:
            raise ValueError(f"nodes must be >= 1 and gpus_per_node >= 0 (got {self.nodes}, {self.gpus_per_node})")
        args = [
            "sbatch",
            "--parsable",
            "--no-requeue",
            "--export=ALL",
            f"--job-name={self.job_name}",
            f"--output={self.output_path}",
            f"--chdir={self.workdir}",
            f"--nodes={self.nodes}",
        ]
        if self.partition:
            args.append(f"--partition={self.partition}")
        if self.account:
            args.append(f"--account={self.account}")
        if self.time_limit_s is not None:
            args.append(f"--time={time_limit_minutes(self.time_limit_s)}")
        if self.gpus_per_node:
            args.append(f"--gpus-per-node={self.gpus_per_node}")
        if self.nodelist:
            args.append(f"--nodelist={self.nodelist}")
        return [*args, *self.extra_args, *payload]


class SlurmClient:
    """One Slurm cluster, reached through its client commands.

    ``env`` is added to this process's environment for every command (e.g.
    ``{"SLURM_CONF": "/etc/slurm/other.conf"}``; a ``PATH`` there decides
    where the commands are looked up).
    """

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        *,
        poll_s: float = POLL_S,
        query_timeout_s: float = QUERY_TIMEOUT_S,
        submit_timeout_s: float = SUBMIT_TIMEOUT_S,
        cancel_grace_s: float = CANCEL_GRACE_S,
    ) -> None:
        self.env = {**os.environ, **(env or {})}
        self.poll_s = poll_s
        self.query_timeout_s = query_timeout_s
        self.submit_timeout_s = submit_timeout_s
        self.cancel_grace_s = cancel_grace_s

    # ---- plumbing -----------------------------------------------------------
    @property
    def conf_path(self) -> str:
        return self.env.get("SLURM_CONF") or "/etc/slurm/slurm.conf"

    @property
    def controller(self) -> str:
        """``host:port`` of the controller as slurm.conf names it (best effort)."""
        host = read_conf_value(self.conf_path, "SlurmctldHost") or read_conf_value(self.conf_path, "ControlMachine")
        if not host:
            return f"of {self.conf_path}"
        host = host.split("(", 1)[0]
        port = read_conf_value(self.conf_path, "SlurmctldPort") or "6817"
        return f"{host}:{port}"

    def _which(self, command: str) -> str | None:
        return shutil.which(command, path=self.env.get("PATH", os.defpath))

    def _missing(self, command: str) -> HostError:
        return HostError(
            f"MODE slurm: {command} not found on PATH; install Slurm's client commands (Debian: slurm-client) or fix "
            "PATH"
        )

    def _run(
        self, argv: Sequence[str], timeout: float | None = None, extra_env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess:
        """Run a Slurm command; missing binary or timeout -> one-line HostError."""
        timeout = self.query_timeout_s if timeout is None else timeout
        env = {**self.env, **extra_env} if extra_env else self.env
        exe = self._which(argv[0])
        if exe is None:
            raise self._missing(argv[0])
        try:
            return subprocess.run(
                [exe, *argv[1:]],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            raise HostError(
                f"slurm controller {self.controller}: `{shlex.join(argv)}` did not answer within {timeout:.0f} s"
            ) from None
        except OSError as exc:
            raise HostError(f"MODE slurm: cannot run {argv[0]}: {exc.strerror or exc}") from None

    # ---- before submitting --------------------------------------------------
    def check(self, partition: str | None = None) -> list[str]:
        """Commands on PATH, controller reachable, ``partition`` exists
        (None: the cluster's default).  Returns the partitions that exist."""
        for command in COMMANDS:
            if self._which(command) is None:
                raise self._missing(command)
        try:
            proc = self._run(["sinfo", "--noheader", "--format=%P|%a"])
        except HostError as exc:
            raise ConfigError(f"MODE slurm: controller {self.controller} unreachable: {exc}") from None
        if proc.returncode != 0:
            raise ConfigError(
                f"MODE slurm: controller {self.controller} unreachable (SLURM_CONF "
                f"{self.conf_path}): sinfo exited {proc.returncode}: "
                f"{_last_line(proc.stderr or proc.stdout)}"
            )
        partitions: list[str] = []
        for line in proc.stdout.splitlines():
            name = line.split("|", 1)[0].strip().rstrip("*")
            if name and name not in partitions:
                partitions.append(name)
        if partition is not None and partition not in partitions:
            raise ConfigError(
                f"SLURM_PARTITION: partition {partition!r} does not exist on controller {self.controller} (partitions: "
                f"{', '.join(partitions) or 'none'})"
            )
        return partitions

    # ---- submitting ---------------------------------------------------------
    def submit(self, job: BatchJob) -> str:
        """Submit a batch job (``BatchJob``) and return its id."""
        args = job.sbatch_args()
        job_env = {str(k): str(v) for k, v in (job.env or {}).items()}
        proc = self._run(args, timeout=self.submit_timeout_s, extra_env=job_env)
        if proc.returncode != 0:
            where = f" to partition {job.partition}" if job.partition else ""
            raise HostError(
                f"slurm controller {self.controller}: sbatch of job {job.job_name}{where} exited {proc.returncode}: "
                f"{_last_line(proc.stderr or proc.stdout)}"
            )
        job_id = proc.stdout.strip().split(";", 1)[0]
        if not re.fullmatch(r"\d+(_\d+)?", job_id):
            raise HostError(
                f"slurm controller {self.controller}: sbatch of job {job.job_name} printed no job id: "
                f"{_last_line(proc.stdout + proc.stderr)}"
            )
        return job_id

    # ---- watching -----------------------------------------------------------
    def state(self, job_id: str | int) -> JobState:
        """The job's state now: squeue (exit code from scontrol once final),
        else scontrol show job, else sacct.  Unknown job -> SlurmJobError ``lost``."""
        job_id = str(job_id)
        found = self._from_squeue(job_id)
        if found is not None and not found.final:
            return found
        detailed = self._from_scontrol(job_id)
        if detailed is not None:
            return detailed
        if found is not None:
            return found
        accounted = self._from_sacct(job_id)
        if accounted is not None:
            return accounted
        raise SlurmJobError(
            f"slurm job {job_id} unknown to controller {self.controller} (not in squeue, scontrol show job or sacct)",
            "lost",
        )

    def _from_squeue(self, job_id: str) -> JobState | None:
        proc = self._run(["squeue", "--noheader", "--states=all", f"--jobs={job_id}", "--format=%i|%T|%N|%l|%r"])
        if proc.returncode != 0:
            if "Invalid job id" in proc.stderr:
                return None
            raise HostError(
                f"slurm controller {self.controller}: squeue for job {job_id} exited {proc.returncode}: "
                f"{_last_line(proc.stderr)}"
            )
        for line in proc.stdout.splitlines():
            fields = line.split("|", 4)
            if len(fields) == 5 and fields[0].strip() == job_id:
                return JobState(
                    job_id,
                    _base_state(fields[1]),
                    _node(fields[2]),
                    reason=fields[4].strip(),
                    time_limit_s=parse_time_limit(fields[3]),
                    source="squeue",
                )
        return None

    def _from_scontrol(self, job_id: str) -> JobState | None:
        proc = self._run(["scontrol", "--oneliner", "show", "job", job_id])
        if proc.returncode != 0:
            return None
        fields = dict(re.findall(r"(?:^|\s)([A-Za-z/:]+)=(\S*)", proc.stdout))
        if fields.get("JobId") != job_id or "JobState" not in fields:
            return None
        code, sig = _exit_pair(fields.get("ExitCode", ""))
        return JobState(
            job_id,
            _base_state(fields["JobState"]),
            _node(fields.get("NodeList", "")),
            code,
            sig,
            fields.get("Reason", ""),
            parse_time_limit(fields.get("TimeLimit", "")),
            "scontrol",
        )

    def _from_sacct(self, job_id: str) -> JobState | None:
        query = [
            "sacct",
            "--noheader",
            "--parsable2",
            "--allocations",
            f"--jobs={job_id}",
            "--format=JobID,State,NodeList,ExitCode,Timelimit",
        ]
        proc = self._run(query)
        if proc.returncode != 0 and "accounting storage is disabled" in proc.stderr:
            # No slurmdbd: the job completion log (JobCompType=jobcomp/filetxt).
            proc = self._run([query[0], "--completion", *query[1:]])
        if proc.returncode != 0:
            return None
        for line in proc.stdout.splitlines():
            fields = line.split("|")
            if len(fields) >= 4 and fields[0].strip() == job_id:
                code, sig = _exit_pair(fields[3])
                limit = parse_time_limit(fields[4]) if len(fields) > 4 else None
                return JobState(
                    job_id, _base_state(fields[1]), _node(fields[2]), code, sig, time_limit_s=limit, source="sacct"
                )
        return None

    def wait(
        self,
        job_id: str | int,
        timeout_s: float | None = None,
        pending_timeout_s: float | None = None,
        abort_event: threading.Event | None = None,
        *,
        check: bool = False,
    ) -> JobState:
        """Poll until the job reaches a final state and return it.

        Cancels the job (and waits for it to end) then raises
        :class:`SlurmJobError` when it has been PENDING for ``pending_timeout_s``
        (``why="pending_timeout"``), is still not finished ``timeout_s`` after
        this call (``"timeout"``) or ``abort_event`` is set (``"interrupted"``).
        ``check=True``: also raise (``"failed"``) unless it ended COMPLETED with
        exit code 0.  None disables a limit.
        """
        job_id = str(job_id)
        started = time.monotonic()
        pending_since: float | None = None
        while True:
            current = self.state(job_id)
            now = time.monotonic()
            if current.final:
                if check and not current.ok:
                    raise SlurmJobError(current.describe(), "failed", current)
                return current
            if abort_event is not None and abort_event.is_set():
                self._cancel_and_raise(current, "interrupted", f"cancelled on interrupt (was {current.state})")
            if current.state == "PENDING":
                pending_since = now if pending_since is None else pending_since
                if pending_timeout_s is not None and now - pending_since >= pending_timeout_s:
                    reason = current.reason if current.reason and current.reason != "None" else "none given"
                    self._cancel_and_raise(
                        current,
                        "pending_timeout",
                        f"PENDING for {now - pending_since:.0f} s (reason: {reason}): cancelled",
                    )
            else:
                pending_since = None
            if timeout_s is not None and now - started >= timeout_s:
                self._cancel_and_raise(
                    current, "timeout", f"still {current.state} after {now - started:.0f} s: cancelled"
                )
            if abort_event is not None:
                abort_event.wait(self.poll_s)
            else:
                time.sleep(self.poll_s)

    def wait_running(
        self, job_id: str | int, pending_timeout_s: float | None = None, abort_event: threading.Event | None = None
    ) -> JobState:
        """Poll until the job RUNS (its allocation is ready) and return that state.

        Cancels it and raises :class:`SlurmJobError` when it stays PENDING for
        ``pending_timeout_s`` (``why="pending_timeout"``), on ``abort_event``
        (``"interrupted"``), or when it ends before running (``"failed"``)."""
        job_id = str(job_id)
        started = time.monotonic()
        while True:
            current = self.state(job_id)
            if current.state == "RUNNING":
                return current
            if current.final:
                raise SlurmJobError(f"{current.describe()} before it ran", "failed", current)
            if abort_event is not None and abort_event.is_set():
                self._cancel_and_raise(current, "interrupted", f"cancelled on interrupt (was {current.state})")
            waited = time.monotonic() - started
            if pending_timeout_s is not None and waited >= pending_timeout_s:
                reason = current.reason if current.reason and current.reason != "None" else "none given"
                self._cancel_and_raise(
                    current, "pending_timeout", f"{current.state} for {waited:.0f} s (reason: {reason}): cancelled"
                )
            if abort_event is not None:
                abort_event.wait(min(self.poll_s, 0.5))
            else:
                time.sleep(min(self.poll_s, 0.5))

    def _cancel_and_raise(self, current: JobState, why: str, what: str) -> None:
        self.cancel(current.job_id)
        final = self._wait_gone(current.job_id)
        message = f"{current.where} {what}"
        if final is None:
            message += f"; still not ended {self.cancel_grace_s:.0f} s after scancel"
        raise SlurmJobError(message, why, final or current)

    def _wait_gone(self, job_id: str) -> JobState | None:
        """After scancel: the final state (processes reaped: not COMPLETING), or None."""
        deadline = time.monotonic() + self.cancel_grace_s
        while True:
            try:
                current = self.state(job_id)
            except SlurmJobError:
                return None
            if current.final:
                return current
            if time.monotonic() >= deadline:
                return None
            time.sleep(min(self.poll_s, 0.5))

    # ---- cancelling ---------------------------------------------------------
    def cancel(self, job_id: str | int) -> None:
        """``scancel`` the job; a finished or unknown job is not an error."""
        self.cancel_all([job_id])

    def cancel_all(self, job_ids: Iterable[str | int]) -> None:
        ids = [str(j) for j in job_ids]
        for start in range(0, len(ids), 100):
            chunk = ids[start : start + 100]
            proc = self._run(["scancel", *chunk])
            if proc.returncode != 0:
                text = proc.stderr.strip()
                benign = ("already completing or completed", "Invalid job id")
                errors = [line for line in text.splitlines() if line.strip() and not any(b in line for b in benign)]
                if errors:
                    raise HostError(
                        f"slurm controller {self.controller}: scancel {' '.join(chunk)} exited {proc.returncode}: "
                        f"{errors[-1].strip()}"
                    )
