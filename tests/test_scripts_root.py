"""scripts/root.sh: the README's two commands need no `sudo` typed.

As root (a minimal image has no sudo binary) the scripts run as they are; as a
user they run the root steps again under sudo; with neither, one line and exit 1.
Root and "a user without sudo" are real here (setpriv to nobody, a PATH holding
every command of this machine but sudo); "a user with sudo" is a real sudo and a
real user in a container of the base image, where sudo is apt-installed.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts"
NOBODY = 65534

PROBE = """\
set -euo pipefail
source {root_sh}
as_root "${{BASH_SOURCE[0]}}" "$@"
echo "uid=$(id -u) args=$* torch=${{TORCH_INDEX_URL:-unset}} other=${{OTHER:-unset}}"
root_run id -u
"""


@pytest.fixture
def open_dir():
    """A folder another user can read (pytest's own are root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="inferperf-root-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


@pytest.fixture(scope="module")
def no_sudo_path():
    """A PATH with every command of this machine's PATH but sudo: a minimal image's."""
    bin_dir = Path(tempfile.mkdtemp(prefix="inferperf-bin-"))
    bin_dir.chmod(0o755)
    for folder in os.environ.get("PATH", "/usr/bin:/bin").split(":") + ["/usr/sbin", "/sbin"]:
        if not os.path.isdir(folder):
            continue
        for entry in os.scandir(folder):
            target = bin_dir / entry.name
            if entry.name != "sudo" and not target.exists() and os.access(entry.path, os.X_OK):
                target.symlink_to(entry.path)
    yield str(bin_dir)
    shutil.rmtree(bin_dir)


def _closed_folder(path: Path) -> Path | None:
    """The first folder above ``path`` that other users cannot enter (no x bit for others), or None."""
    for folder in reversed(path.parents):
        if not folder.stat().st_mode & stat.S_IXOTH:
            return folder
    return None


@pytest.fixture
def scripts_open_to_nobody():
    """The nobody tests run this checkout's scripts: say in one line when nobody cannot reach them."""
    closed = _closed_folder(SCRIPTS / "root.sh")
    if closed is not None:
        pytest.fail(
            f"{closed} is mode {stat.S_IMODE(closed.stat().st_mode):o}: another user cannot reach {SCRIPTS}; "
            "clone the repository into a folder others can enter (not under mktemp -d's 700)",
            pytrace=False,
        )


def _probe(tmp_path: Path, root_sh: Path | str = SCRIPTS / "root.sh") -> Path:
    probe = tmp_path / "probe.sh"
    probe.write_text(PROBE.format(root_sh=root_sh))
    probe.chmod(0o644)
    return probe


def _bash(args: list[str], path: str, as_nobody: bool, **env: str) -> subprocess.CompletedProcess:
    prefix = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"] if as_nobody else []
    return subprocess.run(
        [*prefix, "bash", *args],
        env={"PATH": path, "HOME": "/", **env},
        cwd="/",
        capture_output=True,
        text=True,
        timeout=120,
    )


needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv to become another user"
)


@needs_root
def test_as_root_the_scripts_run_in_place_without_sudo(open_dir, no_sudo_path):
    run = _bash([str(_probe(open_dir)), "a", "b c"], no_sudo_path, as_nobody=False, TORCH_INDEX_URL="https://x/y")
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["uid=0 args=a b c torch=https://x/y other=unset", "0"]
    assert run.stderr == ""


@needs_root
def test_a_user_without_sudo_gets_one_line(open_dir, no_sudo_path, scripts_open_to_nobody):
    run = _bash([str(_probe(open_dir))], no_sudo_path, as_nobody=True)
    assert (run.returncode, run.stdout) == (1, "")
    assert run.stderr == "probe.sh: ERROR: needs root: run it as root (there is no sudo here to ask)\n"


@needs_root
def test_real_scripts_ask_for_root_only_for_root_steps(no_sudo_path, scripts_open_to_nobody):
    # Everything installed: nothing to do and no root asked for; else installing is a root step.
    deps = _bash([str(SCRIPTS / "install_system_deps.sh")], no_sudo_path, as_nobody=True)
    if deps.returncode == 0:
        assert deps.stdout.startswith("install_system_deps: all packages already installed") and deps.stderr == ""
    else:
        assert (deps.returncode, deps.stderr) == (
            1,
            "install_system_deps.sh: ERROR: needs root: run it as root (there is no sudo here to ask)\n",
        )
    # nobody cannot reach the engine's socket, so start_dockerd.sh must start one: a root step.
    if shutil.which("dockerd", path=no_sudo_path) is None:
        pytest.skip("docker.io is not installed (scripts/install_system_deps.sh)")
    dockerd = _bash([str(SCRIPTS / "start_dockerd.sh")], no_sudo_path, as_nobody=True)
    assert (dockerd.returncode, dockerd.stderr) == (
        1,
        "start_dockerd.sh: ERROR: needs root: run it as root (there is no sudo here to ask)\n",
    )
    # test.sh needs root before anything else (it installs packages, starts dockerd, runs the suite).
    test_sh = _bash([str(SCRIPTS / "test.sh"), "-k", "nothing"], no_sudo_path, as_nobody=True)
    assert (test_sh.returncode, test_sh.stdout, test_sh.stderr) == (
        1,
        "",
        "test.sh: ERROR: needs root: run it as root (there is no sudo here to ask)\n",
    )


@pytest.mark.docker
@pytest.mark.slow
def test_a_user_with_sudo_runs_the_root_steps_under_sudo(open_dir):
    """A real sudo and a real user, in a container of the base image (sudo apt-installed there)."""
    from tests.infra.docker_env import InfraUnavailable, ensure_base_image, ensure_docker, require

    try:
        ensure_base_image(client=ensure_docker())
    except InfraUnavailable as exc:
        require(False, f"Docker engine or base image unavailable: {exc}")
    _probe(open_dir, "/repo/scripts/root.sh")
    script = (
        "set -e\n"
        "apt-get update -qq >/tmp/apt.log 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
        "--no-install-recommends sudo >>/tmp/apt.log 2>&1"
        " || { tail -5 /tmp/apt.log; exit 3; }\n"
        "useradd -m alice && echo 'alice ALL=(ALL) NOPASSWD: ALL' > /etc/sudoers.d/alice\n"
        "su alice -c 'cd /tmp && TORCH_INDEX_URL=https://x/y OTHER=1 bash /probe/probe.sh a \"b c\"'\n"
    )
    ca = "/etc/ssl/certs/ca-certificates.crt"
    mounts = ["-v", f"{SCRIPTS}:/repo/scripts:ro", "-v", f"{open_dir}:/probe:ro"] + (
        ["-v", f"{ca}:{ca}:ro"] if os.path.isfile(ca) else []
    )
    run = subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--network",
            "host",
            *mounts,
            "inferperf/debian-python:bookworm",
            "bash",
            "-c",
            script,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode != 3, f"apt-get install sudo failed in the container: {run.stdout}"
    assert run.returncode == 0, run.stdout + run.stderr
    # Root after sudo; the arguments kept; the settings the scripts read passed on, others not.
    assert run.stdout.splitlines() == ["uid=0 args=a b c torch=https://x/y other=unset", "0"]
    assert run.stderr == "probe.sh: not root; running it again with sudo\n"
