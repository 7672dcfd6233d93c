"""MODE docker: reach the host over SSH, build/reuse the vendor image, run the case in a container.

The host is reached through a transport: ``SshTransport`` (paramiko: SFTP for files,
the Docker API through ``docker system dial-stdio`` channels) or, for
``HOSTS: ["localhost"]`` (or DOCKER_LOCAL: true), ``LocalTransport``: this machine's
files and the local engine through the SDK (``docker.from_env()``), no SSH. The
session is the same for both: the lifecycle of utils/executors/base.py, these primitives.

Layout on each host (REMOTE_WORKDIR, default /var/tmp/inferperf):
  code/<hash>/inference/      the code, uploaded once per version (a cache)
  onnxs/                      exported ONNX and compiled engines (a cache)
  runs/<run_id>/<host>/<case>/   the case log dir while it runs; removed after fetching
"""

from __future__ import annotations

import os
import posixpath
import secrets
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import threading
import time
from pathlib import Path

import docker
import requests
from docker.errors import APIError, DockerException, NotFound
from docker.models.containers import _create_container_args
from loguru import logger

from common.errors import HostError, one_line
from common.files import hash_tree
from utils.executors.base import HostSession, slug
from utils.executors.containers import (
    LABEL_CONTROLLER,
    LABEL_ROLE,
    LABEL_RUN,
    container_name,
    merge_options,
    parse_container_options,
    vendor_container_options,
)
from utils.executors.docker_forward import DockerOverSsh
from utils.executors.images import ImageSpec, ensure_image
from utils.executors.ssh import CommandResult, SshHost
from utils.host_config import is_local_engine
from utils.requirements import all_requirement_files

CONTAINER_ROOT = "/workspace"
CODE_SKIP = ("onnxs", "result", "__pycache__", ".pytest_cache")
WAIT_SLICE_S = 60
STOP_TIMEOUT_S = 10
JOIN_S = STOP_TIMEOUT_S + 30  # how long teardown waits for a stop or removal still under way
API_POOL_SIZE = 16  # concurrent Docker API connections per host (waits, log streams, calls)


def code_version(perf_dir: Path) -> str:
    """Hash exactly what _sync_code uploads."""
    return hash_tree([perf_dir], suffixes=None, skip_dirs=CODE_SKIP, relative_to_parent=False)[:16]


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


class SshTransport(SshHost):
    """A host reached over SSH: SshHost plus the few file operations the session uses,
    each one SFTP request."""

    local = False
    engine_words = "Docker engine"

    @property
    def connected(self) -> bool:
        return self.client is not None

    @property
    def alive(self) -> bool:
        """The SSH connection still carries traffic (False after a drop the lifecycle saw)."""
        transport = self.client.get_transport() if self.client is not None else None
        return transport is not None and transport.is_active()

    def open_docker(self) -> tuple[docker.DockerClient, DockerOverSsh]:
        forward = DockerOverSsh(self.transport, self.label)
        try:
            return docker.DockerClient(base_url=forward.base_url, timeout=120, max_pool_size=API_POOL_SIZE), forward
        except BaseException:
            forward.close()
            raise

    def user_ids(self, created_dir: str) -> str:
        """ "uid:gid" the containers run as: the SSH user's, read from a directory it just
        created over SFTP (one stat, where ``id`` would cost a command channel). Under a
        set-group-ID parent the group is the parent's, so then ask ``id``."""
        attrs = self.sftp.stat(created_dir)
        if attrs.st_uid is not None and attrs.st_gid is not None and not (attrs.st_mode or 0) & stat.S_ISGID:
            return f"{attrs.st_uid}:{attrs.st_gid}"
        return self.run(["sh", "-c", 'echo "$(id -u):$(id -g)"'], timeout=20).stdout.strip()

    def write_text(self, path: str, text: str) -> None:
        with self.sftp.open(path, "w") as handle:
            handle.write(text)

    def rename(self, source: str, target: str) -> None:
        self.sftp.posix_rename(source, target)

    def remove_files(self, directory: str, names: list[str]) -> None:
        """Remove these files and then the (now empty) directory; OSError when it is not."""
        for name in names:
            self.sftp.remove(posixpath.join(directory, name))
        self.sftp.rmdir(directory)

    def rmdir(self, path: str) -> bool:
        try:
            self.sftp.rmdir(path)
            return True
        except OSError:
            return False


class LocalTransport:
    """This machine as the host: files through the local file system, commands as
    local processes, the engine through ``docker.from_env()``. The same methods as
    SshTransport, so DockerSession has one code path."""

    local = True
    engine_words = "the local Docker engine"

    def __init__(self, host) -> None:
        self.host = host
        self._connected = False

    @property
    def label(self) -> str:
        return self.host.label

    @property
    def connected(self) -> bool:
        return self._connected

    alive = connected

    def error(self, message: str) -> HostError:
        return HostError(f"host {self.label}: {message}")

    def connect(self) -> None:
        self._connected = True

    def close(self) -> None:
        self._connected = False

    def open_docker(self) -> tuple[docker.DockerClient, None]:
        return docker.from_env(timeout=120, max_pool_size=API_POOL_SIZE), None

    def run(self, argv: list[str], timeout: float = 60.0, check: bool = True) -> CommandResult:
        try:
            process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            raise self.error(f"cannot run {shlex.join(argv)}: {exc.strerror or exc}") from None
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            process.communicate()
            raise self.error(f"command timed out after {timeout:.0f} s and was stopped: {shlex.join(argv)}") from None
        result = CommandResult(process.returncode, out.decode(errors="replace"), err.decode(errors="replace"))
        if check and result.exit_code != 0:
            detail = (result.stderr.strip().splitlines() or ["no output"])[-1]
            raise self.error(f"`{shlex.join(argv)}` exited with status {result.exit_code}: {detail}")
        return result

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def exists(self, path: str) -> bool:
        return os.path.lexists(path)

    def makedirs(self, path: str) -> None:
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as exc:
            raise self.error(f"cannot create directory {path}: {exc.strerror or exc}") from None

    def user_ids(self, created_dir: str) -> str:
        return f"{os.getuid()}:{os.getgid()}"

    def put_tree(self, local: Path, remote: str, skip: tuple[str, ...] = ()) -> int:
        count = 0

        def ignore(_root, names):
            nonlocal count
            skipped = {n for n in names if n in skip or n.endswith((".pyc", ".pyo"))}
            count += sum(1 for n in names if n not in skipped and not os.path.isdir(os.path.join(_root, n)))
            return skipped

        shutil.copytree(local, remote, ignore=ignore, symlinks=False)
        return count

    def write_text(self, path: str, text: str) -> None:
        Path(path).write_text(text, encoding="utf-8")

    def rename(self, source: str, target: str) -> None:
        os.rename(source, target)

    def get_files(self, remote_dir: str, local_dir: Path) -> list[str]:
        """Copy the plain files of one directory (not recursive)."""
        local_dir.mkdir(parents=True, exist_ok=True)
        fetched = []
        try:
            entries = list(os.scandir(remote_dir))
        except OSError:
            return fetched
        for entry in entries:
            if entry.is_file(follow_symlinks=False):
                shutil.copyfile(entry.path, local_dir / entry.name)
                fetched.append(entry.name)
        return fetched

    def remove_files(self, directory: str, names: list[str]) -> None:
        for name in names:
            os.unlink(os.path.join(directory, name))
        os.rmdir(directory)

    def rmdir(self, path: str) -> bool:
        try:
            os.rmdir(path)
            return True
        except OSError:
            return False

    def remove_tree(self, path: str, timeout: float = 120) -> None:
        if not path.startswith("/") or path.count("/") < 3:
            raise self.error(f"refusing to remove suspicious path {path!r}")
        shutil.rmtree(path, ignore_errors=True)
        if os.path.lexists(path):
            # Files a container wrote as another user: let rm report what it cannot remove.
            self.run(["rm", "-rf", "--", path], timeout=timeout)


class DockerSession(HostSession):
    def __init__(self, *args, build_log_dir: Path, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        config = self.config
        self.remote = self.make_transport()
        self.build_log_dir = build_log_dir
        self.forward: DockerOverSsh | None = None
        self.client: docker.DockerClient | None = None
        self.image: str | None = None
        self.code_dir: str | None = None
        self.user: str | None = None
        self._lock = threading.Lock()
        self._containers: list = []
        self._pending: list[threading.Thread] = []  # stops and removals under way
        self._precreated: tuple[dict, _Background] | None = None  # the case container, created early
        self._stopped_cases: list[_Container] = []
        self._closed = False
        self._remote_log = ""
        self.workdir = self.host_workdir()
        self.run_dir = posixpath.join(self.workdir, "runs", slug(self.run_id), slug(self.label))
        opts = parse_container_options(config.container_opt, str(config.path))
        self.container_options = merge_options(opts, vendor_container_options(config.flagperf_path, config.vendor))

    def make_transport(self) -> "SshTransport | LocalTransport":
        config = self.config
        if is_local_engine(config, self.host):
            return LocalTransport(self.host)
        return SshTransport(self.host, config.ssh_user, config.ssh_key_file, config.known_hosts, config.trust_on_first_use)

    def host_workdir(self) -> str:
        """The folder on the host that holds code/, onnxs/ and runs/ (layout above)."""
        return self.config.remote_workdir

    # ---- preparation --------------------------------------------------------
    def prepare(self) -> None:
        """Connect, then two independent halves side by side: the engine (version, orphans,
        image) on this thread, the files (data dirs, user, code) on another. A failure is
        reported at the first step in the order ssh, docker, data, code, image."""
        self.preflight_step = "ssh"
        self.remote.connect()
        files = _Background(self._prepare_files, f"prepare-{self.label}")
        try:
            self.preflight_step = "docker"
            self._open_engine()
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
            self.client, self.forward = self.remote.open_docker()
            one_connection_pool(self.client)
            self.client.ping()
        except (DockerException, requests.RequestException) as exc:
            where = self.remote.engine_words
            raise HostError(f"host {self.label}: {where} not reachable ({_reason(exc)}); is dockerd running and the docker CLI installed?") from None
        self.sweep_orphans()

    def _prepare_files(self, progress: "_Background") -> None:
        progress.step = "data"
        for spec in self.config.cases:
            if not self.remote.is_dir(spec.data_dir):
                raise HostError(f"host {self.label}: data dir {spec.data_dir} for {spec.key} does not exist")
        self.remote.makedirs(self.run_dir)
        self.user = self.remote.user_ids(self.run_dir)
        if self.config.clear_caches:
            self._drop_page_cache()
        progress.step = "code"
        self._sync_code()

    def _drop_page_cache(self) -> None:
        result = self.remote.run(["sh", "-c", "sync && echo 3 > /proc/sys/vm/drop_caches"], timeout=120, check=False)
        if result.exit_code != 0:
            logger.warning(f"host {self.label}: CLEAR_CACHES: cannot drop the page cache (needs root)")

    def _sync_code(self) -> None:
        """Upload inference/ once per code version; an existing complete copy is reused."""
        remote = self.remote
        version = code_version(self.config.flagperf_path)
        root = posixpath.join(self.workdir, "code")
        final = posixpath.join(root, version)
        self.code_dir = posixpath.join(final, "inference")
        if remote.exists(posixpath.join(final, ".complete")):
            logger.info(f"host {self.label}: code version {version} already present")
            return
        staging = posixpath.join(root, f".staging-{version}-{secrets.token_hex(4)}")
        try:
            remote.makedirs(root)
            count = remote.put_tree(self.config.flagperf_path, posixpath.join(staging, "inference"), skip=CODE_SKIP)
            for mount_point in ("onnxs",):
                remote.makedirs(posixpath.join(staging, "inference", mount_point))
            remote.write_text(posixpath.join(staging, ".complete"), version)
            try:
                remote.rename(staging, final)
            except OSError:
                if not remote.exists(posixpath.join(final, ".complete")):
                    raise
            logger.info(f"host {self.label}: uploaded code version {version} ({count} files)")
        finally:
            if remote.exists(staging):
                remote.remove_tree(staging)
        remote.makedirs(posixpath.join(self.workdir, "onnxs"))

    def _ensure_image(self) -> str:
        config = self.config
        framework_dirs = {spec.framework for spec in config.cases}
        if len(framework_dirs) != 1:
            raise HostError(f"host {self.label}: one run builds one image; CASES mixes frameworks {sorted(framework_dirs)}")
        framework = framework_dirs.pop()
        buildargs = {}
        if config.base_image:
            buildargs["BASE_IMAGE"] = config.base_image
        if config.pip_source:
            buildargs["PIP_INDEX_URL"] = config.pip_source
        spec = ImageSpec(
            vendor=config.vendor,
            framework=framework,
            folder=config.flagperf_path / "docker_images" / config.vendor / framework,
            buildargs=buildargs,
            wheels_dir=Path(config.pip_wheels_dir) if config.pip_wheels_dir else None,
            ca_bundle=Path(config.ca_bundle) if config.ca_bundle else None,
            # Only the requirements of this run's cases go into the image's case layer.
            requirements=tuple(all_requirement_files(config.flagperf_path, framework, cases=[s.case for s in config.cases])),
        )
        tag, _ = ensure_image(self.client, spec, self.label, self.build_log_dir / f"build_{slug(self.label)}.log")
        return tag

    # ---- the lifecycle's primitives (utils/executors/base.py) ------------------------------
    def perf_dir(self) -> str:
        return f"{CONTAINER_ROOT}/inference"

    def data_dir(self, spec) -> str:
        return f"{CONTAINER_ROOT}/data"

    def case_log_dir(self, spec, local_dir: Path) -> str:
        self._remote_log = posixpath.join(self.run_dir, slug(spec.key))
        self.remote.makedirs(self._remote_log)
        return f"{CONTAINER_ROOT}/log"

    def start(self, role: str, argv: list[str], spec, env: dict[str, str], stdout: Path | None):
        """A monitor is created and started in the background (the two monitors and the
        case container's creation overlap); its first wait() reports a failed start. The case container, created meanwhile with
        the same command line, only needs starting."""
        if role != "case":
            handle = _Container(self.label, role, poll=True)
            handle.starting = _Background(lambda _: self._create_and_start(handle, role, argv, spec, env), f"start-{role}")
            if self._precreated is None:
                self._precreate_case(spec, env)
            return handle
        handle = _Container(self.label, role, poll=False)
        handle.stdout = stdout
        self._create_and_start(handle, role, argv, spec, env)
        echo = self.echo_for(spec)
        if stdout is not None and echo is not None:  # --verbose: the lines as they come
            handle.streamer = threading.Thread(target=_stream_logs, args=(handle, echo), daemon=True)
            handle.streamer.start()
        handle.watch()
        return handle

    def _container_arguments(self, role: str, argv: list[str], spec, env: dict[str, str]) -> dict:
        volumes = {
            self.code_dir: {"bind": f"{CONTAINER_ROOT}/inference", "mode": "ro"},
            self._remote_log: {"bind": f"{CONTAINER_ROOT}/log", "mode": "rw"},
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
            version=self.client.api._version,
            **options,
        )

    def _create(self, role: str, arguments: dict):
        """containers.run() is create + inspect + start; the inspect is not needed."""
        name = arguments["name"]
        try:
            created = self.client.api.create_container(**_create_container_args(dict(arguments)))
        except (APIError, requests.RequestException) as exc:
            raise HostError(f"host {self.label}: Docker could not create the {role} container: {_reason(exc)}") from None
        container = self.client.containers.prepare_model({"Id": created["Id"], "Name": f"/{name}"})
        with self._lock:
            self._containers.append(container)  # removed by end_case/cleanup even if it never starts
        return container

    def _precreate_case(self, spec, env: dict[str, str]) -> None:
        argv = self.pipeline_argv(f"{CONTAINER_ROOT}/log", spec)
        arguments = self._container_arguments("case", argv, spec, env)
        self._precreated = (arguments, _Background(lambda _: self._create("case", arguments), "create-case"))

    def _create_and_start(self, handle: "_Container", role: str, argv: list[str], spec, env: dict[str, str]) -> None:
        arguments = self._container_arguments(role, argv, spec, env)
        container = None
        if role == "case" and self._precreated is not None:
            early, creating = self._precreated
            self._precreated = None
            error = creating.join()
            if error is None and early == arguments:
                container = creating.value
            elif error is None:
                _remove_container(creating.value)  # the command line changed: start afresh
        if container is None:
            container = self._create(role, arguments)
        handle.container = container
        try:
            self.client.api.start(container.id)
        except (APIError, requests.RequestException) as exc:
            raise HostError(f"host {self.label}: Docker could not start the {role} container: {_reason(exc)}") from None

    def wait(self, handle: "_Container", timeout: float) -> int | None:
        handle.started()
        code = handle.result(timeout)
        if code is not None and handle.stdout is not None:
            if handle.streamer is not None:
                handle.streamer.join(timeout=10)
            else:
                _save_logs(handle)
        return code

    def stop(self, handle: "_Container") -> None:
        """Ask the engine to stop it (SIGTERM, SIGKILL after STOP_TIMEOUT_S) without waiting:
        the monitors stop side by side, and fetch() waits for every stop under way before it
        reads the files they wrote."""
        if handle.stdout is not None:
            self._stopped_cases.append(handle)
        if handle.done():
            return  # exited already (the pipeline, a dead monitor): nothing to stop
        self._background(_stop_handle, handle, f"stop-{handle.role}")

    def output_tail(self, handle: "_Container") -> str:
        if handle.container is None:
            return ""
        try:
            lines = handle.container.logs(stdout=False, stderr=True).decode(errors="replace").strip().splitlines()
        except (NotFound, APIError, requests.RequestException):
            return ""
        return lines[-1].strip() if lines else ""

    def exit_detail(self, handle: "_Container") -> str | None:
        if handle.container is None:
            return None
        try:
            handle.container.reload()
        except (NotFound, APIError, requests.RequestException):
            return None
        return "oom" if handle.container.attrs.get("State", {}).get("OOMKilled") else None

    def fetch(self, spec, log_dir: str, local_dir: Path) -> None:
        self._join_pending()
        if self.remote.connected and not self.remote.alive:
            self._reconnect()
        for handle in self._stopped_cases:  # a pipeline stopped (timeout, interrupt): its output so far
            if handle.stdout is not None and handle.streamer is None and not handle.logs_saved:
                _save_logs(handle)
        self._stopped_cases = []
        try:
            names = self.remote.get_files(self._remote_log, local_dir)
        except (OSError, EOFError) as exc:
            raise HostError(f"host {self.label}: fetching {self._remote_log} failed: {exc}") from None
        try:
            self.remote.remove_files(self._remote_log, names)
        except (OSError, EOFError):
            # Something besides plain files (a folder the pipeline made): cleanup() removes
            # the whole run dir with one command.
            pass

    def _reconnect(self) -> None:
        """The connection dropped under the case (network, sshd restart): the case has failed,
        but its containers live on in the host's engine. A new connection (host key checked
        again) stops and removes them, so that the files can be fetched and the next case
        starts clean; if the host stays unreachable they end by their own lifetime."""
        if self._precreated is not None:
            self._precreated[1].join(timeout=JOIN_S)
            self._precreated = None
        with self._lock:
            self._containers, stopped, self._stopped_cases = [], self._stopped_cases, []
        if self.client is not None:
            self.client.close()
        if self.forward is not None:
            self.forward.close()
        self.client = self.forward = None
        self.remote.close()
        try:
            self.remote.connect()
            self._open_engine()
        except HostError as exc:
            logger.warning(f"host {self.label}: the case's containers may run on until their lifetime ends: {one_line(exc)}")
            return
        for handle in stopped:  # the pipeline's output up to the drop, through the new connection
            if handle.container is not None and handle.stdout is not None and handle.streamer is None:
                handle.container = self.client.containers.prepare_model({"Id": handle.container.id, "Name": f"/{handle.container.name}"})
                _save_logs(handle)
        self.sweep_run()
        logger.warning(f"host {self.label}: reconnected after the lost connection and removed the case's containers")

    def end_case(self, spec) -> None:
        """Remove the case's containers in the background (the next case need not wait);
        cleanup() waits for the removals."""
        if self._precreated is not None:
            self._precreated[1].join(timeout=JOIN_S)  # so that its container is in the list
            self._precreated = None
        with self._lock:
            containers, self._containers = self._containers, []
        self._stopped_cases = []
        for container in containers:
            self._background(_remove_container, container, f"rm-{container.name}")

    # ---- teardown ---------------------------------------------------------------
    def _background(self, target, item, name: str) -> None:
        thread = threading.Thread(target=target, args=(item,), name=name, daemon=True)
        with self._lock:
            self._pending = [t for t in self._pending if t.is_alive()] + [thread]
        thread.start()

    def _join_pending(self, timeout: float = JOIN_S) -> None:
        with self._lock:
            pending = list(self._pending)
        for thread in pending:
            thread.join(timeout=timeout)

    def _remove_all(self) -> None:
        self.end_case(None)
        self._join_pending()

    def interrupt(self) -> None:
        with self._lock:
            containers = list(self._containers)
        for container in containers:
            self._background(_stop_container, container, f"stop-{container.name}")
        self._join_pending()

    def sweep_orphans(self) -> None:
        """Remove containers left by an earlier run.py on this machine that died without
        cleaning up (SIGKILL, power loss): their controller label names a pid that is gone."""
        host = socket.gethostname()
        try:
            containers = self.client.containers.list(all=True, filters={"label": LABEL_CONTROLLER})
        except (DockerException, requests.RequestException):
            return
        for container in containers:
            owner = container.labels.get(LABEL_CONTROLLER, "")
            name, _, pid = owner.rpartition(":")
            if name != host or not pid.isdigit() or _pid_alive(int(pid)):
                continue
            try:
                container.remove(force=True)
                logger.warning(f"host {self.label}: removed {container.name}, left running by a run.py (pid {pid}) that died")
            except (DockerException, requests.RequestException):
                pass

    def sweep_run(self) -> None:
        """Remove every container of this run and host on the engine, by label and name."""
        try:
            for container in self.client.containers.list(all=True, filters={"label": f"{LABEL_RUN}={self.run_id}", "name": f"-{slug(self.label)}-"}):
                container.remove(force=True)
        except (DockerException, requests.RequestException) as exc:
            logger.warning(f"host {self.label}: container sweep failed: {_reason(exc)}")

    def cleanup(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self.client is not None:
            self._remove_all()
            self.sweep_run()
        if self.remote.connected:
            try:
                # Each case's files were fetched and removed: the run dir is empty, and one
                # rmdir suffices; anything left in it takes one rm -rf.
                if self.remote.exists(self.run_dir) and not self.remote.rmdir(self.run_dir):
                    self.remote.remove_tree(self.run_dir)
                self.remote.rmdir(posixpath.dirname(self.run_dir))  # fails while other hosts' dirs remain
            except (HostError, OSError, EOFError) as exc:
                logger.warning(f"host {self.label}: removing {self.run_dir} failed: {exc}")
        if self.client is not None:
            self.client.close()
        if self.forward is not None:
            self.forward.close()
        self.remote.close()


def _stop_handle(handle: "_Container") -> None:
    try:
        handle.started()
    except HostError:
        pass  # it never started; end_case removes what was created
    if handle.container is not None:
        _stop_container(handle.container)


def _stop_container(container) -> None:
    try:
        container.stop(timeout=STOP_TIMEOUT_S)
    except (NotFound, APIError, requests.RequestException):
        pass


def _remove_container(container) -> None:
    try:
        container.remove(force=True)
    except (NotFound, APIError, requests.RequestException):
        pass


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stream_logs(handle: "_Container", echo) -> None:
    """--verbose: copy the pipeline's output to stdout.log and the console as it comes."""
    try:
        with open(handle.stdout, "ab") as sink:
            buffer = b""
            for chunk in handle.container.logs(stream=True, follow=True):
                sink.write(chunk)
                sink.flush()
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    echo(line.decode(errors="replace"))
        handle.logs_saved = True
    except (APIError, requests.RequestException, OSError):
        pass


def _save_logs(handle: "_Container") -> None:
    """The pipeline's output into stdout.log with one request once it has exited (or was
    stopped): no connection held open for the whole run. Not streamed: docker-py's
    stream reader takes the connection's socket over, which then cannot go back to the
    pool cleanly."""
    if handle.logs_saved or handle.container is None:
        return
    try:
        data = handle.container.logs(stdout=True, stderr=True, stream=False)
        with open(handle.stdout, "ab") as sink:
            sink.write(data)
        handle.logs_saved = True
    except (NotFound, APIError, requests.RequestException, OSError) as exc:
        logger.warning(f"host {handle.label}: could not save the pipeline's output: {_reason(exc)}")


class _Background:
    """A call on its own thread; ``join`` returns the exception it raised (or None)."""

    def __init__(self, target, name: str) -> None:
        self.step: str | None = None
        self.value = None
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


class _Container:
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
        self.container = None
        self.starting: _Background | None = None
        self.stdout: Path | None = None
        self.streamer: threading.Thread | None = None
        self.logs_saved = False
        self._done = threading.Event()
        self._code: int | None = None
        self._error: str | None = None

    @property
    def name(self) -> str:
        return self.container.name if self.container is not None else self.role

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
                    status = self.container.wait(timeout=WAIT_SLICE_S)
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
            self._error = f"connection to the Docker engine lost ({_reason(exc)})"
        finally:
            self._done.set()

    def _engine_answers(self) -> bool:
        try:
            self.container.reload()
        except NotFound:
            raise
        except (APIError, requests.RequestException, OSError):
            return False
        return True

    def done(self) -> bool:
        return self._done.is_set()

    def _inspect(self) -> None:
        try:
            self.container.reload()
        except NotFound:
            self._error = "the container disappeared"
            self._done.set()
            return
        except (APIError, requests.RequestException, OSError) as exc:
            raise HostError(f"host {self.label}: connection to the Docker engine lost ({_reason(exc)}) while {self.name} ran") from None
        state = self.container.attrs.get("State", {})
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


def controller_id() -> str:
    """Who started a container: this machine and run.py's pid (see DockerSession.sweep_orphans)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _reason(exc: Exception) -> str:
    text = getattr(exc, "explanation", None) or str(exc) or type(exc).__name__
    return " ".join(str(text).split())[:300]
