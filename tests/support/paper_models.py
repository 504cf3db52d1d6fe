"""Tiny ONNX models for the worked examples of the PluS paper (§4.1 Fig. 5, §4.2 Fig. 6)."""
import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h


def model(nodes, inputs, outputs, inits=(), opset=17):
    g = h.make_graph(nodes, "paper",
                     [h.make_tensor_value_info(n, T.FLOAT, d) for n, d in inputs],
                     [h.make_tensor_value_info(n, T.FLOAT, None) for n in outputs], list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)], ir_version=10)


def axes(name, values):
    return onnx.numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def fig6_nodes():
    """MatMul [M,N,K] -> ReduceMax -> Sub -> Exp -> ReduceSum -> Div (Fig. 6(a))."""
    return [h.make_node("MatMul", ["x0", "x1"], ["x2"]),
            h.make_node("ReduceMax", ["x2"], ["x3"], axes=[1], keepdims=1),
            h.make_node("Sub", ["x2", "x3"], ["x4"]),
            h.make_node("Exp", ["x4"], ["x5"]),
            h.make_node("ReduceSum", ["x5", "ax"], ["x6"], keepdims=1),
            h.make_node("Div", ["x5", "x6"], ["x7"])]


def fig6_model(steps=6):
    nodes = fig6_nodes()[:steps]
    return model(nodes, [("x0", ["M", "K"]), ("x1", ["K", "N"])], [nodes[-1].output[0]],
                 [axes("ax", [1])])
