"""Tiny real ONNX files for tests (fixtures)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def doubling_onnx(tmp_path_factory):
    """A real ONNX file: y = x + x over a dynamic batch."""
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])
    graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "double", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path_factory.mktemp("onnx") / "double.onnx"
    onnx.save(model, str(path))
    return str(path)
