"""Per-element error bounds (plus_ep/verification/bounds.py): correct fp32 / TF32 / f16 computations stay
inside them, an error of 1e-3 of the output's scale does not, and the conditioning terms (softmax,
LayerNorm on nearly constant rows) are what makes the difference; the PTX <-> cubin tie of the packs."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from plus_ep.kernels.wire import pack
from plus_ep.verification.bounds import Bounded, compare, evaluate, layernorm, matmul, softmax


def _tf32(x: np.ndarray) -> np.ndarray:
    """Round fp32 to TF32 (10 mantissa bits, nearest, ties away from zero: cvt.rna.tf32.f32)."""
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x1000) & 0xFFFFE000
    return b.astype(np.uint32).view(np.float32)


@pytest.fixture
def ab():
    rng = np.random.default_rng(0)
    return rng.standard_normal((96, 200)).astype(np.float32), rng.standard_normal((200, 72)).astype(np.float32)


def test_fp32_gemm_inside_its_bound_and_1e3_of_the_scale_outside(ab):
    a, b = ab
    ref = matmul(Bounded.exact(a), Bounded.exact(b), "exact")
    got = a @ b                                         # fp32, numpy's own summation order
    c = compare(got, ref)
    assert c["ok"] and c["ratio"] < 0.1, c
    bad = got.copy()
    bad[5, 7] += 1e-3 * c["scale"]
    c = compare(bad, ref)
    assert not c["ok"] and c["worst"] == [5, 7] and c["ratio"] > 5, c


def test_tf32_gemm_inside_its_bound_and_a_swapped_operand_pair_outside(ab):
    a, b = ab
    ref = matmul(Bounded.exact(a), Bounded.exact(b), "tf32")
    got = _tf32(a).astype(np.float64) @ _tf32(b).astype(np.float64)
    c = compare(got.astype(np.float32), ref)
    assert c["ok"] and c["ratio"] < 0.7, c      # ~4 sigma of 7000 elements against LAMBDA = 6 sigma
    a2 = a.copy()
    a2[:, [3, 4]] = a2[:, [4, 3]]                         # two k columns of A swapped in one fragment
    c = compare((_tf32(a2).astype(np.float64) @ _tf32(b).astype(np.float64)).astype(np.float32), ref)
    assert not c["ok"] and c["ratio"] > 10, c


def test_softmax_bound_follows_its_conditioning():
    rng = np.random.default_rng(1)
    x = (8 * rng.standard_normal((64, 150))).astype(np.float32)          # peaky rows
    e = Bounded.exact(x)
    ref = softmax(e, -1)
    z = np.exp(x - x.max(-1, keepdims=True))
    got = (z / z.sum(-1, keepdims=True)).astype(np.float32)
    assert compare(got, ref)["ok"]
    z2 = np.exp2(x - x.max(-1, keepdims=True))                            # base 2
    assert not compare((z2 / z2.sum(-1, keepdims=True)).astype(np.float32), ref)["ok"]
    # an input known only to within 1e-3 absolute: the bound grows by about p * 2e-3
    loose = softmax(Bounded(x.astype(np.float64), np.full(x.shape, 1e-3), "float32"), -1)
    assert np.all(loose.e >= ref.e) and np.max(loose.e / np.maximum(ref.v, 1e-30)) > 1.9e-3


def test_layernorm_on_nearly_constant_rows_tells_a_stable_variance_from_a_cancelling_one():
    rng = np.random.default_rng(2)
    x = (1000.0 + 0.05 * rng.standard_normal((32, 256))).astype(np.float32)
    g = rng.standard_normal(256).astype(np.float32)
    b = rng.standard_normal(256).astype(np.float32)
    y, _, _ = layernorm(Bounded.exact(x), Bounded.exact(g), Bounded.exact(b), -1, 1e-5)
    x32 = x.astype(np.float32)
    mu = x32.mean(-1, keepdims=True, dtype=np.float32)
    d = x32 - mu
    two_pass = (d / np.sqrt((d * d).mean(-1, keepdims=True) + np.float32(1e-5))) * g + b
    assert compare(two_pass.astype(np.float32), y)["ok"]
    one_pass_var = (x32 * x32).mean(-1, keepdims=True, dtype=np.float32) - mu * mu   # E[x^2] - E[x]^2
    one_pass = (d / np.sqrt(np.maximum(one_pass_var, 0) + np.float32(1e-5))) * g + b
    assert not compare(one_pass.astype(np.float32), y)["ok"]


def test_evaluate_a_function_body_against_ort_fp32_and_compare_nonfinite():
    import onnxruntime as ort
    nodes = [helper.make_node("MatMul", ["x", "w"], ["t"]), helper.make_node("Add", ["t", "b"], ["u"]),
             helper.make_node("Div", ["u", "s"], ["v"]), helper.make_node("Erf", ["v"], ["e"]),
             helper.make_node("Mul", ["u", "e"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "xwbs"],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    rng = np.random.default_rng(3)
    feeds = {"x": rng.standard_normal((40, 64)).astype(np.float32),
             "w": rng.standard_normal((64, 48)).astype(np.float32),
             "b": rng.standard_normal(48).astype(np.float32), "s": np.array(1.41421356, np.float32)}
    ort_y = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    ev = evaluate(g, [feeds[n] for n in "xwbs"], math="exact")
    c = compare(ort_y, ev.outputs[0])
    assert c["ok"] and c["ratio"] < 0.3, c
    ref = Bounded(np.array([np.nan, np.inf, 1.0]), np.zeros(3), "float32")
    assert compare(np.array([np.nan, np.inf, 1.0], np.float32), ref)["ok"]
    c = compare(np.array([0.0, np.inf, 1.0], np.float32), ref)
    assert not c["ok"] and c["nonfinite_mismatches"] == 1


def test_pack_ties_ptx_to_its_cubin():
    ptx = ".version 9.0\n.target sm_80\n"
    tied = pack.tie(b"cubin-a", ptx)
    assert pack.untied(tied) == ptx and pack.tie(b"cubin-a", tied) == tied
    assert pack.tie_problem(pack.Image(b"cubin-a", tied)) is None
    assert "not the one its PTX was assembled into" in pack.tie_problem(pack.Image(b"cubin-b", tied))
    edited = tied.replace("sm_80", "sm_86")
    assert "changed after the compile" in pack.tie_problem(pack.Image(b"cubin-a", edited))
    assert "no tie" in pack.tie_problem(pack.Image(b"cubin-a", ptx))
    assert pack.tie_problem(pack.Image(b"cubin-a", None)) is None
    blob = pack.write([pack.Image(b"cubin-a", tied)])
    assert pack.parse(blob)[0].ptx == tied                         # the tie travels in the pack as PTX text


def test_gather_elements_along_a_negative_axis_moves_data_and_bounds():
    """DeBERTa's relative-position gathers (axis -1 over more than 64 positions, an index narrower than the
    data along it, negative indices): the body evaluates (onnx.reference 1.23 refuses a negative axis with
    such shapes and gathers through np.choose, at most 64 choices) and the bounds move with the elements."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["c"]), helper.make_node("GatherElements", ["c", "i"], ["y"], axis=-1)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None),
                                       helper.make_tensor_value_info("w", TensorProto.FLOAT, None),
                                       helper.make_tensor_value_info("i", TensorProto.INT64, None)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((3, 7, 16)).astype(np.float32), rng.standard_normal((16, 80)).astype(np.float32)
    i = rng.integers(-80, 80, (3, 7, 7)).astype(np.int64)
    ev = evaluate(g, [x, w, i], math="exact")
    c = x.astype(np.float64) @ w.astype(np.float64)
    j = np.where(i < 0, i + 80, i)
    want = np.array([[[c[a, b, j[a, b, k]] for k in range(7)] for b in range(7)] for a in range(3)])
    np.testing.assert_allclose(ev.outputs[0].v, want, rtol=1e-12)
    mm = matmul(Bounded.exact(x), Bounded.exact(w), "exact")
    np.testing.assert_allclose(ev.outputs[0].e, np.take_along_axis(mm.e, j, axis=-1), rtol=1e-12)


def test_underflow_near_the_bottom_of_the_range_is_allowed_and_nothing_more():
    """SiLU(g) * u on a very negative gate (the fp32 genai decoder's stress inputs): the exact value is about
    -2e-37, a kernel whose sigmoid's exp(-g) overflows gives -0.0. Each op's underflow (eta, the smallest
    normal) propagates through the products, so that is inside the bound; the same 2e-37 error on a value of
    normal size, or an error of 1e-6 on this element, is not."""
    nodes = [helper.make_node("Sigmoid", ["g"], ["s"]), helper.make_node("Mul", ["g", "s"], ["a"]),
             helper.make_node("Mul", ["a", "u"], ["y"])]
    g = helper.make_graph(nodes, "silu_up", [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "gu"],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    gate, up = np.array([-95.0, 0.5], np.float32), np.array([450.0, 3.0], np.float32)
    ev = evaluate(g, [gate, up], math="exact")
    exact = ev.outputs[0].v
    assert -1e-36 < exact[0] < -1e-37
    flushed = np.array([-0.0, exact[1]], np.float32)
    assert compare(flushed, ev.outputs[0])["ok"]
    assert not compare(np.array([exact[0] + 1e-6, exact[1]], np.float32), ev.outputs[0])["ok"]
    assert not compare(np.array([exact[0], exact[1] * (1 + 1e-4)], np.float32), ev.outputs[0])["ok"]
