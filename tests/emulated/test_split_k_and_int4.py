"""Two GEMM paths where plausible bugs hide behind aligned sizes (issue 37), rendered and run on the CPU PTX
interpreter against float64 numpy with verify's bounds:

* split-K with uneven K ranges: K = 1100 on 8 rows splits 4 ways into [0, 288), [288, 576), [576, 864),
  [864, 1100): the last range is shorter and K is not a multiple of BK, so a split that reads to its nominal
  end, a range not rounded to whole K tiles, or a reduce that drops a plane all show (K = 1024 splits into
  equal BK-aligned ranges and hides them);
* MatMulNBits with the default zero point 2^(bits - 1) (no zero_points input) at 2, 4 and 8 bits, K with a
  partial last quantisation block, on the exact SIMT, TF32 and f16 paths."""
from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from plus_ep.kernels.render import render
from plus_ep.kernels.target import Target
from plus_ep.rewrite import rewrite_detailed
from plus_ep.verification.bounds import Bounded, U32, compare, matmul, unit
from tests.support import contrib_cases as cc
from tests.support.run_rendered import run_rendered


def _one(model, math, pattern="gemm"):
    r = rewrite_detailed(model, archs=None)
    (sg,) = r.subgraphs
    assert sg.pattern.name == pattern, sg.pattern.name
    ins, outs = r.view.graph_index.boundary(sg.nodes)
    rd = render(r.view, sg, ins, outs, Target("sm_80", "tf32" if math == "tf32" else "exact"), node_name=pattern)
    defs = {k: int(v) for k, v in re.findall(r"#define (PLUS_\w+) (\d+)\n", rd.variants[0].source)}
    return r, sg, ins, rd, defs


@pytest.mark.parametrize("math,M,K", [("exact", 8, 1100), ("tf32", 8, 1100), ("fp16", 4, 1500)])
def test_split_k_with_uneven_k_ranges(math, M, K):
    N = 80
    rng = np.random.default_rng(K)
    dt, npdt = (TensorProto.FLOAT16, np.float16) if math == "fp16" else (TensorProto.FLOAT, np.float32)
    w = (rng.standard_normal((N, K)) / np.sqrt(K)).astype(npdt)
    c = rng.standard_normal(N).astype(npdt)
    g = helper.make_graph([helper.make_node("Gemm", ["A", "W", "C"], ["G"], transB=1), helper.make_node("Relu", ["G"], ["Y"])],
                          "splitk", [helper.make_tensor_value_info("A", dt, [M, K])],
                          [helper.make_tensor_value_info("Y", dt, [M, N])],
                          [numpy_helper.from_array(w, "W"), numpy_helper.from_array(c, "C")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    _, _, ins, rd, d = _one(model, math)
    S, BK = d["PLUS_SPLITK"], d["PLUS_BK"]
    per = -(-(-(-K // S)) // BK) * BK
    assert S > 1 and K % per != 0 and K % BK != 0, (S, BK, per)      # uneven: the last range is short and ragged
    assert [ln.entry for ln in rd.plan.routes[0].launches] == ["plus_gemm", "plus_splitk_reduce"]
    a = rng.standard_normal((M, K)).astype(npdt)
    arrays = {"A": a, "W": w, "C": c}
    (got,) = run_rendered(rd, [arrays[t] for t in ins], [np.zeros((M, N), npdt)], name=f"splitk_{math}")
    a64, w64, c64 = (x.astype(np.float64) for x in (a, w, c))
    mm = matmul(Bounded.exact(a), Bounded.exact(w.T), math)
    v = mm.v + c64
    ref = Bounded(np.maximum(v, 0.0), mm.e + U32 * np.abs(v) + unit(npdt) * np.abs(v), "float16" if math == "fp16" else "float32")
    res = compare(got, ref)
    assert res["ok"], res
    np.testing.assert_allclose(ref.v, np.maximum(a64 @ w64.T + c64, 0.0))


def _nbits_model(bits, block, K, N, dt):
    """y = MatMulNBits(a, packed, scales) with no zero_points input (the default 2^(bits - 1))."""
    rng = np.random.default_rng(bits * 100 + K)
    w = rng.standard_normal((K, N)).astype(np.float32) / np.sqrt(K)
    packed, scales, zp, zvals = cc.quantize_nbits(w, bits, block, True, rng)
    assert zp is None and (zvals == 1 << (bits - 1)).all()
    npdt = np.float16 if dt == TensorProto.FLOAT16 else np.float32
    scales = scales.astype(npdt)
    node = helper.make_node("MatMulNBits", ["a", "b", "s"], ["y"], domain="com.microsoft", K=K, N=N, bits=bits,
                            block_size=block)
    g = helper.make_graph([node], "nbits", [helper.make_tensor_value_info("a", dt, [2, 3, K])],
                          [helper.make_tensor_value_info("y", dt, [2, 3, N])],
                          [numpy_helper.from_array(packed, "b"), numpy_helper.from_array(scales, "s")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=9)
    return model, packed, scales, rng.standard_normal((2, 3, K)).astype(npdt)


def _dequantised(packed, scales, bits, block, K, N):
    """float64 [K, N] weight from the packed fields (low bits first) with the default zero point 2^(bits - 1)."""
    per, mask = 8 // bits, (1 << bits) - 1
    q = np.stack([(packed.reshape(N, -1) >> (bits * j)) & mask for j in range(per)], -1).reshape(N, -1)
    blocks = scales.shape[-1]
    w = (q[:, :blocks * block].reshape(N, blocks, block).astype(np.float64) - (1 << (bits - 1))) \
        * scales.astype(np.float64).reshape(N, blocks, 1)
    return w.reshape(N, -1)[:, :K].T


@pytest.mark.parametrize("bits,block,K,N,math", [(4, 32, 72, 40, "exact"), (8, 16, 40, 70, "tf32"),
                                                 (2, 16, 56, 24, "exact"), (4, 16, 72, 80, "fp16")])
def test_nbits_gemm_with_the_default_zero_point(bits, block, K, N, math):
    dt = TensorProto.FLOAT16 if math == "fp16" else TensorProto.FLOAT
    model, packed, scales, a = _nbits_model(bits, block, K, N, dt)
    assert K % block != 0                                        # a partial last quantisation block
    r, sg, ins, rd, d = _one(model, math)
    assert sg.roles.nbits["bits"] == bits and sg.roles.nbits.get("zero_points") is None
    assert d.get("PLUS_B_NBITS") == 1
    arrays = {"a": a, "b": packed, "s": scales}
    inputs = [arrays[t] if t in arrays else np.asarray(r.view.const(t)) for t in ins]   # the expansion's constants
    (got,) = run_rendered(rd, inputs, [np.zeros((2, 3, N), a.dtype)], name=f"nbits_b{bits}_{math}")
    w = _dequantised(packed, scales, bits, block, K, N)
    wt = w.astype(a.dtype)                                       # the decoded weight, rounded to the activations' type
    mm = matmul(Bounded.exact(a), Bounded(wt.astype(np.float64), unit(a.dtype) * np.abs(w), str(a.dtype)), math)
    ref = Bounded(mm.v, mm.e + unit(a.dtype) * np.abs(mm.v), str(a.dtype))
    res = compare(got, ref)
    assert res["ok"], res


def test_split_k_of_a_matmul_with_a_residual_epilogue():
    """MatMul [2, 4, 1100] @ W [1100, 48] + bias + residual: the 8 rows of a decode step with a long K, split
    unevenly, each partial plane summed once by the reduce and the epilogue applied to the sum."""
    rng = np.random.default_rng(11)
    K, N = 1100, 48
    w = (rng.standard_normal((K, N)) / np.sqrt(K)).astype(np.float32)
    bias = rng.standard_normal(N).astype(np.float32)
    n = helper.make_node
    g = helper.make_graph([n("MatMul", ["X", "W"], ["p"]), n("Add", ["p", "bias"], ["q"]), n("Add", ["q", "R"], ["Y"])],
                          "splitk_residual", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 4, K]),
                                              helper.make_tensor_value_info("R", TensorProto.FLOAT, [2, 4, N])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 4, N])],
                          [numpy_helper.from_array(w, "W"), numpy_helper.from_array(bias, "bias")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    _, _, ins, rd, d = _one(model, "exact")
    assert d["PLUS_SPLITK"] > 1 and K % d["PLUS_BK"] != 0, d
    arrays = {"X": rng.standard_normal((2, 4, K)).astype(np.float32), "R": rng.standard_normal((2, 4, N)).astype(np.float32),
              "W": w, "bias": bias}
    (got,) = run_rendered(rd, [arrays[t] for t in ins], [np.zeros((2, 4, N), np.float32)], name="splitk_residual")
    mm = matmul(Bounded.exact(arrays["X"]), Bounded.exact(w), "exact")
    v = mm.v + bias.astype(np.float64) + arrays["R"].astype(np.float64)
    res = compare(got, Bounded(v, mm.e + 2 * U32 * np.abs(v), "float32"))
    assert res["ok"], res


@pytest.mark.parametrize("bits", [8, 2])
def test_nbits_decode_step_with_the_default_zero_point(bits):
    """One row (a decode step: the GEMV-shaped route), exact fp32, every packed field width but 4."""
    block, K, N = 16, 40, 72
    model, packed, scales, a = _nbits_model(bits, block, K, N, TensorProto.FLOAT)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 1
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_value = 1
    model.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 1
    a = a[:1, :1]
    r, sg, ins, rd, d = _one(model, "exact")
    assert d.get("PLUS_B_NBITS") == 1
    arrays = {"a": a, "b": packed, "s": scales}
    (got,) = run_rendered(rd, [arrays[t] if t in arrays else np.asarray(r.view.const(t)) for t in ins],
                          [np.zeros((1, 1, N), np.float32)], name=f"nbits_gemv_b{bits}")
    w = _dequantised(packed, scales, bits, block, K, N)
    mm = matmul(Bounded.exact(a), Bounded(w, U32 * np.abs(w), "float32"), "exact")
    res = compare(got, Bounded(mm.v, mm.e + U32 * np.abs(mm.v), "float32"))
    assert res["ok"], res
