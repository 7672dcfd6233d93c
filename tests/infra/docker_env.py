"""Real Docker engine / base image for tests (no pytest import at module level).

* :func:`ensure_docker` runs ``scripts/start_dockerd.sh`` (no-op when the
  engine already answers) and returns a ``docker.DockerClient`` for the local
  engine.
* :func:`ensure_base_image` builds ``inferperf/debian-python:bookworm`` with
  ``scripts/build_base_image.sh`` when missing (debootstrap, ~1 minute).
* :func:`require` skips a test normally but FAILS it under CI (``CI=true``),
  so missing infrastructure can never let CI pass.

All failures raise :class:`InfraUnavailable` with the script output.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPTS_DIR = REPO_ROOT / "scripts"
LOCAL_DOCKER_URL = "unix:///var/run/docker.sock"
BASE_IMAGE = "inferperf/debian-python:bookworm"


class InfraUnavailable(RuntimeError):
    """Docker / base image / sshd could not be provided."""


def is_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def require(condition: bool, reason: str) -> None:
    """``pytest.skip(reason)`` when ``condition`` is false, or
    ``pytest.fail(reason)`` when running under CI (env ``CI=true``)."""
    if condition:
        return
    import pytest  # lazily: this module is usable without pytest

    if is_ci():
        pytest.fail(f"[CI] required infrastructure missing: {reason}", pytrace=False)
    pytest.skip(reason)


def _run_script(name: str, *args: str, timeout: float) -> str:
    script = SCRIPTS_DIR / name
    if not script.exists():
        raise InfraUnavailable(f"{script} not found")
    try:
        proc = subprocess.run(
            ["bash", str(script), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        raise InfraUnavailable(f"{name} timed out after {timeout:.0f}s: {exc.output or ''}")
    except OSError as exc:
        raise InfraUnavailable(f"cannot run {name}: {exc}")
    if proc.returncode != 0:
        raise InfraUnavailable(f"{name} failed (rc={proc.returncode}): {proc.stdout.strip()[-2000:]}")
    return proc.stdout


def ensure_docker(timeout: float = 120.0):
    """Start the local Docker engine if needed; return a ``docker.DockerClient``.

    Raises :class:`InfraUnavailable` when the SDK is missing or the engine
    cannot be started (e.g. not root, docker.io not installed).
    """
    try:
        import docker
    except ImportError as exc:
        raise InfraUnavailable(f"Docker SDK for Python not installed: {exc}")

    def _client():
        client = docker.DockerClient(base_url=LOCAL_DOCKER_URL, timeout=600)
        client.ping()
        return client

    try:
        return _client()
    except Exception:
        pass
    _run_script("start_dockerd.sh", timeout=timeout)
    try:
        return _client()
    except Exception as exc:
        raise InfraUnavailable(f"Docker engine started but not reachable at {LOCAL_DOCKER_URL}: {exc}")


def ensure_base_image(name: str = BASE_IMAGE, client=None, timeout: float = 900.0) -> str:
    """Make sure the registry-free base image exists; return its name."""
    client = client or ensure_docker()
    import docker

    try:
        client.images.get(name)
        return name
    except docker.errors.ImageNotFound:
        pass
    _run_script("build_base_image.sh", name, timeout=timeout)
    try:
        client.images.get(name)
    except docker.errors.ImageNotFound:
        raise InfraUnavailable(f"build_base_image.sh succeeded but {name} is missing")
    return name
