"""Lowering: the ops of BERT/ALBERT/GPT-2/T5/ViT/Llama exports, views, composites, unknown ops."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto as T

from plus_ep.graph_rewrites.graph import GraphView
from plus_ep.graph_rewrites.identify import Identifier
from plus_ep.graph_rewrites.partition import Subgraph, check_partition
from plus_ep.graph_rewrites.lowering import lower, reshape_map
from plus_ep.warehouse import load_warehouse
from tests.support.graphs import Graph


def one(op, inputs, attrs=None, inits=(), outs=1, opset=18):
    g = Graph(opset=opset, ir_version=10)
    for n, d in inputs:
        g.input(n, d)
    for i in inits:
        g.init(i.name, i)
    g.op(op, *[n for n, _ in inputs], *[i.name for i in inits], outs=[f"y{k}" for k in range(outs)], **(attrs or {}))
    for k in range(outs):
        g.output(f"y{k}", None, T.UNDEFINED)
    view = GraphView.build(g.model())
    return lower(view, view.nodes[0])


def const(name, values):
    return onnx.numpy_helper.from_array(np.array(values, dtype=np.int64), name)


X = [("x", ["B", "S", 8])]
XY = [("x", ["B", "S", 8]), ("y", [8])]
CASES = {
    "Add": (XY, {}, (), "elementwise", 3), "Sub": (XY, {}, (), "elementwise", 3),
    "Mul": (XY, {}, (), "elementwise", 3), "Div": (XY, {}, (), "elementwise", 3),
    "Pow": (XY, {}, (), "elementwise", 3), "Erf": (X, {}, (), "elementwise", 3),
    "Tanh": (X, {}, (), "elementwise", 3), "Sigmoid": (X, {}, (), "elementwise", 3),
    "Relu": (X, {}, (), "elementwise", 3), "Sqrt": (X, {}, (), "elementwise", 3),
    "Reciprocal": (X, {}, (), "elementwise", 3), "IsNaN": (X, {}, (), "elementwise", 3),
    "Cast": (X, {"to": T.FLOAT16}, (), "elementwise", 3), "Neg": (X, {}, (), "elementwise", 3),
    "Equal": (XY, {}, (), "elementwise", 3), "Less": (XY, {}, (), "elementwise", 3),
    "Softmax": (X, {"axis": -1}, (), "composite", None),
    "LayerNormalization": ([("x", ["B", "S", 8]), ("g", [8]), ("b", [8])], {"axis": -1}, (), "composite", None),
    "ReduceMean": (X, {"keepdims": 1}, (const("ax", [-1]),), "reduce", 3),
    "ReduceSum": (X, {"keepdims": 0}, (const("ax", [1]),), "reduce", 3),
    "ReduceMax": (X, {"keepdims": 1}, (const("ax", [-1]),), "reduce", 3),
    "MatMul": ([("x", ["B", "S", 8]), ("w", [8, 16])], {}, (), "dot", 4),
    "Gemm": ([("x", ["M", 8]), ("w", [16, 8]), ("c", [16])], {"transB": 1}, (), "dot", 3),
    "Transpose": (X, {"perm": [0, 2, 1]}, (), "view", 0),
    "Reshape": (X, {}, (const("sh", [0, 0, 2, 4]),), "view", 0),
    "Squeeze": ([("x", ["B", 1, 8])], {}, (const("ax", [1]),), "view", 0),
    "Unsqueeze": (X, {}, (const("ax", [1]),), "view", 0),
    "Flatten": (X, {"axis": 2}, (), "view", 0), "Identity": (X, {}, (), "view", 0),
    "Dropout": (X, {}, (), "view", 0),
    "Expand": ([("x", ["B", 1, 8])], {}, (const("sh", [1, 4, 8]),), "injective", 3),
    "Slice": (X, {}, (const("st", [0]), const("en", [4]), const("ax", [2])), "injective", 3),
    "Concat": ([("x", ["B", "S", 8]), ("y", ["B", "S", 8])], {"axis": -1}, (), "injective", 3),
    "Gather": ([("x", [100, 8])], {}, (const("ids", [[1, 2]]),), "injective", 2),   # [1,2,8]
}


@pytest.mark.parametrize("op", sorted(CASES))
def test_lowers(op):
    inputs, attrs, inits, kind, nloops = CASES[op]
    nests = one(op, inputs, attrs, inits)
    assert nests, f"{op} did not lower"
    if kind == "composite":
        assert len(nests) > 3 and any(n.skeleton for n in nests)
        return
    (nest,) = nests
    assert nest.kind == kind
    assert len(nest.loops) == nloops
    assert nest.skeleton == (kind in ("reduce", "dot"))


def test_where_and_split():
    n = one("Where", [("c", ["B", 8]), ("x", ["B", 8]), ("y", [8])])
    assert n[0].kind == "elementwise" and len(n[0].ins) == 3
    n = one("Split", X, {"axis": -1}, (const("sp", [4, 4]),), outs=2)
    assert n[0].kind == "injective" and len(n[0].outs) == 2


def test_unknown_op_is_not_lowered():
    g = Graph(opset=18, ir_version=None)
    g.input("x", [2])
    g.op("Foo", "x", out="y", domain="com.example")
    g.output("y", [2])
    view = GraphView.build(g.model())
    assert lower(view, view.nodes[0]) is None


def test_reshape_map_groups_axes():
    assert reshape_map(["B", "S", 64], ["B", "S", 4, 16]) == [(0,), (1,), (2,), (2,)]
    assert reshape_map([2, 3, 4], [6, 4]) == [(0, 1), (2,)]
    assert reshape_map(["B", "S", 64], ["B*S", 64]) == [(0, 1), (2,)]


def test_partition_postcondition_catches_overlap_and_cycles():
    g = Graph(opset=18, ir_version=10)
    g.input("a", ["M", 4])
    g.input("w", [4, 4])
    g.op("MatMul", "a", "w", out="c")
    g.op("Relu", "c", out="d")
    g.op("Add", "c", "d", out="e")
    view = GraphView.build(g.model(["e"]))
    ident = Identifier(view, load_warehouse(plugins=False))
    pat = load_warehouse(plugins=False).get("gemm")
    with pytest.raises(AssertionError, match="subgraphs"):
        check_partition(ident.index, [Subgraph((0, 1), pat, None, 0), Subgraph((1, 2), pat, None, 1)], ident.view.node_label)
    with pytest.raises(AssertionError, match="convex"):
        check_partition(ident.index, [Subgraph((0, 2), pat, None, 0)], ident.view.node_label)
    check_partition(ident.index, ident.run(), ident.view.node_label)
