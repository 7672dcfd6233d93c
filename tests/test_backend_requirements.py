"""host.yaml's BACKEND_REQUIREMENTS (issue 32): what an unmet pin of a ByteMLPerf backend folder's
requirements.txt does on the host side. ``check`` (the default) stops with one line, ``warn`` names
each unmet pin with the version installed and runs the backend unmodified, ``skip`` reads nothing.
ByteMLPerf's own CPU backend pins tensorflow==2.4.0 and numpy==1.19.2, which no current Python
installs: ``warn`` is how it runs in an environment the user made compatible."""

from __future__ import annotations

import json
import shutil
from importlib import metadata
from pathlib import Path

import pytest

from common.errors import ConfigError
from tests.conftest import copy_inference_tree, local_host_yaml, run_py

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "bytemlperf"
VENDOR = "bytecpu"
VENDOR_CONFIG = "compiler: ORTCPU\ngraph_level: basic\ninteract_info:\n  calibrate: true\n  calibration_batches: 2\n"
# ORTCPU's code runs here; these pins do not hold: numpy's version differs, the other is not installed.
UNMET = "numpy==1.19.2\nonnxruntime\ninferperf-no-such-package==0.1\n"
FAST = ("--set", "min_duration_s=0.2", "--set", "min_query_count=16", "--set", "compile_only=true")


def _backend_tree(root: Path, requirements: str) -> Path:
    perf = copy_inference_tree(root / "inference")
    folder = perf / "inference_engine" / VENDOR / "ORTCPU"
    shutil.copytree(FIXTURES / "ORTCPU", folder)
    (folder / "requirements.txt").write_text(requirements)
    (perf / "configs" / "digits" / "vendor_config" / f"{VENDOR}_configurations.yaml").write_text(VENDOR_CONFIG)
    return perf


def test_check_warn_and_skip(tmp_path):
    from utils import requirements
    from utils.requirements import check_backend_requirements

    perf = tmp_path / "inference"
    shutil.copytree(FIXTURES / "TFCPU", perf / "inference_engine" / VENDOR / "TFCPU")
    numpy = metadata.version("numpy")
    with pytest.raises(ConfigError) as info:
        check_backend_requirements(perf, VENDOR, "TFCPU")
    assert str(info.value).endswith(
        "install with: pip install -r " + str(perf / "inference_engine" / VENDOR / "TFCPU" / "requirements.txt")
    )
    assert check_backend_requirements(perf, VENDOR, "TFCPU", "skip") == []
    requirements._WARNED.clear()
    lines = check_backend_requirements(perf, VENDOR, "TFCPU", "warn")
    where = "backend 'TFCPU' (inference_engine/bytecpu/TFCPU): "
    tail = "; going on (BACKEND_REQUIREMENTS: warn)"
    expected = [f"package 'numpy' {numpy} is installed, but its requirements.txt needs numpy==1.19.2"]
    try:
        expected.append(
            f"package 'tensorflow' {metadata.version('tensorflow')} is installed, but its requirements.txt needs "
            "tensorflow==2.4.0"
        )
    except metadata.PackageNotFoundError:
        expected.append("package 'tensorflow' is not installed (needs tensorflow==2.4.0)")
    assert lines == [where + line + tail for line in expected]
    assert check_backend_requirements(perf, VENDOR, "TFCPU", "warn") == []  # once per file and process
    assert check_backend_requirements(perf, VENDOR, "onnxruntime", "warn") == []  # a module compiler has no file


@pytest.mark.parametrize("value", ["maybe", "WARN", True, ["warn"]])
def test_bad_value_is_one_config_line(tmp_path, value):
    from utils.host_config import load_host_config

    perf = copy_inference_tree(tmp_path / "inference")
    config = local_host_yaml(tmp_path, perf, tmp_path, BACKEND_REQUIREMENTS=value)
    with pytest.raises(ConfigError) as info:
        load_host_config(config, perf)
    assert str(info.value).startswith(f"{config}: key 'BACKEND_REQUIREMENTS' must be one of check, warn, skip, got ")


def test_run_py_warns_and_runs_the_backend_unmodified(tmp_path, digits_data_dir):
    perf = _backend_tree(tmp_path, UNMET)
    checked = run_py(perf, local_host_yaml(tmp_path, perf, digits_data_dir, VENDOR=VENDOR), *FAST)
    assert checked.returncode == 2, (checked.stdout + checked.stderr)[-3000:]
    assert "(and 1 more), listed in its requirements.txt; install with: pip install -r " in checked.stderr
    assert not (tmp_path / "result").exists()

    config = local_host_yaml(tmp_path, perf, digits_data_dir, VENDOR=VENDOR, BACKEND_REQUIREMENTS="warn")
    warned = run_py(perf, config, *FAST)
    output = warned.stdout + warned.stderr
    assert warned.returncode == 0, output[-3000:]
    warnings = [line.split("| WARNING | ")[1] for line in output.splitlines() if "| WARNING | backend 'ORTCPU'" in line]
    assert warnings == [
        "backend 'ORTCPU' (inference_engine/bytecpu/ORTCPU): package 'numpy' "
        f"{metadata.version('numpy')} is installed, "
        "but its requirements.txt needs numpy==1.19.2; going on (BACKEND_REQUIREMENTS: warn)",
        "backend 'ORTCPU' (inference_engine/bytecpu/ORTCPU): package 'inferperf-no-such-package' is not installed "
        "(needs inferperf-no-such-package==0.1); going on (BACKEND_REQUIREMENTS: warn)",
    ]
    result = json.loads(next((tmp_path / "result").glob("run*/digits:pytorch/*/result.json")).read_text())
    assert result["engine"]["compile_report"]["backend"] == "ORTCPU"

    skipped = run_py(
        perf, local_host_yaml(tmp_path, perf, digits_data_dir, VENDOR=VENDOR, BACKEND_REQUIREMENTS="skip"), *FAST
    )
    assert skipped.returncode == 0 and "BACKEND_REQUIREMENTS" not in skipped.stdout + skipped.stderr


def test_a_module_from_a_distribution_of_another_name_is_named(tmp_path):
    """tensorflow-cpu provides the module tensorflow: a pin of 'tensorflow' says where the module comes from."""
    from utils.requirements import unmet_requirements

    path = tmp_path / "requirements.txt"
    path.write_text("yaml==5.1\n")  # the module yaml comes from the distribution PyYAML
    (unmet,) = unmet_requirements(path)
    assert (
        unmet.describe()
        == f"package 'yaml' is not installed, but its module comes from PyYAML {metadata.version('PyYAML')} (needs "
        "yaml==5.1)"
    )
