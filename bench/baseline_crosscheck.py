"""Is the base tier's figure the chip's? Its GEMM and STREAM figures against bare loops.

    python3 -m bench.baseline_crosscheck [--size 1024] [--dtype fp32] [--array-mib 256] [--rounds 3] [--seconds 2]

Each round runs, side by side and in the same process and threads:
  - base_gemm's stage (benchmarks/base_common.py, configs/base_gemm as shipped, one size; the cpu
    vendor's fp32 GEMM is ONNX Runtime's MatMul, inference_engine/cpu/base/kernels.py) and a bare
    ``InferenceSession.run`` loop of a MatMul graph (the same library, B constant as there), a bare
    ``torch.mm(a, b, out=c)`` loop and a bare numpy ``a @ b`` loop at the same size;
  - base_stream's copy (configs/base_stream, ``array_mib``) and a bare numpy ``np.copyto(c, a)``
    loop and a bare ``c.copy_(a)`` torch loop over arrays of the same size (bytes as STREAM counts
    them: 2 arrays per copy).
It prints each ratio baseline / bare per round and their median: the baseline's ``sustained`` rate
(work x calls / time, as the bare loops measure), since its figure, the median call's rate, is
another estimator (printed beside it, with its ratio to the sustained rate). Target (issue 29): within 5 % of
the bare loop of the same library on a quiet machine. numpy's copy is single-threaded and its GEMM
is OpenBLAS, so those ratios also show what a different library or thread count gives.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
INFERENCE = REPO / "inference"
sys.path.insert(0, str(INFERENCE))


def bare_rate(call, work: float, seconds: float) -> float:
    """Work per second of ``call`` repeated for ``seconds`` after 3 warm-up calls."""
    for _ in range(3):
        call()
    calls, start = 0, time.perf_counter()
    while True:
        call()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds and calls >= 8:
            return work * calls / elapsed


def sustained(figure: dict) -> float:
    """A base figure's mean rate (work x calls / time, the bare loops' estimator)."""
    return float(figure["sustained"]["value"])


def ort_matmul(b):
    """A bare ONNX Runtime session of one n x n MatMul (fp32) by the constant ``b``, as the cpu
    vendor's GEMM holds it (an initializer, packed once: inference_engine/cpu/base/kernels.py)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    n = b.shape[0]
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["A", "B"], ["C"])],
        "mm",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, [n, n])],
        [helper.make_tensor_value_info("C", TensorProto.FLOAT, [n, n])],
        initializer=[numpy_helper.from_array(b, "B")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def config_for(case: str, overrides: dict):
    from contract.config import load_case_config

    return load_case_config(str(INFERENCE), case, "pytorch", "cpu", "/tmp", "/tmp", overrides)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--dtype", default="fp32")
    parser.add_argument("--array-mib", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=2.0, help="of each bare loop")
    args = parser.parse_args(argv)

    import numpy as np
    import torch
    from loguru import logger

    import tools.measure  # noqa: F401  (installs the measuring functions a base case calls: contract/measuring.py)
    from benchmarks.base_common import DTYPES, gemm_stage, stream_stage
    from contract.kernels import gemm_flop, stream_bytes

    logger.remove()
    n, dtype = args.size, args.dtype
    torch_dtype = getattr(torch, DTYPES[dtype][0])
    a, b = torch.randn(n, n).to(torch_dtype), torch.randn(n, n).to(torch_dtype)
    out = torch.empty(n, n, dtype=torch_dtype)
    na, nb = np.random.rand(n, n).astype(np.float32), np.random.rand(n, n).astype(np.float32)
    elements = args.array_mib * 2**20 // 8
    sa, sc = np.ones(elements), np.zeros(elements)
    ta, tc = torch.ones(elements, dtype=torch.float64), torch.zeros(elements, dtype=torch.float64)
    gemm_config = config_for("base_gemm", {"sizes": [n], "dtypes": [dtype]})
    stream_config = config_for("base_stream", {"array_mib": args.array_mib, "kernels": ["copy"]})
    flop, moved = gemm_flop(n, n, n), stream_bytes("copy", elements, 8)
    session = ort_matmul(nb)
    print(f"{torch.get_num_threads()} torch threads; GEMM {n}^3 {dtype}; STREAM copy over {args.array_mib} MiB arrays")
    valid: dict[str, list[bool]] = {}
    names = (
        "gemm / bare onnxruntime run",
        "gemm / bare torch.mm",
        "gemm / bare numpy @ (fp32)",
        "copy / bare numpy copyto",
        "copy / bare torch copy_",
    )
    ratios: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(1, args.rounds + 1):
        gemm = gemm_stage(gemm_config).figures[0]
        ortmm = bare_rate(lambda: session.run(None, {"A": na}), flop, args.seconds)
        mm = bare_rate(lambda: torch.mm(a, b, out=out), flop, args.seconds)
        npmm = bare_rate(lambda: na @ nb, flop, args.seconds)
        copy = stream_stage(stream_config).figures[0]
        npcopy = bare_rate(lambda: np.copyto(sc, sa), moved, args.seconds)
        tcopy = bare_rate(lambda: tc.copy_(ta), moved, args.seconds)
        judged = (gemm, gemm, gemm, copy, copy)
        found = (
            sustained(gemm) / ortmm,
            sustained(gemm) / mm,
            sustained(gemm) / npmm,
            sustained(copy) / npcopy,
            sustained(copy) / tcopy,
        )
        for name, value, figure in zip(ratios, found, judged):
            ratios[name].append(value)
            valid.setdefault(name, []).append(figure["verdict"]["valid"])

        def width(figure: dict) -> str:
            return "no interval" if figure["relative_half_width"] is None else f"±{figure['relative_half_width']:.1%}"

        print(
            f"round {round_}: base_gemm {gemm['value'] / 1e9:.1f} GFLOP/s {width(gemm)} "
            f"({'valid' if gemm['verdict']['valid'] else 'INVALID'}; sustained {sustained(gemm) / 1e9:.1f}, "
            f"figure / sustained {gemm['value'] / sustained(gemm):.3f}), "
            f"onnxruntime {ortmm / 1e9:.1f}, torch.mm {mm / 1e9:.1f}, numpy {npmm / 1e9:.1f} GFLOP/s; base_stream "
            f"copy {copy['value'] / 1e9:.2f} GB/s "
            f"{width(copy)} ({'valid' if copy['verdict']['valid'] else 'INVALID'}; sustained "
            f"{sustained(copy) / 1e9:.2f}), "
            f"numpy copyto {npcopy / 1e9:.2f}, torch copy_ {tcopy / 1e9:.2f} GB/s"
        )
    for name, values in ratios.items():
        quiet = [
            v for v, ok in zip(values, valid[name]) if ok
        ]  # rounds whose baseline was VALID (no contention, precise)
        shown = f"median of valid rounds {statistics.median(quiet):.3f}" if quiet else "no valid round"
        print(
            f"{name}: {shown}; all rounds "
            f"{', '.join(f'{v:.3f}' + ('' if ok else '*') for v, ok in zip(values, valid[name]))} "
            "(* baseline INVALID)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
