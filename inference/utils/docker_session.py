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
    LABEL_ROLE,
    LABEL_RUN,
    container_name,
    merge_options,
    parse_container_options,
    slug,
    vendor_container_options,
)
from utils.docker_forward import DockerOverSsh
from utils.image_manager import ImageSpec, ensure_image
from utils.requirements import all_requirement_files
from utils.session import CaseOutcome, HostSession, read_outcome

CONTAINER_ROOT = "/workspace"
CODE_SKIP = ("onnxs", "result", "__pycache__", ".pytest_cache")
MONITOR_STARTUP_S = 1.0
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

    # ---- one case -------------------------------------------------------------
    def _run(self, role: str, spec, command: list[str], log_dir: str, extra_volumes: dict | None = None):
        volumes = {
            self.code_dir: {"bind": f"{CONTAINER_ROOT}/inference", "mode": "ro"},
            log_dir: {"bind": f"{CONTAINER_ROOT}/log", "mode": "rw"},
            **(extra_volumes or {}),
        }
        options = dict(self.container_options)
        environment = {
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
            "HOME": "/tmp",
            **options.pop("environment", {}),
        }
        env_name = self.config.visible_device_env
        if env_name:
            import os

            if os.environ.get(env_name) is not None:
                environment[env_name] = os.environ[env_name]
        container = self.client.containers.run(
            self.image,
            command=command,
            name=container_name(self.run_id, self.label, spec.key, role),
            detach=True,
            network_mode="host",
            shm_size=self.config.shm_size,
            working_dir=f"{CONTAINER_ROOT}/inference",
            volumes=volumes,
            environment=environment,
            user=self.user,
            labels={LABEL_RUN: self.run_id, LABEL_ROLE: role},
            **options,
        )
        with self._lock:
            self._containers.append(container)
        return container

    def run_case(self, spec, local_dir: Path) -> CaseOutcome:
        outcome = CaseOutcome(spec, self.label, self.noderank, local_dir)
        started = time.monotonic()
        local_dir.mkdir(parents=True, exist_ok=True)
        remote_log = posixpath.join(self.run_dir, slug(spec.key))
        self.ssh.makedirs(remote_log)
        log_dir = f"{CONTAINER_ROOT}/log"
        monitors = []
        code = None
        try:
            for monitor in self.monitor_specs():
                monitors.append(
                    (monitor, self._run(f"mon-{monitor.name}", spec, monitor.argv("python3", log_dir, self.config.monitor_interval), remote_log))
                )
            command = self.pipeline_argv("python3", f"{CONTAINER_ROOT}/inference", f"{CONTAINER_ROOT}/data", log_dir, spec)
            onnxs = posixpath.join(self.config.remote_workdir, "onnxs")
            case_container = self._run(
                "case", spec, command, remote_log,
                {spec.data_dir: {"bind": f"{CONTAINER_ROOT}/data", "mode": "ro"}, onnxs: {"bind": f"{CONTAINER_ROOT}/inference/onnxs", "mode": "rw"}},
            )
            streamer = threading.Thread(target=_stream_logs, args=(case_container, local_dir / "stdout.log", f"[{self.label} {spec.key}] "), daemon=True)
            streamer.start()
            dead = self._dead_monitor(monitors, started)
            if dead:
                self._stop(case_container)
                outcome.fail("monitors", dead)
            else:
                code = self._wait(case_container, outcome)
            streamer.join(timeout=10)
        except (APIError, requests.RequestException) as exc:
            outcome.fail("container", f"host {self.label}: Docker error: {_reason(exc)}")
        finally:
            for _, container in monitors:
                self._stop(container)
            self._fetch(remote_log, local_dir)
            self._remove_all()
        if self.abort.is_set() and outcome.status not in ("timeout",):
            outcome.fail("interrupted", "run interrupted (SIGINT/SIGTERM)", "interrupted")
        for monitor, _ in monitors:
            outcome.monitors[monitor.name] = str(local_dir / monitor.output)
        if outcome.step in ("monitors", "container"):
            outcome.exit_code = code
            outcome.wall_time_s = time.monotonic() - started
            return outcome
        return read_outcome(outcome, code, started)

    def _wait(self, container, outcome: CaseOutcome) -> int | None:
        try:
            status = container.wait(timeout=self.config.case_timeout)
            code = int(status.get("StatusCode", -1))
        except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
            outcome.fail("timeout", f"case exceeded CASE_TIMEOUT of {self.config.case_timeout:.0f} s and was stopped", "timeout")
            self._stop(container)
            return None
        if code == 137 and not self.abort.is_set():
            outcome.fail("container", f"host {self.label}: container was killed (status 137: SIGKILL or out of memory)")
        return code

    def _dead_monitor(self, monitors, started: float) -> str | None:
        time.sleep(max(0.0, MONITOR_STARTUP_S - (time.monotonic() - started)))
        for spec, container in monitors:
            try:
                container.reload()
            except NotFound:
                return f"{spec.source} container disappeared at start"
            if container.status != "running":
                logs = container.logs(stdout=False, stderr=True).decode(errors="replace").strip().splitlines()
                code = container.attrs.get("State", {}).get("ExitCode")
                return f"{spec.source} exited at once with status {code}: {logs[-1] if logs else 'no output'}"
        return None

    def _fetch(self, remote_log: str, local_dir: Path) -> None:
        try:
            self.ssh.get_files(remote_log, local_dir)
            self.ssh.remove_tree(remote_log)
        except (HostError, OSError) as exc:
            logger.warning(f"host {self.label}: fetching {remote_log} failed: {exc}")

    # ---- teardown ---------------------------------------------------------------
    def _stop(self, container) -> None:
        try:
            container.stop(timeout=STOP_TIMEOUT_S)
        except (NotFound, APIError, requests.RequestException):
            pass

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
            self._stop(container)

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


def _stream_logs(container, path: Path, prefix: str) -> None:
    import sys

    try:
        with open(path, "ab") as sink:
            buffer = b""
            for chunk in container.logs(stream=True, follow=True):
                sink.write(chunk)
                sink.flush()
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    sys.stdout.write(prefix + line.decode(errors="replace") + "\n")
            sys.stdout.flush()
    except (APIError, requests.RequestException, OSError):
        pass


def _reason(exc: Exception) -> str:
    text = getattr(exc, "explanation", None) or str(exc) or type(exc).__name__
    return " ".join(str(text).split())[:300]
