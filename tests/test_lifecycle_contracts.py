"""The interfaces between the host, its executors and the plug-ins, declared once and held to:
the pipeline's step lines, the transports' interface and the code copy, analysis_log's shapes,
the registry that answers the host without importing plug-ins, and the one home of the
framework-folder mapping and the unknown-vendor message."""

from __future__ import annotations

import ast
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from common.layout import framework_dir, unknown_vendor
from common.pipeline_lines import PROGRESS_PREFIX, STEP_STATES, STEPS, parse_step, step_line
from common.vendor_analysis import NO_ANALYSIS, VendorAnalysis
from utils.executors.transport import HostTransport, LocalTransport, SshTransport, code_version, sync_code
from utils.host_config import Host

INFERENCE = Path(__file__).resolve().parents[1] / "inference"


# ---- the pipeline's lines: one definition, written by the container side, read by the host --------
def test_step_lines_read_back_as_written():
    for index, name in enumerate(STEPS, start=1):
        for state in STEP_STATES:
            line = (
                f"2026-11-23 04:49:36.903 | INFO    | {step_line(name, state, 'in 1.19 s' if state == 'done' else '')}"
            )
            step = parse_step(line)
            assert (step.index, step.total, step.name, step.state) == (index, len(STEPS), name, state)
    assert (
        step_line("onnx_export", "skipped", "(exist_onnx_path is set)")
        == "[4/7 onnx_export] skipped (exist_onnx_path is set)"
    )
    assert parse_step("a line that says [2/7 nothing") is None
    with pytest.raises(ValueError):
        step_line("compile", "start")
    with pytest.raises(ValueError):
        step_line("init", "begun")


def test_both_sides_use_the_one_definition():
    import tools.measure.phase_progress as phase_progress
    import tools.pipeline as pipeline
    from utils.run_progress import parse_line

    assert pipeline.STEPS is STEPS and phase_progress.PREFIX is PROGRESS_PREFIX
    event = parse_line(f"[127.0.0.1 digits:pytorch] t | INFO    | {step_line('vendor_compile', 'start')}")
    assert (event.kind, event.host, event.case, event.step) == (
        "step",
        "127.0.0.1",
        "digits:pytorch",
        (5, 7, "vendor_compile", "start"),
    )
    progress = parse_line(PROGRESS_PREFIX + json.dumps({"phase": "inference", "done": 3}))
    assert progress.kind == "progress" and progress.progress["done"] == 3


# ---- the transports: one declared interface ---------------------------------------------------
def test_every_transport_implements_the_whole_interface_with_its_signatures():
    from utils.executors.slurm_docker import SlurmTransport

    abstract = HostTransport.__abstractmethods__
    assert {"run", "put_tree", "get_files", "open_docker", "remove_tree", "label", "alive"} <= abstract
    for cls in (SshTransport, LocalTransport, SlurmTransport):
        assert issubclass(cls, HostTransport) and not cls.__abstractmethods__, cls
        for name in abstract:
            declared, given = getattr(HostTransport, name), getattr(cls, name)
            if isinstance(declared, property):
                assert isinstance(given, property), (cls, name)
            else:
                assert list(inspect.signature(given).parameters.items()) == list(
                    inspect.signature(declared).parameters.items()
                ), (cls, name)


def test_a_transport_missing_a_method_cannot_be_made():
    class Partial(LocalTransport):
        pass

    Partial(Host("localhost", 22))  # everything implemented
    namespace = {name: getattr(LocalTransport, name) for name in HostTransport.__abstractmethods__ if name != "rename"}
    incomplete = type("Incomplete", (HostTransport,), {**namespace, "local": True, "engine_words": "x"})
    with pytest.raises(TypeError, match="rename"):
        incomplete()


def test_code_is_copied_once_per_version_through_a_transport(tmp_path):
    source = tmp_path / "inference"
    (source / "tools").mkdir(parents=True)
    (source / "tools" / "a.py").write_text("A = 1\n")
    (source / "tools" / "a.pyc").write_bytes(b"\0")
    for skipped in ("onnxs", "result", "__pycache__"):
        (source / skipped).mkdir()
        (source / skipped / "big.bin").write_bytes(b"x" * 10)
    workdir = tmp_path / "host" / "work"
    transport = LocalTransport(Host("localhost", 22))
    first = sync_code(transport, source, str(workdir))
    copied = Path(first.inference_dir)
    assert (
        first.copied == 1
        and first.version == code_version(source)
        and copied == workdir / "code" / first.version / "inference"
    )
    assert sorted(str(p.relative_to(copied)) for p in copied.rglob("*")) == ["onnxs", "tools", "tools/a.py"]
    assert (copied.parent / ".complete").read_text() == first.version
    assert sync_code(transport, source, str(workdir)).copied is None  # reused
    (source / "tools" / "a.py").write_text("A = 2\n")
    second = sync_code(transport, source, str(workdir))
    assert second.version != first.version and second.copied == 1
    assert not [p for p in (workdir / "code").iterdir() if p.name.startswith(".staging")]


# ---- analysis_log: three shapes, one reader -------------------------------------------------
@pytest.mark.parametrize(
    "value, expected",
    [
        ((1.0, 2.0, 3e12), (1.0, 2.0, 3e12)),
        ((1.0, 2.0, {"fp32": 1e12}), (1.0, 2.0, {"fp32": 1e12})),
        ((1.0, 2.0), (1.0, 2.0, None)),
        ([1.0, 2.0], (1.0, 2.0, None)),
        ((1.0, 2.0, 3e12, 6e12), (1.0, 2.0, {"fp32": 3e12, "fp16": 6e12})),
        (VendorAnalysis(1.0, None, None), (1.0, None, None)),
    ],
)
def test_analysis_log_shapes(value, expected):
    analysis = VendorAnalysis.from_return(value)
    assert isinstance(analysis, VendorAnalysis) and analysis == expected
    assert (analysis.max_mem_used_gib, analysis.total_mem_gib, analysis.peak_flops) == expected


@pytest.mark.parametrize("value", [None, 3.0, (1.0,), [1.0, 2.0, 3.0], (1, 2, 3, 4, 5), "abc"])
def test_analysis_log_other_shapes_are_refused_with_the_contract(value):
    with pytest.raises(ValueError, match=r"analysis_log must return \(max_mem_used_GiB, total_mem_GiB, peak_flops\)"):
        VendorAnalysis.from_return(value)
    assert NO_ANALYSIS == (None, None, None)


# ---- the registry answers the host from the layout, importing no plug-in ------------------------
def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=INFERENCE, capture_output=True, text=True, timeout=120)


def test_registry_checks_an_engine_without_importing_it():
    proc = _python(
        "import sys\n"
        "from contract import registry\n"
        "print(registry.check_engine('cpu', 'onnxruntime').name)\n"
        "for vendor, compiler in (('acme', 'x'), ('cpu', 'tvm')):\n"
        "    try:\n"
        "        registry.check_engine(vendor, compiler)\n"
        "    except Exception as exc:\n"
        "        print(type(exc).__name__, exc)\n"
        "print(sorted(m for m in sys.modules if m.startswith(('inference_engine', 'benchmarks', 'onnxruntime', "
        "'torch', 'tools'))))\n"
    )
    assert proc.returncode == 0, proc.stderr
    found, vendor, compiler, modules = proc.stdout.splitlines()
    assert found == "onnxruntime.py"
    assert vendor.startswith("ConfigError unknown vendor 'acme': no inference_engine/acme/ (known: cpu, ")
    known = "ConfigError unknown compiler 'tvm' for vendor 'cpu': no inference_engine/cpu/tvm.py (known: "
    assert compiler.startswith(known) and "onnxruntime, " in compiler[len(known) :], compiler
    assert modules == "[]"  # no plug-in, no framework module, no heavy package


def test_run_py_asks_the_registry_and_imports_no_engine_outside_mode_local(tmp_path):
    """MODE docker (the engine runs on the hosts): run.py's checks read the layout; the engine's
    module and its runtime stay unimported here, and an unknown compiler is still one line."""
    data = tmp_path / "data"
    data.mkdir()
    code = (
        "import sys\n"
        "from entry.checks import check_cases\n"
        "from utils.cli import INFERENCE_DIR\n"
        "from utils.host_config import HostConfig\n"
        f"fields = dict(path={str(tmp_path / 'host.yaml')!r}, vendor='cpu', mode='docker', hosts=['localhost'], "
        f"cases={{'digits:pytorch': {str(data)!r}}})\n"
        "for key, value in dict(flagperf_path=None, log_path=None, log_level='INFO', ssh_port=22, shm_size='1G', "
        "container_opt='', pip_source=None,\n"
        "        clear_caches=False, visible_device_env=None, ssh_user='u', ssh_key_file=None, "
        "trust_on_first_use=True, known_hosts=None,\n"
        "        case_timeout=60, monitor_interval=1.0, base_image=None, pip_wheels_dir=None, ca_bundle=None, "
        "remote_workdir='/var/tmp/x').items():\n"
        "    fields.setdefault(key, value)\n"
        "config = HostConfig(**fields, inference_dir=INFERENCE_DIR)\n"
        "check_cases(config)\n"
        "print(sorted(m for m in sys.modules if m.startswith(('inference_engine.cpu', 'onnxruntime'))))\n"
        "config.overrides = ['compiler=tvm']\n"
        "try:\n"
        "    check_cases(config)\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    modules, refused = proc.stdout.splitlines()[-2:]
    assert modules == "[]"
    assert refused.startswith("ConfigError unknown compiler 'tvm' for vendor 'cpu'")


# ---- one home: the framework-folder mapping and the unknown-vendor message ---------------------
def test_framework_folder_and_unknown_vendor_are_defined_once():
    assert framework_dir("pytorch_2.1") == "pytorch" and framework_dir("pytorch") == "pytorch"
    assert unknown_vendor("acme") == "unknown vendor 'acme': no inference_engine/acme/"
    assert (
        unknown_vendor("acme", "docker_images", ["cpu"]) == "unknown vendor 'acme': no docker_images/acme/ (known: cpu)"
    )
    elsewhere = []
    for path in INFERENCE.rglob("*.py"):
        if path == INFERENCE / "common" / "layout.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            text = ast.unparse(node) if isinstance(node, (ast.Subscript, ast.JoinedStr, ast.Constant)) else ""
            if (
                ".split('_', 1)[0]" in text
                or ".split('_')[0]" in text
                or text.lstrip("f'\"").startswith("unknown vendor")
            ):
                elsewhere.append(f"{path.relative_to(INFERENCE)}:{node.lineno}")
    assert elsewhere == []


# ---- the monitor's protocol: declared by the shipped monitors, checked by run.py before any host ----
def test_shipped_monitors_declare_their_protocol():
    for vendor in ("cpu", "nvidia"):
        tree = ast.parse((INFERENCE / "docker_images" / vendor / f"{vendor}_monitor.py").read_text(encoding="utf-8"))
        assigns = [n for n in tree.body if isinstance(n, ast.Assign)]
        declared = [
            ast.literal_eval(n.value)
            for n in assigns
            if any(getattr(t, "id", "") == "MONITOR_PROTOCOL" for t in n.targets)
        ]
        assert declared == ["sampler"], vendor


def test_run_py_refuses_a_bad_monitor_declaration_before_any_host(tmp_path):
    from types import SimpleNamespace

    from common.errors import ConfigError
    from entry.checks import check_monitor

    config = SimpleNamespace(flagperf_path=tmp_path, vendor="acme")
    check_monitor(config)  # no monitor file: nothing to check
    monitor = tmp_path / "docker_images" / "acme" / "acme_monitor.py"
    monitor.parent.mkdir(parents=True)
    monitor.write_text("MONITOR_PROTOCOL = 'daemon'\n")
    check_monitor(config)
    monitor.write_text("MONITOR_PROTOCOL = 'poll'\n")
    with pytest.raises(
        ConfigError,
        match=r"^docker_images/acme/acme_monitor.py: MONITOR_PROTOCOL must be 'sampler' or 'daemon', got 'poll'$",
    ):
        check_monitor(config)


# ---- docs/architecture.md stays true to the tree ---------------------------------------------
ARCHITECTURE = INFERENCE.parent / "docs" / "architecture.md"


def _named_files(token: str) -> list[Path]:
    """The files or folders a backticked name in architecture.md may mean: from the repository,
    from inference/, or every file under inference/ whose path ends with it (a bare module name
    in a room's row)."""
    direct = [base / token for base in (INFERENCE.parent, INFERENCE) if (base / token).exists()]
    return direct or [p for p in INFERENCE.rglob(Path(token).name) if p.as_posix().endswith("/" + token.rstrip("/"))]


def _defines(path: Path, dotted: str) -> bool:
    scope = ast.parse(path.read_text(encoding="utf-8")).body
    for name in dotted.split("."):
        nodes = [n for n in scope if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name]
        nodes += [
            n for n in scope if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == name for t in n.targets)
        ]
        nodes += [n for n in scope if isinstance(n, ast.AnnAssign) and getattr(n.target, "id", "") == name]
        if not nodes:
            return False
        scope = getattr(nodes[0], "body", [])
    return True


# Files a run writes (docs/result_schema.md), named in architecture.md but never in the tree.
RUN_OUTPUTS = {"summary.md"}


def test_architecture_names_only_what_exists():
    text = ARCHITECTURE.read_text(encoding="utf-8")
    tokens = set(re.findall(r"`([\w./]+(?:\.(?:py|md|yaml|j2)|/)(?:::[\w.]+)?)`", text)) - RUN_OUTPUTS
    assert len(tokens) > 40
    missing = []
    for token in sorted(tokens):
        name, _, symbol = token.partition("::")
        paths = _named_files(name)
        if not paths or (symbol and not any(_defines(path, symbol) for path in paths)):
            missing.append(token)
    assert missing == []


def test_architecture_names_every_room():
    text = ARCHITECTURE.read_text(encoding="utf-8")
    rooms = [
        p for side in ("tools", "utils") for p in (INFERENCE / side).iterdir() if p.is_dir() and p.name != "__pycache__"
    ]
    assert [r.name for r in rooms if f"`{r.parent.name}/{r.name}/`" not in text] == []
    top = [
        p.name
        for p in INFERENCE.iterdir()
        if p.is_dir() and not p.name.startswith((".", "_")) and p.name not in ("onnxs", "result")
    ]
    assert [name for name in top if f"`{name}/" not in text] == []
