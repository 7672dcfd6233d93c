"""MODE slurm with SLURM_CONTAINER: docker: the vendor container on each Slurm node.

The Docker executor's primitives (utils/executors/docker.py: image, containers,
monitors, logs, orphan sweep) with two things changed:

- the node's Docker engine is reached through the job: every Docker API
  connection is one ``srun --jobid J --overlap --unbuffered docker system
  dial-stdio`` step (``DockerOverCommand``), so the engine is only ever used from
  inside an allocation that Slurm granted on that node;
- files live in SLURM_SHARED_DIR, which this machine and the nodes both mount:
  code/, onnxs/ and runs/ are there (REMOTE_WORKDIR's layout), reached as local
  files here and bind-mounted into the containers there.

``prepare`` runs in a job of its own (engine check, orphan sweep, the image built
on the node on first use, which must fit in CASE_TIMEOUT); each case then runs in
its own job, as in the native Slurm mode (utils/executors/slurm.py, ``SlurmJobs``).
The containers are the node's Docker engine's children, not the job's: Slurm's
cgroup limits and GPU binding do not reach them (the vendor's container options
choose the devices). A job that ends under its case (time limit, scancel, node
failure) takes the engine connection with it: the case fails naming the job's end,
and a short job of its own removes the case's containers.
"""

from __future__ import annotations

from pathlib import Path

import docker
from loguru import logger

from common.errors import HostError
from utils.executors.docker import API_POOL_SIZE, JOIN_S, DockerSession, LocalTransport, one_connection_pool
from utils.executors.docker_forward import DockerOverCommand
from utils.executors.slurm import SlurmJobs
from utils.host_config import CaseSpec


class SlurmTransport(LocalTransport):
    """Files through this machine's view of the shared directory; the engine through
    srun steps of the session's current job."""

    local = False
    engine_words = "the node's Docker engine (through srun)"

    def __init__(self, session: "SlurmDockerSession") -> None:
        super().__init__(session.host)
        self.session = session

    def error(self, message: str) -> HostError:
        return HostError(f"node {self.label}: {message}")

    def open_docker(self) -> tuple[docker.DockerClient, DockerOverCommand]:
        session = self.session
        if session.job_id is None:
            raise HostError(f"node {self.label}: no Slurm job holds the node (internal error)")
        argv = session.step_argv("docker", unbuffered=True) + ["docker", "system", "dial-stdio"]
        forward = DockerOverCommand(argv, self.label)
        try:
            return docker.DockerClient(base_url=forward.base_url, timeout=120, max_pool_size=API_POOL_SIZE), forward
        except BaseException:
            forward.close()
            raise


class SlurmDockerSession(SlurmJobs, DockerSession):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.init_jobs()

    def make_transport(self) -> SlurmTransport:
        return SlurmTransport(self)

    def host_workdir(self) -> str:
        return self.config.slurm_shared_dir

    # ---- preparation: one job for the engine's part -------------------------------
    def prepare(self) -> None:
        log = Path(self.run_dir) / ".prepare"
        self.preflight_step = "slurm"
        try:
            log.mkdir(parents=True, exist_ok=True)
            self.submit_job("prepare", log)
        except OSError as exc:
            raise HostError(f"node {self.label}: cannot create {log}: {exc.strerror or exc}") from None
        try:
            super().prepare()
        finally:
            self._release_engine()
            self.cancel_job()
            self.remote.remove_tree(str(log))

    def _drop_page_cache(self) -> None:
        self.drop_node_page_cache()  # in the prepare job

    def _release_engine(self) -> None:
        """Close the client and end its srun steps (before the job they run in ends)."""
        if self.client is not None:
            self.client.close()
            self.client = None
        if self.forward is not None:
            self.forward.close()
            self.forward = None

    # ---- one case: its own job, its own engine connection ----------------------------
    def case_log_dir(self, spec: CaseSpec, local_dir: Path) -> str:
        log_dir = super().case_log_dir(spec, local_dir)  # makes runs/<run>/<node>/<case> on the shared dir
        self.submit_job(spec.key, Path(self._remote_log))
        try:
            self.client, self.forward = self.remote.open_docker()
            one_connection_pool(self.client)
            self.client.ping()
        except HostError:
            raise
        except Exception as exc:
            raise HostError(f"node {self.label}: the node's Docker engine not reachable in job {self.job_id}: {exc}") from None
        return log_dir

    def wait(self, handle, timeout: float) -> int | None:
        """A lost engine connection is most often the job's end: name it first."""
        try:
            return super().wait(handle, timeout)
        except HostError as exc:
            detail = self.job_detail()
            if detail:
                raise HostError(f"node {self.label}: {detail}; {exc}") from None
            raise

    def exit_detail(self, handle) -> str | None:
        return super().exit_detail(handle) or self.job_detail()

    def end_case(self, spec) -> None:
        if self._job_ended():
            self._sweep_after_the_job()
            return
        super().end_case(spec)
        self._join_pending()  # the removals use the job's steps: finish them first
        self._release_engine()
        self.cancel_job()

    def _job_ended(self) -> bool:
        if self.job_id is None:
            return False
        try:
            return self.slurm.state(self.job_id).final
        except HostError:
            return False

    def _sweep_after_the_job(self) -> None:
        """The job ended under the case (time limit, scancel, node failure): its steps,
        and the engine connection with them, are gone, but the containers are the
        engine's and live on. Reach the engine through a short job of its own and
        remove this run's containers there."""
        if self._precreated is not None:
            self._precreated[1].join(timeout=JOIN_S)
            self._precreated = None
        with self._lock:
            self._containers, self._stopped_cases = [], []
        self._release_engine()
        self.cancel_job()
        log = Path(self.run_dir) / ".sweep"
        try:
            log.mkdir(parents=True, exist_ok=True)
            self.submit_job("container sweep", log)
            self.client, self.forward = self.remote.open_docker()
            one_connection_pool(self.client)
            self.sweep_run()
        except (HostError, OSError) as exc:
            logger.warning(f"node {self.label}: the case's containers may remain until their lifetime ends: {exc}")
        finally:
            self._release_engine()
            self.cancel_job()
            self.remote.remove_tree(str(log))

    def cleanup(self) -> None:
        super().cleanup()
        self.cancel_jobs()
