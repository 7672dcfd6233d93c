"""tools/plugins.py and contract/cases.py: the container side finds a vendor's engine and a case's
package by name, when a step asks, and importing the pipeline loads no plug-in at all (the
engine API, contract/engine_base.py, is no plug-in)."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest

from common.errors import ConfigError

INFERENCE = Path(__file__).resolve().parents[1] / "inference"


def test_importing_the_pipeline_loads_no_plug_in_until_a_step_asks_for_one():
    script = (
        "import sys\n"
        "import tools.pipeline\n"
        "api = ('inference_engine', 'contract.engine_base')\n"
        "plug_ins = lambda: sorted(m for m in sys.modules if m.split('.')[0] in ('inference_engine', 'benchmarks') "
        "and m not in api)\n"
        "print(plug_ins())\n"
        "from pathlib import Path\n"
        "from contract.cases import case_module\n"
        "from tools.plugins import engine_module\n"
        "case_module(Path(tools.pipeline.__file__).parents[1], 'digits', 'pytorch_2.1')\n"
        "engine_module('cpu', 'onnxruntime')\n"
        "print(plug_ins())\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=INFERENCE, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    before, after = proc.stdout.strip().splitlines()[-2:]
    assert before == "[]"
    # 'pytorch_2.1' names the image; the case's code is benchmarks/digits/pytorch
    assert "'benchmarks.digits.pytorch'" in after and "'inference_engine.cpu.onnxruntime'" in after


def test_an_unknown_vendor_or_case_is_one_config_error(tmp_path):
    from contract.cases import case_module
    from tools.plugins import check_vendor

    check_vendor("cpu")
    with pytest.raises(ConfigError, match=r"^unknown vendor 'acme': no inference_engine/acme/$"):
        check_vendor("acme")
    with pytest.raises(
        ConfigError, match=r"^unknown case 'nosuch' for framework 'pytorch_2.1': no benchmarks/nosuch/pytorch/$"
    ):
        case_module(INFERENCE, "nosuch", "pytorch_2.1")


def test_a_case_package_missing_a_case_function_is_refused_by_name(tmp_path, monkeypatch):
    from contract.cases import CASE_FUNCTIONS, case_module

    (tmp_path / "benchmarks" / "halfcase" / "pytorch").mkdir(parents=True)
    package = types.ModuleType("benchmarks.halfcase.pytorch")
    for name in CASE_FUNCTIONS[:3]:
        setattr(package, name, lambda *args: None)
    setattr(package, CASE_FUNCTIONS[4], "not callable")
    monkeypatch.setitem(sys.modules, "benchmarks.halfcase.pytorch", package)
    with pytest.raises(
        ConfigError, match=rf"^benchmarks/halfcase/pytorch/__init__.py: missing case function '{CASE_FUNCTIONS[3]}'$"
    ):
        case_module(tmp_path, "halfcase", "pytorch")
    setattr(package, CASE_FUNCTIONS[3], lambda *args: None)
    with pytest.raises(ConfigError, match=rf"missing case function '{CASE_FUNCTIONS[4]}'$"):
        case_module(tmp_path, "halfcase", "pytorch")
    setattr(package, CASE_FUNCTIONS[4], lambda *args: None)
    setattr(package, CASE_FUNCTIONS[5], lambda *args: None)
    assert case_module(tmp_path, "halfcase", "pytorch") is package


def test_the_framework_step_is_the_case_s_own_when_it_has_one():
    from contract.cases import Case

    own = Case(types.SimpleNamespace(framework_step=lambda model, config: ("own", model, config)))
    assert own.framework_step(None, "config") is None  # no model (no_validation): no step
    assert own.framework_step("model", "config") == ("own", "model", "config")


def test_a_case_without_hooks_gets_each_hook_s_default(monkeypatch):
    from contract.cases import Case

    made = []
    monkeypatch.setattr(
        "contract.cases.make_step", lambda model, config: made.append((model, config)) or "default step"
    )
    bare = Case(types.SimpleNamespace(configure="not callable: no hook"))
    config = types.SimpleNamespace(key=1)
    bare.configure(config)
    assert vars(config) == {"key": 1}
    assert bare.export_cached("model", config) is None and bare.performance_stage("engine", "model", config) is None
    assert bare.framework_step("model", config) == "default step" and made == [("model", config)]
    assert bare.is_base_tier is False
    with pytest.raises(ConfigError, match="not a base-tier case"):
        bare.baseline_stage(config)


def test_a_case_s_hooks_are_called_with_their_arguments():
    from contract.cases import Case

    calls = []
    module = types.SimpleNamespace(
        configure=lambda config: calls.append(("configure", config)),
        export_cached=lambda model, config: ("path.onnx", {"status": "hit"}),
        performance_stage=lambda engine, model, config: ("report", engine, model, config),
        baseline_stage=lambda config: ("baseline", config),
    )
    case = Case(module)
    case.configure("c")
    assert calls == [("configure", "c")]
    assert case.export_cached("m", "c") == ("path.onnx", {"status": "hit"})
    assert case.performance_stage("e", "m", "c") == ("report", "e", "m", "c")
    assert case.is_base_tier and case.baseline_stage("c") == ("baseline", "c")
