"""Containers on one machine (issue 32): HOSTS: ["localhost"] with MODE docker is a one-line change
of the shipped host.yaml. The image build inherits this machine's pip configuration (index URLs,
find-links, cert) unless host.yaml says otherwise; a loopback address is SSH, and its errors say
"localhost"; a ByteMLPerf backend's requirements layer follows BACKEND_REQUIREMENTS: warn.
The docker tests use a real engine and a real pip (no PIP_WHEELS_DIR, no CA_BUNDLE)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from common.errors import ConfigError
from tests.conftest import copy_inference_tree
from tests.infra.docker_session import (  # noqa: F401 - session fixtures shared with the other docker tests
    assert_nothing_left,
    digits_data,
    docker_client,
    wheels_dir,
)
from tests.measure_config import CHEAP_SET

INFERENCE = Path(__file__).resolve().parents[1] / "inference"
SYSTEM_CA = "/etc/ssl/certs/ca-certificates.crt"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "bytemlperf"


def pip_env(tmp_path: Path, pip_conf: str) -> dict[str, str]:
    """This process's environment with a pip configured by ``pip_conf`` alone: no PIP_* variables,
    no user configuration (HOME elsewhere); the system's global files still apply, as for a user."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    conf = tmp_path / "pip.conf"
    conf.write_text(pip_conf)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k != "XDG_CONFIG_HOME"}
    return {**env, "HOME": str(home), "PIP_CONFIG_FILE": str(conf)}


# ---- this machine's pip, as a build can use it ----------------------------------------------------------


def test_host_pip_reads_pips_own_precedence_and_keeps_what_a_build_can_reach(tmp_path, monkeypatch):
    from utils.executors.images import read_host_pip

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    text = (
        f"[global]\nfind-links = {wheels} https://example.org/links\ncert = {SYSTEM_CA}\n"
        "index-url = file:///opt/pypi/simple\nextra-index-url = https://download.pytorch.org/whl/cpu file:///opt/pypi-more/simple\n"
        "[install]\nindex-url = https://pypi.example.org/simple\ntrusted-host = pypi.example.org\n"
    )
    for key, value in pip_env(tmp_path, text).items():
        monkeypatch.setenv(key, value)
    for key in [k for k in os.environ if k.startswith("PIP_") and k != "PIP_CONFIG_FILE"]:
        monkeypatch.delenv(key)
    pip = read_host_pip(sys.executable)
    assert pip.index_url == "https://pypi.example.org/simple"  # [install] wins over [global]
    assert pip.extra_index_urls == ("https://download.pytorch.org/whl/cpu",)
    assert pip.trusted_hosts == ("pypi.example.org",)
    assert pip.find_links == (wheels,) and pip.cert == Path(SYSTEM_CA)
    assert pip.unusable == ("extra-index-url file:///opt/pypi-more/simple", "find-links https://example.org/links")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))  # a PIP_* variable wins over every file
    assert read_host_pip(sys.executable).find_links == (tmp_path,)


def flaky_python(tmp_path: Path, failures: int) -> Path:
    """A ``python`` whose first ``failures`` runs exit 3 with a line on stderr; then this interpreter."""
    count = tmp_path / "runs"
    script = tmp_path / "python"
    script.write_text(
        "#!/bin/sh\n"
        f'echo x >> "{count}"\n'
        f'if [ "$(wc -l < "{count}")" -le {failures} ]; then echo "pip: refused" >&2; exit 3; fi\n'
        f'exec "{sys.executable}" "$@"\n'
    )
    script.chmod(0o755)
    return script


def test_a_pip_config_list_that_fails_once_is_asked_again(tmp_path, monkeypatch):
    from utils.executors.images import read_host_pip

    for key, value in pip_env(tmp_path, f"[global]\nfind-links = {tmp_path}\ncert = {SYSTEM_CA}\n").items():
        monkeypatch.setenv(key, value)
    for key in [k for k in os.environ if k.startswith("PIP_") and k != "PIP_CONFIG_FILE"]:
        monkeypatch.delenv(key)
    pip = read_host_pip(str(flaky_python(tmp_path, failures=1)))
    assert pip.failure is None and pip.find_links == (tmp_path,) and pip.cert == Path(SYSTEM_CA)
    assert (tmp_path / "runs").read_text().count("x") == 2


def test_a_pip_config_list_that_keeps_failing_is_said_not_taken_for_an_empty_configuration(tmp_path):
    from utils.executors.images import read_host_pip

    python = flaky_python(tmp_path, failures=2)
    pip = read_host_pip(str(python))
    assert pip.describe() == f"nothing: `{python} -m pip config list` failed twice (exit 3: pip: refused)"
    assert (pip.find_links, pip.cert, pip.index_url) == ((), None, None)
    missing = read_host_pip(str(tmp_path / "no-python"))
    assert missing.failure is not None and missing.failure.startswith(
        f"`{tmp_path / 'no-python'} -m pip config list` failed twice ("
    )


def test_a_pip_config_list_that_hangs_is_said_once_not_asked_again(tmp_path, monkeypatch):
    import utils.executors.images as images

    count = tmp_path / "runs"
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\necho x >> "{count}"\nexec sleep 60\n')
    python.chmod(0o755)
    monkeypatch.setattr(images, "PIP_CONFIG_TIMEOUT_S", 0.5)
    pip = images.read_host_pip(str(python))
    assert pip.describe() == f"nothing: `{python} -m pip config list` did not answer within 0.5 s"
    assert count.read_text().count("x") == 1


# ---- host.yaml on one machine ---------------------------------------------------------------------------


def one_machine_yaml(tmp_path: Path, **changes) -> Path:
    """The shipped host.yaml with ``changes`` (MODE docker etc.), results under tmp_path."""
    config = yaml.safe_load((INFERENCE / "configs" / "host.yaml").read_text())
    config.update({"FLAGPERF_LOG_PATH": str(tmp_path / "result"), **changes})
    path = tmp_path / "host.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_the_shipped_host_yaml_needs_only_mode_docker(tmp_path):
    from utils.host_config import load_host_config

    config = load_host_config(one_machine_yaml(tmp_path, MODE="docker"), INFERENCE)
    assert [h.label for h in config.hosts] == ["localhost"] and config.in_container
    data = {spec.key: spec.data_dir for spec in config.cases}
    assert data["digits:pytorch"] == str(
        (INFERENCE.parent / "data" / "digits").resolve()
    )  # relative paths: this machine's


def test_a_loopback_address_is_ssh_and_its_error_says_localhost(tmp_path):
    from utils.host_config import load_host_config

    path = one_machine_yaml(
        tmp_path,
        MODE="docker",
        HOSTS=["127.0.0.1"],
        KNOWN_HOSTS=str(tmp_path / "none"),
        CASES={"digits:pytorch": "/data"},
    )
    with pytest.raises(ConfigError) as info:
        load_host_config(path, INFERENCE)
    assert str(info.value) == (
        f"{path}: key 'KNOWN_HOSTS' {tmp_path / 'none'} does not exist: add the hosts' keys (ssh-keyscan, checked) "
        "or set "
        'TRUST_ON_FIRST_USE: true; 127.0.0.1 is this machine: HOSTS: ["localhost"] drives its Docker engine without SSH'
    )
    relative = one_machine_yaml(tmp_path, MODE="docker", HOSTS=["127.0.0.1"], TRUST_ON_FIRST_USE=True)
    with pytest.raises(ConfigError, match="must be an absolute path on the hosts"):
        load_host_config(relative, INFERENCE)


def test_an_unreachable_loopback_host_says_localhost():
    from utils.executors.ssh import SshHost
    from utils.host_config import Host

    with pytest.raises(Exception) as info:
        SshHost(Host("127.0.0.9", 22), "root", None, "/nonexistent", trust_on_first_use=True).connect()
    assert str(info.value).startswith("host 127.0.0.9: unreachable on port 22: ")
    assert str(info.value).endswith('; for this machine\'s Docker engine without SSH, write HOSTS: ["localhost"]')
    with pytest.raises(Exception) as info:  # an sshd on a port of its own is meant: no hint
        SshHost(Host("127.0.0.9", 1), "root", None, "/nonexistent", trust_on_first_use=True).connect()
    assert str(info.value).startswith("host 127.0.0.9:1: unreachable on port 1: ") and "localhost" not in str(
        info.value
    )


# ---- the image, built from this machine's pip configuration ------------------------------------------------


def run_py(perf: Path, config: Path, env: dict, *extra: str) -> tuple[int, str]:
    proc = subprocess.run(
        [sys.executable, "run.py", "--config", str(config), *CHEAP_SET, *extra],
        cwd=perf,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=1800,
    )
    return proc.returncode, proc.stdout


@pytest.mark.docker
@pytest.mark.slow
def test_image_builds_from_a_host_pip_with_only_find_links_and_a_cert(tmp_path, digits_data, wheels_dir, docker_client):
    perf = copy_inference_tree(tmp_path / "inference")
    dockerfile = perf / "docker_images" / "cpu" / "pytorch" / "Dockerfile"
    # A Dockerfile no engine has built, so this test builds the image; the label marks every image
    # of the builder stage (untagged, about 1 GB) so that the test removes them too.
    token = uuid.uuid4().hex
    builder = "FROM ${BASE_IMAGE} AS builder\n"
    assert builder in dockerfile.read_text()
    dockerfile.write_text(dockerfile.read_text().replace(builder, f"{builder}LABEL inferperf.test={token}\n", 1))
    env = pip_env(tmp_path, f"[global]\nfind-links = {wheels_dir}\ncert = {SYSTEM_CA}\n")
    workdir = tmp_path / "remote"
    config = one_machine_yaml(
        tmp_path,
        MODE="docker",
        CASES={"digits:pytorch": str(digits_data)},
        REMOTE_WORKDIR=str(workdir),
        SHM_SIZE="256m",
        FLAGPERF_LOG_LEVEL="DEBUG",
    )
    tags: list[str] = []
    try:
        code, out = run_py(perf, config, env, "--set", "compile_only=true")
        tags += [line.split("building image ")[1].split()[0] for line in out.splitlines() if "building image " in line]
        assert code == 0, out[-4000:]
        assert tags, out[-3000:]
        assert f"inherits this machine's pip configuration (find-links {wheels_dir}, cert {SYSTEM_CA})" in out
        build_log = "".join(p.read_text() for p in (tmp_path / "result").glob("run*/build_localhost.log"))
        assert "torch-2.13.0+cpu" in build_log and "/tmp/ctx/wheels" in build_log, build_log[-3000:]
        assert_nothing_left(docker_client, workdir)

        # The control: the same machine with HOST_PIP_CONFIG: false has no torch CPU wheel to build from.
        off = one_machine_yaml(
            tmp_path,
            MODE="docker",
            CASES={"digits:pytorch": str(digits_data)},
            REMOTE_WORKDIR=str(workdir),
            HOST_PIP_CONFIG=False,
        )
        code, out = run_py(perf, off, env, "--set", "compile_only=true")
        tags += [line.split("building image ")[1].split()[0] for line in out.splitlines() if "building image " in line]
        assert code == 1, out[-4000:]
        assert (
            "No matching distribution found for torch==2.13.0+cpu" in out
            or "Could not find a version that satisfies" in out
        ), out[-3000:]
    finally:
        for tag in tags:  # this test's images only: their Dockerfile is this test's
            with contextlib.suppress(Exception):
                docker_client.images.remove(tag, force=True)
        for image in docker_client.images.list(all=True, filters={"label": f"inferperf.test={token}"}):
            with contextlib.suppress(Exception):
                docker_client.images.remove(image.id, force=True)


@pytest.mark.docker
@pytest.mark.slow
def test_backend_requirements_warn_installs_what_it_can_and_names_the_rest(
    tmp_path, digits_data, wheels_dir, docker_client
):
    perf = copy_inference_tree(tmp_path / "inference")
    backend = perf / "inference_engine" / "cpu" / "ORTCPU"
    shutil.copytree(FIXTURES / "ORTCPU", backend)
    # ByteMLPerf's CPU backend's pins; the comment makes a layer no engine has built (warnings come from the build).
    (backend / "requirements.txt").write_text(
        f"# test {uuid.uuid4().hex}\nnumpy==1.19.2\ntensorflow==2.4.0\nonnxruntime\n"
    )
    vendor_config = perf / "configs" / "digits" / "vendor_config" / "cpu_configurations.yaml"
    vendor_config.write_text(
        vendor_config.read_text() + "compiler: ORTCPU\ngraph_level: extended\ninteract_info:\n  calibrate: true\n"
    )
    env = pip_env(tmp_path, f"[global]\nfind-links = {wheels_dir}\ncert = {SYSTEM_CA}\n")
    workdir = tmp_path / "remote"
    config = one_machine_yaml(
        tmp_path,
        MODE="docker",
        CASES={"digits:pytorch": str(digits_data)},
        REMOTE_WORKDIR=str(workdir),
        SHM_SIZE="256m",
        BACKEND_REQUIREMENTS="warn",
    )
    layer_tags: list[str] = []
    try:
        code, out = run_py(perf, config, env, "--set", "compile_only=true")
        layer_tags += [line.split("built image ")[1].split()[0] for line in out.splitlines() if "built image " in line]
        assert code == 0, out[-4000:]
        warnings = [
            line.split("| WARNING | ")[1] for line in out.splitlines() if "| WARNING | host localhost: image " in line
        ]
        assert len(warnings) == 2, out[-4000:]
        assert (
            "backend-ORTCPU: numpy==1.19.2 not installed (the image has numpy 2." in warnings[0]
            and "Cannot install numpy==1.19.2" in warnings[0]
        )
        assert (
            "backend-ORTCPU: tensorflow==2.4.0 not installed (tensorflow is not in the image; pip: No matching "
            "distribution found" in warnings[1]
        )
        assert all(w.endswith("; going on (BACKEND_REQUIREMENTS: warn)") for w in warnings)
        layer_log = "".join(p.read_text() for p in (tmp_path / "result").glob("run*/build_localhost_cases.log"))
        assert "inferperf: backend-ORTCPU: installed onnxruntime" in layer_log, layer_log[-2000:]
        assert_nothing_left(docker_client, workdir)
        # The next run reuses the image, and names the same pins again (kept on the image as a label).
        code, again = run_py(perf, config, env, "--set", "compile_only=true")
        assert code == 0 and f"reusing image {layer_tags[-1]}" in again, again[-4000:]
        assert [
            line.split("| WARNING | ")[1] for line in again.splitlines() if "| WARNING | host localhost: image " in line
        ] == warnings
    finally:
        for tag in layer_tags:
            with contextlib.suppress(Exception):
                docker_client.images.remove(tag, force=True)  # the layer only: the vendor image beneath is shared


# ---- SIGKILL of the pipeline in its container: the run's end sweeps this machine's cache ------------------


def case_pipeline(docker_client, workdir: Path):
    """The run_inference.py process of this test's case container (its mounts lie under ``workdir``), or None."""
    import psutil

    for container in docker_client.containers.list(ignore_removed=True, filters={"label": "inferperf.run"}):
        if not any(Path(m.get("Source", "/")).is_relative_to(workdir) for m in container.attrs.get("Mounts", [])):
            continue
        with contextlib.suppress(psutil.Error, KeyError):
            init = psutil.Process(container.attrs["State"]["Pid"])
            for process in (init, *init.children(recursive=True)):
                if "run_inference.py" in " ".join(process.cmdline()):
                    return process
    return None


@pytest.mark.docker
@pytest.mark.slow
def test_sigkill_of_the_pipeline_in_its_container_leaves_nothing_after_run_py(
    tmp_path, digits_data, wheels_dir, docker_client
):
    perf = copy_inference_tree(tmp_path / "inference")
    workdir = tmp_path / "remote"
    onnxs = workdir / "onnxs"
    config = one_machine_yaml(
        tmp_path,
        MODE="docker",
        CASES={"digits:pytorch": str(digits_data)},
        REMOTE_WORKDIR=str(workdir),
        SHM_SIZE="256m",
        PIP_WHEELS_DIR=str(wheels_dir),
        CA_BUNDLE=SYSTEM_CA,
    )
    for _attempt in range(5):
        for old in onnxs.glob("digits_*") if onnxs.is_dir() else []:  # cached weights stay: the export runs again
            old.unlink()
        proc = subprocess.Popen(
            [sys.executable, "run.py", "--config", str(config), *CHEAP_SET, "--set", "compile_only=true"],
            cwd=perf,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        killed = None
        while proc.poll() is None and killed is None:
            if onnxs.is_dir() and any(
                p.name.startswith(".digits_") and p.name.endswith(".tmp") for p in onnxs.iterdir()
            ):
                killed = case_pipeline(docker_client, workdir)
                if killed is not None:
                    killed.kill()
            time.sleep(0.005)
        out, _ = proc.communicate(timeout=1200)
        if killed is not None and "removed 1 temporary file(s) left by killed pipelines" in out:
            break
    else:
        pytest.fail("never caught the pipeline writing its export or engine in 5 runs")
    assert proc.returncode == 1, out[-3000:]
    assert f"host localhost: removed 1 temporary file(s) left by killed pipelines in {onnxs}: .digits_" in out, out[
        -3000:
    ]
    assert not [p.name for p in onnxs.iterdir() if p.name.endswith(".tmp")]
    assert_nothing_left(docker_client, workdir)


@pytest.mark.docker
def test_a_missing_inferperf_base_image_names_the_script_before_any_build(tmp_path, docker_client):
    """The Dockerfile's own default base (no BASE_IMAGE in host.yaml) is one of InferPerf's, in no registry."""
    from common.errors import HostError
    from utils.executors.images import ImageSpec, ensure_image

    folder = tmp_path / "docker_images" / "acme" / "pytorch"
    folder.mkdir(parents=True)
    base = f"inferperf/no-such-base:{uuid.uuid4().hex[:12]}"
    (folder / "Dockerfile").write_text(f"ARG BASE_IMAGE={base}\nFROM ${{BASE_IMAGE}}\n")
    spec = ImageSpec("acme", "pytorch", folder, {}, requirements=())
    with pytest.raises(HostError) as info:
        ensure_image(docker_client, spec, "localhost", tmp_path / "build.log")
    assert str(info.value) == (
        f"host localhost: base image {base} not found on its engine and no registry is assumed; build it with "
        "scripts/build_base_image.sh on that host"
    )
    assert not (tmp_path / "build.log").exists()


@pytest.mark.docker
def test_a_missing_data_dir_on_this_machine_fails_before_the_image_build(tmp_path, docker_client):
    perf = copy_inference_tree(tmp_path / "inference")
    dockerfile = perf / "docker_images" / "cpu" / "pytorch" / "Dockerfile"
    dockerfile.write_text(
        dockerfile.read_text() + f"# test build {uuid.uuid4().hex}\n"
    )  # an image no engine has: it would build
    missing = tmp_path / "no-data"
    config = one_machine_yaml(
        tmp_path, MODE="docker", CASES={"digits:pytorch": str(missing)}, REMOTE_WORKDIR=str(tmp_path / "remote")
    )
    code, out = run_py(perf, config, dict(os.environ))
    assert code == 1, out[-3000:]
    assert "building image" not in out, out[-3000:]
    assert (
        f"FAILED digits:pytorch on host localhost at step data: host localhost: data dir {missing} for "
        "digits:pytorch does not exist" in out
    )
