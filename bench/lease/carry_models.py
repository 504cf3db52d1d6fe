"""The models the GPU lease carries for the kernel-correctness step: together they exercise every
template family and route kind PlusEP builds, at small ragged shapes so the PTX interpreter makes their
reference outputs here in minutes.

Each case is rewritten twice, once with sm_90a packs (what an H100 runs: wgmma GEMMs, cluster
GEMM + norm rows, Hopper attention configs) and once with sm_80 packs only (the launcher JIT-compiles
their PTX on a 9.0 device: the mma.sync paths).

| case             | covers                                                                        |
|------------------|-------------------------------------------------------------------------------|
| bert_tf32        | BERT layer (embedding gather + LayerNorm row, Q/K/V gemm_group, attention D 32, |
|                  | gemm + GELU, gemm + residual + LayerNorm), fp32 on TF32 tensor cores, padded   |
|                  | batch 2 x seq 7, FusedHost shape tensors where the exporter's shape chain feeds |
| bert_exact       | the same on SIMT fp32 (fp32_math=exact)                                       |
| bert_fp16        | the same in fp16 (f16 mma / wgmma)                                            |
| gemm_{f32,tf32,f16,bf16} | ragged M 37 x N 100 x K 72 GEMM + bias + GELU epilogue                  |
| norm_ln_f16      | GEMM + bias + residual + LayerNorm, N 1100: the cluster route on sm_90a        |
| norm_rms_tf32    | GEMM + residual + RMSNorm, N 768 (fp32 on TF32)                               |
| attn_d{32,80,128,256}_f16, attn_d{64,96}_tf32 | attention, ragged seq 13, key-padding mask         |
| shapev           | a GEMM whose output Reshape reads a Shape -> Concat chain: `FusedHost` inputs |
| llama_gqa        | zoo Llama (2 layers): RMSNorm, rotary, grouped-query attention (torch export; |
|                  | skipped when torch is missing)                                                 |
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper, numpy_helper

_NP = {T.FLOAT: np.float32, T.FLOAT16: np.float16, T.BFLOAT16: np.float32}


@dataclass
class Case:
    name: str
    model: onnx.ModelProto
    feeds: dict
    fp32_math: str = "tf32"
    covers: str = ""
    archs: tuple = ("sm_90a", "sm_80")
    extra: dict = field(default_factory=dict)


def _init(name, a, dt):
    a = np.asarray(a, np.float32)
    if dt == T.BFLOAT16:
        return helper.make_tensor(name, T.BFLOAT16, a.shape, a.ravel().tolist())
    return numpy_helper.from_array(a.astype(_NP[dt]), name)


def _feed(a, dt):
    """A float input in the model's element type (bf16 inputs are fed as bf16 bits in uint16)."""
    a = np.asarray(a, np.float32)
    if dt == T.BFLOAT16:
        return (a.view(np.uint32) >> 16).astype(np.uint16)   # truncation: values exactly representable
    return a.astype(_NP[dt])


def _model(nodes, inputs, outputs, inits):
    g = helper.make_graph(nodes, "lease", inputs, outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def gemm_case(name, dt, fp32_math, M=37, K=72, N=100, seed=0) -> Case:
    rng = np.random.default_rng(seed)
    n = helper.make_node
    nodes = [n("MatMul", ["X", "W"], ["mm"]), n("Add", ["mm", "B"], ["y0"]),
             n("Mul", ["y0", "half"], ["h"]), n("Div", ["y0", "sqrt2"], ["d"]), n("Erf", ["d"], ["e"]),
             n("Add", ["e", "one"], ["e1"]), n("Mul", ["h", "e1"], ["Y"])]
    inits = [_init("W", rng.standard_normal((K, N)) / 8, dt), _init("B", rng.standard_normal(N), dt),
             _init("half", np.array(0.5), dt), _init("sqrt2", np.array(np.sqrt(2.0)), dt),
             _init("one", np.array(1.0), dt)]
    m = _model(nodes, [helper.make_tensor_value_info("X", dt, ["m", K])],
               [helper.make_tensor_value_info("Y", dt, ["m", N])], inits)
    return Case(name, m, {"X": _feed(rng.standard_normal((M, K)), dt)}, fp32_math,
                f"GEMM M {M} x N {N} x K {K} + bias + GELU, {name.split('_')[1]}")


def norm_case(name, dt, fp32_math, rms, M=37, K=96, N=1100, seed=1) -> Case:
    rng = np.random.default_rng(seed)
    n = helper.make_node
    nodes = [n("MatMul", ["X", "W"], ["mm"]), n("Add", ["mm", "B"], ["mb"]), n("Add", ["mb", "R"], ["S"])]
    inits = [_init("W", rng.standard_normal((K, N)) / 10, dt), _init("B", rng.standard_normal(N) / 4, dt),
             _init("g", 1 + rng.standard_normal(N) / 4, dt)]
    if rms:
        inits += [_init("two", np.array(2.0), dt), _init("eps", np.array(1e-6), dt)]
        nodes += [n("Pow", ["S", "two"], ["sq"]), n("ReduceMean", ["sq"], ["ms"], axes=[-1], keepdims=1),
                  n("Add", ["ms", "eps"], ["mse"]), n("Sqrt", ["mse"], ["rt"]), n("Div", ["S", "rt"], ["nrm"]),
                  n("Mul", ["nrm", "g"], ["Y"])]
    else:
        inits.append(_init("bb", rng.standard_normal(N) / 4, dt))
        nodes.append(n("LayerNormalization", ["S", "g", "bb"], ["Y"], axis=-1, epsilon=1e-5))
    m = _model(nodes, [helper.make_tensor_value_info("X", dt, ["m", K]), helper.make_tensor_value_info("R", dt, ["m", N])],
               [helper.make_tensor_value_info("Y", dt, ["m", N])], inits)
    feeds = {"X": _feed(rng.standard_normal((M, K)), dt), "R": _feed(rng.standard_normal((M, N)), dt)}
    kind = "RMSNorm" if rms else "LayerNorm"
    return Case(name, m, feeds, fp32_math, f"GEMM + residual + {kind}, M {M} x N {N} x K {K}")


def attention_case(name, dt, fp32_math, D, B=2, H=2, S=13, seed=2) -> Case:
    rng = np.random.default_rng(seed)
    n = helper.make_node
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), n("MatMul", ["q", "kt"], ["s0"]),
             n("Mul", ["s0", "scale"], ["s1"]), n("Add", ["s1", "mask"], ["s2"]), n("Softmax", ["s2"], ["p"], axis=-1),
             n("MatMul", ["p", "v"], ["o"]), n("Transpose", ["o"], ["Y"], perm=[0, 2, 1, 3])]
    vi = helper.make_tensor_value_info
    m = _model(nodes, [vi(x, dt, ["b", H, "s", D]) for x in ("q", "k", "v")] + [vi("mask", dt, ["b", 1, 1, "s"])],
               [vi("Y", dt, ["b", "s", H, D])], [_init("scale", np.array(1 / np.sqrt(D)), dt)])
    mask = np.zeros((B, 1, 1, S), np.float32)
    mask[-1, ..., S - 4:] = -10000.0      # key padding of the last sequence
    feeds = {x: _feed(rng.standard_normal((B, H, S, D)), dt) for x in ("q", "k", "v")}
    feeds["mask"] = _feed(mask, dt)
    return Case(name, m, feeds, fp32_math, f"attention D {D}, seq {S}, key padding")


def shapev_case(width=32, batch=2, seq=7, seed=3) -> Case:
    rng = np.random.default_rng(seed)
    n = helper.make_node
    nodes = [n("Shape", ["mask"], ["mshape"]), n("Concat", ["mshape", "C3"], ["shape"], axis=0),
             n("MatMul", ["X2", "W"], ["mm"]), n("Add", ["mm", "B"], ["biased"]),
             n("Reshape", ["biased", "shape"], ["Y"])]
    inits = [_init("W", rng.standard_normal((width, 3 * width)) / 6, T.FLOAT),
             _init("B", rng.standard_normal(3 * width), T.FLOAT),
             numpy_helper.from_array(np.array([3 * width], np.int64), "C3")]
    vi = helper.make_tensor_value_info
    m = _model(nodes, [vi("X2", T.FLOAT, ["batch*seq", width]), vi("mask", T.INT64, ["batch", "seq"])],
               [vi("Y", T.FLOAT, ["batch", "seq", 3 * width])], inits)
    feeds = {"X2": rng.standard_normal((batch * seq, width)).astype(np.float32),
             "mask": np.ones((batch, seq), np.int64)}
    return Case("shapev", m, feeds, "exact", "GEMM whose Reshape reads Shape -> Concat: FusedHost shape inputs")


def bert_cases() -> list:
    from plus_ep.demo_model import build_bert, sample_inputs
    raw = build_bert(layers=1, hidden=64, heads=2, intermediate=128, vocab=64, max_pos=32)
    feeds = sample_inputs(batch=2, seq=7, vocab=64)
    from bench.harness.bert_fp16 import to_fp16
    what = "BERT layer: embeddings + LayerNorm, Q/K/V group, attention D 32, GELU GEMM, GEMM + LayerNorm"
    half = onnx.ModelProto()
    half.CopyFrom(raw)
    return [Case("bert_tf32", raw, feeds, "tf32", what + " (TF32)"),
            Case("bert_exact", raw, feeds, "exact", what + " (SIMT fp32)"),
            Case("bert_fp16", to_fp16(half), feeds, "tf32", what + " (fp16)")]


def llama_case():
    """Zoo Llama, 2 layers (needs torch for the export; cached after the first)."""
    try:
        from plus_ep import zoo
        from plus_ep.feeds import sample_inputs
        path = zoo.export("llama", "torchscript", "small", layers=2)
    except Exception as e:  # noqa: BLE001 - torch or transformers missing: the case is left out, said
        return None, f"llama_gqa left out: {type(e).__name__}: {e}"
    m = onnx.load(str(path))
    return Case("llama_gqa", m, sample_inputs(m, batch=2, seq=7), "tf32",
                "Llama: RMSNorm, rotary, grouped-query attention (zoo export, 2 layers)"), None


def cases(short: bool = False) -> tuple[list, list]:
    """(cases, notes). short: the CI rehearsal's one tiny case."""
    if short:
        return [gemm_case("gemm_tf32", T.FLOAT, "tf32", M=9, K=24, N=40)], []
    out = bert_cases()
    out += [gemm_case("gemm_f32", T.FLOAT, "exact"), gemm_case("gemm_tf32", T.FLOAT, "tf32"),
            gemm_case("gemm_f16", T.FLOAT16, "tf32"), gemm_case("gemm_bf16", T.BFLOAT16, "tf32")]
    out += [norm_case("norm_ln_f16", T.FLOAT16, "tf32", rms=False), norm_case("norm_rms_tf32", T.FLOAT, "tf32", rms=True,
                                                                             N=768)]
    out += [attention_case(f"attn_d{d}_f16", T.FLOAT16, "tf32", d) for d in (32, 80, 128, 256)]
    out += [attention_case(f"attn_d{d}_tf32", T.FLOAT, "tf32", d) for d in (64, 96)]
    out.append(shapev_case())
    notes = []
    llama, why = llama_case()
    if llama:
        out.append(llama)
    else:
        notes.append(why)
    return out, notes
