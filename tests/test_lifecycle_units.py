"""Fast unit tests of the host-side lifecycle's pure parts (utils/executors/base.py, common/lifetime.py)
and of the layering the README promises (tools/ and utils/ meet only in common/)."""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from common import lifetime
from common.errors import ConfigError
from common.monitor_protocol import monitor_protocol
from common.record import CaseResult
from tests.infra.imports import (
    INFERENCE,
    _imports,
    back_arrows,
    find_cycle,
    import_graph,
    loops,
    module_name,
    undeclared_loads,
)
from tests.result_records import write_result
from utils.case_specs import CaseSpec
from utils.executors.base import CaseOutcome, describe_exit, exit_signal, read_outcome


# ---- exit statuses read the same whichever executor reported them ---------------------------
@pytest.mark.parametrize("local, container", [(-9, 137), (-11, 139), (-15, 143), (-6, 134), (-1, 129)])
def test_a_signal_reads_the_same_from_a_local_wait_and_from_docker(local, container):
    assert exit_signal(local) == exit_signal(container) == signal.Signals(-local)
    assert describe_exit(local).split(": ", 1)[1] == describe_exit(container).split(": ", 1)[1]


def test_exit_words():
    assert describe_exit(-9) == "status -9: killed by SIGKILL (out of memory, or killed from outside)"
    assert describe_exit(137, "oom") == "status 137: killed by SIGKILL: out of memory"
    assert describe_exit(139) == "status 139: segmentation fault (SIGSEGV)"
    assert describe_exit(2) == "status 2: config error"
    assert describe_exit(3) == "status 3: data error"
    assert describe_exit(4) == "status 4: engine error"
    assert describe_exit(130) == "status 130: interrupted"  # the pipeline's own code, not "SIGINT"
    assert describe_exit(7) == "status 7: no result.json or failure.json was written"
    assert describe_exit(None).startswith("no exit status")
    assert exit_signal(0) is None and exit_signal(1) is None and exit_signal(128) is None and exit_signal(200) is None


# ---- read_outcome -------------------------------------------------------------------------
def outcome(tmp_path: Path) -> CaseOutcome:
    return CaseOutcome(CaseSpec("digits", "pytorch", "/d"), "h", 0, tmp_path)


def test_read_outcome_success(tmp_path):
    written = write_result(tmp_path, vendor="cpu")
    got = read_outcome(outcome(tmp_path), 0)
    assert (
        got.status == "success"
        and got.result == CaseResult.from_json(json.loads(written.read_text()))
        and got.error is None
    )


def test_read_outcome_prefers_the_pipelines_own_failure_record(tmp_path):
    (tmp_path / "failure.json").write_text(json.dumps({"step": "engine", "error": "boom", "exit_code": 4}))
    got = read_outcome(outcome(tmp_path), 4)
    assert (got.status, got.step, got.error, got.exit_code) == ("failed", "engine", "boom", 4)


def test_read_outcome_interrupted_failure(tmp_path):
    (tmp_path / "failure.json").write_text(json.dumps({"step": "inference", "error": "stopped", "exit_code": 130}))
    assert read_outcome(outcome(tmp_path), 130).status == "interrupted"


def test_read_outcome_without_files_names_the_exit(tmp_path):
    got = read_outcome(outcome(tmp_path), -11, describe_exit(-11))
    assert got.step == "pipeline" and got.error == "pipeline exited with status -11: segmentation fault (SIGSEGV)"


def test_read_outcome_result_on_a_failed_exit_is_not_success(tmp_path):
    (tmp_path / "result.json").write_text("{}")
    assert read_outcome(outcome(tmp_path), 1).status == "failed"


def test_read_outcome_unreadable_result(tmp_path):
    (tmp_path / "result.json").write_text("{not json")
    got = read_outcome(outcome(tmp_path), 0)
    assert (
        got.status == "failed"
        and got.step == "summary"
        and got.error.startswith(f"{tmp_path / 'result.json'}: unreadable: ")
    )


# ---- monitors -----------------------------------------------------------------------------
def test_monitor_protocol_is_declared_or_follows_one_rule(tmp_path):
    def monitor(name: str, text: str) -> Path:
        (tmp_path / name).write_text(text)
        return tmp_path / name

    # declared: the declaration wins over what the file imports or says
    assert (
        monitor_protocol(monitor("a.py", 'MONITOR_PROTOCOL = "daemon"\nfrom common.sampler import run_sampler\n'))
        == "daemon"
    )
    assert (
        monitor_protocol(
            monitor("b.py", "import sys\nMONITOR_PROTOCOL: str = 'sampler'\nprint('--output start stop')\n")
        )
        == "sampler"
    )
    # undeclared: built on common.sampler is a sampler (any import form); anything else is FlagPerf's daemon
    assert monitor_protocol(monitor("c.py", "from common.sampler import monitor_args, run_sampler\n")) == "sampler"
    assert monitor_protocol(monitor("d.py", "def main():\n    from common import sampler\n")) == "sampler"
    assert monitor_protocol(monitor("e.py", "import common.sampler\n")) == "sampler"
    assert monitor_protocol(monitor("f.py", "parser.add_argument('-o', choices=['start', 'stop'])\n")) == "daemon"
    assert (
        monitor_protocol(
            monitor("g.py", "# --output, monitor_args: words in a comment decide nothing\nprint('hello')\n")
        )
        == "daemon"
    )
    # a file that cannot be read or parsed is started as a sampler and fails with its own error
    assert monitor_protocol(tmp_path / "missing.py") == "sampler"
    assert monitor_protocol(monitor("h.py", "def broken(:\n")) == "sampler"
    with pytest.raises(
        ConfigError,
        match=r"^docker_images/v/v_monitor.py: MONITOR_PROTOCOL must be 'sampler' or 'daemon', got 'daemonic'$",
    ):
        monitor_protocol(monitor("i.py", "MONITOR_PROTOCOL = 'daemonic'\n"), "docker_images/v/v_monitor.py")
    with pytest.raises(ConfigError, match=r"MONITOR_PROTOCOL must be .* got '<NAME>'"):
        monitor_protocol(monitor("j.py", "MONITOR_PROTOCOL = NAME\n"))
    for vendor in ("cpu", "nvidia"):  # the shipped monitors
        assert monitor_protocol(INFERENCE / "docker_images" / vendor / f"{vendor}_monitor.py") == "sampler"


def test_sampler_refuses_a_busy_loop_interval(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "common.sys_monitor", "--output", str(tmp_path / "s.jsonl"), "--interval", "0.000001"],
        cwd=INFERENCE,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "--interval must be between 0.05 and 60.0 seconds" in proc.stderr
    assert not (tmp_path / "s.jsonl").exists()


def test_monitor_stops_when_its_parent_dies(tmp_path):
    """A monitor whose INFERPERF_PARENT_PID is gone stops within a second or two."""
    parent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    out = tmp_path / "s.jsonl"
    env = {**os.environ, lifetime.PARENT_ENV: str(parent.pid)}
    # The monitor's parent is this test process, not `parent`: getppid() != parent from the start.
    monitor = subprocess.Popen(
        [sys.executable, "-m", "common.sys_monitor", "--output", str(out), "--interval", "0.1"],
        cwd=INFERENCE,
        env=env,
        start_new_session=True,
    )
    try:
        assert monitor.wait(timeout=20) == 0
    finally:
        parent.kill()
        monitor.kill()
    assert out.read_text().strip(), "it should have written its samples before stopping"


def test_lifetime_bound_ends_a_monitor(tmp_path):
    out = tmp_path / "s.jsonl"
    env = {**os.environ, lifetime.MAX_SECONDS_ENV: "1"}
    started = time.monotonic()
    monitor = subprocess.Popen(
        [sys.executable, "-m", "common.sys_monitor", "--output", str(out), "--interval", "0.1"],
        cwd=INFERENCE,
        env=env,
        start_new_session=True,
    )
    try:
        assert monitor.wait(timeout=30) == 0
    finally:
        monitor.kill()
    assert 1.0 <= time.monotonic() - started < 25


def test_expired_reason():
    now = time.monotonic()
    assert lifetime.expired_reason(now, None, None) is None
    assert lifetime.expired_reason(now, os.getppid(), None) is None
    assert "parent (pid 1) is gone" in lifetime.expired_reason(now, 1, None)
    assert "outlived INFERPERF_MAX_SECONDS=5" in lifetime.expired_reason(now - 6, None, 5.0)
    assert lifetime.expired_reason(now - 4, None, 5.0) is None


def test_lifetime_ignores_nonsense_bounds(monkeypatch):
    for text in ("0", "-3", "abc", "1e12", ""):
        monkeypatch.setenv(lifetime.MAX_SECONDS_ENV, text)
        assert lifetime._max_seconds() is None
    monkeypatch.setenv(lifetime.MAX_SECONDS_ENV, "90")
    assert lifetime._max_seconds() == 90.0


# ---- layering: the house (tests/infra/imports.py FLOORS, docs/architecture.md "The house") -----
def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize(
    "side, forbidden",
    [
        ("tools", {"utils", "inference_engine", "benchmarks"}),
        ("utils", {"tools", "inference_engine", "benchmarks"}),
        ("common", {"contract", "tools", "utils", "inference_engine", "benchmarks", "docker_images"}),
        ("contract", {"tools", "utils", "inference_engine", "benchmarks", "docker_images", "general_perf"}),
        ("inference_engine", {"utils", "tools", "benchmarks"}),
        ("benchmarks", {"utils", "inference_engine"}),
        ("docker_images", {"utils", "tools"}),
    ],
)
def test_layering(side, forbidden):
    offenders = {
        str(path.relative_to(INFERENCE)): sorted(imported_roots(path) & forbidden)
        for path in (INFERENCE / side).rglob("*.py")
        if imported_roots(path) & forbidden
    }
    assert offenders == {}


def test_no_arrow_runs_back_up_the_house():
    """Every static import (module- or function-level) goes down the house or stays in its room."""
    assert back_arrows(import_graph(static_only=True)) == []


def test_the_house_refuses_an_arrow_up_or_across(tmp_path):
    for folder in ("common", "contract", "tools", "utils", "inference_engine/acme"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "common" / "a.py").write_text("def f():\n    from contract.b import B\n")
    (tmp_path / "contract" / "b.py").write_text("from common.a import f\nB = 1\n")
    (tmp_path / "tools" / "c.py").write_text("from contract.b import B\nfrom utils.d import D\n")
    (tmp_path / "utils" / "d.py").write_text("D = 1\n")
    (tmp_path / "inference_engine" / "acme" / "e.py").write_text("from contract.b import B\n")
    assert back_arrows(import_graph(tmp_path, static_only=True)) == [
        ("common.a", "contract.b"),
        ("tools.c", "utils.d"),
    ]


# ---- no import circle anywhere under inference/, loads by name included -----------------------
def test_no_import_circle_under_inference():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle (imports and loads by name): " + " -> ".join(cycle)


def test_every_load_by_name_reads_a_declared_table():
    """A module loaded by a name built at run time is loaded only as ``DYNAMIC_IMPORTS[KEY].format(...)``,
    so the circle test above follows it (tests/infra/imports.py)."""
    assert undeclared_loads() == []


def test_a_declared_load_is_followed_to_every_module_its_pattern_matches(tmp_path):
    """benchmarks/base_common.py once loaded the vendor kernels by an f-string while they imported
    it back: the loop is seen, the f-string is an undeclared load, and the declared form is followed."""
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "inference_engine" / "acme" / "base").mkdir(parents=True)
    (tmp_path / "inference_engine" / "zeta" / "base").mkdir(parents=True)
    (tmp_path / "benchmarks" / "base_common.py").write_text(
        "import importlib\nclass TorchKernels: ...\n"
        "def vendor_kernels(vendor):\n"
        "    return importlib.import_module(f'inference_engine.{vendor}.base.kernels')\n"
    )
    for vendor in ("acme", "zeta"):
        (tmp_path / "inference_engine" / vendor / "base" / "kernels.py").write_text(
            "from benchmarks.base_common import TorchKernels\n"
        )
    assert import_graph(tmp_path)["benchmarks.base_common"] == {
        "inference_engine.acme.base.kernels",
        "inference_engine.zeta.base.kernels",
    }
    assert find_cycle(import_graph(tmp_path)) is not None
    assert undeclared_loads(tmp_path) == ["benchmarks/base_common.py:4"]
    (tmp_path / "contract").mkdir()
    (tmp_path / "contract" / "kernels.py").write_text("class TorchKernels: ...\n")
    (tmp_path / "contract" / "registry.py").write_text(
        "import importlib\nDYNAMIC_IMPORTS = {'kernels': 'inference_engine.{vendor}.base.kernels'}\n"
        "def vendor_kernels(vendor):\n"
        "    return importlib.import_module(DYNAMIC_IMPORTS['kernels'].format(vendor=vendor))\n"
        "def other(name):\n    return importlib.import_module(DYNAMIC_IMPORTS['nowhere'].format(name=name))\n"
    )
    (tmp_path / "benchmarks" / "base_common.py").write_text("from contract.registry import vendor_kernels\n")
    for vendor in ("acme", "zeta"):
        (tmp_path / "inference_engine" / vendor / "base" / "kernels.py").write_text(
            "from contract.kernels import TorchKernels\n"
        )
    graph = import_graph(tmp_path)
    assert graph["contract.registry"] == {"inference_engine.acme.base.kernels", "inference_engine.zeta.base.kernels"}
    assert find_cycle(graph) is None
    assert undeclared_loads(tmp_path) == ["contract/registry.py:6"]  # a key the table lacks


def test_the_circle_finder_sees_function_level_relative_and_package_imports(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("from pkg.a import A\n")
    (tmp_path / "pkg" / "a.py").write_text("from . import b\nA = 1\n")
    (tmp_path / "pkg" / "b.py").write_text("def f():\n    from pkg.c import C\n")
    (tmp_path / "pkg" / "c.py").write_text(
        "import json\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import A\nC = 2\n"
    )
    graph = import_graph(tmp_path)
    assert graph == {"pkg": {"pkg.a"}, "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.c"}, "pkg.c": {"pkg.a"}}
    assert find_cycle(graph) == ["pkg.a", "pkg.b", "pkg.c", "pkg.a"]
    assert loops(graph) == [["pkg.a", "pkg.b", "pkg.c"]]
    assert import_graph(tmp_path, module_level_only=True)["pkg.b"] == set()
    (tmp_path / "pkg" / "c.py").write_text("C = 2\n")
    assert find_cycle(import_graph(tmp_path)) is None
    assert loops(import_graph(tmp_path)) == []


def test_the_circle_finder_follows_import_module_of_a_string_literal(tmp_path):
    """The engine registry once loaded tools/compat/bytemlperf/engine.py by
    ``importlib.import_module("...")``, and that module imported the registry back."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "registry.py").write_text(
        "import importlib\ndef load():\n    return importlib.import_module('pkg.adapter')\n"
    )
    (tmp_path / "pkg" / "adapter.py").write_text(
        "from importlib import import_module\nfrom pkg.registry import load\nLATER = import_module('pkg.other')\n"
    )
    (tmp_path / "pkg" / "other.py").write_text(
        "import importlib\nNAME = 'pkg.registry'\ndef f():\n    importlib.import_module(NAME)\n"
    )
    graph = import_graph(tmp_path)
    assert graph["pkg.registry"] == {"pkg.adapter"} and graph["pkg.adapter"] == {"pkg.registry", "pkg.other"}
    assert graph["pkg.other"] == set()  # a name built at run time is not followed: an undeclared load
    assert undeclared_loads(tmp_path) == ["pkg/other.py:4"]
    assert find_cycle(graph) == ["pkg.adapter", "pkg.registry", "pkg.adapter"]
    assert import_graph(tmp_path, module_level_only=True)["pkg.registry"] == set()
    assert import_graph(tmp_path, module_level_only=True)["pkg.adapter"] == {"pkg.registry", "pkg.other"}


# ---- tools/ finds plug-ins through tools/plugins.py, by name, when it needs one ----------------
PLUG_INS = ("inference_engine", "benchmarks")


def is_plug_in(module: str) -> bool:
    return module.split(".")[0] in PLUG_INS and module not in PLUG_INS  # the packages' own __init__ are no plug-in


def test_tools_imports_no_plug_in_at_module_level():
    graph = import_graph(module_level_only=True)
    offenders = {
        name: sorted(m for m in imported if is_plug_in(m))
        for name, imported in graph.items()
        if name.split(".")[0] in ("tools", "contract") and any(is_plug_in(m) for m in imported)
    }
    assert offenders == {}


def test_the_container_entry_loads_no_plug_in_until_it_asks_for_one():
    """What run_inference.py imports (inside main, too), and what those import at module level."""
    graph = import_graph(module_level_only=True)
    seen, todo = set(), sorted(import_graph()["run_inference"])
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += graph.get(name, ())
    assert "tools.pipeline" in seen
    assert sorted(m for m in seen if is_plug_in(m)) == []


# ---- what a plug-in may import (contract/__init__.py PLUGIN_IMPORTS, docs/architecture.md) -------
def plug_in_files(root: Path = INFERENCE) -> list[tuple[str, str, Path]]:
    """(kind, the module its own folder is, path) of every file under inference_engine/ (engines)
    and benchmarks/ (cases and their bases)."""
    found = []
    for kind, area in (("engine", "inference_engine"), ("case", "benchmarks")):
        for path in sorted((root / area).rglob("*.py")):
            parts = path.relative_to(root / area).parts
            own = f"{area}.{parts[0]}" if len(parts) > 1 else module_name(path, root)
            found.append((kind, own, path))
    return found


def plug_in_imports(path: Path, root: Path) -> list[str]:
    """Every import of a plug-in file (function-level and ``TYPE_CHECKING`` ones too, and loads by name)."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    return [target for target, _, _ in _imports(ast.parse(path.read_text(encoding="utf-8")), package)]


def plug_in_offenders(root: Path = INFERENCE, rules: dict[str, tuple[str, ...]] | None = None) -> dict[str, list[str]]:
    """Each plug-in file's imports of code under ``root`` that ``rules`` (PLUGIN_IMPORTS) does not allow."""
    from contract import PLUGIN_IMPORTS

    rules = PLUGIN_IMPORTS if rules is None else rules
    roots = {p.stem for p in root.iterdir() if p.suffix == ".py" or p.is_dir()}
    offenders = {}
    for kind, own, path in plug_in_files(root):
        allowed = (own, *rules[kind])
        bad = sorted(
            target
            for target in plug_in_imports(path, root)
            if target.split(".")[0] in roots and not any(target == a or target.startswith(a + ".") for a in allowed)
        )
        if bad:
            offenders[str(path.relative_to(root))] = bad
    return offenders


def test_plug_ins_import_only_what_is_declared():
    assert plug_in_offenders() == {}


def test_a_vendor_imports_only_the_floor():
    """An engine's imports of the code under inference/: the floor, common/, its own vendor folder and
    ByteMLPerf's base class names (general_perf/, which published backends import as written).
    The rule is pinned here, so widening PLUGIN_IMPORTS is a visible change."""
    from contract import PLUGIN_IMPORTS

    assert PLUGIN_IMPORTS["engine"] == ("common", "contract", "general_perf")
    assert [path for path in plug_in_offenders() if path.startswith("inference_engine/")] == []


def test_a_case_imports_only_the_floor():
    """A case's imports of the code under inference/: the floor, common/ and the cases' own helpers;
    none of tools/ (the measuring functions a hook runs come through contract/measuring.py), of
    utils/, of an engine module or of another room. Pinned here, so widening it is a visible change."""
    from contract import PLUGIN_IMPORTS

    assert PLUGIN_IMPORTS["case"] == ("common", "contract", "benchmarks")
    assert [path for path in plug_in_offenders() if path.startswith("benchmarks/")] == []


def test_the_contract_floor_holds_the_measuring_functions_a_case_calls():
    """Every framework function a case's hook measures with is declared by the contract and
    installed by the container side: importing tools.measure installs ``ToolsMeasuring``, which
    implements each method of ``Measuring`` with the same parameters."""
    import inspect

    import tools.measure  # noqa: F401  (installs)
    from contract.measuring import Measuring, measuring
    from tools.measure.services import ToolsMeasuring

    declared = {name for name, _ in inspect.getmembers(Measuring, inspect.isfunction) if not name.startswith("_")}
    assert declared == {
        "timed_forward",
        "measure_kernel",
        "measure_collective",
        "run_llm_stage",
        "run_serving_stage",
        "engine_precision",
    }
    assert isinstance(measuring(), ToolsMeasuring)
    for name in declared:
        wanted = list(inspect.signature(getattr(Measuring, name)).parameters)
        assert list(inspect.signature(getattr(ToolsMeasuring, name)).parameters) == wanted, name


def test_a_case_measuring_outside_the_framework_gets_one_clear_line(monkeypatch):
    """Nothing installed (a case imported by itself): one EngineError naming what is missing."""
    from common.errors import EngineError
    from contract import measuring as contract_measuring

    monkeypatch.setattr(contract_measuring, "_installed", [])
    with pytest.raises(EngineError, match=r"^contract\.measuring: no measuring functions installed") as caught:
        contract_measuring.measuring()
    assert "\n" not in str(caught.value)


def test_the_plug_in_import_rule_refuses_a_back_arrow(tmp_path):
    """The arrows issues 27 and 42 removed: an engine reaching for tools/, another room or the old
    base-tier kernels in a case file; a case for another engine's module, a load by name, the host side or
    the container side's measuring functions."""
    for folder in ("common", "contract", "tools", "utils", "inference_engine/acme", "benchmarks/demo/pytorch"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "inference_engine" / "acme" / "fast.py").write_text(
        "import numpy\nfrom common.errors import EngineError\n"
        "from contract.engine_base import EngineBase\nfrom contract.config import CaseConfig\nfrom . import helpers\n"
        "from tools.cache import fingerprint\nfrom benchmarks.base_common import TorchKernels\n"
    )
    (tmp_path / "benchmarks" / "demo" / "pytorch" / "__init__.py").write_text(
        "import importlib\nfrom .model import create_model\nfrom benchmarks.common import param\n"
        "from tools.measure.loop import timed_forward\n"
        "def f(v):\n    from inference_engine.acme.fast import InferModel\n"
        "    from utils.host_config import HostConfig\n"
        "    return importlib.import_module(f'inference_engine.{v}.fast')\n"
    )
    assert plug_in_offenders(tmp_path) == {
        "inference_engine/acme/fast.py": ["benchmarks.base_common.TorchKernels", "tools.cache.fingerprint"],
        "benchmarks/demo/pytorch/__init__.py": [
            "inference_engine.acme.fast.InferModel",
            "inference_engine.{}.fast",
            "tools.measure.loop.timed_forward",  # issue 42: a case measures through contract/measuring.py
            "utils.host_config.HostConfig",
        ],
    }
