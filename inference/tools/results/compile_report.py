"""What an engine says about itself: ByteMLPerf's compile report and nGraph's op support.

Everything here is optional for a vendor; whatever the engine offers is
collected, and ``sg_percent``/``segments`` are computed by the framework from
the ONNX graph and the engine's op support so every vendor is measured alike.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from loguru import logger

from tools.compat.adapters import as_engine

# ONNX ops that carry data rather than compute: every runtime materialises them
# as initializers while loading, so no kernel registry lists them.
DATA_OPS = frozenset({"Constant"})


def _support_predicate(engine: Any) -> Callable[[str], bool] | None:
    """The engine's op support (``is_supported`` first, else ``supported_ops``); None when it says nothing."""
    declared = as_engine(engine)
    if declared.implements("is_supported"):
        return lambda op: op in DATA_OPS or bool(declared.is_supported(op))
    if declared.implements("supported_ops"):
        ops = set(declared.supported_ops() or ()) | DATA_OPS
        return lambda op: op in ops
    return None


def _shape_map(model: Any) -> dict[str, list[int]]:
    shapes = {}
    graph = model.graph
    for value in list(graph.input) + list(graph.output) + list(graph.value_info):
        dims = value.type.tensor_type.shape.dim
        shapes[value.name] = [d.dim_value if d.HasField("dim_value") else -1 for d in dims]
    return shapes


# Initializers above this many bytes lose their values before shape inference, which reads only
# their dims and types, and the values of small ones (a Reshape's shape, a Slice's starts). The
# weights' bytes otherwise go through its copy of the model twice: seconds for a large model.
SHAPE_ONLY_ABOVE_BYTES = 4096


def _without_weight_values(model: Any) -> None:
    for tensor in model.graph.initializer:
        if tensor.ByteSize() > SHAPE_ONLY_ABOVE_BYTES:
            for field in ("raw_data", "float_data", "double_data", "int32_data", "int64_data", "uint64_data"):
                tensor.ClearField(field)


def _inferred_shapes(model: Any) -> tuple[Any, dict[str, list[int]]]:
    """The model as shape inference returns it (without its weights' values), and every value's shape."""
    import onnx

    _without_weight_values(model)
    try:
        model = onnx.shape_inference.infer_shapes(model)
    except Exception as exc:  # shapes are informative only
        logger.debug(f"shape inference failed, segment shapes omitted: {exc}")
    return model, _shape_map(model)


def graph_segments(onnx_path: str, supported: Callable[[str], bool]) -> dict:
    """Split the graph (in its topological order) into runs of supported and fallback ops."""
    import onnx

    model = onnx.load(onnx_path, load_external_data=False)
    model, shapes = _inferred_shapes(model)
    nodes = list(model.graph.node)
    initializers = {init.name for init in model.graph.initializer}
    graph_outputs = {out.name for out in model.graph.output}
    consumers: dict[str, set[int]] = {}
    for index, node in enumerate(nodes):
        for name in node.input:
            consumers.setdefault(name, set()).add(index)

    runs: list[tuple[bool, list[int]]] = []
    for index, node in enumerate(nodes):
        ok = supported(node.op_type)
        if runs and runs[-1][0] == ok:
            runs[-1][1].append(index)
        else:
            runs.append((ok, [index]))

    segments = []
    for sg_idx, (ok, members) in enumerate(runs):
        member_set = set(members)
        produced = {out for i in members for out in nodes[i].output if out}
        inputs = {
            name
            for i in members
            for name in nodes[i].input
            if name and name not in produced and name not in initializers
        }
        outputs = {
            name
            for name in produced
            if name in graph_outputs or any(c not in member_set for c in consumers.get(name, ()))
        }
        segments.append(
            {
                "sg_idx": sg_idx,
                "is_fallback": not ok,
                "node_count": len(members),
                "op_types": sorted({nodes[i].op_type for i in members}),
                "input_tensor_map": {name: shapes.get(name) for name in sorted(inputs)},
                "output_tensor_map": {name: shapes.get(name) for name in sorted(outputs)},
            }
        )
    total = len(nodes)
    accelerated = sum(len(m) for ok, m in runs if ok)
    fallback_ops = sorted({nodes[i].op_type for ok, m in runs if not ok for i in m})
    return {
        "sg_percent": round(100.0 * accelerated / total, 2) if total else 100.0,
        "node_count": total,
        "fallback_ops": fallback_ops,
        "segments": segments,
    }


def _optional(method: Callable[[], Any], name: str) -> Any:
    """An optional API's answer (None: not supported); a failure is a warning and None."""
    try:
        return method()
    except Exception as exc:  # an optional API must not lose the run
        logger.warning(f"engine {name}() failed, omitted: {exc}")
        return None


def describe_engine(engine: Any, onnx_path: str | None, compile_duration_s: float) -> dict:
    """What the engine says about itself (``engine``: an EngineBase, or any engine, which is seen
    through it) and the op coverage the framework computes; ``class`` names the vendor's class."""
    engine = as_engine(engine)
    vendor = type(engine.vendor_engine)
    info: dict[str, Any] = {"class": f"{vendor.__module__}.{vendor.__qualname__}"}
    if (
        onnx_path and Path(onnx_path).is_file()
    ):  # the weights' bytes, about: the roofline's memory traffic per call (utils/results/report/roofline.py)
        info["onnx_bytes"] = Path(onnx_path).stat().st_size
    version = _optional(engine.version, "version")
    if version is not None:
        info["version"] = str(version)
    report = dict(_optional(engine.compile_report, "compile_report") or {})
    report.setdefault("compile_duration", compile_duration_s)
    report.setdefault("compile_precision", str(engine.precision if engine.precision is not None else "unknown").upper())
    supported = _support_predicate(engine)
    if supported is not None and onnx_path:
        try:
            coverage = graph_segments(onnx_path, supported)
        except Exception as exc:
            logger.warning(f"op coverage of {onnx_path} could not be computed: {exc}")
        else:
            report.update(coverage)
            report["compile_status"] = "success" if not coverage["fallback_ops"] else "partial"
            if coverage["fallback_ops"]:
                logger.warning(
                    f"ops falling back off the engine: {', '.join(coverage['fallback_ops'])} (sg_percent "
                    f"{coverage['sg_percent']})"
                )
    report.setdefault("compile_status", "success")
    info["compile_report"] = report
    best = _optional(engine.best_batch_sizes, "best_batch_sizes")
    if best is not None:
        info["best_batch_sizes"] = [int(b) for b in best]
    return info
