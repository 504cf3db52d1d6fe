"""Rendered kernels (rewrite -> render -> NVRTC -> the CPU PTX interpreter) on layouts where plausible index
bugs do not cancel out (issue 37), checked element by element against the ONNX graph evaluated in float64
with verify's bounds (plus_ep/verification/bounds.py: evaluate, compare):

* batched GEMMs with both operands batched, M != N != K and batch strides that all differ (A [.., M, K] and B
  [.., K, N] with M K != K N != M N), broadcast batch dims on either side, multi-tile M and N (grid x, y and z
  all > 1): a B operand read with A's batch stride, or C's, is wrong here (in QK^T-shaped tests they coincide);
* element-wise and GEMM-epilogue subgraphs through Transpose(perm [0, 2, 3, 1]), which is not its own inverse:
  an index mapped through the inverse permutation reads or writes the wrong elements."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from plus_ep.kernels.render import render
from plus_ep.kernels.target import Target
from plus_ep.rewrite import rewrite_detailed
from plus_ep.verification.bounds import Bounded, compare, evaluate
from tests.support.run_rendered import run_rendered

F, H = TensorProto.FLOAT, TensorProto.FLOAT16


def _model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                          [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _run(model, feeds, math, pattern, arch="sm_80"):
    """Render the model's one subgraph for (arch, math), run route 0 on the interpreter, compare every output
    with the graph in float64 within verify's bounds; returns the render."""
    r = rewrite_detailed(model, archs=None)
    (sg,) = r.subgraphs
    assert sg.pattern.name == pattern, sg.pattern.name
    ins, outs = r.view.graph_index.boundary(sg.nodes)
    rd = render(r.view, sg, ins, outs, Target(arch, "tf32" if math == "tf32" else "exact"), node_name=pattern)
    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    arrays = {**consts, **feeds}
    ev = evaluate(model.graph, [Bounded.exact(feeds[i.name]) for i in model.graph.input], math=math)
    want = {o.name: b for o, b in zip(model.graph.output, ev.outputs)}
    dtypes = {o.name: helper.tensor_dtype_to_np_dtype(o.type.tensor_type.elem_type) for o in model.graph.output}
    got = run_rendered(rd, [arrays[t] for t in ins], [np.zeros(want[t].v.shape, dtypes[t]) for t in outs],
                       arch=arch, name=pattern)
    for t, g in zip(outs, got):
        c = compare(g, want[t])
        assert c["ok"], f"{pattern} output {t} ({math}): {c}"
    return rd


def _grid(rd, route=0):
    from tests.support.run_rendered import static_value
    return [tuple(static_value(g) for g in ln.grid) for ln in rd.plan.routes[route].launches]


# (A shape, B shape): both batched, M, N, K distinct, multi-tile in M (> 32 or 64 rows) and N (> 64 columns)
BATCHED = {
    "same_batch": ([3, 37, 24], [3, 24, 83]),
    "b_broadcast_outer": ([2, 3, 41, 40], [3, 40, 70]),
    "both_broadcast": ([2, 1, 35, 19], [1, 3, 19, 90]),
}


@pytest.mark.parametrize("case,math", [("same_batch", "exact"), ("b_broadcast_outer", "exact"),
                                       ("both_broadcast", "exact"), ("same_batch", "tf32"),
                                       ("both_broadcast", "fp16")])
def test_batched_gemm_both_operands(case, math):
    ash, bsh = BATCHED[case]
    osh = list(np.broadcast_shapes(tuple(ash[:-2]), tuple(bsh[:-2]))) + [ash[-2], bsh[-1]]
    dt = H if math == "fp16" else F
    m = _model([helper.make_node("MatMul", ["A", "B"], ["P"]), helper.make_node("Relu", ["P"], ["Y"])],
               [("A", dt, ash), ("B", dt, bsh)], [("Y", dt, osh)])
    rng = np.random.default_rng(sum(ash) + sum(bsh))
    npdt = np.float16 if math == "fp16" else np.float32
    feeds = {"A": rng.standard_normal(ash).astype(npdt), "B": rng.standard_normal(bsh).astype(npdt)}
    rd = _run(m, feeds, math, "gemm")
    ((gx, gy, gz),) = _grid(rd)
    assert gx > 1 and gy > 1 and gz == int(np.prod(osh[:-2])) > 1, (gx, gy, gz)


def test_elementwise_through_a_non_involutive_transpose():
    """Sigmoid(x) -> Transpose(perm [0, 2, 3, 1]) -> + z (z in the transposed layout), and a second output in x's
    layout: the pull maps each output index back through the permutation."""
    n = helper.make_node
    m = _model([n("Sigmoid", ["X"], ["s"]), n("Transpose", ["s"], ["t"], perm=[0, 2, 3, 1]), n("Add", ["t", "Z"], ["Y"]),
                n("Transpose", ["Y"], ["back"], perm=[0, 3, 1, 2]), n("Mul", ["back", "X"], ["W"])],
               [("X", F, [2, 3, 5, 7]), ("Z", F, [2, 5, 7, 3])], [("Y", F, [2, 5, 7, 3]), ("W", F, [2, 3, 5, 7])])
    rng = np.random.default_rng(7)
    _run(m, {"X": rng.standard_normal((2, 3, 5, 7)).astype(np.float32),
             "Z": rng.standard_normal((2, 5, 7, 3)).astype(np.float32)}, "exact", "elementwise")


def test_gemm_epilogue_through_a_non_involutive_transpose():
    """X [2, 37, 24] @ W [24, 72] + b -> Reshape [2, 37, 6, 12] -> Transpose(perm [0, 2, 3, 1]) -> [2, 6, 12, 37]:
    the accumulator's forward map stores each (m, n) through the permutation."""
    n = helper.make_node
    rng = np.random.default_rng(8)
    inits = [numpy_helper.from_array(rng.standard_normal((24, 72)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.standard_normal(72).astype(np.float32), "bias"),
             numpy_helper.from_array(np.array([2, 37, 6, 12], np.int64), "shape")]
    m = _model([n("MatMul", ["X", "W"], ["p"]), n("Add", ["p", "bias"], ["q"]), n("Reshape", ["q", "shape"], ["r"]),
                n("Transpose", ["r"], ["Y"], perm=[0, 2, 3, 1])],
               [("X", F, [2, 37, 24])], [("Y", F, [2, 6, 12, 37])], inits)
    rd = _run(m, {"X": rng.standard_normal((2, 37, 24)).astype(np.float32)}, "exact", "gemm")
    ((gx, gy, _),) = _grid(rd)
    assert gx > 1 and gy > 1


def test_row_softmax_over_a_non_involutive_transpose():
    """Softmax over the last axis of Transpose(x, perm [0, 2, 3, 1]) (the row kernel pulls each row's elements
    through the permutation), then LayerNorm-free scaling by a second input in the transposed layout."""
    n = helper.make_node
    m = _model([n("Transpose", ["X"], ["t"], perm=[0, 2, 3, 1]), n("Softmax", ["t"], ["p"], axis=-1),
                n("Mul", ["p", "Z"], ["Y"])],
               [("X", F, [2, 6, 5, 7]), ("Z", F, [2, 5, 7, 6])], [("Y", F, [2, 5, 7, 6])])
    rng = np.random.default_rng(9)
    _run(m, {"X": (rng.standard_normal((2, 6, 5, 7)) * 3).astype(np.float32),
             "Z": rng.standard_normal((2, 5, 7, 6)).astype(np.float32)}, "exact", "softmax")


def test_batched_gemm_stored_through_a_non_involutive_transpose():
    """A [2, 3, 37, 16] @ B [2, 3, 16, 40] -> Transpose(perm [0, 2, 3, 1]) -> [2, 37, 40, 3]: both operands batched
    and the accumulator stored through the permutation (the head axis last)."""
    n = helper.make_node
    m = _model([n("MatMul", ["A", "B"], ["p"]), n("Transpose", ["p"], ["Y"], perm=[0, 2, 3, 1])],
               [("A", F, [2, 3, 37, 16]), ("B", F, [2, 3, 16, 40])], [("Y", F, [2, 37, 40, 3])])
    rng = np.random.default_rng(10)
    rd = _run(m, {"A": rng.standard_normal((2, 3, 37, 16)).astype(np.float32),
                  "B": rng.standard_normal((2, 3, 16, 40)).astype(np.float32)}, "exact", "gemm")
    ((_, gy, gz),) = _grid(rd)
    assert gy > 1 and gz == 6
