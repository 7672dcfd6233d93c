"""Start a REAL Slurm cluster for tests (Debian's slurm-wlm + munge): one node, or N on this machine.

Everything lives in one temporary directory: its own munge key and munged
(socket, pid, log and seed files), its own ``slurm.conf`` (free controller and
node ports, state/spool/log/pid paths inside the directory), a ``slurmctld``
and a ``slurmd`` running in the foreground (``-D``) in their own sessions.
Nothing under /etc or /run is used, so the distro's services (never started:
scripts/install_system_deps.sh keeps postinst from starting them) and any
other test cluster are unaffected.  Clients find this cluster through
``SLURM_CONF`` (:attr:`SlurmCluster.env`); ``AuthInfo=socket=...`` in the
config points every Slurm component at this munged.

Typical use::

    cluster = start_slurm(tmp_path / "slurm")
    try:
        subprocess.run(["sinfo"], env={**os.environ, **cluster.env})
    finally:
        cluster.stop()

or the session-scoped pytest fixture :func:`slurm_cluster` (import it into a
test module: ``from tests.infra.slurm import slurm_cluster  # noqa: F401``).
Under ``CI=true`` a cluster that does not come up FAILS the tests that use it;
otherwise they are skipped with the reason.

Cluster shape: node ``<hostname>`` (address 127.0.0.1) with every CPU of this
machine, partitions ``debug`` (default) and ``batch``.  ``start_slurm(nodes=N)``
with N > 1 starts N ``slurmd`` on this machine instead (Debian's Slurm is built
with ``--enable-multiple-slurmd``): nodes ``<hostname>-n1`` .. ``-nN``, all at
127.0.0.1, each on its own ``Port=``, with its own spool directory, pid and log
file (``%n`` in slurm.conf); every one declares this machine's CPUs, so N nodes
offer N times the real cores (fine for jobs that sleep, not for measuring
compute).  Common to both shapes: ``MinJobAge=600`` so
``scontrol show job`` keeps finished jobs (there is no slurmdbd, so ``sacct``
has no data); ``KillWait=1`` and ``OverTimeLimit=0`` so a job past its time
limit dies promptly -- but Slurm's time limits are whole minutes and slurmctld
checks them only every 30 s, so a ``--time=1`` job ends TIMEOUT 60-90 s after
it starts.

Mount namespaces: when ``unshare --mount`` works here (root, util-linux), every
``slurmd`` starts in a mount namespace of its own (private propagation); its
jobs and steps inherit it.  Nothing differs until a test mounts something in
it: :meth:`SlurmCluster.hide_from_node` mounts an empty tmpfs over a directory
in one node's namespace only, so that node no longer sees what this machine
writes there (a "shared" directory that is not shared).  Without ``unshare``
the daemons start as before and :attr:`SlurmCluster.mount_namespaces` is False.

Requirements: Debian's ``slurm-wlm`` and ``munge`` (scripts/install_system_deps.sh);
root (slurmd runs jobs as their submitting user and must be able to setuid).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Union

PathLike = Union[str, os.PathLike]

MUNGED = "/usr/sbin/munged"
SLURMCTLD = "/usr/sbin/slurmctld"
SLURMD = "/usr/sbin/slurmd"
CLIENTS = ("sbatch", "squeue", "scancel", "sinfo", "scontrol")
PARTITIONS = ("debug", "batch")  # the first is the default
CLUSTER_NAME = "inferperf"
UNSHARE = ["unshare", "--mount", "--propagation", "private"]


class SlurmUnavailable(RuntimeError):
    """The Slurm/munge binaries are missing or the cluster did not come up."""


def free_port(address: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((address, 0))
        return s.getsockname()[1]


def _tail(path: Path, chars: int = 1500) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"({path.name}: no log)"
    text = text[-chars:].strip()
    return f"--- {path.name} ---\n{text}" if text else f"({path.name}: empty)"


def _mem_mb() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    return 1024


@dataclass
class SlurmCluster:
    """A running test cluster.  ``env`` is what clients need (``SLURM_CONF``)."""

    root: str
    conf_path: str
    node: str
    cpus: int
    partitions: List[str]
    shared_dir: str
    controller_port: int
    slurmd_port: int
    munge_socket: str
    nodes: List[str] = field(default_factory=list)  # every node; ``node`` is the first
    node_ports: Dict[str, int] = field(default_factory=dict)  # node -> its slurmd's port
    mount_namespaces: bool = False  # each slurmd in a mount namespace of its own
    processes: Dict[str, subprocess.Popen] = field(default_factory=dict, repr=False)

    @property
    def env(self) -> Dict[str, str]:
        return {"SLURM_CONF": self.conf_path}

    @property
    def default_partition(self) -> str:
        return self.partitions[0]

    def client_env(self) -> Dict[str, str]:
        """os.environ plus :attr:`env` (for subprocess calls)."""
        return {**os.environ, **self.env}

    def run(self, *argv: str, timeout: float = 30.0, check: bool = True) -> subprocess.CompletedProcess:
        """Run a Slurm client command (``scontrol``, ``squeue`` ...) against this cluster."""
        proc = subprocess.run(
            list(argv),
            env=self.client_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise SlurmUnavailable(
                f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip() or proc.stdout.strip()}"
            )
        return proc

    def end_job_now(self, job: str, tries: int = 10) -> None:
        """Move a running job's end time to now, as an admin: slurmctld's own time-limit
        enforcement then ends it TIMEOUT.  ``scontrol`` turns ``now`` into a second on the
        client, and slurmctld refuses an end time before its own ``now`` ("Invalid time
        specified", ``update_job`` in job_mgr.c), so a second that ticks over between the
        two is refused: asked again, with a fresh ``now``, up to ``tries`` times."""
        for _ in range(tries - 1):
            proc = self.run("scontrol", "update", f"jobid={job}", "EndTime=now", check=False)
            if proc.returncode == 0:
                return
            if "Invalid time specified" not in proc.stderr + proc.stdout:
                break
        self.run("scontrol", "update", f"jobid={job}", "EndTime=now")

    def node_state(self, node: Optional[str] = None) -> str:
        """``sinfo``'s long state of a node (the first by default), e.g. ``idle``, ``mixed``, ``drained``."""
        out = self.run("sinfo", "-h", "-N", "-n", node or self.node, "-o", "%T").stdout.split()
        return out[0] if out else ""

    def node_states(self) -> Dict[str, str]:
        """Every node's long state."""
        states = {}
        for line in self.run("sinfo", "-h", "-N", "-o", "%N %T").stdout.splitlines():
            fields = line.split()
            if len(fields) == 2:
                states[fields[0]] = fields[1]
        return states

    def slurmd_pid(self, node: Optional[str] = None) -> int:
        """The pid of a node's slurmd (the first node by default)."""
        proc = self.processes.get(_slurmd_key(self, node or self.node))
        if proc is None or proc.poll() is not None:
            raise SlurmUnavailable(f"slurmd of node {node or self.node} is not running")
        return proc.pid

    @contextlib.contextmanager
    def hide_from_node(self, directory: PathLike, node: Optional[str] = None) -> Iterator[None]:
        """Mount an empty tmpfs over ``directory`` in one node's mount namespace only
        (the first node by default): jobs on that node see an empty directory there,
        and what they write stays in the tmpfs, invisible to this machine.  Unmounted
        on exit.  Needs :attr:`mount_namespaces`."""
        if not self.mount_namespaces:
            raise SlurmUnavailable(
                "the slurmd processes share this machine's mount namespace (unshare --mount unavailable)"
            )
        pid = self.slurmd_pid(node)
        target = str(Path(directory).resolve())
        _nsenter(pid, "mount", "-t", "tmpfs", "-o", "size=4m,mode=1777", "inferperf-hidden", target)
        try:
            yield
        finally:
            _nsenter(pid, "umount", "-l", target)

    def node_listdir(self, directory: PathLike, node: Optional[str] = None) -> List[str]:
        """The names in ``directory`` as that node's jobs see it (its mount namespace)."""
        out = (
            _nsenter(self.slurmd_pid(node), "ls", "-A", str(Path(directory).resolve()))
            if self.mount_namespaces
            else None
        )
        return out.split() if out is not None else sorted(os.listdir(directory))

    def job_ids(self) -> List[str]:
        """Ids of the jobs slurmctld still tracks as pending/running/completing."""
        return self.run("squeue", "-h", "-o", "%i").stdout.split()

    def drain(self, reason: str = "test", node: Optional[str] = None) -> None:
        self.run("scontrol", "update", f"nodename={node or self.node}", "state=drain", f"reason={reason}")

    def undrain(self, node: Optional[str] = None) -> None:
        self.run("scontrol", "update", f"nodename={node or self.node}", "state=resume")

    def logs(self) -> str:
        names = ["munged.log", "slurmctld.log"] + [_slurmd_log(self, node) for node in self.nodes or [self.node]]
        return "\n".join(_tail(Path(self.root) / name) for name in names)

    def wait_idle(self, timeout: float = 30.0) -> None:
        """Until every node is idle (no jobs, not drained); raises with the logs."""
        deadline = time.monotonic() + timeout
        nodes = self.nodes or [self.node]
        state = ""
        while time.monotonic() < deadline:
            try:
                states = self.node_states()
                busy = {n: states.get(n, "missing") for n in nodes if states.get(n) != "idle"}
                state = ", ".join(f"{n} {st}" for n, st in busy.items())
            except (SlurmUnavailable, subprocess.TimeoutExpired) as exc:
                busy, state = {"?": "?"}, f"sinfo failed: {exc}"
            if not busy:
                return
            for name, proc in self.processes.items():
                if proc.poll() is not None:
                    raise SlurmUnavailable(
                        f"{name} exited with status {proc.returncode} before the nodes became idle\n{self.logs()}"
                    )
            time.sleep(0.25)
        raise SlurmUnavailable(f"nodes not idle after {timeout:.0f} s (last state: {state or 'none'})\n{self.logs()}")

    def cancel_all_jobs(self, timeout: float = 20.0) -> None:
        """scancel every job of this cluster and wait (bounded) until none is left."""
        try:
            ids = self.job_ids()
            if ids:
                self.run("scancel", *ids, check=False)
            deadline = time.monotonic() + timeout
            while ids and time.monotonic() < deadline:
                time.sleep(0.25)
                ids = self.job_ids()
        except (SlurmUnavailable, subprocess.TimeoutExpired, OSError):
            pass

    def stop(self, timeout: float = 15.0, remove: bool = True) -> None:
        """Cancel the jobs, stop slurmd, slurmctld and munged, kill whatever
        process still carries this cluster's ``SLURM_CONF`` (job steps,
        slurmstepd) and remove the directory."""
        if self.processes.get("slurmctld") is not None and self.processes["slurmctld"].poll() is None:
            self.cancel_all_jobs()
        slurmds = [name for name in self.processes if name.startswith("slurmd")]
        for name in (*slurmds, "slurmctld", "munged"):
            proc = self.processes.pop(name, None)
            if proc is None:
                continue
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=timeout)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in processes_with_env(f"SLURM_CONF={self.conf_path}"):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if remove:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "SlurmCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def processes_with_env(entry: str) -> List[int]:
    """Pids (other than ours) whose initial environment contains ``entry``
    (``NAME=value``): slurmstepd and job processes inherit ``SLURM_CONF``."""
    needle = entry.encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(name))
        except OSError:
            continue
    return found


def _slurmd_key(cluster: SlurmCluster, node: str) -> str:
    """The key of a node's slurmd in :attr:`SlurmCluster.processes`."""
    return "slurmd" if len(cluster.nodes) <= 1 else f"slurmd-{node}"


def _slurmd_log(cluster: SlurmCluster, node: str) -> str:
    return "slurmd.log" if len(cluster.nodes) <= 1 else f"slurmd-{node}.log"


def _nsenter(pid: int, *argv: str) -> str:
    """Run ``argv`` in the mount namespace of ``pid``; its stdout, or SlurmUnavailable."""
    proc = subprocess.run(
        ["nsenter", "-t", str(pid), "-m", "--", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        timeout=30,
    )
    if proc.returncode != 0:
        raise SlurmUnavailable(f"nsenter -t {pid} -m {' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout


def mount_namespaces_available() -> bool:
    """``unshare --mount`` works here (util-linux present, allowed to create namespaces),
    and so does ``nsenter`` (to mount inside one later)."""
    if shutil.which("unshare") is None or shutil.which("nsenter") is None:
        return False
    try:
        proc = subprocess.run(UNSHARE + ["true"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0


def _slurm_conf(
    root: Path,
    nodes: List[str],
    cpus: int,
    mem_mb: int,
    ctld_port: int,
    slurmd_ports: Dict[str, int],
    munge_socket: Path,
) -> str:
    single = len(nodes) == 1
    host = socket.gethostname().split(".")[0]
    node_list = ",".join(nodes)
    parts = [
        f"PartitionName={p} Nodes={node_list} Default={'YES' if i == 0 else 'NO'} MaxTime=INFINITE State=UP "
        "OverSubscribe=NO"
        for i, p in enumerate(PARTITIONS)
    ]
    if single:
        node_lines = [f"NodeName={nodes[0]} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={mem_mb} State=UNKNOWN"]
    else:  # several slurmd on this machine: one port each (multiple-slurmd build)
        node_lines = [
            f"NodeName={n} NodeHostname={host} NodeAddr=127.0.0.1 Port={slurmd_ports[n]} CPUs={cpus} "
            f"RealMemory={mem_mb} State=UNKNOWN"
            for n in nodes
        ]
    return "\n".join(
        [
            f"ClusterName={CLUSTER_NAME}",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={ctld_port}",
            f"SlurmdPort={slurmd_ports[nodes[0]]}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={munge_socket}",
            f"StateSaveLocation={root / 'state'}",
            f"SlurmdSpoolDir={root / 'spool'}" + ("" if single else "/%n"),
            f"SlurmctldPidFile={root / 'slurmctld.pid'}",
            f"SlurmdPidFile={root / ('slurmd.pid' if single else 'slurmd-%n.pid')}",
            f"SlurmctldLogFile={root / 'slurmctld.log'}",
            f"SlurmdLogFile={root / ('slurmd.log' if single else 'slurmd-%n.log')}",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            f"PlugStackConfig={root / 'plugstack.conf'}",
            "MpiDefault=none",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "SchedulerType=sched/backfill",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            # No slurmdbd: job completion records go to a text file that
            # `sacct --completion` reads (final state, node, exit code).
            "JobCompType=jobcomp/filetxt",
            f"JobCompLoc={root / 'jobcomp.txt'}",
            "ReturnToService=2",
            "MinJobAge=600",
            "KillWait=1",
            "OverTimeLimit=0",
            "InactiveLimit=0",
            "MessageTimeout=5",
            "SlurmctldTimeout=30",
            "SlurmdTimeout=60",
            *node_lines,
            *parts,
            "",
        ]
    )


def start_slurm(
    workdir: Optional[PathLike] = None,
    *,
    timeout: float = 60.0,
    nodes: int = 1,
    mount_namespaces: Optional[bool] = None,
) -> SlurmCluster:
    """Start munged, slurmctld and ``nodes`` slurmd in ``workdir`` (a new temporary
    directory when None) and wait until every node is idle.

    ``mount_namespaces``: start each slurmd in a mount namespace of its own
    (``unshare --mount``); None (default): when available here, True: required.

    Raises :class:`SlurmUnavailable` (with the daemons' log tails) when a
    binary is missing or the cluster does not come up within ``timeout``;
    whatever was started is stopped first.
    """
    if os.geteuid() != 0:
        raise SlurmUnavailable("the test Slurm cluster needs root (slurmd runs jobs as their user)")
    missing = [b for b in (MUNGED, SLURMCTLD, SLURMD) if not os.path.exists(b)]
    missing += [c for c in CLIENTS if shutil.which(c) is None]
    if missing:
        raise SlurmUnavailable(
            f"missing {', '.join(missing)}; install slurm-wlm and munge (scripts/install_system_deps.sh)"
        )
    if nodes < 1:
        raise ValueError(f"nodes must be >= 1, got {nodes}")
    use_ns = mount_namespaces_available() if mount_namespaces is None else mount_namespaces
    if mount_namespaces and not mount_namespaces_available():
        raise SlurmUnavailable("unshare --mount / nsenter unavailable here (util-linux, CAP_SYS_ADMIN)")
    root = Path(workdir).resolve() if workdir else Path(tempfile.mkdtemp(prefix="inferperf-slurm-"))
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)  # munged refuses group/world-writable parents of its files
    for sub in ("state", "spool", "munge", "shared"):
        (root / sub).mkdir(exist_ok=True)
    os.chmod(root / "munge", 0o700)
    os.chmod(root / "shared", 0o1777)
    (root / "plugstack.conf").write_text("")

    host = socket.gethostname().split(".")[0]
    names = [host] if nodes == 1 else [f"{host}-n{i}" for i in range(1, nodes + 1)]
    if nodes > 1:
        for name in names:
            (root / "spool" / name).mkdir(exist_ok=True)
    cpus = os.cpu_count() or 1
    mem_mb = max(1, int(_mem_mb() * 0.9))
    munge_socket = root / "munge" / "munge.socket"
    key = root / "munge" / "munge.key"
    with open(key, "wb") as f:
        f.write(os.urandom(1024))
    os.chmod(key, 0o400)

    cluster = SlurmCluster(
        root=str(root),
        conf_path=str(root / "slurm.conf"),
        node=names[0],
        nodes=names,
        mount_namespaces=use_ns,
        cpus=cpus,
        partitions=list(PARTITIONS),
        shared_dir=str(root / "shared"),
        controller_port=0,
        slurmd_port=0,
        munge_socket=str(munge_socket),
    )
    try:
        cluster.processes["munged"] = _spawn(
            [
                MUNGED,
                "--foreground",
                "--force",
                f"--socket={munge_socket}",
                f"--key-file={key}",
                f"--pid-file={root / 'munge' / 'munged.pid'}",
                f"--log-file={root / 'munged.log'}",
                f"--seed-file={root / 'munge' / 'munged.seed'}",
            ],
            root / "munged.out",
            {},
        )
        _wait_for(lambda: munge_socket.exists(), cluster, "munged", 15.0)

        cluster.controller_port = free_port()
        ports: Dict[str, int] = {}
        while len(ports) < len(names):  # distinct even if the kernel hands a port out twice
            port = free_port()
            if port != cluster.controller_port and port not in ports.values():
                ports[names[len(ports)]] = port
        cluster.node_ports = ports
        cluster.slurmd_port = ports[names[0]]
        Path(cluster.conf_path).write_text(
            _slurm_conf(root, names, cpus, mem_mb, cluster.controller_port, ports, munge_socket)
        )
        env = cluster.env
        # -i: ignore any saved state (the directory is new anyway); -D: foreground.
        cluster.processes["slurmctld"] = _spawn(
            [SLURMCTLD, "-D", "-i", "-f", cluster.conf_path], root / "slurmctld.out", env
        )
        _wait_for(
            lambda: cluster.run("sinfo", "-h", timeout=10, check=False).returncode == 0, cluster, "slurmctld", timeout
        )
        prefix = UNSHARE if use_ns else []  # unshare execs slurmd: the pid stays slurmd's
        for name in names:
            key = _slurmd_key(cluster, name)
            cluster.processes[key] = _spawn(
                [*prefix, SLURMD, "-D", "-f", cluster.conf_path, "-N", name], root / f"{key}.out", env
            )
        cluster.wait_idle(timeout)
    except BaseException:
        cluster.stop(remove=workdir is None)
        raise
    return cluster


def _spawn(argv: List[str], out: Path, env: Dict[str, str]) -> subprocess.Popen:
    with open(out, "ab") as f:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=f,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
            start_new_session=True,
        )


def _wait_for(ready, cluster: SlurmCluster, name: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc = cluster.processes[name]
        if proc.poll() is not None:
            raise SlurmUnavailable(
                f"{name} exited with status {proc.returncode} at start\n"
                f"{_tail(Path(cluster.root) / (name + '.out'))}\n{cluster.logs()}"
            )
        try:
            if ready():
                return
        except (subprocess.TimeoutExpired, OSError):
            pass
        time.sleep(0.1)
    raise SlurmUnavailable(f"{name} not ready after {timeout:.0f} s\n{cluster.logs()}")


try:  # the fixture only; the helpers above need no pytest
    import pytest
except ImportError:  # pragma: no cover
    pytest = None

if pytest is not None:

    @pytest.fixture(scope="session")
    def slurm_cluster():
        """A running :class:`SlurmCluster` for the session (skipped -- or
        failed under CI=true -- when it cannot be started)."""
        from tests.infra.docker_env import require

        try:
            cluster = start_slurm()
        except (SlurmUnavailable, OSError, subprocess.SubprocessError) as exc:
            require(False, f"Slurm test cluster unavailable: {exc}")
            return
        try:
            yield cluster
        finally:
            cluster.stop()
