"""Identification of the axis_softmax family: a softmax over a middle or leading axis becomes one axis_softmax
subgraph with its element-wise neighbours; one over the last axis stays the row_reduce family's (the axis
family's role finder refuses it, and says why); its kernel renders for a symbolic batch. The kernels
themselves run on the interpreter in tests/emulated/test_axis_softmax_emulated.py."""
from __future__ import annotations

import onnx
import pytest

import plus_ep
from plus_ep.explain import format_pattern_list
from plus_ep.kernels.render import render
from plus_ep.kernels.target import Target
from plus_ep.warehouse import default_warehouse
from plus_ep.warehouse.families.axis_softmax import axis_softmax_roles
from tests.support.axis_softmax_models import axis_model


@pytest.mark.parametrize("op,shape,axis,want", [
    ("Softmax", ["batch", 8, 4, 4], 1, "axis_softmax"), ("LogSoftmax", ["batch", 4, 16, "anchors"], 2, "axis_softmax"),
    ("LogSoftmax", [6, "n"], 0, "leading_axis_softmax"), ("Softmax", ["batch", 8, 4], -1, "softmax")])
def test_the_axis_decides_the_family(op, shape, axis, want):
    r = plus_ep.rewrite_detailed(axis_model(op, shape, axis, neighbours=axis != -1))
    assert [s.pattern.name for s in r.subgraphs] == [want]
    (sg,) = r.subgraphs
    if want != "softmax":
        assert sg.roles.axis == axis % len(shape) and sg.roles.log == (op == "LogSoftmax")
        assert len(sg.nodes) == 4            # Mul, the softmax, Add, Transpose: one kernel


@pytest.mark.parametrize("shape,axis,why", [
    (["batch", 8, 4], 2, "softmax over the last axis, a row program's"),
    (["batch", 8, 4], None, "no axis attribute"),
    (["batch", 8, 4], 1, None)])
def test_the_role_finder_takes_middle_axes_only(shape, axis, why):
    model = axis_model("Softmax", shape, 1, neighbours=True)
    node = next(nd for nd in model.graph.node if nd.op_type == "Softmax")
    del node.attribute[:]
    if axis is not None:
        node.attribute.append(onnx.helper.make_attribute("axis", axis))
    r = plus_ep.rewrite_detailed(model)
    got = axis_softmax_roles(r.view, list(range(len(r.view.nodes))))
    if why is not None:
        assert isinstance(got, str) and why in got, got
    else:
        assert got.axis == 1 and not got.log and r.view.nodes[got.softmax] is not None


def test_a_non_elementwise_neighbour_is_refused():
    model = axis_model("Softmax", ["batch", 8, 4], 1)
    r = plus_ep.rewrite_detailed(model)
    got = axis_softmax_roles(r.view, [0])
    assert not isinstance(got, str)
    model.graph.node.append(onnx.helper.make_node("ReduceSum", ["Y"], ["Z"], keepdims=0))
    model.graph.output.append(onnx.helper.make_tensor_value_info("Z", onnx.TensorProto.FLOAT, None))
    r = plus_ep.rewrite_detailed(model)
    assert "element-wise and index ops only" in axis_softmax_roles(r.view, [0, 1])


def test_explain_lists_the_family():
    assert "axis_softmax  [prologue, epilogue]  family=axis_softmax" in format_pattern_list(default_warehouse())


def test_renders_for_a_symbolic_batch():
    r = plus_ep.rewrite_detailed(axis_model("Softmax", ["batch", 12, 5, 7], 1, neighbours=True))
    (sg,) = r.subgraphs
    ins, outs = r.view.graph_index.boundary(sg.nodes)
    rd = render(r.view, sg, ins, outs, Target("sm_80", "exact"), node_name="axis")
    (variant,) = rd.variants
    assert '#include "axis_softmax.cuh"' in variant.source and "#define PLUS_AXIS_LOG 0" in variant.source
    assert rd.plan.syms == ["batch"] and [lc.entry for lc in rd.plan.routes[0].launches] == ["plus_axis_softmax"]
    assert rd.plan.routes[0].launches[0].grid[0] == "35,s0,*,256,cdiv,8192,min"     # 5 x 7 x batch columns
