"""Vendor images: built with the Docker SDK, tagged by a hash of what they are built from.

The tag covers the Dockerfile folder's contents, the build arguments and the
extra context (wheels, CA bundle), so editing the Dockerfile rebuilds and an
unchanged folder reuses the image on every host.

Build context = docker_images/<vendor>/<framework>/ (FlagPerf's layout; or the folder the cases'
engine declares, ``IMAGE`` in inference_engine/<vendor>/<compiler>.py: ``CaseSpec.image``) plus, when configured,
``wheels/`` (PIP_WHEELS_DIR: e.g. the offline torch wheel) and
``ca-certificates.crt`` (CA_BUNDLE: lets pip inside the build reach the index), plus ``common/``:
docker_images/common/, the build fragments InferPerf's own Dockerfiles share (``install.sh``, the pip
install), in every image's context and hash so that editing a fragment rebuilds the images; a
Dockerfile that does not use it builds as before (a vendor folder with its own ``common/`` keeps it).
Unless host.yaml says otherwise (HOST_PIP_CONFIG: false, or PIP_SOURCE,
PIP_WHEELS_DIR, CA_BUNDLE for one setting each), the build inherits this
machine's pip configuration (``host_pip``): its http(s) index URLs, the wheels
of its find-links folders and its cert, so an image builds wherever pip works.

A ByteMLPerf backend folder's requirements.txt follows BACKEND_REQUIREMENTS:
``check`` installs it with the cases' files (one pip call: a pin that cannot
install fails the build with pip's line); ``warn`` installs it line by line and
reports each line that did not install as a warning (``LENIENT_INSTALL``);
``skip`` leaves it out of the image.

Case requirements (spec §3.2.0; not for an engine's own image, which holds all its cases run with): when
cases of this framework have a
``benchmarks/<case>/<framework>/requirements.txt``, a second, generated build
puts them on top of the vendor image (``CASE_LAYER_DOCKERFILE``), with the
image's own torch, numpy, TensorRT and Triton pinned as constraints. The vendor
image keeps its own tag (the hash of its folder); the image the cases run in is
tagged with a hash that also covers every requirement file, so editing one
rebuilds only the layer. Vendors' Dockerfiles need no change for this.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import io
import json
import re
import subprocess
import sys
import tarfile
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
from docker.errors import APIError, BuildError, ImageNotFound
from loguru import logger

from common.errors import one_line
from common.files import hash_file, hash_tree, tree_files

# docker_images/<SHARED_FOLDER>/: the build fragments InferPerf's Dockerfiles share, sent as <SHARED_FOLDER>/ in every
# image's build context (no vendor: vendors are inference_engine/'s folders).
SHARED_FOLDER = "common"


@dataclass(frozen=True)
class ImageSpec:
    vendor: str
    framework: str  # the image folder's name: the cases' framework, or their engine's own image (CaseSpec.image)
    folder: Path
    buildargs: dict[str, str]
    wheels_dir: Path | None = None
    ca_bundle: Path | None = None
    # The cases' requirement files to install on top; None = every case of this
    # framework under the perf dir (docker_images/<vendor>/<framework>/../../..).
    requirements: tuple[Path, ...] | None = None
    # More folders of wheels (this machine's pip find-links), after wheels_dir's.
    wheels_dirs: tuple[Path, ...] = ()
    # host.yaml's BACKEND_REQUIREMENTS for the backend folders' files: check, warn or skip.
    backend_requirements: str = "check"

    @property
    def dockerfile(self) -> Path:
        return self.folder / "Dockerfile"

    @property
    def shared(self) -> Path | None:
        """docker_images/common/ when there is one and the image folder has no ``common/`` of its own."""
        folder = self.folder.parent.parent / SHARED_FOLDER
        return folder if folder.is_dir() and not (self.folder / SHARED_FOLDER).exists() else None

    @property
    def requirement_files(self) -> tuple[Path, ...]:
        from utils.requirements import all_backend_requirement_files, all_requirement_files

        # Every ByteMLPerf backend folder of the vendor brings its requirements.txt too (docs/bytemlperf_migration.md).
        skip = self.backend_requirements == "skip"
        backends = () if skip else tuple(all_backend_requirement_files(self.folder.parents[2], self.vendor))
        if self.requirements is not None:
            return tuple(sorted(self.requirements)) + backends
        return tuple(all_requirement_files(self.folder.parents[2], self.framework)) + backends

    def _wheels(self) -> list[Path]:
        """The .whl files of wheels_dir and wheels_dirs (a name found twice: the first folder's)."""
        found: dict[str, Path] = {}
        for folder in ([self.wheels_dir] if self.wheels_dir is not None else []) + list(self.wheels_dirs):
            for path in sorted(p for p in folder.iterdir() if p.is_file() and p.suffix == ".whl"):
                found.setdefault(path.name, path)
        return [found[name] for name in sorted(found)]

    def _lenient(self, path: Path) -> bool:
        """Installed line by line, each failure a warning: a backend folder's file under BACKEND_REQUIREMENTS: warn."""
        return self.backend_requirements == "warn" and _case_name(path).startswith("backend-")

    def content_hash(self) -> str:
        """The hash in ``tag``: the vendor image's, plus every case requirement file when there are any."""
        vendor = self.vendor_hash()
        files = self.requirement_files
        if not files:
            return vendor
        digest = hashlib.sha256(f"vendor:{vendor}".encode())
        for path in files:
            digest.update(f"{'lenient' if self._lenient(path) else 'requirements'}:{_case_name(path)}".encode())
            hash_file(path, digest)
        return digest.hexdigest()[:16]

    def vendor_hash(self) -> str:
        """Hash of what the vendor Dockerfile's build sees: its folder, docker_images/common/, build args, wheels and CA
        bundle."""
        digest = hashlib.sha256()
        hash_tree([self.folder], suffixes=None, relative_to_parent=False, digest=digest)
        if self.shared is not None:  # its names hash as common/…, apart from the folder's own
            hash_tree([self.shared], suffixes=None, relative_to_parent=True, digest=digest)
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
            if any(self._lenient(path) for path in self.requirement_files):
                _add_bytes(tar, "lenient_install.py", LENIENT_INSTALL.encode())
            for path in self.requirement_files:
                tar.add(path, arcname=f"{'lenient' if self._lenient(path) else 'requirements'}/{_case_name(path)}.txt")
            if self.ca_bundle is not None:
                tar.add(self.ca_bundle, arcname="ca-certificates.crt")

    def write_context(self, target: Path) -> None:
        with tarfile.open(target, "w") as tar:
            for path in tree_files(self.folder):
                tar.add(path, arcname=str(path.relative_to(self.folder)))
            if self.shared is not None:
                for path in tree_files(self.shared):
                    tar.add(path, arcname=f"{SHARED_FOLDER}/{path.relative_to(self.shared)}")
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
    python3 -m pip list --format=freeze | grep -iE '^(torch|numpy|tensorrt[a-z0-9_-]*|triton)==' \
> $d/constraints.txt || true; \\
    set -- ; for f in $d/requirements/*.txt; do if [ -f "$f" ]; then set -- "$@" -r "$f"; fi; done; \\
    if [ $# -gt 0 ]; then python3 -m pip install -c $d/constraints.txt "$@" \\
        || { echo "inferperf: pip could not install the requirements on $(python3 -V 2>&1)"; exit 1; }; fi; \\
    if [ -d $d/lenient ]; then python3 $d/lenient_install.py $d/constraints.txt $d/lenient/*.txt; fi; \\
    rm -rf $d /root/.cache
"""
# BACKEND_REQUIREMENTS: warn, inside the build: each line of each file on its own (pip resolves
# one line at a time, so an uninstallable pin costs only itself), and one WARNING line per line
# that did not install, with what the image has instead; ensure_image repeats them on the host.
LENIENT_INSTALL = """\
import re, subprocess, sys
from importlib import metadata

constraints, files = sys.argv[1], sys.argv[2:]
for path in files:
    name = path.rsplit("/", 1)[-1][: -len(".txt")]
    for raw in open(path, encoding="utf-8"):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        done = subprocess.run([sys.executable, "-m", "pip", "install", "-c", constraints, line], \
capture_output=True, text=True)
        if done.returncode == 0:
            print(f"inferperf: {name}: installed {line}", flush=True)
            continue
        package = re.split(r"[\\s<>=!~;\\[(]", line, maxsplit=1)[0]
        try:
            has = f"the image has {package} {metadata.version(package)}"
        except metadata.PackageNotFoundError:
            has = f"{package} is not in the image"
        errors = [e[len("ERROR: "):] for e in (done.stdout + done.stderr).splitlines() if e.startswith("ERROR: ")]
        errors = [e for e in errors if not e.startswith(("Could not find a version", "ResolutionImpossible"))] or errors
        why = errors[0] if errors else f"pip exited {done.returncode}"
        print(f"inferperf: warning: {name}: {line} not installed ({has}; pip: {why})", flush=True)
"""
LENIENT_WARNING = "inferperf: warning: "  # the start of LENIENT_INSTALL's lines that ensure_image repeats


def _case_name(requirements_file: Path) -> str:
    """benchmarks/<case>/<framework>/requirements.txt -> <case>; inference_engine/<vendor>/<XXX>/requirements.txt ->
    backend-XXX"""
    if requirements_file.parents[2].name == "inference_engine":
        return f"backend-{requirements_file.parent.name}"
    return requirements_file.parent.parent.name


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def ensure_image(
    client: docker.DockerClient,
    spec: ImageSpec,
    host_label: str,
    build_log: Path,
    abort: threading.Event | None = None,
) -> tuple[str, bool]:
    """Return (tag, built): reuse the image if this exact tag exists, else build it. A build stops
    waiting once ``abort`` is set (Ctrl-C: ``_build``)."""
    from common.errors import HostError

    if not spec.dockerfile.is_file():
        raise HostError(f"host {host_label}: no Dockerfile at {spec.dockerfile}")
    tag = spec.tag
    if _reused(client, spec, host_label, build_log):
        return tag, False
    base = spec.buildargs.get("BASE_IMAGE") or _local_default_base(spec.dockerfile)
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
    builder = _Builder(client, spec, host_label, abort)
    if not files or not _exists(client, vendor_tag):
        _build(builder, spec.write_context, vendor_tag, spec.buildargs, spec.dockerfile, build_log)
    if files:
        _build_case_layer(builder, files, build_log)
    logger.info(f"host {host_label}: built image {tag}")
    return tag, True


def _reused(client: docker.DockerClient, spec: ImageSpec, host_label: str, build_log: Path) -> bool:
    """Whether the image of this exact tag exists (then said in the log, with its unmet requirements)."""
    tag = spec.tag
    try:
        image = client.images.get(tag)
    except ImageNotFound:
        return False
    logger.info(f"host {host_label}: reusing image {tag}")
    _note_reused(spec, build_log, tag)
    for line in _unmet_label(image):  # BACKEND_REQUIREMENTS: warn, named at every run as in MODE local
        logger.warning(f"host {host_label}: image {tag}: {line}; going on (BACKEND_REQUIREMENTS: warn)")
    return True


@dataclass(frozen=True)
class _Builder:
    """One host's image builds: its engine, the image's spec, the host's name in every line, and the
    event that Ctrl-C sets."""

    client: Any
    spec: ImageSpec
    host_label: str
    abort: threading.Event | None = None


def _build_case_layer(builder: _Builder, files: tuple[Path, ...], build_log: Path) -> None:
    """The cases' requirements on top of the vendor's image, its unmet ones (BACKEND_REQUIREMENTS: warn)
    said and kept on the image's label."""
    spec, host_label, tag = builder.spec, builder.host_label, builder.spec.tag
    cases = ", ".join(_case_name(f) for f in files)
    logger.info(f"host {host_label}: installing the requirements of {cases} on top of {spec.vendor_tag}")
    layer_log = build_log.with_name(f"{build_log.stem}_cases{build_log.suffix}")
    _build(
        builder,
        spec.write_case_layer_context,
        tag,
        spec.case_layer_buildargs(),
        f"the requirements of {cases}",
        layer_log,
    )
    unmet = lenient_warnings(layer_log)
    for line in unmet:
        logger.warning(f"host {host_label}: image {tag}: {line}; going on (BACKEND_REQUIREMENTS: warn)")
    if unmet:
        _label_unmet(builder.client, tag, unmet)


UNMET_LABEL = "inferperf.unmet-requirements"  # the layer's warnings, kept on the image for the runs that reuse it


def _label_unmet(client: docker.DockerClient, tag: str, unmet: list[str]) -> None:
    """Put ``unmet`` on the image as a label (a label-only build on top of it, under the same tag)."""
    try:
        client.images.build(
            fileobj=io.BytesIO(f"FROM {tag}\n".encode()),
            tag=tag,
            labels={UNMET_LABEL: json.dumps(unmet)},
            rm=True,
            forcerm=True,
        )
    except (APIError, BuildError) as exc:  # the warnings were shown; only later runs would miss them
        logger.debug(f"image {tag}: the unmet requirements were not kept as a label: {exc}")


def _unmet_label(image) -> list[str]:
    try:
        lines = json.loads((getattr(image, "labels", None) or {}).get(UNMET_LABEL, "[]"))
    except (ValueError, TypeError):
        return []
    return [str(line) for line in lines] if isinstance(lines, list) else []


def lenient_warnings(build_log: Path) -> list[str]:
    """LENIENT_INSTALL's warning lines in a build log, without their prefix."""
    try:
        text = build_log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return [
        line.strip()[len(LENIENT_WARNING) :] for line in text.splitlines() if line.strip().startswith(LENIENT_WARNING)
    ]


@dataclass(frozen=True)
class HostPip:
    """This machine's pip configuration as an image build can use it (``host_pip``)."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    trusted_hosts: tuple[str, ...] = ()
    find_links: tuple[Path, ...] = ()  # local folders of wheels
    cert: Path | None = None
    unusable: tuple[str, ...] = ()  # settings a container cannot reach (file:// indexes, URLs of find-links)
    failure: str | None = None  # why pip's configuration could not be read: nothing is inherited

    def describe(self) -> str:
        if self.failure:
            return f"nothing: {self.failure}"
        parts = [f"index {self.index_url}"] if self.index_url else []
        parts += [f"extra index {url}" for url in self.extra_index_urls]
        parts += [f"find-links {folder}" for folder in self.find_links]
        parts += [f"cert {self.cert}"] if self.cert else []
        return ", ".join(parts) or "nothing a build can use"


# pip's own precedence among `pip config list`'s sections: environment, then the install command's, then global.
_PIP_SECTIONS = {":env:": 3, "install": 2, "global": 1}


_HOST_PIP_LOCK = threading.Lock()


def host_pip(python: str = sys.executable) -> HostPip:
    """``read_host_pip``, once a run: the hosts' sessions ask at once (utils/executors/docker.py), and
    each ``pip config list`` is a Python process."""
    with _HOST_PIP_LOCK:
        return _cached_host_pip(python)


@functools.lru_cache(maxsize=4)
def _cached_host_pip(python: str) -> HostPip:
    return read_host_pip(python)


PIP_CONFIG_TIMEOUT_S = 120.0


def _pip_config_list(python: str) -> tuple[str | None, str]:
    """``python -m pip config list``'s output, or None and why not. A run that exits non-zero or
    cannot start is asked once more, since such a failure can pass; one that outlives its timeout
    is not, since a second wait would double the delay and is unlikely to end differently."""
    why = ""
    for _ in range(2):
        try:
            proc = subprocess.run(
                [python, "-m", "pip", "config", "list"],
                capture_output=True,
                text=True,
                timeout=PIP_CONFIG_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return None, f"did not answer within {PIP_CONFIG_TIMEOUT_S:g} s"
        except (OSError, subprocess.SubprocessError) as exc:
            why = one_line(exc)
            continue
        if proc.returncode == 0:
            return proc.stdout, ""
        why = f"exit {proc.returncode}: {(proc.stderr.strip().splitlines() or ['no output'])[-1]}"
    return None, f"failed twice ({why})"


def read_host_pip(python: str = sys.executable) -> HostPip:
    """``python -m pip config list``, read as pip reads it (PIP_* variables over the install
    section over global), keeping what a container build can reach: http(s) index URLs and
    trusted hosts as build arguments, find-links folders as wheels, the cert file."""
    listed, why = _pip_config_list(python)
    if listed is None:
        return HostPip(failure=f"`{python} -m pip config list` {why}")
    values: dict[str, tuple[int, str]] = {}
    for line in listed.splitlines():
        key, sep, raw = line.partition("=")
        section, _, name = key.rpartition(".")
        rank = _PIP_SECTIONS.get(section)
        if not sep or rank is None:
            continue
        try:
            value = str(ast.literal_eval(raw.strip()))
        except (ValueError, SyntaxError):
            continue
        if rank > values.get(name, (0, ""))[0]:
            values[name] = (rank, value)
    get = {name: value.split() for name, (_, value) in values.items()}
    web = ("http://", "https://")
    unusable: list[str] = []
    index = next(iter(get.get("index-url", [])), None)
    if index is not None and not index.startswith(web):
        unusable.append(f"index-url {index}")
        index = None
    extra = tuple(u for u in get.get("extra-index-url", []) if u.startswith(web))
    unusable += [f"extra-index-url {u}" for u in get.get("extra-index-url", []) if not u.startswith(web)]
    folders = []
    for entry in get.get("find-links", []):
        folder = Path(entry.removeprefix("file://"))
        if not entry.startswith(web) and folder.is_dir():
            folders.append(folder)
        else:
            unusable.append(f"find-links {entry}")
    cert = Path(values["cert"][1]) if "cert" in values and Path(values["cert"][1]).is_file() else None
    return HostPip(index, extra, tuple(get.get("trusted-host", [])), tuple(folders), cert, tuple(unusable))


def _note_reused(spec: ImageSpec, build_log: Path, tag: str) -> None:
    """A reused image's build logs say what it was built from (its tag is the hash of exactly that)."""
    _write_build_log(build_log, [{"stream": f"reused image {spec.vendor_tag}, built earlier from {spec.dockerfile}"}])
    if spec.requirement_files:
        names = ", ".join(f"requirements/{_case_name(f)}.txt" for f in spec.requirement_files)
        note = f"reused image {tag}, built earlier from {names} on top of {spec.vendor_tag}"
        _write_build_log(build_log.with_name(f"{build_log.stem}_cases{build_log.suffix}"), [{"stream": note}])


def _local_default_base(dockerfile: Path) -> str | None:
    """The Dockerfile's ``ARG BASE_IMAGE=`` default when it is one of InferPerf's own images
    (``inferperf/…``, made by scripts/build_base_image.sh and in no registry): a machine without
    it gets that script's name instead of the engine's failed pull. Other defaults may be pulled."""
    match = re.search(
        r"^\s*ARG\s+BASE_IMAGE=(\S+)", dockerfile.read_text(encoding="utf-8", errors="replace"), re.MULTILINE
    )
    return match.group(1) if match and match.group(1).startswith("inferperf/") else None


def _exists(client: docker.DockerClient, tag: str) -> bool:
    try:
        client.images.get(tag)
        return True
    except ImageNotFound:
        return False


BUILD_POLL_S = 0.25  # how often a build's wait looks at the run's abort


def _build(builder: _Builder, write_context, tag: str, buildargs: dict, what, build_log: Path) -> None:
    """Build ``tag``. The Docker SDK's build blocks until the engine ends it, minutes with no word
    in between, so it runs on a daemon thread and this one waits, looking at ``abort``: on Ctrl-C
    it raises at once. The engine then drops the build (and, ``forcerm``, its container) when the
    connection closes, which is when run.py exits: nothing waits on the daemon thread."""
    from common.errors import HostError

    client, spec, host_label, abort = builder.client, builder.spec, builder.host_label, builder.abort
    with tempfile.TemporaryDirectory(prefix="inferperf-ctx-") as tmp:
        context = Path(tmp) / "context.tar"
        write_context(context)
        try:
            handle = open(context, "rb")  # closed by the build's thread, which may outlive this call
            stream = _wait_for_build(
                abort,
                f"host {host_label}: building {what} interrupted: the engine drops the build as run.py exits",
                handle,
                lambda: client.images.build(
                    fileobj=handle,
                    custom_context=True,
                    tag=tag,
                    buildargs=buildargs,
                    network_mode="host",
                    rm=True,
                    forcerm=True,
                    labels={"inferperf.vendor": spec.vendor, "inferperf.framework": spec.framework},
                )[1],
            )
            _write_build_log(build_log, stream)
        except BuildError as exc:
            chunks = list(exc.build_log or ())  # an iterator: read once, for the log and for pip's own words
            _write_build_log(build_log, chunks)
            detail = _pip_failure(chunks) or exc.msg.strip().splitlines()[-1]
            raise HostError(f"host {host_label}: building {what} failed: {detail} (build log: {build_log})") from None
        except APIError as exc:
            raise HostError(f"host {host_label}: building {what} failed: {exc.explanation or exc}") from None


def _wait_for_build(abort: threading.Event | None, interrupted: str, handle, build):
    """``build()``'s value (or its exception), run on a daemon thread that closes ``handle`` when it
    ends; a ``HostError`` saying ``interrupted`` as soon as ``abort`` is set."""
    from common.errors import HostError

    outcome: dict = {}

    def run() -> None:
        try:
            outcome["value"] = build()
        except BaseException as exc:  # handed to the waiting thread, which raises it
            outcome["error"] = exc
        finally:
            handle.close()

    thread = threading.Thread(target=run, name="image-build", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(BUILD_POLL_S)
        if abort is not None and abort.is_set() and thread.is_alive():
            raise HostError(interrupted)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _pip_failure(chunks: list) -> str | None:
    """pip's last ERROR line in a failed build (e.g. no distribution of a pin for the image's Python), with that
    Python."""
    text = "".join(str(chunk.get("stream") or chunk.get("error") or "") for chunk in chunks)
    lines = [line.strip() for line in re.sub(r"\x1b\[[0-9;]*m", "", text).splitlines()]  # pip colours its errors
    errors = [line[len("ERROR: ") :] for line in lines if line.startswith("ERROR: ")]
    python = next(
        (line.split(" on ", 1)[1] for line in lines if line.startswith("inferperf: pip could not install")), None
    )
    if not errors:
        return None
    # The line that names the requirement, not the version list before it nor the resolver's "ResolutionImpossible"
    # after.
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
