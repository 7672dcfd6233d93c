"""MODE docker: reach the host over SSH, build/reuse the vendor image, run the case in a container.

Layout on each host (REMOTE_WORKDIR, default /var/tmp/inferperf):
  code/<hash>/inference/      the code, uploaded once per version (a cache)
  onnxs/                      exported ONNX and compiled engines (a cache)
  runs/<run_id>/<host>/<case>/   the case log dir while it runs; removed after fetching
"""
from __future__ import annotations

import os
import posixpath
import secrets
import socket
import threading
import time
from pathlib import Path

import docker
import requests
from docker.errors import APIError, DockerException, NotFound
from loguru import logger

from common.files import hash_tree
from common.errors import HostError
from utils.cluster_manager import SshHost
from utils.container_manager import (
    LABEL_CONTROLLER,
    LABEL_ROLE,
    LABEL_RUN,
    container_name,
    merge_options,
    parse_container_options,
    vendor_container_options,
)
from utils.docker_forward import DockerOverSsh
from utils.image_manager import ImageSpec, ensure_image
from utils.requirements import all_requirement_files
from utils.session import HostSession, slug

CONTAINER_ROOT = "/workspace"
CODE_SKIP = ("onnxs", "result", "__pycache__", ".pytest_cache")
WAIT_SLICE_S = 60
STOP_TIMEOUT_S = 10


def code_version(perf_dir: Path) -> str:
    """Hash exactly what _sync_code uploads."""
    return hash_tree([perf_dir], suffixes=None, skip_dirs=CODE_SKIP, relative_to_parent=False)[:16]


class DockerSession(HostSession):
    def __init__(self, *args, build_log_dir: Path, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        config = self.config
        self.ssh = SshHost(self.host, config.ssh_user, config.ssh_key_file, config.known_hosts, config.trust_on_first_use)
        self.build_log_dir = build_log_dir
        self.forward: DockerOverSsh | None = None
        self.client: docker.DockerClient | None = None
        self.image: str | None = None
        self.code_dir: str | None = None
        self.user: str | None = None
        self._lock = threading.Lock()
        self._containers: list = []
        self._closed = False
        self._remote_log = ""
        workdir = config.remote_workdir
        self.run_dir = posixpath.join(workdir, "runs", slug(self.run_id), slug(self.label))
        opts = parse_container_options(config.container_opt, str(config.path))
        self.container_options = merge_options(opts, vendor_container_options(config.flagperf_path, config.vendor))

    # ---- preparation --------------------------------------------------------
    def prepare(self) -> None:
        self.preflight_step = "ssh"
        self.ssh.connect()
        self.preflight_step = "docker"
        self.forward = DockerOverSsh(self.ssh.transport, self.label)
        try:
            self.client = docker.DockerClient(base_url=self.forward.base_url, timeout=120)
            self.client.ping()
        except (DockerException, requests.RequestException) as exc:
            raise HostError(f"host {self.label}: Docker engine not reachable ({_reason(exc)}); is dockerd running and the docker CLI installed?") from None
        self.sweep_orphans()
        self.preflight_step = "data"
        for spec in self.config.cases:
            if not self.ssh.is_dir(spec.data_dir):
                raise HostError(f"host {self.label}: data dir {spec.data_dir} for {spec.key} does not exist")
        uid = self.ssh.run(["id", "-u"], timeout=20).stdout.strip()
        gid = self.ssh.run(["id", "-g"], timeout=20).stdout.strip()
        self.user = f"{uid}:{gid}"
        if self.config.clear_caches:
            self._drop_page_cache()
        self.preflight_step = "code"
        self._sync_code()
        self.preflight_step = "image"
        self.image = self._ensure_image()
        self.ssh.makedirs(self.run_dir)
        self.preflight_step = None

    def _drop_page_cache(self) -> None:
        result = self.ssh.run(["sh", "-c", "sync && echo 3 > /proc/sys/vm/drop_caches"], timeout=120, check=False)
        if result.exit_code != 0:
            logger.warning(f"host {self.label}: CLEAR_CACHES: cannot drop the page cache (needs root)")

    def _sync_code(self) -> None:
        """Upload inference/ once per code version; an existing complete copy is reused."""
        version = code_version(self.config.flagperf_path)
        root = posixpath.join(self.config.remote_workdir, "code")
        final = posixpath.join(root, version)
        self.code_dir = posixpath.join(final, "inference")
        if self.ssh.exists(posixpath.join(final, ".complete")):
            logger.info(f"host {self.label}: code version {version} already present")
            return
        staging = posixpath.join(root, f".staging-{version}-{secrets.token_hex(4)}")
        try:
            count = self.ssh.put_tree(self.config.flagperf_path, posixpath.join(staging, "inference"), skip=CODE_SKIP)
            for mount_point in ("onnxs",):
                self.ssh.makedirs(posixpath.join(staging, "inference", mount_point))
            with self.ssh.sftp.open(posixpath.join(staging, ".complete"), "w") as marker:
                marker.write(version)
            try:
                self.ssh.sftp.posix_rename(staging, final)
            except OSError:
                if not self.ssh.exists(posixpath.join(final, ".complete")):
                    raise
            logger.info(f"host {self.label}: uploaded code version {version} ({count} files)")
        finally:
            if self.ssh.exists(staging):
                self.ssh.remove_tree(staging)
        self.ssh.makedirs(posixpath.join(self.config.remote_workdir, "onnxs"))

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

    # ---- the lifecycle's primitives (utils/session.py) ------------------------------
    def perf_dir(self) -> str:
        return f"{CONTAINER_ROOT}/inference"

    def data_dir(self, spec) -> str:
        return f"{CONTAINER_ROOT}/data"

    def case_log_dir(self, spec, local_dir: Path) -> str:
        self._remote_log = posixpath.join(self.run_dir, slug(spec.key))
        self.ssh.makedirs(self._remote_log)
        return f"{CONTAINER_ROOT}/log"

    def start(self, role: str, argv: list[str], spec, env: dict[str, str], stdout: Path | None):
        volumes = {
            self.code_dir: {"bind": f"{CONTAINER_ROOT}/inference", "mode": "ro"},
            self._remote_log: {"bind": f"{CONTAINER_ROOT}/log", "mode": "rw"},
        }
        if role == "case":
            onnxs = posixpath.join(self.config.remote_workdir, "onnxs")
            volumes[spec.data_dir] = {"bind": f"{CONTAINER_ROOT}/data", "mode": "ro"}
            volumes[onnxs] = {"bind": f"{CONTAINER_ROOT}/inference/onnxs", "mode": "rw"}
        options = dict(self.container_options)
        environment = {"HOME": "/tmp", **env, **options.pop("environment", {})}
        env_name = self.config.visible_device_env
        if env_name and os.environ.get(env_name) is not None:
            environment[env_name] = os.environ[env_name]
        try:
            container = self.client.containers.run(
                self.image,
                command=argv,
                name=container_name(self.run_id, self.label, spec.key, role),
                detach=True,
                network_mode="host",
                shm_size=self.config.shm_size,
                working_dir=f"{CONTAINER_ROOT}/inference",
                volumes=volumes,
                environment=environment,
                user=self.user,
                labels={LABEL_RUN: self.run_id, LABEL_ROLE: role, LABEL_CONTROLLER: controller_id()},
                **options,
            )
        except (APIError, requests.RequestException) as exc:
            raise HostError(f"host {self.label}: Docker could not start the {role} container: {_reason(exc)}") from None
        handle = _Container(container, self.label)
        with self._lock:
            self._containers.append(container)
        if stdout is not None:
            handle.streamer = threading.Thread(target=_stream_logs, args=(container, stdout, self.echo_for(spec)), daemon=True)
            handle.streamer.start()
        return handle

    def wait(self, handle: "_Container", timeout: float) -> int | None:
        code = handle.result(timeout)
        if code is not None and handle.streamer is not None:
            handle.streamer.join(timeout=10)
        return code

    def stop(self, handle: "_Container") -> None:
        try:
            handle.container.stop(timeout=STOP_TIMEOUT_S)
        except (NotFound, APIError, requests.RequestException):
            pass

    def output_tail(self, handle: "_Container") -> str:
        try:
            lines = handle.container.logs(stdout=False, stderr=True).decode(errors="replace").strip().splitlines()
        except (NotFound, APIError, requests.RequestException):
            return ""
        return lines[-1].strip() if lines else ""

    def exit_detail(self, handle: "_Container") -> str | None:
        try:
            handle.container.reload()
        except (NotFound, APIError, requests.RequestException):
            return None
        return "oom" if handle.container.attrs.get("State", {}).get("OOMKilled") else None

    def fetch(self, spec, log_dir: str, local_dir: Path) -> None:
        try:
            self.ssh.get_files(self._remote_log, local_dir)
            self.ssh.remove_tree(self._remote_log)
        except (OSError, EOFError) as exc:
            raise HostError(f"host {self.label}: fetching {self._remote_log} failed: {exc}") from None

    def end_case(self, spec) -> None:
        self._remove_all()

    # ---- teardown ---------------------------------------------------------------
    def _remove_all(self) -> None:
        with self._lock:
            containers, self._containers = self._containers, []
        for container in containers:
            try:
                container.remove(force=True)
            except (NotFound, APIError, requests.RequestException):
                pass

    def interrupt(self) -> None:
        with self._lock:
            containers = list(self._containers)
        for container in containers:
            try:
                container.stop(timeout=STOP_TIMEOUT_S)
            except (NotFound, APIError, requests.RequestException):
                pass

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

    def cleanup(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self.client is not None:
            self._remove_all()
            try:
                # Sweep by label too: nothing of this run survives on this engine.
                for container in self.client.containers.list(all=True, filters={"label": f"{LABEL_RUN}={self.run_id}", "name": f"-{slug(self.label)}-"}):
                    container.remove(force=True)
            except (DockerException, requests.RequestException) as exc:
                logger.warning(f"host {self.label}: container sweep failed: {_reason(exc)}")
        if self.ssh.client is not None:
            try:
                self.ssh.remove_tree(self.run_dir)
                self.ssh.run(["rmdir", "--ignore-fail-on-non-empty", "--", posixpath.dirname(self.run_dir)], timeout=20, check=False)
            except (HostError, OSError, EOFError) as exc:
                logger.warning(f"host {self.label}: removing {self.run_dir} failed: {exc}")
        if self.client is not None:
            self.client.close()
        if self.forward is not None:
            self.forward.close()
        self.ssh.close()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stream_logs(container, path: Path, echo) -> None:
    try:
        with open(path, "ab") as sink:
            buffer = b""
            for chunk in container.logs(stream=True, follow=True):
                sink.write(chunk)
                sink.flush()
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                if echo is not None:
                    for line in lines:
                        echo(line.decode(errors="replace"))
    except (APIError, requests.RequestException, OSError):
        pass


class _Container:
    """A started container and a thread that waits for its exit.

    The engine's wait call is repeated in bounded slices (the SDK's HTTP timeout
    would otherwise end it); a dropped connection ends it with an error, which
    ``result`` reports as the host being lost, never as a timeout."""

    def __init__(self, container, label: str) -> None:
        self.container = container
        self.label = label
        self.streamer: threading.Thread | None = None
        self._done = threading.Event()
        self._code: int | None = None
        self._error: str | None = None
        threading.Thread(target=self._wait, name=f"wait-{container.name}", daemon=True).start()

    def _wait(self) -> None:
        try:
            while True:
                try:
                    status = self.container.wait(timeout=WAIT_SLICE_S)
                    self._code = int(status.get("StatusCode", -1))
                    return
                except requests.exceptions.ReadTimeout:
                    continue
        except NotFound:
            self._error = "the container disappeared"
        except (APIError, requests.RequestException, OSError) as exc:
            self._error = f"connection to the Docker engine lost ({_reason(exc)})"
        finally:
            self._done.set()

    def result(self, timeout: float) -> int | None:
        if not self._done.wait(timeout):
            return None
        if self._error:
            raise HostError(f"host {self.label}: {self._error} while {self.container.name} ran")
        return self._code


def controller_id() -> str:
    """Who started a container: this machine and run.py's pid (see DockerSession.sweep_orphans)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _reason(exc: Exception) -> str:
    text = getattr(exc, "explanation", None) or str(exc) or type(exc).__name__
    return " ".join(str(text).split())[:300]
