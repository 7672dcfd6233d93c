"""tests/conftest.py's guard: under CI=true a skip fails its test unless CI_SKIPS declares it.

Real pytest runs in a subprocess, on a folder of small test files whose conftest takes the repo's hooks
and declares one skip of its own; and every declaration names a skip its file really has.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conftest import CI_SKIPS, REPO

FILES = {
    "conftest.py": (
        "import tests.conftest as repo\n"
        "from tests.conftest import pytest_make_collect_report, pytest_runtest_makereport  # noqa: F401\n"
        "repo.CI_SKIPS = (('test_declared.py', 'no such device here'),)\n"
    ),
    "test_declared.py": "import pytest\n\ndef test_it():\n    pytest.skip('no such device here, as declared')\n",
    "test_undeclared.py": "import pytest\n\ndef test_it():\n    pytest.skip('the venv is missing')\n",
    "test_mark.py": "import pytest\n\n@pytest.mark.skipif(True, reason='a mark')\ndef test_it():\n    pass\n",
    "test_module.py": "import pytest\n\npytest.importorskip('no_such_module_anywhere')\n\ndef test_it():\n    pass\n",
    "test_xfail.py": "import pytest\n\n@pytest.mark.xfail(reason='known')\ndef test_it():\n    assert False\n",
    "test_passes.py": "def test_it():\n    pass\n",
}


def outcomes(tmp_path: Path, ci: str | None) -> tuple[int, dict[str, str], str]:
    """pytest on FILES with CI set to ``ci`` (unset for None): its exit, each file's outcome from the JUnit
    report (passed, skipped, failed), and its output."""
    folder = tmp_path / "suite"
    folder.mkdir(exist_ok=True)
    for name, text in FILES.items():
        (folder / name).write_text(text)
    env = {key: value for key, value in os.environ.items() if key != "CI"}
    # The repo's pytest configuration puts both on the path; the repo's conftest, imported here, needs both.
    path = os.pathsep.join([str(REPO), str(REPO / "inference")])
    env.update({"PYTHONPATH": path, **({"CI": ci} if ci is not None else {})})
    report = tmp_path / f"report-{ci}.xml"
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:xdist",
        "-q",
        "-rA",
        "--continue-on-collection-errors",
    ]
    done = subprocess.run(
        [*command, f"--junitxml={report}", str(folder)], cwd=folder, env=env, capture_output=True, text=True
    )
    seen: dict[str, str] = {}
    for case in ET.parse(report).iter("testcase"):
        kinds = {child.tag for child in case} & {"failure", "error", "skipped"}
        name = (case.get("classname") or case.get("name", "")) + ".py"  # a collection error has no class
        seen[name] = {"failure": "failed", "error": "failed", "skipped": "skipped"}.get(
            min(kinds, default=""), "passed"
        )
    return done.returncode, seen, done.stdout + done.stderr


def test_under_ci_an_undeclared_skip_fails_naming_the_file_and_a_declared_one_stays_a_skip(tmp_path):
    code, seen, out = outcomes(tmp_path, "true")
    assert code == 1, out
    assert seen["test_declared.py"] == "skipped" and seen["test_xfail.py"] == "skipped"  # xfail is no skip
    assert seen["test_passes.py"] == "passed"
    for name in ("test_undeclared.py", "test_mark.py", "test_module.py"):
        assert seen[name] == "failed", (name, out)
    line = "test_undeclared.py: skipped under CI=true, and tests/conftest.py CI_SKIPS does not declare this skip"
    assert f"{line}: the venv is missing" in out
    assert "test_mark.py: skipped under CI=true" in out and "a mark" in out
    assert "test_module.py: skipped under CI=true" in out and "no_such_module_anywhere" in out


@pytest.mark.parametrize("ci", [None, "false"])
def test_outside_ci_a_skip_is_a_skip(tmp_path, ci):
    code, seen, out = outcomes(tmp_path, ci)
    assert code == 0, out
    assert {name for name, outcome in seen.items() if outcome == "passed"} == {"test_passes.py"}


def test_each_declared_skip_names_a_test_file_and_a_reason_the_tests_give():
    """A declaration whose file or reason is gone would excuse nothing, and hide that it is stale. (A reason
    may come from a helper in another test file: test_llamacpp_vendor.py's image test skips in
    test_vllm_vendor.py's.)"""
    sources = "".join(path.read_text() for path in (REPO / "tests").rglob("*.py") if path.name != "conftest.py")
    for file, text in CI_SKIPS:
        assert (REPO / file).is_file() and text in sources, (file, text)
