"""scripts/gpu_proof.py --dry-run: every step resolves on this CPU machine, and a plan over its budget or
a step that does not resolve is refused with one line and exit 2."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "gpu_proof.sh"


def proof_module():
    spec = importlib.util.spec_from_file_location("gpu_proof", REPO / "scripts" / "gpu_proof.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_proof"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def dry_run(*extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), "--dry-run", *extra],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable},
    )


def test_the_dry_run_resolves_every_step_within_eight_minutes(tmp_path):
    run = dry_run("--work", str(tmp_path))
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.splitlines()
    gpu_proof = proof_module()
    steps = gpu_proof.build_plan(tmp_path, REPO / "data", sys.executable)
    assert gpu_proof.plan_seconds(steps) <= 480
    assert f"plan: {len(steps)} steps, {gpu_proof.plan_seconds(steps)} s of 480 s" in lines
    rows = [line for line in lines if line.startswith("| ") and not line.startswith("| step")]
    assert [row.split(" | ")[0][2:] for row in rows] == [s.name for s in steps]
    # every vision and bert case at both precisions, the llama case, the base tier, fidelity and contention
    names = {s.name for s in steps}
    assert {f"{c} {p}" for c in ("digits", "resnet50", "vit", "bert") for p in ("fp32", "fp16")} <= names
    assert {"llama inductor_llm", "base_gemm", "base_stream", "base_transfer", "fidelity", "contention"} <= names
    assert "| digits fp16 | 28 | digits inductor fp16=True device=cuda |" in lines
    assert any(line.startswith("| pytest -m gpu | 45 | pytest collects: ") for line in lines)
    preflights = [line for line in lines if line.startswith("preflight nvidia/")]
    assert [p.split(":")[0] for p in preflights] == [
        f"preflight nvidia/{e}" for e in ("inductor", "inductor_llm", "tensorrt")
    ]
    assert "needs the TensorRT Python package, but 'import tensorrt' failed" in preflights[2]


def test_a_plan_over_its_budget_is_refused_in_one_line(tmp_path):
    run = dry_run("--work", str(tmp_path), "--budget-s", "300")
    assert run.returncode == 2
    assert run.stdout == ""
    assert run.stderr == "gpu_proof: dry run: the plan's timeouts sum to 479 s, over the budget of 300 s\n"


def test_a_step_longer_than_planned_pushes_the_plan_over_eight_minutes(tmp_path):
    gpu_proof = proof_module()
    steps = gpu_proof.build_plan(tmp_path, REPO / "data", sys.executable)
    steps[-2].timeout_s += 2
    with pytest.raises(gpu_proof.Unresolved, match=r"^the plan's timeouts sum to 481 s, over the budget of 480 s$"):
        gpu_proof.dry_run(steps, 480, REPO / "data", sys.executable)


@pytest.mark.parametrize(
    "setting, bad, message",
    [
        ("batch_sizes=[1,8,32,128]", "batch_sizes=[0]", "key 'batch_sizes' entry 0 must be a positive integer > 0"),
        ("scenario=[offline,single_stream]", "scenario=[offline,serverless]", "entry 'serverless' must be one of"),
        ("compiler=inductor", "compiler=no_such_engine", "no_such_engine"),
        ("compiler=inductor", "device=cpu", "device 'cpu' is not a GPU"),
        ("compiler=inductor", "not-a-setting", "'not-a-setting' is not KEY=VALUE"),
    ],
)
def test_a_broken_step_is_refused_naming_it(tmp_path, setting, bad, message):
    gpu_proof = proof_module()
    steps = gpu_proof.build_plan(tmp_path, REPO / "data", sys.executable)
    command = next(s for s in steps if s.name == "resnet50 fp16").commands[0]
    command[command.index(setting)] = bad
    with pytest.raises(gpu_proof.Unresolved) as info:
        gpu_proof.dry_run(steps, 480, REPO / "data", sys.executable)
    assert str(info.value).startswith("resnet50 fp16: ") and message in str(info.value)
    assert "\n" not in str(info.value)


def test_a_child_command_that_does_not_parse_is_refused(tmp_path):
    gpu_proof = proof_module()
    steps = gpu_proof.build_plan(tmp_path, REPO / "data", sys.executable)
    fidelity = next(s for s in steps if s.name == "fidelity")
    fidelity.commands[1] = [a for a in fidelity.commands[1] if a not in ("--batch", "32")]
    with pytest.raises(gpu_proof.Unresolved, match=r"^fidelity: bare-graph .* does not parse$"):
        gpu_proof.dry_run(steps, 480, REPO / "data", sys.executable)


def test_the_run_without_an_output_folder_is_one_line(tmp_path):
    run = subprocess.run(
        ["bash", str(SCRIPT), "--out", str(tmp_path / "absent")],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable},
    )
    assert run.returncode == 2
    assert run.stderr == "gpu_proof: ERROR: --out DIR or $OUT must name an existing folder\n"
