"""tests/support/graphs.py builds the model the same onnx.helper calls would, so tests can move to it
without changing what they test."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from tests.support.graphs import Graph


def test_builder_gives_the_hand_written_model():
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    g = Graph("m", opset=17, ir_version=9)
    g.input("X", ["B", 2])
    g.init("W", w)
    y = g.op("MatMul", "X", "W", name="mm")
    top, idx = g.op("TopK", y, g.init("k", np.array([1], np.int64)), outs=["top", "idx"], axis=-1)
    g.op("Gelu", top, out="Y", domain="com.microsoft")
    g.output("Y", ["B", 1])
    nodes = [helper.make_node("MatMul", ["X", "W"], ["t0"], name="mm"),
             helper.make_node("TopK", ["t0", "k"], ["top", "idx"], axis=-1),
             helper.make_node("Gelu", ["top"], ["Y"], domain="com.microsoft")]
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["B", 2])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["B", 1])],
                              [numpy_helper.from_array(w, "W"), numpy_helper.from_array(np.array([1], np.int64), "k")])
    want = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                             ir_version=9)
    assert (top, idx) == ("top", "idx")
    assert g.model().SerializeToString(deterministic=True) == want.SerializeToString(deterministic=True)


def test_outputs_given_to_model_are_float_of_unknown_shape():
    g = Graph()
    g.input("X", [4])
    g.op("Relu", "X", out="Y")
    m = g.model(["Y"])
    (out,) = m.graph.output
    assert out.name == "Y" and out.type.tensor_type.elem_type == TensorProto.FLOAT
    assert not out.type.tensor_type.HasField("shape")
    assert [n.op_type for n in m.graph.node] == ["Relu"] and m.opset_import[0].version == 17
