"""tools.results.compile_report: sg_percent and segments from a hand-built ONNX graph, exactly.

The graph (batch dimension symbolic, so its size is reported as -1):

    X -> Relu -> a -> Add(+W) -> b -> Sigmoid -> c -> Mul(c, a) -> d -> Clip -> Y
               (0)              (1)           (2)                 (3)      (4)

With Relu, Add, Mul and Clip supported and Sigmoid not, the runs are
[0, 1] accelerated, [2] fallback, [3, 4] accelerated: sg_percent = 4/5 = 80.0.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

from tools.results import compile_report  # noqa: E402
from tools.results.compile_report import describe_engine, graph_segments  # noqa: E402

SUPPORTED = {"Relu", "Add", "Mul", "Clip"}


def save(tmp_path: Path, nodes, name="g.onnx", outputs=("Y",)) -> str:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, ["N", 4]) for out in outputs],
        initializer=[helper.make_tensor("W", TensorProto.FLOAT, [4], [1.0, 2.0, 3.0, 4.0])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / name
    onnx.save(model, str(path))
    return str(path)


def five_nodes():
    return [
        helper.make_node("Relu", ["X"], ["a"]),
        helper.make_node("Add", ["a", "W"], ["b"]),
        helper.make_node("Sigmoid", ["b"], ["c"]),
        helper.make_node("Mul", ["c", "a"], ["d"]),
        helper.make_node("Clip", ["d", "", ""], ["Y"]),  # empty names: omitted optional inputs
    ]


EXPECTED_SEGMENTS = [
    {
        "sg_idx": 0,
        "is_fallback": False,
        "node_count": 2,
        "op_types": ["Add", "Relu"],
        "input_tensor_map": {"X": [-1, 4]},
        "output_tensor_map": {"a": [-1, 4], "b": [-1, 4]},  # a is also read by Mul, outside the run
    },
    {
        "sg_idx": 1,
        "is_fallback": True,
        "node_count": 1,
        "op_types": ["Sigmoid"],
        "input_tensor_map": {"b": [-1, 4]},
        "output_tensor_map": {"c": [-1, 4]},
    },
    {
        "sg_idx": 2,
        "is_fallback": False,
        "node_count": 2,
        "op_types": ["Clip", "Mul"],
        "input_tensor_map": {"a": [-1, 4], "c": [-1, 4]},
        "output_tensor_map": {"Y": [-1, 4]},  # d stays inside the run
    },
]


def test_segments_of_a_graph_with_one_fallback(tmp_path):
    result = graph_segments(save(tmp_path, five_nodes()), lambda op: op in SUPPORTED)
    assert result == {"sg_percent": 80.0, "node_count": 5, "fallback_ops": ["Sigmoid"], "segments": EXPECTED_SEGMENTS}


def test_fixed_dimensions_and_intermediate_graph_outputs(tmp_path):
    nodes = [helper.make_node("Relu", ["X"], ["a"]), helper.make_node("Relu", ["a"], ["Y"])]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 3])],
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 3]),
        ],
    )
    path = tmp_path / "fixed.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    result = graph_segments(str(path), lambda op: True)
    assert result["segments"] == [
        {
            "sg_idx": 0,
            "is_fallback": False,
            "node_count": 2,
            "op_types": ["Relu"],
            "input_tensor_map": {"X": [2, 3]},
            "output_tensor_map": {"Y": [2, 3], "a": [2, 3]},  # a is a graph output too
        }
    ]
    assert (result["sg_percent"], result["node_count"], result["fallback_ops"]) == (100.0, 2, [])


@pytest.mark.parametrize(
    "supported, percent, fallback, kinds",
    [
        (SUPPORTED, 80.0, ["Sigmoid"], [False, True, False]),
        ({"Relu", "Add"}, 40.0, ["Clip", "Mul", "Sigmoid"], [False, True]),
        ({"Relu", "Sigmoid", "Clip"}, 60.0, ["Add", "Mul"], [False, True, False, True, False]),
        (set(), 0.0, ["Add", "Clip", "Mul", "Relu", "Sigmoid"], [True]),
        ({"Add", "Mul"}, 40.0, ["Clip", "Relu", "Sigmoid"], [True, False, True, False, True]),
    ],
)
def test_sg_percent_and_runs_for_each_support_set(tmp_path, supported, percent, fallback, kinds):
    result = graph_segments(save(tmp_path, five_nodes()), lambda op: op in supported)
    assert result["sg_percent"] == percent
    assert result["fallback_ops"] == fallback
    assert [s["is_fallback"] for s in result["segments"]] == kinds
    assert [s["sg_idx"] for s in result["segments"]] == list(range(len(kinds)))
    assert sum(s["node_count"] for s in result["segments"]) == 5


def test_sg_percent_is_rounded_to_two_decimals(tmp_path):
    nodes = [
        helper.make_node("Relu", ["X"], ["a"]),
        helper.make_node("Sigmoid", ["a"], ["b"]),
        helper.make_node("Relu", ["b"], ["Y"]),
    ]
    assert graph_segments(save(tmp_path, nodes), lambda op: op == "Relu")["sg_percent"] == 66.67
    assert graph_segments(save(tmp_path, nodes, "b.onnx"), lambda op: op == "Sigmoid")["sg_percent"] == 33.33


def test_unused_outputs_end_no_segment_and_external_weights_are_not_read(tmp_path):
    # "spare" is produced but read by nobody and is no graph output: not a segment output.
    nodes = [helper.make_node("Relu", ["X"], ["spare"])] + five_nodes()
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 4])],
        # raw bytes: only those can move to an external file
        initializer=[helper.make_tensor("W", TensorProto.FLOAT, [4], struct.pack("<4f", 1, 2, 3, 4), raw=True)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "external.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location="weights.bin", size_threshold=0)
    (tmp_path / "weights.bin").unlink()  # only the graph is needed, never the weights
    result = graph_segments(str(path), lambda op: op in SUPPORTED)
    assert result["segments"][0]["output_tensor_map"] == {"a": [-1, 4], "b": [-1, 4]}
    assert result["segments"][0]["node_count"] == 3
    assert (result["sg_percent"], result["node_count"]) == (83.33, 6)


def test_an_empty_graph_is_fully_accelerated(tmp_path):
    graph = helper.make_graph(
        [],
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1])],
    )
    path = tmp_path / "empty.onnx"
    onnx.save(helper.make_model(graph), str(path))
    assert graph_segments(str(path), lambda op: False) == {
        "sg_percent": 100.0,
        "node_count": 0,
        "fallback_ops": [],
        "segments": [],
    }


def test_failed_shape_inference_leaves_intermediate_shapes_unknown(tmp_path, monkeypatch, caplog_loguru):
    def fail(model):
        raise RuntimeError("no shapes today")

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", fail)
    result = graph_segments(save(tmp_path, five_nodes()), lambda op: op in SUPPORTED)
    assert result["segments"][0]["input_tensor_map"] == {"X": [-1, 4]}
    assert result["segments"][0]["output_tensor_map"] == {"a": None, "b": None}
    assert result["segments"][2]["output_tensor_map"] == {"Y": [-1, 4]}
    assert result["sg_percent"] == 80.0
    assert ("DEBUG", "shape inference failed, segment shapes omitted: no shapes today") in [
        (r["level"], r["message"]) for r in caplog_loguru
    ]


# --- describe_engine ---------------------------------------------------------------


class Bare:
    pass


class Full:
    precision = "fp16"

    def version(self):
        return 3.5

    def compile_report(self):
        return {"compile_duration": 1.25, "compile_status": "success", "custom": 1}

    def is_supported(self, op):
        return 1 if op in SUPPORTED else 0  # truthy, not bool: the framework makes it one

    def best_batch_sizes(self):
        return [1.0, "8"]


class ByList:
    def supported_ops(self):
        return ["Relu", "Add", "Mul", "Clip", "Sigmoid"]


class Broken:
    is_supported = {"Relu"}  # not callable: ignored

    def version(self):
        raise RuntimeError("boom")

    def compile_report(self):
        return None

    def best_batch_sizes(self):
        raise RuntimeError("bad sizes")


def test_describe_a_bare_engine():
    assert describe_engine(Bare(), None, 0.5) == {
        "class": f"{__name__}.Bare",
        "compile_report": {"compile_duration": 0.5, "compile_precision": "UNKNOWN", "compile_status": "success"},
    }


def test_describe_an_engine_with_every_optional_api(tmp_path, caplog_loguru):
    path = save(tmp_path, five_nodes())
    engine = Full()
    info = describe_engine(engine, path, 9.0)
    assert info == {
        "class": f"{__name__}.Full",
        "onnx_bytes": Path(path).stat().st_size,  # the roofline's bytes per call (utils/results/report/roofline.py)
        "version": "3.5",
        "compile_report": {
            "compile_duration": 1.25,  # the engine's own figure wins
            "compile_status": "partial",  # but not over the framework's coverage
            "custom": 1,
            "compile_precision": "FP16",
            "sg_percent": 80.0,
            "node_count": 5,
            "fallback_ops": ["Sigmoid"],
            "segments": EXPECTED_SEGMENTS,
        },
        "best_batch_sizes": [1, 8],
    }
    assert engine.compile_report() == {"compile_duration": 1.25, "compile_status": "success", "custom": 1}
    warnings = [r["message"] for r in caplog_loguru if r["level"] == "WARNING"]
    assert warnings == ["ops falling back off the engine: Sigmoid (sg_percent 80.0)"]


def test_the_fallback_warning_lists_every_op(tmp_path, caplog_loguru):
    class Few(Full):
        def is_supported(self, op):
            return op in {"Relu", "Add"}

    report = describe_engine(Few(), save(tmp_path, five_nodes()), 1.0)["compile_report"]
    assert (report["compile_status"], report["sg_percent"]) == ("partial", 40.0)
    warnings = [r["message"] for r in caplog_loguru if r["level"] == "WARNING"]
    assert warnings == ["ops falling back off the engine: Clip, Mul, Sigmoid (sg_percent 40.0)"]


def test_full_support_from_a_list_of_ops_is_a_success(tmp_path, caplog_loguru):
    report = describe_engine(ByList(), save(tmp_path, five_nodes()), 2.0)["compile_report"]
    assert report["compile_status"] == "success"
    assert (report["sg_percent"], report["fallback_ops"], len(report["segments"])) == (100.0, [], 1)
    assert [r for r in caplog_loguru if r["level"] == "WARNING"] == []


def test_failing_optional_apis_are_omitted_with_a_warning(tmp_path, caplog_loguru):
    info = describe_engine(Broken(), str(tmp_path / "missing.onnx"), 0.25)
    assert info == {
        "class": f"{__name__}.Broken",
        "compile_report": {"compile_duration": 0.25, "compile_precision": "UNKNOWN", "compile_status": "success"},
    }
    warnings = [r["message"] for r in caplog_loguru if r["level"] == "WARNING"]
    assert warnings == [
        "engine version() failed, omitted: boom",
        "engine best_batch_sizes() failed, omitted: bad sizes",
    ]


def test_an_unreadable_onnx_file_loses_only_the_coverage(tmp_path, caplog_loguru):
    path = tmp_path / "bad.onnx"
    path.write_bytes(b"not onnx")
    report = describe_engine(ByList(), str(path), 1.0)["compile_report"]
    assert report == {"compile_duration": 1.0, "compile_precision": "UNKNOWN", "compile_status": "success"}
    warnings = [r["message"] for r in caplog_loguru if r["level"] == "WARNING"]
    assert len(warnings) == 1 and warnings[0].startswith(f"op coverage of {path} could not be computed: ")


def test_support_predicate_prefers_is_supported_and_returns_bools():
    class Both(Full):
        def supported_ops(self):
            return ["Sigmoid"]

    predicate = compile_report._support_predicate(Both())
    assert predicate("Relu") is True and predicate("Sigmoid") is False
    by_list = compile_report._support_predicate(ByList())
    assert by_list("Sigmoid") is True and by_list("Gemm") is False
    assert compile_report._support_predicate(Bare()) is None
    assert compile_report._support_predicate(Broken()) is None


def test_shapes_come_out_the_same_without_the_weights_values(tmp_path):
    """Shape inference runs on the graph with its large initializers' values dropped (their dims
    kept): a MatMul's output shape needs only its weight's dims, a Reshape's needs its small shape
    initializer's values, and both come out as they do with every value in place."""
    weight = helper.make_tensor("W", TensorProto.FLOAT, [64, 64], [0.5] * 64 * 64)  # 16 KiB: dropped
    target = helper.make_tensor("shape", TensorProto.INT64, [2], [4, 32])  # kept
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["X", "W"], ["m"]),
            helper.make_node("Reshape", ["m", "shape"], ["r"]),
            helper.make_node("Relu", ["r"], ["Y"]),
        ],
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 64])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [4, 32])],
        initializer=[weight, target],
    )
    path = tmp_path / "weights.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    assert weight.ByteSize() > compile_report.SHAPE_ONLY_ABOVE_BYTES > target.ByteSize()
    result = graph_segments(str(path), lambda op: op != "Reshape")
    maps = [(s["input_tensor_map"], s["output_tensor_map"]) for s in result["segments"]]
    assert maps == [
        ({"X": [2, 64]}, {"m": [2, 64]}),
        ({"m": [2, 64]}, {"r": [4, 32]}),
        ({"r": [4, 32]}, {"Y": [4, 32]}),
    ]
