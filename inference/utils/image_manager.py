"""Vendor images: built with the Docker SDK, tagged by a hash of what they are built from.

The tag covers the Dockerfile folder's contents, the build arguments and the
extra context (wheels, CA bundle), so editing the Dockerfile rebuilds and an
unchanged folder reuses the image on every host.

Build context = docker_images/<vendor>/<framework>/ plus, when configured,
``wheels/`` (PIP_WHEELS_DIR: e.g. the offline torch wheel) and
``ca-certificates.crt`` (CA_BUNDLE: lets pip inside the build reach the index).
"""
from __future__ import annotations

import hashlib
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import docker
from docker.errors import APIError, BuildError, ImageNotFound
from loguru import logger

from tools.cache import hash_file


@dataclass(frozen=True)
class ImageSpec:
    vendor: str
    framework: str
    folder: Path
    buildargs: dict[str, str]
    wheels_dir: Path | None = None
    ca_bundle: Path | None = None

    @property
    def dockerfile(self) -> Path:
        return self.folder / "Dockerfile"

    def _wheels(self) -> list[Path]:
        if self.wheels_dir is None:
            return []
        return sorted(p for p in self.wheels_dir.iterdir() if p.is_file() and p.suffix == ".whl")

    def content_hash(self) -> str:
        digest = hashlib.sha256()
        for path in sorted(p for p in self.folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            digest.update(str(path.relative_to(self.folder)).encode())
            hash_file(path, digest)
        for key, value in sorted(self.buildargs.items()):
            digest.update(f"arg:{key}={value}".encode())
        for wheel in self._wheels():
            # Wheel file names carry name+version+tag; hashing 200 MB each run would cost seconds.
            digest.update(f"wheel:{wheel.name}:{wheel.stat().st_size}".encode())
        if self.ca_bundle is not None:
            hash_file(self.ca_bundle, digest)
        return digest.hexdigest()[:16]

    @property
    def tag(self) -> str:
        return f"inferperf/{self.vendor}-{self.framework.lower()}:{self.content_hash()}"

    def write_context(self, target: Path) -> None:
        with tarfile.open(target, "w") as tar:
            for path in sorted(self.folder.rglob("*")):
                if path.is_file() and "__pycache__" not in path.parts:
                    tar.add(path, arcname=str(path.relative_to(self.folder)))
            for wheel in self._wheels():
                tar.add(wheel, arcname=f"wheels/{wheel.name}")
            if self.ca_bundle is not None:
                tar.add(self.ca_bundle, arcname="ca-certificates.crt")


def ensure_image(client: docker.DockerClient, spec: ImageSpec, host_label: str, build_log: Path) -> tuple[str, bool]:
    """Return (tag, built): reuse the image if this exact tag exists, else build it."""
    from utils.cluster_manager import HostError

    if not spec.dockerfile.is_file():
        raise HostError(f"host {host_label}: no Dockerfile at {spec.dockerfile}")
    tag = spec.tag
    try:
        client.images.get(tag)
        logger.info(f"host {host_label}: reusing image {tag}")
        return tag, False
    except ImageNotFound:
        pass
    base = spec.buildargs.get("BASE_IMAGE")
    if base:
        try:
            client.images.get(base)
        except ImageNotFound:
            raise HostError(
                f"host {host_label}: base image {base} not found on its engine and no registry is assumed; "
                "build it with scripts/build_base_image.sh on that host"
            ) from None
    logger.info(f"host {host_label}: building image {tag} from {spec.dockerfile}")
    with tempfile.TemporaryDirectory(prefix="inferperf-ctx-") as tmp:
        context = Path(tmp) / "context.tar"
        spec.write_context(context)
        try:
            with open(context, "rb") as handle:
                _, stream = client.images.build(
                    fileobj=handle,
                    custom_context=True,
                    tag=tag,
                    buildargs=spec.buildargs,
                    network_mode="host",
                    rm=True,
                    forcerm=True,
                    labels={"inferperf.vendor": spec.vendor, "inferperf.framework": spec.framework},
                )
            _write_build_log(build_log, stream)
        except BuildError as exc:
            _write_build_log(build_log, exc.build_log)
            raise HostError(
                f"host {host_label}: building {spec.dockerfile} failed: {exc.msg.strip().splitlines()[-1]} "
                f"(build log: {build_log})"
            ) from None
        except APIError as exc:
            raise HostError(f"host {host_label}: building {spec.dockerfile} failed: {exc.explanation or exc}") from None
    logger.info(f"host {host_label}: built image {tag}")
    return tag, True


def _write_build_log(path: Path, stream) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as out:
        for chunk in stream or ():
            text = chunk.get("stream") or chunk.get("error") or chunk.get("status") or ""
            out.write(text if text.endswith("\n") else text + "\n")
