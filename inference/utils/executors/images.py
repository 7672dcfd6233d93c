"""Vendor images: built with the Docker SDK, tagged by a hash of what they are built from.

The tag covers the Dockerfile folder's contents, the build arguments and the
extra context (wheels, CA bundle), so editing the Dockerfile rebuilds and an
unchanged folder reuses the image on every host.

Build context = docker_images/<vendor>/<framework>/ plus, when configured,
``wheels/`` (PIP_WHEELS_DIR: e.g. the offline torch wheel) and
``ca-certificates.crt`` (CA_BUNDLE: lets pip inside the build reach the index).

Case requirements (spec §3.2.0): when cases of this framework have a
``benchmarks/<case>/<framework>/requirements.txt``, a second, generated build
puts them on top of the vendor image (``CASE_LAYER_DOCKERFILE``), with the
image's own torch, numpy, TensorRT and Triton pinned as constraints. The vendor
image keeps its own tag (the hash of its folder); the image the cases run in is
tagged with a hash that also covers every requirement file, so editing one
rebuilds only the layer. Vendors' Dockerfiles need no change for this.
"""

from __future__ import annotations

import hashlib
import io
import re
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import docker
from docker.errors import APIError, BuildError, ImageNotFound
from loguru import logger

from common.files import hash_file, hash_tree, tree_files


@dataclass(frozen=True)
class ImageSpec:
    vendor: str
    framework: str
    folder: Path
    buildargs: dict[str, str]
    wheels_dir: Path | None = None
    ca_bundle: Path | None = None
    # The cases' requirement files to install on top; None = every case of this
    # framework under the perf dir (docker_images/<vendor>/<framework>/../../..).
    requirements: tuple[Path, ...] | None = None

    @property
    def dockerfile(self) -> Path:
        return self.folder / "Dockerfile"

    @property
    def requirement_files(self) -> tuple[Path, ...]:
        from utils.requirements import all_backend_requirement_files, all_requirement_files

        # Every ByteMLPerf backend folder of the vendor brings its requirements.txt too (docs/bytemlperf_migration.md).
        backends = tuple(all_backend_requirement_files(self.folder.parents[2], self.vendor))
        if self.requirements is not None:
            return tuple(sorted(self.requirements)) + backends
        return tuple(all_requirement_files(self.folder.parents[2], self.framework)) + backends

    def _wheels(self) -> list[Path]:
        if self.wheels_dir is None:
            return []
        return sorted(p for p in self.wheels_dir.iterdir() if p.is_file() and p.suffix == ".whl")

    def content_hash(self) -> str:
        """The hash in ``tag``: the vendor image's, plus every case requirement file when there are any."""
        vendor = self.vendor_hash()
        files = self.requirement_files
        if not files:
            return vendor
        digest = hashlib.sha256(f"vendor:{vendor}".encode())
        for path in files:
            digest.update(f"requirements:{_case_name(path)}".encode())
            hash_file(path, digest)
        return digest.hexdigest()[:16]

    def vendor_hash(self) -> str:
        """Hash of what the vendor Dockerfile's build sees: its folder, build args, wheels and CA bundle."""
        digest = hashlib.sha256()
        hash_tree([self.folder], suffixes=None, relative_to_parent=False, digest=digest)
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
        """The image the cases run in."""
        return f"inferperf/{self.vendor}-{self.framework.lower()}:{self.content_hash()}"

    @property
    def vendor_tag(self) -> str:
        """The vendor Dockerfile's image alone (equal to ``tag`` when no case has requirements)."""
        return f"inferperf/{self.vendor}-{self.framework.lower()}:{self.vendor_hash()}"

    def case_layer_buildargs(self) -> dict[str, str]:
        args = {key: value for key, value in self.buildargs.items() if key in CASE_LAYER_ARGS}
        return {**args, "VENDOR_IMAGE": self.vendor_tag}

    def write_case_layer_context(self, target: Path) -> None:
        """Dockerfile, requirements/<case>.txt for each file, and the CA bundle when configured."""
        with tarfile.open(target, "w") as tar:
            _add_bytes(tar, "Dockerfile", CASE_LAYER_DOCKERFILE.encode())
            for path in self.requirement_files:
                tar.add(path, arcname=f"requirements/{_case_name(path)}.txt")
            if self.ca_bundle is not None:
                tar.add(self.ca_bundle, arcname="ca-certificates.crt")

    def write_context(self, target: Path) -> None:
        with tarfile.open(target, "w") as tar:
            for path in tree_files(self.folder):
                tar.add(path, arcname=str(path.relative_to(self.folder)))
            for wheel in self._wheels():
                tar.add(wheel, arcname=f"wheels/{wheel.name}")
            if self.ca_bundle is not None:
                tar.add(self.ca_bundle, arcname="ca-certificates.crt")


# Build args the case layer accepts (passed through from the vendor build's).
CASE_LAYER_ARGS = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST")
# No heredocs: the Docker SDK's legacy builder does not support them. The
# constraints pin the image's own torch, numpy, TensorRT and Triton, so no case
# requirement can replace them; PIP_BREAK_SYSTEM_PACKAGES lets pip install into
# images whose Python is the system one (PEP 668), as NGC's are.
CASE_LAYER_DOCKERFILE = """\
# Generated by InferPerf's utils/executors/images.py: the cases' requirements.txt
# files (spec 3.2.0) installed on top of the vendor image.
ARG VENDOR_IMAGE
FROM ${VENDOR_IMAGE}
ARG PIP_INDEX_URL=https://pypi.org/simple
ARG PIP_EXTRA_INDEX_URL=
ARG PIP_TRUSTED_HOST=
COPY . /tmp/inferperf-case-requirements
RUN set -eu; d=/tmp/inferperf-case-requirements; \\
    [ -n "${PIP_EXTRA_INDEX_URL}" ] || unset PIP_EXTRA_INDEX_URL; \\
    [ -n "${PIP_TRUSTED_HOST}" ] || unset PIP_TRUSTED_HOST; \\
    if [ -f $d/ca-certificates.crt ]; then export PIP_CERT=$d/ca-certificates.crt; fi; \\
    export PIP_BREAK_SYSTEM_PACKAGES=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1; \\
    python3 -m pip list --format=freeze | grep -iE '^(torch|numpy|tensorrt[a-z0-9_-]*|triton)==' > $d/constraints.txt || true; \\
    set -- ; for f in $d/requirements/*.txt; do set -- "$@" -r "$f"; done; \\
    python3 -m pip install -c $d/constraints.txt "$@" || { echo "inferperf: pip could not install the requirements on $(python3 -V 2>&1)"; exit 1; }; \\
    rm -rf $d /root/.cache
"""


def _case_name(requirements_file: Path) -> str:
    """benchmarks/<case>/<framework>/requirements.txt -> <case>; inference_engine/<vendor>/<XXX>/requirements.txt -> backend-XXX"""
    if requirements_file.parents[2].name == "inference_engine":
        return f"backend-{requirements_file.parent.name}"
    return requirements_file.parent.parent.name


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def ensure_image(client: docker.DockerClient, spec: ImageSpec, host_label: str, build_log: Path) -> tuple[str, bool]:
    """Return (tag, built): reuse the image if this exact tag exists, else build it."""
    from common.errors import HostError

    if not spec.dockerfile.is_file():
        raise HostError(f"host {host_label}: no Dockerfile at {spec.dockerfile}")
    tag = spec.tag
    try:
        client.images.get(tag)
        logger.info(f"host {host_label}: reusing image {tag}")
        _note_reused(spec, build_log, tag)
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
    files = spec.requirement_files
    vendor_tag = spec.vendor_tag
    if not files or not _exists(client, vendor_tag):
        _build(client, spec.write_context, vendor_tag, spec.buildargs, spec, spec.dockerfile, host_label, build_log)
    if files:
        cases = ", ".join(_case_name(f) for f in files)
        logger.info(f"host {host_label}: installing the requirements of {cases} on top of {vendor_tag}")
        layer_log = build_log.with_name(f"{build_log.stem}_cases{build_log.suffix}")
        _build(client, spec.write_case_layer_context, tag, spec.case_layer_buildargs(), spec, f"the requirements of {cases}", host_label, layer_log)
    logger.info(f"host {host_label}: built image {tag}")
    return tag, True


def _note_reused(spec: ImageSpec, build_log: Path, tag: str) -> None:
    """A reused image's build logs say what it was built from (its tag is the hash of exactly that)."""
    _write_build_log(build_log, [{"stream": f"reused image {spec.vendor_tag}, built earlier from {spec.dockerfile}"}])
    if spec.requirement_files:
        names = ", ".join(f"requirements/{_case_name(f)}.txt" for f in spec.requirement_files)
        note = f"reused image {tag}, built earlier from {names} on top of {spec.vendor_tag}"
        _write_build_log(build_log.with_name(f"{build_log.stem}_cases{build_log.suffix}"), [{"stream": note}])


def _exists(client: docker.DockerClient, tag: str) -> bool:
    try:
        client.images.get(tag)
        return True
    except ImageNotFound:
        return False


def _build(client, write_context, tag: str, buildargs: dict, spec: ImageSpec, what, host_label: str, build_log: Path) -> None:
    from common.errors import HostError

    with tempfile.TemporaryDirectory(prefix="inferperf-ctx-") as tmp:
        context = Path(tmp) / "context.tar"
        write_context(context)
        try:
            with open(context, "rb") as handle:
                _, stream = client.images.build(
                    fileobj=handle,
                    custom_context=True,
                    tag=tag,
                    buildargs=buildargs,
                    network_mode="host",
                    rm=True,
                    forcerm=True,
                    labels={"inferperf.vendor": spec.vendor, "inferperf.framework": spec.framework},
                )
            _write_build_log(build_log, stream)
        except BuildError as exc:
            chunks = list(exc.build_log or ())  # an iterator: read once, for the log and for pip's own words
            _write_build_log(build_log, chunks)
            detail = _pip_failure(chunks) or exc.msg.strip().splitlines()[-1]
            raise HostError(f"host {host_label}: building {what} failed: {detail} (build log: {build_log})") from None
        except APIError as exc:
            raise HostError(f"host {host_label}: building {what} failed: {exc.explanation or exc}") from None


def _pip_failure(chunks: list) -> str | None:
    """pip's last ERROR line in a failed build (e.g. no distribution of a pin for the image's Python), with that Python."""
    text = "".join(str(chunk.get("stream") or chunk.get("error") or "") for chunk in chunks)
    lines = [line.strip() for line in re.sub(r"\x1b\[[0-9;]*m", "", text).splitlines()]  # pip colours its errors
    errors = [line[len("ERROR: ") :] for line in lines if line.startswith("ERROR: ")]
    python = next((line.split(" on ", 1)[1] for line in lines if line.startswith("inferperf: pip could not install")), None)
    if not errors:
        return None
    # The line that names the requirement, not the version list before it nor the resolver's "ResolutionImpossible" after.
    telling = [e for e in errors if not e.startswith(("Could not find a version", "ResolutionImpossible"))] or errors
    kept = [line.split(")", 1)[1].strip() for line in lines if line.startswith("The user requested (constraint)")]
    notes = [f"the image keeps {', '.join(kept)}"] if kept else []
    notes += [f"the image's Python is {python.removeprefix('Python ')}"] if python else []
    return f"pip: {telling[0]}" + (f" ({'; '.join(notes)})" if notes else "")


def _write_build_log(path: Path, stream) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as out:
        for chunk in stream or ():
            text = chunk.get("stream") or chunk.get("error") or chunk.get("status") or ""
            out.write(text if text.endswith("\n") else text + "\n")
