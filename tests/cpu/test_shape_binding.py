"""Binding a fused node's symbolic dims (issue 16 item 3): dims no input axis gives bind from the values
of shape tensors (`shapev` plan records), Flatten dims are inferred instead of invented, and a node may
take more than 32 inputs. The plans are checked by the launcher's own parser and binder (C harness)."""
from __future__ import annotations

import pytest
from onnx import TensorProto, helper
from plus_ep.graph_rewrites import graph as G
from plus_ep.graph_rewrites.graph import GraphView
from plus_ep.kernels.wire import plan as P
from plus_ep.kernels.codegen import shapevals

from plus_ep.rewrite import rewrite_detailed
from plus_ep.kernels.target import Target
from tests.support import shapev_models


def _gpt2_like(width=64):
    """X2 is [batch*seq, C] (the flattened rows GPT-2's TorchScript Conv1D multiplies); batch and seq
    reach the Reshape after the GEMM only through Shape(mask)->Concat, as in the export."""
    return shapev_models.gpt2_like(width)


def test_shape_tensor_values_are_followed():
    view = GraphView.build(_gpt2_like())
    assert [str(v) for v in shapevals.values(view, "shape")] == ["batch", "seq", "192"]
    assert shapevals.is_shape_tensor(view, "shape") and not shapevals.is_shape_tensor(view, "X2")


def test_gpt2_seq_binds_from_the_shape_tensor(tmp_path):
    """`seq` is no input axis (X2 is [batch*seq, 64]): the plan binds it from the Concat's values
    (before, the subgraph stayed unfused: "dimension 'seq' is not the exact size of any input axis")."""
    res = rewrite_detailed(_gpt2_like(), archs=None)
    sgs = res.subgraphs
    assert sgs, "the GEMM was not identified"
    from plus_ep.kernels.render import render
    sg = next(s for s in sgs if s.pattern.family.name in ("gemm", "gemm_rownorm"))
    ins, outs = res.view.graph_index.boundary(sg.nodes)
    rd = render(res.view, sg, ins, outs, Target("sm_80", "exact"), node_name="gemm")
    text = rd.plan.text()
    k_seq = rd.plan.syms.index("seq")
    assert f"shapev s{k_seq} {ins.index('shape')} 1 192\n" in text     # a 0 there: the GEMM's 192
    assert P.parse(text).shapev == rd.plan.shapev
    # out dims: batch = batch_seq / seq, seq and 192
    assert P.parse(text).outputs[0][1][1] == f"s{k_seq}"


def test_flatten_dims_are_inferred_not_invented():
    g = helper.make_graph(
        [helper.make_node("Flatten", ["m"], ["f"], axis=2), helper.make_node("Flatten", ["m"], ["f1"], axis=1),
         helper.make_node("Flatten", ["m"], ["f0"], axis=0), helper.make_node("Flatten", ["m"], ["fn"], axis=-1)],
        "flat", [helper.make_tensor_value_info("m", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info(n, TensorProto.INT64, None) for n in ("f", "f1", "f0", "fn")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    out = G._ort_symbolic_shapes(m)
    assert out is not None
    dims = {vi.name: [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]
            for vi in list(out.graph.output)}
    assert dims["f"] == ["batch*seq", 1] and dims["f1"] == ["batch", "seq"]
    assert dims["f0"] == [1, "batch*seq"] and dims["fn"] == ["batch", "seq"]


def test_more_than_32_inputs_render():
    """40 inputs summed into one output: one element-wise kernel (the limit was 32 inputs)."""
    n = 40
    nodes, acc = [], "x0"
    for i in range(1, n):
        nodes.append(helper.make_node("Add", [acc, f"x{i}"], [f"s{i}"]))
        acc = f"s{i}"
    g = helper.make_graph(nodes, "wide", [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, ["n"])
                                          for i in range(n)],
                          [helper.make_tensor_value_info(acc, TensorProto.FLOAT, ["n"])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    res = rewrite_detailed(m, archs=None)
    from plus_ep.kernels.render import render
    big = max(res.subgraphs, key=lambda s: len(s.nodes))
    ins, outs = res.view.graph_index.boundary(big.nodes)
    if len(ins) <= 32:
        pytest.skip(f"identification split the sum ({len(ins)} inputs)")
    rd = render(res.view, big, ins, outs, Target("sm_80", "exact"), node_name="wide")
    assert len(rd.plan.inputs) == len(ins) > 32
    assert f"args.in[{len(ins) - 1}]" in rd.variants[0].source


def test_a_zero_in_a_shape_tensor_means_what_the_reshape_makes_of_it():
    """The `zero` field of `shapev` lines (issue 34's open finding): ONNX Reshape (allowzero 0) reads a 0
    as its input's dim there; allowzero 1 keeps it (refused beside a -1); a dim the input lacks, or
    readers that disagree, refuse it."""
    import sympy
    dims = {"x": [sympy.Symbol("rows"), sympy.Integer(96)], "w": [sympy.Integer(4), sympy.Integer(96)]}
    shape = dims.__getitem__

    def reshape(data="x", allowzero=None, t="s"):
        return helper.make_node("Reshape", [data, t], ["y"], **({} if allowzero is None else {"allowzero": allowzero}))
    m = shapevals.zero_meaning
    assert [m([reshape()], "s", j, shape) for j in range(3)] == [sympy.Symbol("rows"), 96, None]
    assert m([reshape(allowzero=1)], "s", 0, shape) == 0
    assert m([reshape(allowzero=1)], "s", 0, shape, [sympy.Symbol("b"), sympy.Integer(-1)]) is None
    assert m([helper.make_node("Expand", ["x", "s"], ["y"])], "s", 0, shape) == 0
    assert m([reshape(), reshape("w")], "s", 1, shape) == 96 and m([reshape(), reshape("w")], "s", 0, shape) is None
    cast = helper.make_node("Cast", ["s"], ["c"], to=TensorProto.INT64)
    assert m([cast, reshape(t="c")], "s", 0, shape) == sympy.Symbol("rows")        # followed through a Cast
    moved = helper.make_node("Slice", ["s", "a", "b"], ["c"])
    assert m([moved, reshape(t="c")], "s", 0, shape) is None                        # positions no longer known


@pytest.mark.parametrize("variant,lines", [
    ({}, ["shapev s1 0 1 192", "shapev s2 0 0 s0"]),
    ({"allowzero": 1}, ["shapev s1 0 1 0", "shapev s2 0 0 0"]),
    ({"tail": [-1]}, ["shapev s1 0 1 192", "shapev s2 0 0 s0 infer"]),
    ({"tail": [], "mask_rank": 3}, ["shapev s2 0 2 -"]),
], ids=["copy", "allowzero", "infer", "no-dim"])
def test_rendered_plan_says_what_a_zero_binds(variant, lines):
    res = rewrite_detailed(shapev_models.gpt2_like(64, **variant), archs=["sm_80"], fp32_math="exact")
    node = next(n for n in res.model.graph.node if n.domain == "ai.plus_ep")
    text = next(a.s.decode() for a in node.attribute if a.name == "plus_plan")
    assert all(f"\n{ln}\n" in text for ln in lines), text
