"""Row kernels (kernels/codegen/row.py) and the GEMM epilogue on data where precision slips show, rendered from
ONNX graphs with static shapes and run on the CPU PTX interpreter against float64 numpy, per element
within bounds derived from the math (outputs start poisoned):

- softmax of logits up to +-250 (exp overflows fp32 above ~88.7: a kernel that does not subtract the row
  maximum gives inf / inf = NaN);
- LayerNormalization and RMSNormalization (opset 23) over rows of spread 0.02 (variance 4e-4, where the
  model's epsilon 1e-5 is visible at the 1 % level and an epsilon of 1e-3 at the 100 % level), mixed with
  ordinary rows, with gamma != 1 and beta != 0;
- an ONNX Gemm with alpha != 1, beta != 1, transB and a bias C, plus a Relu epilogue: exact fp32 (SIMT), TF32
  (operands rounded to tf32 in the reference too) and split-K (K = 1024 on 8 rows, with its reduce kernel)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from plus_ep.kernels.render import render
from plus_ep.kernels.target import Target
from plus_ep.rewrite import rewrite_detailed
from plus_ep.verification.bounds import U32, Bounded, layernorm
from tests.support.run_rendered import run_rendered

F32 = TensorProto.FLOAT
U = U32


def _one_subgraph(model, pattern_names, fp32_math="exact"):
    r = rewrite_detailed(model)
    (sg,) = [s for s in r.subgraphs if s.pattern.name in pattern_names]
    ins, outs = r.view.graph_index.boundary(sg.nodes)
    rd = render(r.view, sg, ins, outs, Target("sm_80", fp32_math), node_name=sg.pattern.name)
    assert not rd.plan.syms
    return rd, ins, outs


def _model(nodes, inputs, outputs, inits=(), opset=23):
    g = helper.make_graph(nodes, "rows", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def _check(got, ref, bound, what):
    err = np.abs(got.astype(np.float64) - ref)
    bad = ~(err <= bound)
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {err.size} elements outside the bound; worst "
                           f"{np.unravel_index(np.argmax(err / bound), err.shape)} err {err.max():.3g}")


def test_softmax_of_large_logits():
    R, L = 5, 300
    rng = np.random.default_rng(3)
    x = (rng.uniform(-1, 1, (R, L)) * np.array([[250.0], [120.0], [90.0], [30.0], [1.0]])).astype(np.float32)
    model = _model([helper.make_node("Softmax", ["X"], ["Y"], axis=-1)],
                   [helper.make_tensor_value_info("X", F32, [R, L])], [helper.make_tensor_value_info("Y", F32, [R, L])])
    rd, ins, outs = _one_subgraph(model, ("softmax",))
    (got,) = run_rendered(rd, [x], [np.zeros((R, L), np.float32)], name="softmax_large")
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(-1, keepdims=True))
    ref = e / e.sum(-1, keepdims=True)
    # exp(x - max) with x - max exact-ish in fp32 (|x| <= 250: 2^-16 absolute), expf a few ulps, the sum
    # (L + 8) u relative: relative error per element <= |x - max| 2^-23 + (L + 16) u
    rel = np.abs(x64 - x64.max(-1, keepdims=True)) * 2.0 ** -23 + (L + 16) * U
    _check(got, ref, ref * rel * 2 + 1e-37, "softmax of large logits")
    assert np.allclose(got.sum(-1), 1.0, atol=1e-5)


@pytest.mark.parametrize("rms", [False, True])
def test_norm_of_low_variance_rows(rms):
    R, L, eps = 8, 256, 1e-5
    rng = np.random.default_rng(4)
    x = rng.standard_normal((R, L))
    x[:4] = (0.0 if rms else rng.uniform(-3, 3, (4, 1))) + 0.02 * rng.standard_normal((4, L))   # variance ~4e-4
    x = x.astype(np.float32)
    g = (1 + 0.5 * rng.standard_normal(L)).astype(np.float32)
    b = rng.standard_normal(L).astype(np.float32)
    op = "RMSNormalization" if rms else "LayerNormalization"
    inits = [numpy_helper.from_array(g, "g")] + ([] if rms else [numpy_helper.from_array(b, "b")])
    model = _model([helper.make_node(op, ["X", "g"] + ([] if rms else ["b"]), ["Y"], axis=-1, epsilon=eps)],
                   [helper.make_tensor_value_info("X", F32, [R, L])], [helper.make_tensor_value_info("Y", F32, [R, L])],
                   inits)
    rd, ins, outs = _one_subgraph(model, ("rmsnorm", "layernorm"))
    arrays = {"X": x, "g": g, "b": b}
    (got,) = run_rendered(rd, [arrays[t] for t in ins], [np.zeros((R, L), np.float32)], name=f"norm_{op}")
    x64 = x.astype(np.float64)
    c = x64 if rms else x64 - x64.mean(-1, keepdims=True)
    ref = c / np.sqrt((c * c).mean(-1, keepdims=True) + eps) * g + (0.0 if rms else b)
    # verify's LayerNorm/RMSNorm rule (plus_ep/verification/bounds.py), without its MARGIN
    bound = layernorm(Bounded.exact(x), Bounded.exact(g), None if rms else Bounded.exact(b), -1, eps, rms)[0].e
    _check(got, ref, bound, op)


@pytest.mark.parametrize("math,M,K", [("exact", 70, 48), ("tf32", 70, 48), ("exact", 8, 1024)])
def test_gemm_alpha_beta_trans_b_bias(math, M, K):
    """exact: SIMT fp32; tf32: mma.sync m16n8k8 on operands rounded to tf32 (cvt.rna: the reference rounds
    them the same way, so only fp32 accumulation remains); K = 1024 on 8 rows: split-K with its reduce."""
    from tests.support.ptx_harness import tf32
    N = 80
    rng = np.random.default_rng(5)
    a = rng.standard_normal((M, K)).astype(np.float32)
    w = (rng.standard_normal((N, K)) / np.sqrt(K)).astype(np.float32)
    c = rng.standard_normal(N).astype(np.float32)
    alpha, beta = 0.75, -1.5
    model = _model([helper.make_node("Gemm", ["A", "W", "C"], ["G"], alpha=alpha, beta=beta, transB=1),
                    helper.make_node("Relu", ["G"], ["Y"])],
                   [helper.make_tensor_value_info("A", F32, [M, K])], [helper.make_tensor_value_info("Y", F32, [M, N])],
                   [numpy_helper.from_array(w, "W"), numpy_helper.from_array(c, "C")], opset=17)
    rd, ins, outs = _one_subgraph(model, ("gemm",), fp32_math=math)
    if K >= 1024:
        assert [ln.entry for ln in rd.plan.routes[0].launches] == ["plus_gemm", "plus_splitk_reduce"]
    arrays = {"A": a, "W": w, "C": c}
    (got,) = run_rendered(rd, [arrays[t] for t in ins], [np.zeros((M, N), np.float32)], name=f"gemm_ab_{math}_{K}")
    a64, w64 = ((tf32(x) if math == "tf32" else x).astype(np.float64) for x in (a, w))
    ref = np.maximum(alpha * (a64 @ w64.T) + beta * c.astype(np.float64), 0.0)
    bound = (K + 8) * U * (abs(alpha) * (np.abs(a64) @ np.abs(w64).T) + abs(beta) * np.abs(c)) + 1e-30
    _check(got, ref, bound, f"Gemm alpha/beta ({math}, K {K})")
