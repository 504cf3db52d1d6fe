"""Tests for graph_rewrites.fuse (ORT CPU is the oracle; onnx.reference ignores overloads)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from plus_ep.graph_rewrites.fuse import DOMAIN, FusedSubgraph, fuse, inline_fused
from plus_ep.graph_rewrites.partition import boundary

ort = pytest.importorskip("onnxruntime")

F = TensorProto.FLOAT
OPSET = 21
HID = 8


# --------------------------------------------------------------------------- #
# helpers
# --------------------------------------------------------------------------- #


def run_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def make_model(nodes, inputs, outputs, initializers=(), value_info=(), opset=OPSET, ir=9):
    g = helper.make_graph(
        nodes, "g", inputs, outputs, initializer=list(initializers), value_info=list(value_info)
    )
    g.doc_string = "graph doc"
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir)
    m.doc_string = "model doc"
    helper.set_model_props(m, {"origin": "test"})
    onnx.checker.check_model(m, full_check=True)
    return m


def fused_nodes(model):
    return [n for n in model.graph.node if n.domain == DOMAIN]


def node_attr(node, name):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    raise KeyError(name)


def two_layer_model():
    """X[B,S,8] -> 2 x (MatMul+Add+Relu -> Softmax -> LayerNorm) -> Y."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    prev = "X"
    for layer in range(2):
        w, b = f"W{layer}", f"b{layer}"
        g, be = f"gamma{layer}", f"beta{layer}"
        inits += [
            numpy_helper.from_array(rng.standard_normal((HID, HID)).astype(np.float32), w),
            numpy_helper.from_array(rng.standard_normal(HID).astype(np.float32), b),
            numpy_helper.from_array(rng.standard_normal(HID).astype(np.float32), g),
            numpy_helper.from_array(rng.standard_normal(HID).astype(np.float32), be),
        ]
        p = f"l{layer}_"
        nodes += [
            helper.make_node("MatMul", [prev, w], [p + "mm"], name=p + "matmul"),
            helper.make_node("Add", [p + "mm", b], [p + "add"], name=p + "add"),
            helper.make_node("Relu", [p + "add"], [p + "relu"], name=p + "relu"),
            helper.make_node("Softmax", [p + "relu"], [p + "sm"], name=p + "softmax", axis=-1),
            helper.make_node(
                "LayerNormalization", [p + "sm", g, be], [p + "ln"], name=p + "ln", epsilon=1e-5
            ),
        ]
        prev = p + "ln"
    nodes.append(helper.make_node("Identity", [prev], ["Y"], name="out"))
    vi = [helper.make_tensor_value_info(n, F, ["B", "S", HID]) for n in ("l0_mm", "l0_relu", "l1_sm", "l0_ln")]
    return make_model(
        nodes,
        [helper.make_tensor_value_info("X", F, ["B", "S", HID])],
        [helper.make_tensor_value_info("Y", F, ["B", "S", HID])],
        inits,
        vi,
    )


# node indices in two_layer_model
L0_GEMM, L1_GEMM = (0, 1, 2), (5, 6, 7)
L0_SM, L1_SM = (3,), (8,)


def two_layer_partition():
    pgraph = "MatMul(x0, x1) -> t0\nAdd(t0, x2) -> t1\nRelu(t1) -> y0"
    return [
        FusedSubgraph(L0_GEMM, "gemm_epilogue", {"pgraph": pgraph, "tile": [64, 64], "alpha": 1.0}),
        FusedSubgraph(L0_SM, "softmax"),
        FusedSubgraph(L1_GEMM, "gemm_epilogue", {"pgraph": pgraph, "tile": [64, 64], "alpha": 1.0}),
        FusedSubgraph(L1_SM, "softmax", {"stages": 2}),
    ]


# --------------------------------------------------------------------------- #
# structure
# --------------------------------------------------------------------------- #


def test_repeated_layers_share_one_function():
    m = two_layer_model()
    before = m.SerializeToString()
    r = fuse(m, two_layer_partition())
    assert m.SerializeToString() == before, "input model must not be modified"
    onnx.checker.check_model(r, full_check=True)

    fn = fused_nodes(r)
    assert [n.name for n in fn] == [
        "plus_ep/gemm_epilogue/0",
        "plus_ep/softmax/1",
        "plus_ep/gemm_epilogue/2",
        "plus_ep/softmax/3",
    ]
    assert all(n.op_type == "Fused" for n in fn)
    gemm0, sm0, gemm1, sm1 = fn
    assert gemm0.overload == gemm1.overload and gemm0.overload.startswith("gemm_epilogue_")
    assert sm0.overload == sm1.overload and sm0.overload.startswith("softmax_")
    assert gemm0.overload != sm0.overload
    assert len(gemm0.overload) == len("gemm_epilogue_") + 10

    # one function per distinct overload
    keys = [(f.domain, f.name, f.overload) for f in r.functions]
    assert sorted(keys) == sorted({(DOMAIN, "Fused", gemm0.overload), (DOMAIN, "Fused", sm0.overload)})
    gf = next(f for f in r.functions if f.overload == gemm0.overload)
    assert [n.op_type for n in gf.node] == ["MatMul", "Add", "Relu"]
    assert list(gf.input) == ["x0", "x1", "x2"] and list(gf.output) == ["y0"]
    assert {(o.domain, o.version) for o in gf.opset_import} == {("", OPSET)}

    # model level
    assert r.ir_version >= 10
    assert any(o.domain == DOMAIN and o.version == 1 for o in r.opset_import)
    assert r.doc_string == "model doc" and r.graph.doc_string == "graph doc"
    assert {p.key: p.value for p in r.metadata_props} == {"origin": "test"}
    # 2 layers x (gemm, softmax, layernorm) + Identity
    assert len(r.graph.node) == 7


def test_fused_node_inputs_outputs_and_initializers():
    m = two_layer_model()
    r = fuse(m, two_layer_partition())
    gemm0, sm0, gemm1, _ = fused_nodes(r)
    # initializers are passed as node inputs, in order of first use
    assert list(gemm0.input) == ["X", "W0", "b0"]
    assert list(gemm1.input) == ["l0_ln", "W1", "b1"]
    assert list(gemm0.output) == ["l0_relu"]
    assert list(sm0.input) == ["l0_relu"] and list(sm0.output) == ["l0_sm"]
    # initializers are still graph initializers (functions cannot see them)
    assert {i.name for i in r.graph.initializer} == {i.name for i in m.graph.initializer}
    # function bodies never mention original tensor names
    for f in r.functions:
        names = {v for n in f.node for v in list(n.input) + list(n.output)}
        assert names.isdisjoint({"X", "W0", "b0", "W1", "b1", "l0_mm", "l0_add"})


def test_extra_attributes_on_node():
    r = fuse(two_layer_model(), two_layer_partition())
    gemm0, sm0, _, sm1 = fused_nodes(r)
    assert node_attr(gemm0, "pattern") == b"gemm_epilogue"
    assert node_attr(gemm0, "pgraph").decode().count("\n") == 2
    assert node_attr(gemm0, "tile") == [64, 64]
    assert node_attr(gemm0, "alpha") == pytest.approx(1.0)
    assert node_attr(sm0, "pattern") == b"softmax"
    assert node_attr(sm1, "stages") == 2
    # undeclared node attributes are fine for the full checker (and ORT, below)
    onnx.checker.check_model(r, full_check=True)


def test_pattern_attr_conflict_rejected():
    with pytest.raises(ValueError, match="pattern"):
        fuse(two_layer_model(), [FusedSubgraph(L0_SM, "softmax", {"pattern": "other"})])


def test_symbolic_dims_and_value_info():
    m = two_layer_model()
    r = fuse(m, two_layer_partition())
    assert [i.SerializeToString() for i in r.graph.input] == [i.SerializeToString() for i in m.graph.input]
    assert [o.SerializeToString() for o in r.graph.output] == [o.SerializeToString() for o in m.graph.output]
    dims = [d.dim_param for d in r.graph.input[0].type.tensor_type.shape.dim[:2]]
    assert dims == ["B", "S"]
    # l0_mm disappeared into a function body; the others still exist
    assert {v.name for v in r.graph.value_info} == {"l0_relu", "l1_sm", "l0_ln"}


def test_empty_partition_returns_unchanged_copy():
    m = two_layer_model()
    r = fuse(m, [])
    assert r is not m
    assert r.SerializeToString() == m.SerializeToString()


# --------------------------------------------------------------------------- #
# numerics on ORT CPU
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("b,s", [(2, 3), (5, 7)])
def test_rewritten_matches_original_on_ort(b, s):
    m = two_layer_model()
    r = fuse(m, two_layer_partition())
    x = np.random.default_rng(b * 10 + s).standard_normal((b, s, HID)).astype(np.float32)
    (ref,) = run_ort(m, {"X": x})
    (got,) = run_ort(r, {"X": x})
    assert got.shape == (b, s, HID)
    np.testing.assert_allclose(got, ref, atol=1e-5, rtol=1e-5)

    inl = inline_fused(r)
    onnx.checker.check_model(inl, full_check=True)
    assert not fused_nodes(inl) and not inl.functions
    assert all(o.domain != DOMAIN for o in inl.opset_import)
    (got2,) = run_ort(inl, {"X": x})
    np.testing.assert_allclose(got2, ref, atol=1e-5, rtol=1e-5)


def test_different_overloads_same_arity_run_their_own_bodies():
    x_vi = helper.make_tensor_value_info("X", F, ["B", 4])
    m = make_model(
        [
            helper.make_node("Relu", ["X"], ["A"], name="relu"),
            helper.make_node("Sigmoid", ["X"], ["S"], name="sig"),
            helper.make_node("Sub", ["A", "S"], ["Y"], name="sub"),
        ],
        [x_vi],
        [helper.make_tensor_value_info("Y", F, ["B", 4])],
    )
    r = fuse(m, [FusedSubgraph((0,), "act"), FusedSubgraph((1,), "act")])
    onnx.checker.check_model(r, full_check=True)
    a, s = fused_nodes(r)
    assert a.overload != s.overload and a.overload.startswith("act_")
    assert len(r.functions) == 2
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    (y,) = run_ort(r, {"X": x})
    np.testing.assert_allclose(y, np.maximum(x, 0) - 1 / (1 + np.exp(-x)), atol=1e-6)


def test_intermediate_used_outside_becomes_extra_output():
    # X -> Mul(X, 2) -> m ; Relu(m) -> r ; Add(r, m) outside ; m also a graph output? no
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    m = make_model(
        [
            helper.make_node("Mul", ["X", "two"], ["m"], name="mul"),
            helper.make_node("Relu", ["m"], ["r"], name="relu"),
            helper.make_node("Tanh", ["r"], ["t"], name="tanh"),
            helper.make_node("Add", ["t", "m"], ["Y"], name="add"),
            helper.make_node("Neg", ["r"], ["Z"], name="neg_out"),
        ],
        [helper.make_tensor_value_info("X", F, ["B", "S"])],
        [helper.make_tensor_value_info("Y", F, ["B", "S"]), helper.make_tensor_value_info("Z", F, ["B", "S"])],
        [two],
    )
    assert boundary(m, [0, 1, 2]) == (["X", "two"], ["m", "r", "t"])
    assert boundary(m, [1, 2]) == (["m"], ["r", "t"])
    r = fuse(m, [FusedSubgraph((0, 1, 2), "pointwise")])
    onnx.checker.check_model(r, full_check=True)
    (f,) = fused_nodes(r)
    assert list(f.input) == ["X", "two"] and list(f.output) == ["m", "r", "t"]
    x = np.random.default_rng(2).standard_normal((3, 5)).astype(np.float32)
    for a, b in zip(run_ort(r, {"X": x}), run_ort(m, {"X": x})):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_graph_output_produced_inside_is_output():
    m = make_model(
        [
            helper.make_node("Relu", ["X"], ["A"], name="relu"),
            helper.make_node("Neg", ["A"], ["Y"], name="neg"),
        ],
        [helper.make_tensor_value_info("X", F, ["B"])],
        [helper.make_tensor_value_info("A", F, ["B"]), helper.make_tensor_value_info("Y", F, ["B"])],
    )
    assert boundary(m, [0, 1]) == (["X"], ["A", "Y"])


def test_optional_inputs_and_constants():
    # Clip(X, "", hi) with hi from a Constant outside; c from a Constant inside.
    m = make_model(
        [
            helper.make_node("Constant", [], ["hi"], name="const_out", value_float=0.5),
            helper.make_node("Constant", [], ["c"], name="const_in", value_float=3.0),
            helper.make_node("Clip", ["X", "", "hi"], ["cl"], name="clip"),
            helper.make_node("Mul", ["cl", "c"], ["Y"], name="mul"),
        ],
        [helper.make_tensor_value_info("X", F, ["B", "S"])],
        [helper.make_tensor_value_info("Y", F, ["B", "S"])],
    )
    r = fuse(m, [FusedSubgraph((1, 2, 3), "clip_mul")])
    onnx.checker.check_model(r, full_check=True)
    (f,) = fused_nodes(r)
    assert list(f.input) == ["X", "hi"]
    (fn,) = r.functions
    assert [n.op_type for n in fn.node] == ["Constant", "Clip", "Mul"]
    clip = fn.node[1]
    assert clip.input[1] == ""
    assert [n.op_type for n in r.graph.node] == ["Constant", "Fused"]
    x = np.random.default_rng(3).standard_normal((4, 6)).astype(np.float32)
    np.testing.assert_allclose(run_ort(r, {"X": x})[0], run_ort(m, {"X": x})[0], atol=1e-6)


def test_fused_node_placed_topologically():
    # nodes: a=Relu(X), b=Neg(X), c=Add(a, b); fusing {a, c} must come after b.
    m = make_model(
        [
            helper.make_node("Relu", ["X"], ["a"], name="a"),
            helper.make_node("Neg", ["X"], ["b"], name="b"),
            helper.make_node("Add", ["a", "b"], ["Y"], name="c"),
        ],
        [helper.make_tensor_value_info("X", F, ["B"])],
        [helper.make_tensor_value_info("Y", F, ["B"])],
    )
    r = fuse(m, [FusedSubgraph((0, 2), "relu_add")])
    onnx.checker.check_model(r, full_check=True)
    assert [n.op_type for n in r.graph.node] == ["Neg", "Fused"]
    x = np.arange(-3, 3, dtype=np.float32)
    np.testing.assert_allclose(run_ort(r, {"X": x})[0], run_ort(m, {"X": x})[0])


def test_dtype_difference_gives_distinct_overloads():
    m = make_model(
        [
            helper.make_node("Relu", ["X"], ["a"], name="r0"),
            helper.make_node("Relu", ["D"], ["b"], name="r1"),
            helper.make_node("Relu", ["X2"], ["c"], name="r2"),
        ],
        [
            helper.make_tensor_value_info("X", F, ["B"]),
            helper.make_tensor_value_info("D", TensorProto.DOUBLE, ["B"]),
            helper.make_tensor_value_info("X2", F, ["B", "S"]),
        ],
        [
            helper.make_tensor_value_info("a", F, ["B"]),
            helper.make_tensor_value_info("b", TensorProto.DOUBLE, ["B"]),
            helper.make_tensor_value_info("c", F, ["B", "S"]),
        ],
    )
    r = fuse(m, [FusedSubgraph((i,), "relu") for i in range(3)])
    onnx.checker.check_model(r, full_check=True)
    assert len({n.overload for n in fused_nodes(r)}) == 3
    assert len(r.functions) == 3


def test_attribute_difference_gives_distinct_overloads():
    m = make_model(
        [
            helper.make_node("Softmax", ["X"], ["a"], name="s0", axis=-1),
            helper.make_node("Softmax", ["X"], ["b"], name="s1", axis=0),
            helper.make_node("Softmax", ["X"], ["c"], name="s2", axis=-1),
        ],
        [helper.make_tensor_value_info("X", F, ["B", "S"])],
        [helper.make_tensor_value_info(v, F, ["B", "S"]) for v in "abc"],
    )
    r = fuse(m, [FusedSubgraph((i,), "softmax") for i in range(3)])
    s0, s1, s2 = fused_nodes(r)
    assert s0.overload == s2.overload != s1.overload
    x = np.random.default_rng(4).standard_normal((3, 5)).astype(np.float32)
    for a, b in zip(run_ort(r, {"X": x}), run_ort(m, {"X": x})):
        np.testing.assert_allclose(a, b, atol=1e-6)


# --------------------------------------------------------------------------- #
# validation errors
# --------------------------------------------------------------------------- #


def test_overlapping_subgraphs_rejected():
    with pytest.raises(ValueError, match=r"not disjoint.*node 1 .*'gemm_epilogue'.*'bias_relu'"):
        fuse(two_layer_model(), [FusedSubgraph((0, 1), "gemm_epilogue"), FusedSubgraph((1, 2), "bias_relu")])


def _chain_model():
    return make_model(
        [
            helper.make_node("Relu", ["X"], ["a"], name="A"),
            helper.make_node("Neg", ["a"], ["b"], name="B"),
            helper.make_node("Add", ["a", "b"], ["Y"], name="C"),
        ],
        [helper.make_tensor_value_info("X", F, ["B"])],
        [helper.make_tensor_value_info("Y", F, ["B"])],
    )


def test_non_convex_subgraph_rejected():
    with pytest.raises(ValueError, match=r"subgraph 0 \('bad'\).*cycle.*'B'"):
        fuse(_chain_model(), [FusedSubgraph((0, 2), "bad")])


def test_mutual_dependency_cycle_rejected():
    # p=Relu(X), t=Sigmoid(X), r=Abs(p), q=Neg(t); S1={p,q}, S2={r,t}: each convex, together a cycle.
    m = make_model(
        [
            helper.make_node("Relu", ["X"], ["p"], name="p"),
            helper.make_node("Sigmoid", ["X"], ["t"], name="t"),
            helper.make_node("Abs", ["p"], ["r"], name="r"),
            helper.make_node("Neg", ["t"], ["q"], name="q"),
        ],
        [helper.make_tensor_value_info("X", F, ["B"])],
        [helper.make_tensor_value_info("r", F, ["B"]), helper.make_tensor_value_info("q", F, ["B"])],
    )
    fuse(m, [FusedSubgraph((0, 3), "s1")])  # fine alone
    fuse(m, [FusedSubgraph((1, 2), "s2")])
    with pytest.raises(ValueError, match=r"cycle.*subgraph 0 \('s1'\).*subgraph 1 \('s2'\)"):
        fuse(m, [FusedSubgraph((0, 3), "s1"), FusedSubgraph((1, 2), "s2")])


def test_graph_attribute_node_rejected():
    then_g = helper.make_graph(
        [helper.make_node("Relu", ["X"], ["o1"])], "then", [], [helper.make_tensor_value_info("o1", F, ["B"])]
    )
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["X"], ["o2"])], "else", [], [helper.make_tensor_value_info("o2", F, ["B"])]
    )
    m = make_model(
        [
            helper.make_node("ReduceSum", ["X"], ["s"], name="sum", keepdims=0),
            helper.make_node("Greater", ["s", "zero"], ["cond"], name="gt"),
            helper.make_node("If", ["cond"], ["Y"], name="my_if", then_branch=then_g, else_branch=else_g),
        ],
        [helper.make_tensor_value_info("X", F, ["B"])],
        [helper.make_tensor_value_info("Y", F, ["B"])],
        [numpy_helper.from_array(np.array(0.0, np.float32), "zero")],
    )
    with pytest.raises(ValueError, match="my_if"):
        fuse(m, [FusedSubgraph((1, 2), "bad")])
    # a value used implicitly inside the If branches counts as used outside
    assert boundary(m, [0, 1]) == (["X", "zero"], ["cond"])
    r = fuse(m, [FusedSubgraph((0, 1), "reduce_cmp")])
    onnx.checker.check_model(r, full_check=True)
    x = np.array([1.0, -3.0], np.float32)
    np.testing.assert_allclose(run_ort(r, {"X": x})[0], run_ort(m, {"X": x})[0])


def test_bad_indices_rejected():
    with pytest.raises(ValueError, match="out of range"):
        fuse(_chain_model(), [FusedSubgraph((0, 7), "x")])
    with pytest.raises(ValueError, match="empty"):
        fuse(_chain_model(), [FusedSubgraph((), "x")])


# --------------------------------------------------------------------------- #
# inline_fused
# --------------------------------------------------------------------------- #


def test_inline_fused_unique_names_for_repeated_function():
    m = two_layer_model()
    r = fuse(m, two_layer_partition())
    inl = inline_fused(r)
    outs = [o for n in inl.graph.node for o in n.output if o]
    assert len(outs) == len(set(outs))
    assert sorted(n.op_type for n in inl.graph.node) == sorted(n.op_type for n in m.graph.node)
    onnx.checker.check_model(inl, full_check=True)
