"""MODE slurm: each case x node runs as a Slurm job, under the same lifecycle as every executor.

The primitives of utils/executors/base.py on a Slurm cluster (utils/executors/slurm_client.py talks to it):

- ``case_log_dir``: submit the case's job (``sbatch``, one node from HOSTS by
  name, partition, account, GPUs per node; the time limit is CASE_TIMEOUT plus
  a margin, rounded up to Slurm's minutes) and wait until it RUNS, at most
  SLURM_PENDING_TIMEOUT. The job only holds the allocation.
- ``start``: a job step in that allocation, ``srun --jobid J --overlap`` with the
  monitor's or the pipeline's command line; srun runs here and streams the
  step's output back, so waiting and stopping are those of a local process.
- ``fetch``: the case's files come back through SLURM_SHARED_DIR, which this
  machine and the nodes both mount; ``end_case`` cancels the job (``scancel``),
  which also ends any step left on the node.

The code is copied once per version into SLURM_SHARED_DIR/code/<hash>/inference
(the nodes run it natively with SLURM_PYTHON, ``SLURM_CONTAINER: none``; for
``SLURM_CONTAINER: docker`` see utils/executors/slurm_docker.py).
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from loguru import logger

from common.errors import ConfigError, HostError
from utils.case_specs import CaseSpec
from utils.executors.base import slug
from utils.executors.local import ChildProcess, LocalSession
from utils.executors.slurm_client import BatchJob, SlurmClient
from utils.executors.transport import LocalTransport, sync_code
from utils.host_config import Host, HostConfig

JOB_MARGIN_S = 120.0  # the job outlives CASE_TIMEOUT by this much: monitors stop, files flush
PROBE_TIMEOUT_S = 120.0
PROBE_PARALLEL = 16  # probe jobs in flight at once
JOB_STATE_WAIT_S = 10.0  # how long a step's end may precede its job's final state


def shared_dir(config: HostConfig) -> str:
    """SLURM_SHARED_DIR, which utils/host_config.py requires in MODE slurm."""
    if config.slurm_shared_dir is None:
        raise ConfigError(f"{config.path}: key 'SLURM_SHARED_DIR' is required in MODE slurm")
    return config.slurm_shared_dir


def slurm_client(config: HostConfig) -> SlurmClient:
    return SlurmClient(env=os.environ)


def check_slurm(config: HostConfig) -> None:
    """Before anything is submitted: sbatch present, controller reachable, partition known,
    and SLURM_SHARED_DIR visible from every node in HOSTS (a probe job per node writes a
    file there; the probes run side by side). Raises ConfigError (exit 2) naming the key
    or node, the first in HOSTS order."""
    client = slurm_client(config)
    client.check(config.slurm_partition)
    with ThreadPoolExecutor(max_workers=min(len(config.hosts), PROBE_PARALLEL), thread_name_prefix="probe") as pool:
        errors = list(pool.map(lambda host: _probe_node(config, client, host.address), config.hosts))
    for error in errors:
        if error is not None:
            raise error


def _probe_node(config: HostConfig, client: SlurmClient, node: str) -> ConfigError | None:
    shared = Path(shared_dir(config))
    target = shared / f".probe-{slug(node)}-{secrets.token_hex(4)}"
    if config.slurm_container == "docker":  # the node needs docker, not a Python (checked in prepare)
        argv = ["sh", "-c", 'printf ok > "$1"', "sh", str(target)]
    else:
        argv = [
            config.slurm_python,
            "-c",
            "import pathlib, sys; pathlib.Path(sys.argv[1]).write_text('ok')",
            str(target),
        ]
    try:
        job = client.submit(
            BatchJob(
                argv,
                job_name="inferperf-probe",
                output_path=os.devnull,
                workdir=str(shared),
                partition=config.slurm_partition,
                account=config.slurm_account,
                time_limit_s=60,
                nodelist=node,
            )
        )
        state = client.wait(job, timeout_s=PROBE_TIMEOUT_S, pending_timeout_s=config.slurm_pending_timeout)
    except HostError as exc:
        return ConfigError(f"{config.path}: key 'HOSTS' entry {node!r}: the probe job failed: {exc}")
    try:
        seen = target.read_text() == "ok"
        target.unlink()
    except OSError:
        seen = False
    if not seen:
        return ConfigError(
            f"{config.path}: key 'SLURM_SHARED_DIR': {shared} is not shared with node {node} "
            f"(a probe job there {state.describe()}, and its file did not appear here)"
        )
    return None


class SlurmJobs:
    """The job a case runs in, shared by both ways of running on Slurm (natively:
    SlurmSession below; in the vendor container: utils/executors/slurm_docker.py).

    ``submit_job`` holds an allocation on the host's node (a ``sleep`` job with the
    time limit CASE_TIMEOUT plus a margin) and waits until it RUNS, at most
    SLURM_PENDING_TIMEOUT; ``job_detail`` names its end when it ended first; every
    job submitted is cancelled by ``cancel_job`` or, at the latest, ``cancel_jobs``."""

    config: HostConfig
    host: Host
    label: str
    abort: threading.Event

    @classmethod
    def check_config(cls, config: HostConfig) -> None:
        """The scheduler and the nodes, before any job is submitted (``check_slurm``)."""
        check_slurm(config)

    def init_jobs(self) -> None:
        self.slurm = slurm_client(self.config)
        self.shared = Path(shared_dir(self.config))
        self.job_id: str | None = None
        self._jobs: set[str] = set()
        self._job_lock = threading.Lock()

    @property
    def node(self) -> str:
        return self.host.address

    def submit_job(self, name: str, log: Path) -> str:
        config = self.config
        job = self.slurm.submit(
            BatchJob(
                ["sleep", str(int(config.case_timeout + JOB_MARGIN_S))],
                job_name=f"inferperf-{slug(name)}",
                output_path=str(log / "slurm-job.out"),
                workdir=str(log),
                partition=config.slurm_partition,
                account=config.slurm_account,
                time_limit_s=config.case_timeout + JOB_MARGIN_S,
                gpus_per_node=config.slurm_gpus_per_node,
                nodelist=self.node,
            )
        )
        with self._job_lock:
            self.job_id = job
            self._jobs.add(job)
        state = self.slurm.wait_running(job, config.slurm_pending_timeout, self.abort)
        logger.info(f"node {self.label}: {name} runs in slurm job {job} on node {state.node}")
        return job

    def step_argv(self, name: str, chdir: str | None = None, unbuffered: bool = False) -> list[str]:
        """``srun`` running one task as a step of the current job (``--overlap``: beside
        the job's sleep and the other steps); the command follows."""
        argv = ["srun", f"--jobid={self.job_id}", "--overlap", "--ntasks=1", "--nodes=1", f"--nodelist={self.node}"]
        if chdir is not None:
            argv.append(f"--chdir={chdir}")
        if unbuffered:
            argv.append("--unbuffered")  # byte streams (the Docker API), not lines
        return argv + ["--export=ALL", "--quiet", f"--job-name={name}", "--"]

    def drop_node_page_cache(self) -> None:
        """CLEAR_CACHES on the node, as a step of the current job (never on this machine)."""
        argv = self.step_argv("drop-caches") + ["sh", "-c", "sync && echo 3 > /proc/sys/vm/drop_caches"]
        try:
            done = subprocess.run(
                argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=120, start_new_session=True
            )
            ok = done.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if not ok:
            logger.warning(f"node {self.label}: CLEAR_CACHES: cannot drop the page cache (needs root on the node)")

    def job_detail(self) -> str | None:
        """The job's end when it ended (time limit, node failure, cancelled): the steps end
        with it, a moment before slurmctld records the state, so look for a few seconds."""
        if self.job_id is None:
            return None
        started = time.monotonic()
        while True:
            try:
                state = self.slurm.state(self.job_id)
            except HostError:
                return None
            if state.final:
                return state.describe()
            waited = time.monotonic() - started
            if waited >= JOB_STATE_WAIT_S or (state.state == "RUNNING" and waited >= 2.0):
                return None  # the job lives on: the pipeline ended by itself
            time.sleep(0.5)

    def cancel_job(self) -> None:
        with self._job_lock:
            job, self.job_id = self.job_id, None
        if job is not None:
            self._cancel(job)

    def _cancel(self, job: str) -> None:
        try:
            self.slurm.cancel(job)
        except HostError as exc:
            logger.warning(f"node {self.label}: {exc}")
        with self._job_lock:
            self._jobs.discard(job)

    def cancel_jobs(self) -> None:
        with self._job_lock:
            jobs = list(self._jobs)
        for job in jobs:
            self._cancel(job)


class SlurmSession(SlurmJobs, LocalSession):
    """MODE slurm's executor. Inherits the local process primitives (srun runs on this machine)
    and adds the job; the pipeline runs natively on the node. With SLURM_CONTAINER: docker the
    registry picks ``SlurmDockerSession`` instead (utils/executors/slurm_docker.py)."""

    in_container = False
    uses_ssh = False
    runs_here = False

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.init_jobs()
        self.python = self.config.slurm_python
        self.run_root = self.shared / "runs" / slug(self.run_id) / slug(self.label)
        self.code_dir: Path | None = None
        self._caches_dropped = False

    # ---- host ---------------------------------------------------------------------
    def prepare(self) -> None:
        self.preflight_step = "data"
        for spec in self.config.cases:
            if not Path(spec.data_dir).is_dir():
                raise HostError(
                    f"node {self.label}: data dir {spec.data_dir} for {spec.key} is not visible here (it must be "
                    "shared with the nodes)"
                )
        self.preflight_step = "code"
        self.code_dir = self._sync_code()
        self.run_root.mkdir(parents=True, exist_ok=True)
        self.preflight_step = None

    def _sync_code(self) -> Path:
        """inference/ copied once per version into the shared directory (atomic rename)."""
        copy = sync_code(LocalTransport(self.host, who="node"), self.config.flagperf_path, str(self.shared))
        if copy.copied is not None:
            logger.info(f"node {self.label}: code version {copy.version} copied to {Path(copy.inference_dir).parent}")
        return Path(copy.inference_dir)

    def perf_dir(self) -> str:
        return str(self.code_dir)

    def data_dir(self, spec: CaseSpec) -> str:
        return spec.data_dir

    def parent_pid(self) -> int | None:
        return None  # the steps' parent on the node is slurmstepd, not run.py

    # ---- one case -----------------------------------------------------------------
    def case_log_dir(self, spec: CaseSpec, local_dir: Path) -> str:
        log = self.run_root / slug(spec.key)
        log.mkdir(parents=True, exist_ok=True)
        self._log_dir = log
        self.submit_job(spec.key, log)
        if self.config.clear_caches and not self._caches_dropped:
            self.drop_node_page_cache()  # once per node and run, like the other executors
            self._caches_dropped = True
        return str(log)

    def start(
        self, role: str, argv: list[str], spec: CaseSpec, env: dict[str, str], stdout: Path | None
    ) -> ChildProcess:
        return super().start(role, self.step_argv(role, chdir=self.perf_dir()) + argv, spec, env, stdout)

    def exit_detail(self, handle: ChildProcess) -> str | None:
        return self.job_detail()

    def fetch(self, spec: CaseSpec, log_dir: str, local_dir: Path) -> None:
        source = Path(log_dir)
        try:
            for path in source.iterdir():
                if path.is_file():
                    shutil.copy2(path, local_dir / path.name)
            shutil.rmtree(source, ignore_errors=True)
        except OSError as exc:
            raise HostError(f"node {self.label}: fetching {source} failed: {exc.strerror or exc}") from None
        super().fetch(spec, log_dir, local_dir)

    def end_case(self, spec: CaseSpec | None) -> None:
        self.cancel_job()

    def cleanup(self) -> None:
        super().cleanup()
        self.cancel_jobs()
        shutil.rmtree(self.run_root, ignore_errors=True)
        try:
            self.run_root.parent.rmdir()
        except OSError:
            pass
