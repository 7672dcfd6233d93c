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
from docker.errors import DockerException
from loguru import logger

from common.errors import HostError
from utils.case_specs import CaseSpec
from utils.executors.container_handle import ContainerHandle
from utils.executors.docker import DockerSession
from utils.executors.docker_forward import DockerOverCommand
from utils.executors.slurm import SlurmJobs, shared_dir
from utils.executors.transport import API_POOL_SIZE, LocalTransport


class SlurmTransport(LocalTransport):
    """Files through this machine's view of the shared directory; the engine through
    srun steps of the session's current job."""

    local = False
    engine_words = "the node's Docker engine (through srun)"

    def __init__(self, session: SlurmDockerSession) -> None:
        super().__init__(session.host, who="node")
        self.session = session

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
    """The Docker executor configured through its hooks (utils/executors/docker.py): the
    transport, the work folder and the page-cache drop are the job's; the engine client is
    opened and released around each job."""

    in_container = True
    uses_ssh = False  # the node's engine, through the job's steps
    runs_here = False

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.init_jobs()

    def make_transport(self) -> SlurmTransport:
        return SlurmTransport(self)

    def host_workdir(self) -> str:
        return shared_dir(self.config)

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
            self.release_engine()
            self.cancel_job()
            self.remote.remove_tree(str(log))

    def drop_page_cache(self) -> None:
        self.drop_node_page_cache()  # in the prepare job

    # ---- one case: its own job, its own engine connection ----------------------------
    def case_log_dir(self, spec: CaseSpec, local_dir: Path) -> str:
        log_dir = super().case_log_dir(spec, local_dir)  # makes runs/<run>/<node>/<case> on the shared dir
        self.submit_job(spec.key, Path(self.case_dir_on_host))
        try:
            self.connect_engine()
        except HostError:
            raise
        except Exception as exc:
            raise HostError(
                f"node {self.label}: the node's Docker engine not reachable in job {self.job_id}: {exc}"
            ) from None
        return log_dir

    def wait(self, handle: ContainerHandle, timeout: float) -> int | None:
        """A lost engine connection is most often the job's end: name it first."""
        try:
            return super().wait(handle, timeout)
        except HostError as exc:
            detail = self.job_detail()
            if detail:
                raise HostError(f"node {self.label}: {detail}; {exc}") from None
            raise

    def exit_detail(self, handle: ContainerHandle) -> str | None:
        return super().exit_detail(handle) or self.job_detail()

    def end_case(self, spec: CaseSpec | None) -> None:
        if self._job_ended():
            self._sweep_after_the_job()
            return
        super().end_case(spec)
        self.join_background()  # the removals use the job's steps: finish them first
        self.release_engine()  # its srun steps end before the job they run in
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
        self.forget_containers()
        self.release_engine()
        self.cancel_job()
        log = Path(self.run_dir) / ".sweep"
        try:
            log.mkdir(parents=True, exist_ok=True)
            self.submit_job("container sweep", log)
            self.connect_engine()
            self.sweep_run()
        except (HostError, OSError, DockerException) as exc:
            logger.warning(f"node {self.label}: the case's containers may remain until their lifetime ends: {exc}")
        finally:
            self.release_engine()
            self.cancel_job()
            self.remote.remove_tree(str(log))

    def cleanup(self) -> None:
        super().cleanup()
        self.cancel_jobs()
