"""docker_images/common/: the build fragments InferPerf's Dockerfiles share (install.sh), sent in every image's
build context as common/ and covered by its tag (utils/executors/images.py), without making a vendor of it."""

from __future__ import annotations

import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.conftest import INFERENCE

DOCKERFILES = sorted((INFERENCE / "docker_images").glob("*/*/Dockerfile"))
FRAGMENT = re.compile(r"/tmp/ctx/common/(\S+\.sh)")


def spec_of(folder: Path):
    from utils.executors.images import ImageSpec

    return ImageSpec(vendor=folder.parent.name, framework=folder.name, folder=folder, buildargs={}, requirements=())


def context_names(spec, tmp_path: Path) -> dict[str, bytes]:
    target = tmp_path / f"{spec.vendor}-{spec.framework}.tar"
    spec.write_context(target)
    with tarfile.open(target) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def test_every_dockerfile_of_inferperf_runs_the_shared_fragment_and_its_context_carries_it(tmp_path):
    shared = INFERENCE / "docker_images" / "common"
    assert {f.parent.relative_to(INFERENCE / "docker_images").as_posix() for f in DOCKERFILES} >= {
        "cpu/pytorch",
        "cpu/vllm",
        "cpu/llamacpp",
        "nvidia/pytorch",
        "nvidia/vllm",
    }
    for dockerfile in DOCKERFILES:
        used = set(FRAGMENT.findall(dockerfile.read_text(encoding="utf-8")))
        assert used == {"install.sh"}, dockerfile
        names = context_names(spec_of(dockerfile.parent), tmp_path)
        assert names["Dockerfile"] == dockerfile.read_bytes() and names["requirements.txt"]
        for script in used:
            assert names[f"common/{script}"] == (shared / script).read_bytes(), dockerfile


def test_the_fragment_parses_in_sh_and_names_a_bad_mode(tmp_path):
    script = INFERENCE / "docker_images" / "common" / "install.sh"
    assert subprocess.run(["sh", "-n", str(script)], capture_output=True).returncode == 0
    done = subprocess.run(["sh", str(script), "nonsense"], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == "inferperf: install.sh: unknown mode 'nonsense' (venv, download or system)"


@pytest.fixture
def images(tmp_path) -> Path:
    """A copy of docker_images/ that a test may change."""
    return Path(shutil.copytree(INFERENCE / "docker_images", tmp_path / "inference" / "docker_images"))


def test_editing_the_fragment_changes_every_images_tag(images):
    specs = [spec_of(images / "cpu" / "pytorch"), spec_of(images / "nvidia" / "vllm")]
    before = [spec.vendor_hash() for spec in specs]
    assert [spec_of(spec.folder).vendor_hash() for spec in specs] == before  # stable
    (images / "common" / "install.sh").write_text("#!/bin/sh\nexit 0\n")
    after = [spec.vendor_hash() for spec in specs]
    assert all(a != b for a, b in zip(before, after))
    # The tag is the hash of the context: the fragment moved into the folder, as its own common/, sends the same.
    shutil.move(str(images / "common"), str(images / "cpu" / "pytorch" / "common"))
    assert spec_of(images / "cpu" / "pytorch").vendor_hash() == after[0]
    (images / "cpu" / "pytorch" / "common" / "install.sh").rename(images / "cpu" / "pytorch" / "common" / "other.sh")
    assert spec_of(images / "cpu" / "pytorch").vendor_hash() != after[0]


def test_a_vendor_folder_keeps_its_own_common_and_a_tree_without_the_fragment_builds_as_before(images, tmp_path):
    own = images / "cpu" / "pytorch" / "common"
    own.mkdir()
    (own / "install.sh").write_text("echo the vendor's own\n")
    names = context_names(spec_of(images / "cpu" / "pytorch"), tmp_path)
    assert names["common/install.sh"] == b"echo the vendor's own\n"
    # FlagPerf's layout, with no docker_images/common/: the folder alone, as before the fragment.
    flagperf = tmp_path / "flagperf" / "docker_images" / "acme" / "pytorch"
    flagperf.mkdir(parents=True)
    (flagperf / "Dockerfile").write_text("FROM scratch\n")
    spec = spec_of(flagperf)
    assert spec.shared is None and set(context_names(spec, tmp_path)) == {"Dockerfile"}


def test_the_shared_folder_is_no_vendor():
    from contract.registry import vendor_names
    from entry.checks import list_available

    assert "common" not in vendor_names()
    assert "common" not in list_available(INFERENCE).split("vendors", 1)[1]


@pytest.mark.docker
def test_the_nvidia_dockerfiles_parse_and_reach_the_fragment_on_the_engine(tmp_path):
    """The nvidia images cannot be built here (their bases are in registries, and need a GPU): the real engine
    parses each Dockerfile and runs it up to the fragment's RUN on an empty base (``scratch``, no shell), so a
    parse error, a bad COPY or a missing fragment fails before that step."""
    from docker.errors import APIError, BuildError

    from tests.infra.docker_env import InfraUnavailable, ensure_docker, require

    try:
        client = ensure_docker()
    except InfraUnavailable as exc:
        require(False, f"Docker engine unavailable: {exc}")
    for vendor_image in ("nvidia/pytorch", "nvidia/vllm"):
        spec = spec_of(INFERENCE / "docker_images" / vendor_image)
        target = tmp_path / "context.tar"
        spec.write_context(target)
        with open(target, "rb") as handle, pytest.raises(BuildError) as failed:
            client.images.build(
                fileobj=handle, custom_context=True, buildargs={"BASE_IMAGE": "scratch"}, rm=True, forcerm=True
            )
        log = "".join(str(chunk.get("stream") or chunk.get("error") or "") for chunk in failed.value.build_log)
        steps = re.findall(r"^Step \d+/\d+ : (.*)$", log, re.MULTILINE)
        assert steps[-1].startswith("RUN set -eu; sh /tmp/ctx/common/install.sh system '^("), (vendor_image, log)
        assert "COPY . /tmp/ctx" in steps and "/bin/sh" in failed.value.msg, (vendor_image, failed.value.msg)
        assert not isinstance(failed.value, APIError)
