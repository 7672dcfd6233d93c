"""MODE docker: reach the host over SSH, build/reuse the vendor image, run the case in a container.

The host is reached through a ``HostTransport`` (utils/executors/transport.py):
``SshTransport`` (paramiko: SFTP for files, the Docker API through ``docker system
dial-stdio`` channels) or, for ``HOSTS: ["localhost"]`` (or DOCKER_LOCAL: true),
``LocalTransport``: this machine's files and the local engine through the SDK, no SSH.
The session is the same for both: the lifecycle of utils/executors/base.py, these
primitives, each container held as a ``ContainerHandle`` (utils/executors/container_handle.py).

Layout on each host (REMOTE_WORKDIR, default /var/tmp/inferperf):
  code/<hash>/inference/      the code, uploaded once per version (a cache)
  onnxs/                      exported ONNX and compiled engines (a cache)
  runs/<run_id>/<host>/<case>/   the case log dir while it runs; removed after fetching
"""

from __future__ import annotations

import os
import posixpath
import threading
from pathlib import Path
from typing import Any, Callable

import docker
import requests
from docker.errors import APIError, DockerException, NotFound
from docker.models.containers import Container, _create_container_args
from loguru import logger

from common.errors import HostError, one_line
from utils.case_specs import CaseSpec
from utils.executors.base import HostSession, slug
from utils.executors.container_handle import (
    JOIN_S,
    Background,
    ContainerHandle,
    reason,
    remove_container,
    save_logs,
    stop_container,
    stop_handle,
    stream_logs,
)
from utils.executors.containers import (
    LABEL_CONTROLLER,
    LABEL_ROLE,
    LABEL_RUN,
    container_name,
    controller_gone,
    controller_id,
    merge_options,
    parse_container_options,
    vendor_container_options,
)
from utils.executors.docker_forward import EngineForward
from utils.executors.images import HostPip, ImageSpec, ensure_image, host_pip
from utils.executors.transport import HostTransport, LocalTransport, SshTransport, sync_code
from utils.host_config import HostConfig, is_local_engine
from utils.requirements import all_requirement_files

CONTAINER_ROOT = "/workspace"


# A monitor created beside the case container is started once the case's start returned, or after this
# long: the engine works through concurrent starts about one at a time, and the run waits on the case,
# whose pipeline takes longer than this to reach its own clock (its interpreter and imports).
MONITOR_START_GATE_S = 2.0


def one_connection_pool(client: docker.DockerClient) -> docker.DockerClient:
    """Make the client keep its connections.

    docker-py's unix-socket adapter keys its connection pools by the request's URL,
    so every new path (``/containers/<id>/start``, ``.../wait``, ``.../json``) opens
    a new connection: through ``DockerOverSsh`` that is a new SSH channel and a new
    ``docker system dial-stdio`` process on the host for nearly every API call. One
    pool (the one the client's version request already opened) serves them all."""
    adapter = client.api.get_adapter(client.api.base_url)
    pools = getattr(adapter, "pools", None)
    if pools is None or not hasattr(adapter, "get_connection"):
        return client  # tcp:// (requests' own pool manager keys by host already)
    # Proxies mean nothing on a unix socket; without this every request scans the
    # environment for them (requests' trust_env), a few milliseconds of CPU each.
    client.api.trust_env = False
    original = adapter.get_connection
    with pools.lock:
        keys = list(pools.keys())
    key = keys[0] if keys else "http+docker://localhost"
    adapter.get_connection = lambda url, proxies=None: original(key, proxies)
    return client


class DockerSession(HostSession[ContainerHandle]):
    """MODE docker's executor: the lifecycle's primitives on a host's Docker engine.

    A subclass configures it for another way to reach hosts (utils/executors/slurm_docker.py)
    through these documented hooks and calls, never through its private fields:

    - ``make_transport()``: the ``HostTransport`` to the host (default: SSH, or this machine);
    - ``host_workdir()``: the host's folder for code/, onnxs/ and runs/ (default REMOTE_WORKDIR);
    - ``drop_page_cache()``: CLEAR_CACHES on the host (default: a command through the transport);
    - ``connect_engine()`` / ``release_engine()``: open (and ping) or close the engine client;
    - ``forget_containers()``: drop the handles of containers whose engine connection is gone;
    - ``join_background()``: wait for the stops and removals under way;
    - ``case_dir_on_host``: the current case's log folder on the host.
    """

    in_container = True
    uses_ssh = True
    runs_here = False

    @classmethod
    def create(
        cls, config: HostConfig, host_index: int, run_id: str, abort: threading.Event, run_dir: Path
    ) -> DockerSession:
        return cls(config, host_index, run_id, abort, build_log_dir=run_dir)

    def __init__(self, *args, build_log_dir: Path, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        config = self.config
        self.remote: HostTransport = self.make_transport()
        self.build_log_dir = build_log_dir
        self.forward: EngineForward | None = None
        self.client: docker.DockerClient | None = None
        self.image: str | None = None
        self.code_dir: str | None = None
        self.user: str | None = None
        self.case_dir_on_host = ""  # the current case's log folder on the host
        self._lock = threading.Lock()
        self._containers: list[Container] = []
        self._pending: list[threading.Thread] = []  # stops and removals under way
        self._precreated: tuple[dict, Background] | None = None  # the case container, created early
        self._image_spec: Background | None = None  # image_spec(), started as prepare() starts
        self._case_started = threading.Event()  # the monitors' starts wait for it (MONITOR_START_GATE_S)
        self._stopped_cases: list[ContainerHandle] = []
        self._closed = False
        self.workdir = self.host_workdir()
        self.run_dir = posixpath.join(self.workdir, "runs", slug(self.run_id), slug(self.label))
        opts = parse_container_options(config.container_opt, str(config.path))
        self.container_options = merge_options(opts, vendor_container_options(config.flagperf_path, config.vendor))

    # ---- hooks a subclass may replace -----------------------------------------------------
    def make_transport(self) -> HostTransport:
        """How this session reaches its host."""
        config = self.config
        if is_local_engine(config, self.host):
            return LocalTransport(self.host)
        return SshTransport(
            self.host, config.ssh_user, config.ssh_key_file, config.known_hosts, config.trust_on_first_use
        )

    def host_workdir(self) -> str:
        """The folder on the host that holds code/, onnxs/ and runs/ (layout above)."""
        return self.config.remote_workdir

    # ---- preparation --------------------------------------------------------
    def prepare(self) -> None:
        """Connect, then two independent halves side by side: the engine (version, orphans,
        image) on this thread, the files (data dirs, user, code) on another. A failure is
        reported at the first step in the order ssh, docker, data, code, image."""
        self.preflight_step = "ssh"
        # The image's tag needs this machine's pip configuration (a Python process): found while SSH connects.
        self._image_spec = Background(lambda _: image_spec(self.config, self.label), f"image-spec-{self.label}")
        self.remote.connect()
        if self.remote.local:  # this machine: a missing data dir is known at once, not after an image build
            self.preflight_step = "data"
            self._check_data_dirs()
        files = Background(self._prepare_files, f"prepare-{self.label}")
        step: str | None
        error: HostError | None
        try:
            self.preflight_step = "docker"
            self._open_engine()  # and sweep what a dead run.py left
            self.preflight_step = "image"
            self.image = self._ensure_image()
        except HostError as exc:
            step, error = self.preflight_step, exc
        else:
            step, error = None, None
        files_error = files.join()
        if isinstance(files_error, HostError) and (step is None or step == "image"):
            step, error = files.step, files_error
        elif files_error is not None and error is None:
            raise files_error
        if error is not None:
            self.preflight_step = step
            raise error
        self.preflight_step = None

    def _open_engine(self) -> None:
        try:
            self.connect_engine()
        except (DockerException, requests.RequestException) as exc:
            where = self.remote.engine_words
            raise HostError(
                f"host {self.label}: {where} not reachable ({reason(exc)}); is dockerd running and the docker CLI "
                "installed?"
            ) from None
        self.sweep_orphans()

    def connect_engine(self) -> None:
        """Open a client of the host's engine (one connection pool) and ping it; the SDK's
        errors pass through for the caller to word."""
        self.client, self.forward = self.remote.open_docker()
        one_connection_pool(self.client)
        self.client.ping()

    @property
    def engine(self) -> docker.DockerClient:
        """The engine client ``connect_engine`` opened; HostError when none is open."""
        if self.client is None:
            raise HostError(f"host {self.label}: not connected to the Docker engine")
        return self.client

    def release_engine(self) -> None:
        """Close the engine client and what forwards its connections (idempotent)."""
        if self.client is not None:
            self.client.close()
        if self.forward is not None:
            self.forward.close()
        self.client = self.forward = None

    def _prepare_files(self, progress: Background) -> None:
        progress.step = "data"
        self._check_data_dirs()
        self.remote.makedirs(self.run_dir)
        self.user = self.remote.user_ids(self.run_dir)
        if self.config.clear_caches:
            self.drop_page_cache()
        progress.step = "code"
        self._sync_code()

    def _check_data_dirs(self) -> None:
        for spec in self.config.cases:
            if not self.remote.is_dir(spec.data_dir):
                raise HostError(f"host {self.label}: data dir {spec.data_dir} for {spec.key} does not exist")

    def drop_page_cache(self) -> None:
        """CLEAR_CACHES: drop the host's page cache (root only; otherwise one warning)."""
        result = self.remote.run(["sh", "-c", "sync && echo 3 > /proc/sys/vm/drop_caches"], timeout=120, check=False)
        if result.exit_code != 0:
            logger.warning(f"host {self.label}: CLEAR_CACHES: cannot drop the page cache (needs root)")

    def _sync_code(self) -> None:
        """Upload inference/ once per code version; an existing complete copy is reused."""
        copy = sync_code(self.remote, self.config.flagperf_path, self.workdir)
        self.code_dir = copy.inference_dir
        if copy.copied is None:
            logger.info(f"host {self.label}: code version {copy.version} already present")
        else:
            logger.info(f"host {self.label}: uploaded code version {copy.version} ({copy.copied} files)")
        self.remote.makedirs(posixpath.join(self.workdir, "onnxs"))

    def _ensure_image(self) -> str:
        if self._image_spec is None:
            self._image_spec = Background(lambda _: image_spec(self.config, self.label), f"image-spec-{self.label}")
        error = self._image_spec.join()
        if error is not None:
            raise error
        spec: ImageSpec = self._image_spec.value
        log = self.build_log_dir / f"build_{slug(self.label)}.log"
        tag, _ = ensure_image(self.engine, spec, self.label, log, self.abort)
        return tag

    # ---- the lifecycle's primitives (utils/executors/base.py) ------------------------------
    def perf_dir(self) -> str:
        return f"{CONTAINER_ROOT}/inference"

    def data_dir(self, spec: CaseSpec) -> str:
        return f"{CONTAINER_ROOT}/data"

    def case_log_dir(self, spec: CaseSpec, local_dir: Path) -> str:
        self.case_dir_on_host = posixpath.join(self.run_dir, slug(spec.key))
        self.remote.makedirs(self.case_dir_on_host)
        return f"{CONTAINER_ROOT}/log"

    def start(
        self, role: str, argv: list[str], spec: CaseSpec, env: dict[str, str], stdout: Path | None
    ) -> ContainerHandle:
        """A monitor is created and started in the background (the two monitors and the
        case container's creation overlap); its first wait() reports a failed start. The case container, created
        meanwhile with the same command line, only needs starting: its creation is asked for first, since the
        engine works through concurrent creations about one at a time and the case is what the run waits on."""
        if role != "case":
            if self._precreated is None:
                self._precreate_case(spec, env)
            handle = ContainerHandle(self.label, role, poll=True)
            handle.starting = Background(
                lambda _: self._create_and_start(handle, role, argv, spec, env), f"start-{role}"
            )
            return handle
        handle = ContainerHandle(self.label, role, poll=False)
        handle.stdout = stdout
        self._create_and_start(handle, role, argv, spec, env)
        echo = self.echo_for(spec)
        if stdout is not None and echo is not None:  # --verbose: the lines as they come
            handle.streamer = threading.Thread(target=stream_logs, args=(handle, echo), daemon=True)
            handle.streamer.start()
        handle.watch()
        return handle

    def _container_arguments(self, role: str, argv: list[str], spec: CaseSpec, env: dict[str, str]) -> dict:
        volumes = {
            self.code_dir: {"bind": f"{CONTAINER_ROOT}/inference", "mode": "ro"},
            self.case_dir_on_host: {"bind": f"{CONTAINER_ROOT}/log", "mode": "rw"},
        }
        if role == "case":
            onnxs = posixpath.join(self.workdir, "onnxs")
            volumes[spec.data_dir] = {"bind": f"{CONTAINER_ROOT}/data", "mode": "ro"}
            volumes[onnxs] = {"bind": f"{CONTAINER_ROOT}/inference/onnxs", "mode": "rw"}
        options = dict(self.container_options)
        environment = {"HOME": "/tmp", **env, **options.pop("environment", {})}
        env_name = self.config.visible_device_env
        if env_name and os.environ.get(env_name) is not None:
            environment[env_name] = os.environ[env_name]
        return dict(
            image=self.image,
            command=list(argv),
            name=container_name(self.run_id, self.label, spec.key, role),
            network_mode="host",
            shm_size=self.config.shm_size,
            working_dir=f"{CONTAINER_ROOT}/inference",
            volumes=volumes,
            environment=environment,
            user=self.user,
            labels={LABEL_RUN: self.run_id, LABEL_ROLE: role, LABEL_CONTROLLER: controller_id()},
            version=self.engine.api._version,
            **options,
        )

    def _create(self, role: str, arguments: dict) -> Container:
        """containers.run() is create + inspect + start; the inspect is not needed."""
        name = arguments["name"]
        try:
            created = self.engine.api.create_container(**_create_container_args(dict(arguments)))
        except (APIError, requests.RequestException) as exc:
            raise HostError(f"host {self.label}: Docker could not create the {role} container: {reason(exc)}") from None
        container = self.engine.containers.prepare_model({"Id": created["Id"], "Name": f"/{name}"})
        with self._lock:
            self._containers.append(container)  # removed by end_case/cleanup even if it never starts
        return container

    def _precreate_case(self, spec: CaseSpec, env: dict[str, str]) -> None:
        self._case_started.clear()
        argv = self.pipeline_argv(f"{CONTAINER_ROOT}/log", spec)
        arguments = self._container_arguments("case", argv, spec, env)
        self._precreated = (arguments, Background(lambda _: self._create("case", arguments), "create-case"))

    def _create_and_start(
        self, handle: ContainerHandle, role: str, argv: list[str], spec: CaseSpec, env: dict[str, str]
    ) -> None:
        arguments = self._container_arguments(role, argv, spec, env)
        container = None
        if role == "case" and self._precreated is not None:
            early, creating = self._precreated
            self._precreated = None
            error = creating.join()
            if error is None and early == arguments:
                container = creating.value
            elif error is None:
                remove_container(creating.value)  # the command line changed: start afresh
        if container is None:
            container = self._create(role, arguments)
        handle.container = container
        if role != "case":  # the engine starts containers about one at a time: the case's first
            self._case_started.wait(MONITOR_START_GATE_S)
        try:
            self.engine.api.start(container.id)
        except (APIError, requests.RequestException) as exc:
            raise HostError(f"host {self.label}: Docker could not start the {role} container: {reason(exc)}") from None
        finally:
            if role == "case":
                self._case_started.set()

    def wait(self, handle: ContainerHandle, timeout: float) -> int | None:
        handle.started()
        code = handle.result(timeout)
        if code is not None and handle.stdout is not None:
            if handle.streamer is not None:
                handle.streamer.join(timeout=10)
            else:
                save_logs(handle)
        return code

    def stop(self, handle: ContainerHandle) -> None:
        """Ask the engine to stop it (SIGTERM, SIGKILL after STOP_TIMEOUT_S) without waiting:
        the monitors stop side by side, and fetch() waits for every stop under way before it
        reads the files they wrote."""
        if handle.stdout is not None:
            self._stopped_cases.append(handle)
        if handle.done():
            return  # exited already (the pipeline, a dead monitor): nothing to stop
        self._background(stop_handle, handle, f"stop-{handle.role}")

    def output_tail(self, handle: ContainerHandle) -> str:
        if handle.container is None:
            return ""
        try:
            lines = handle.container.logs(stdout=False, stderr=True).decode(errors="replace").strip().splitlines()
        except (NotFound, APIError, requests.RequestException):
            return ""
        return lines[-1].strip() if lines else ""

    def exit_detail(self, handle: ContainerHandle) -> str | None:
        if handle.container is None:
            return None
        try:
            handle.container.reload()
        except (NotFound, APIError, requests.RequestException):
            return None
        return "oom" if handle.container.attrs.get("State", {}).get("OOMKilled") else None

    def fetch(self, spec: CaseSpec, log_dir: str, local_dir: Path) -> None:
        self.join_background()
        if self.remote.connected and not self.remote.alive:
            self._reconnect()
        for handle in self._stopped_cases:  # a pipeline stopped (timeout, interrupt): its output so far
            if handle.stdout is not None and handle.streamer is None and not handle.logs_saved:
                save_logs(handle)
        self._stopped_cases = []
        try:
            names = self.remote.get_files(self.case_dir_on_host, local_dir)
        except (OSError, EOFError) as exc:
            raise HostError(f"host {self.label}: fetching {self.case_dir_on_host} failed: {exc}") from None
        try:
            self.remote.remove_files(self.case_dir_on_host, names)
        except (OSError, EOFError):
            # Something besides plain files (a folder the pipeline made): cleanup() removes
            # the whole run dir with one command.
            pass

    def _reconnect(self) -> None:
        """The connection dropped under the case (network, sshd restart): the case has failed,
        but its containers live on in the host's engine. A new connection (host key checked
        again) stops and removes them, so that the files can be fetched and the next case
        starts clean; if the host stays unreachable they end by their own lifetime."""
        stopped = self.forget_containers()
        self.release_engine()
        self.remote.close()
        try:
            self.remote.connect()
            self._open_engine()
        except HostError as exc:
            logger.warning(
                f"host {self.label}: the case's containers may run on until their lifetime ends: {one_line(exc)}"
            )
            return
        for handle in stopped:  # the pipeline's output up to the drop, through the new connection
            if handle.container is not None and handle.stdout is not None and handle.streamer is None:
                handle.container = self.engine.containers.prepare_model(
                    {"Id": handle.container.id, "Name": f"/{handle.container.name}"}
                )
                save_logs(handle)
        self.sweep_run()
        logger.warning(f"host {self.label}: reconnected after the lost connection and removed the case's containers")

    def end_case(self, spec: CaseSpec | None) -> None:
        """Remove the case's containers in the background (the next case need not wait);
        cleanup() waits for the removals."""
        self._settle_precreated()
        with self._lock:
            containers, self._containers = self._containers, []
        self._stopped_cases = []
        for container in containers:
            self._background(remove_container, container, f"rm-{container.name}")

    def _settle_precreated(self) -> None:
        """Wait for the early creation of the case container, so that it is in the list."""
        if self._precreated is not None:
            self._precreated[1].join(timeout=JOIN_S)
            self._precreated = None

    def forget_containers(self) -> list[ContainerHandle]:
        """The engine connection is gone (a dropped SSH connection, a Slurm job's end): drop the
        handles of the case's containers (the engine still has them: ``sweep_run`` through a new
        connection removes them) and return the stopped pipelines, whose output is still to save."""
        self._settle_precreated()
        with self._lock:
            self._containers, stopped, self._stopped_cases = [], self._stopped_cases, []
        return stopped

    # ---- teardown ---------------------------------------------------------------
    def _background(self, target: Callable[[Any], None], item: Any, name: str) -> None:
        thread = threading.Thread(target=target, args=(item,), name=name, daemon=True)
        with self._lock:
            self._pending = [t for t in self._pending if t.is_alive()] + [thread]
        thread.start()

    def join_background(self, timeout: float = JOIN_S) -> None:
        """Wait for the stops and removals under way (each at most ``timeout`` seconds)."""
        with self._lock:
            pending = list(self._pending)
        for thread in pending:
            thread.join(timeout=timeout)

    def _remove_all(self) -> None:
        self.end_case(None)
        self.join_background()

    def interrupt(self) -> None:
        with self._lock:
            containers = list(self._containers)
        for container in containers:
            self._background(stop_container, container, f"stop-{container.name}")
        self.join_background()

    def sweep_orphans(self) -> None:
        """Remove containers left by an earlier run.py on this machine that died without
        cleaning up (SIGKILL, power loss): their controller label names a pid that is gone."""
        try:
            containers = self.engine.containers.list(all=True, ignore_removed=True, filters={"label": LABEL_CONTROLLER})
        except (DockerException, requests.RequestException):
            return
        for container in containers:
            owner = container.labels.get(LABEL_CONTROLLER, "")
            if not controller_gone(owner):
                continue
            pid = owner.rpartition(":")[2]
            try:
                container.remove(force=True)
                logger.warning(
                    f"host {self.label}: removed {container.name}, left running by a run.py (pid {pid}) that died"
                )
            except (DockerException, requests.RequestException):
                pass

    def sweep_run(self) -> None:
        """Remove every container of this run and host on the engine, by label and name."""
        try:  # ignore_removed: a container removed between the listing and its inspection is not an error
            containers = self.engine.containers.list(
                all=True,
                ignore_removed=True,
                filters={"label": f"{LABEL_RUN}={self.run_id}", "name": f"-{slug(self.label)}-"},
            )
        except (DockerException, requests.RequestException) as exc:
            logger.warning(f"host {self.label}: container sweep failed: {reason(exc)}")
            return
        for container in containers:  # one that went away meanwhile does not stop the sweep of the others
            try:
                container.remove(force=True)
            except NotFound:
                continue
            except (DockerException, requests.RequestException) as exc:
                logger.warning(f"host {self.label}: could not remove {container.name}: {reason(exc)}")

    def cleanup(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self.client is not None:
            self._remove_all()
            self.sweep_run()
            if self.remote.local and self.workdir:  # this machine's engine: its cache is here
                from utils.executors.local import sweep_killed_writers

                sweep_killed_writers(self.label, Path(self.workdir) / "onnxs")
        if self.remote.connected:
            try:
                # Each case's files were fetched and removed: the run dir is empty, and one
                # rmdir suffices; anything left in it takes one rm -rf.
                if self.remote.exists(self.run_dir) and not self.remote.rmdir(self.run_dir):
                    self.remote.remove_tree(self.run_dir)
                self.remote.rmdir(posixpath.dirname(self.run_dir))  # fails while other hosts' dirs remain
            except (HostError, OSError, EOFError) as exc:
                logger.warning(f"host {self.label}: removing {self.run_dir} failed: {exc}")
        self.release_engine()
        self.remote.close()


def image_spec(config: HostConfig, label: str) -> ImageSpec:
    """The image the cases of ``config`` run in on host ``label``: its folder, build arguments and extra context."""
    # FlagPerf's docker_images/<vendor>/<framework>/, or the folder the cases' engine declares (CaseSpec.image).
    folders = {s.image_folder for s in config.cases}
    if len(folders) != 1:
        raise HostError(
            f"host {label}: one run builds one image; CASES needs the images of docker_images/"
            f"{config.vendor}/ {sorted(folders)} (their frameworks, or their engines' own)"
        )
    folder = folders.pop()
    buildargs: dict[str, str] = {}
    if config.base_image:
        buildargs["BASE_IMAGE"] = config.base_image
    # This machine's pip configuration, unless host.yaml turns it off or sets a value itself.
    pip = host_pip() if config.host_pip_config else HostPip()
    index_url = config.pip_source or pip.index_url
    if index_url:
        buildargs["PIP_INDEX_URL"] = index_url
    if pip.extra_index_urls:
        buildargs["PIP_EXTRA_INDEX_URL"] = " ".join(pip.extra_index_urls)
    if pip.trusted_hosts:
        buildargs["PIP_TRUSTED_HOST"] = " ".join(pip.trusted_hosts)
    wheels = Path(config.pip_wheels_dir) if config.pip_wheels_dir else None
    ca_bundle = Path(config.ca_bundle) if config.ca_bundle else pip.cert
    if config.host_pip_config:  # a pip that could not be read is said louder: the build may then fail for it
        (logger.warning if pip.failure else logger.debug)(
            f"host {label}: the image build inherits this machine's pip configuration ({pip.describe()}"
            + (f"; not reachable from a build: {', '.join(pip.unusable)}" if pip.unusable else "")
            + "); host.yaml's PIP_SOURCE, PIP_WHEELS_DIR and CA_BUNDLE win, HOST_PIP_CONFIG: false turns it off"
        )
    layered = [s.case for s in config.cases if s.image is None]
    return ImageSpec(
        vendor=config.vendor,
        framework=folder,
        folder=config.flagperf_path / "docker_images" / config.vendor / folder,
        buildargs=buildargs,
        wheels_dir=wheels,
        ca_bundle=ca_bundle,
        # Only the requirements of this run's cases go into the image's case layer; an engine's own image
        # holds all its cases run with (contract/registry.py, EngineFacts.image).
        requirements=tuple(all_requirement_files(config.flagperf_path, folder, cases=layered)) if layered else (),
        wheels_dirs=() if wheels is not None else pip.find_links,
        backend_requirements=config.backend_requirements,
    )
