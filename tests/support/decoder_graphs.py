"""A hand-written decoder attention with a KV cache, in the form transformers' Llama exports it (no torch
needed): Concat(past, new) along the keys as the present outputs, repeat_kv (Unsqueeze -> Expand ->
Reshape, its targets from Shape(present)), sqrt(scale) on Q and on Kᵀ, an additive mask, Softmax,
·V, the head transpose.

    model = kv_cache_attention(heads=4, kv_heads=2, head_dim=32)
    feeds = kv_cache_feeds(4, 2, 32, batch=2, seq=1, past=20)
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

from tests.support.graphs import Graph


def kv_cache_attention(heads: int = 4, kv_heads: int = 2, head_dim: int = 32, dtype=TensorProto.FLOAT):
    """Inputs q [batch, H, seq, D], k / v [batch, Hkv, seq, D] (the new rows), past_key / past_value
    [batch, Hkv, past, D], mask [batch, 1, seq, past+seq] (additive); outputs out [batch, seq, H*D],
    present_key / present_value [batch, Hkv, past+seq, D]."""
    H, Hkv, D = heads, kv_heads, head_dim
    G = H // Hkv
    g = Graph("kv_cache_attention", opset=17)
    q = g.input("q", ["batch", H, "seq", D], dtype)
    k = g.input("k", ["batch", Hkv, "seq", D], dtype)
    v = g.input("v", ["batch", Hkv, "seq", D], dtype)
    pk = g.input("past_key", ["batch", Hkv, "past", D], dtype)
    pv = g.input("past_value", ["batch", Hkv, "past", D], dtype)
    mask = g.input("mask", ["batch", 1, "seq", "past+seq"], dtype)
    present_k = g.op("Concat", pk, k, axis=2, out="present_key")
    present_v = g.op("Concat", pv, v, axis=2, out="present_value")
    np_dt = np.float16 if dtype == TensorProto.FLOAT16 else np.float32

    def ints(name, vals):
        return g.init(name, np.array(vals, np.int64))
    ints("ax2", [2])
    ints("zero", [0])
    ints("g", [G])
    ints("heads", [H])

    def repeat(t, tag):
        """transformers' repeat_kv: [B, Hkv, T, D] -> [B, Hkv * G, T, D], targets from Shape(t)."""
        if G == 1:
            return t
        shape = g.op("Shape", t, out=f"{tag}_shape")
        b = g.op("Slice", shape, "zero", g.init(f"{tag}_one", np.array([1], np.int64)), out=f"{tag}_b")
        hk = g.op("Slice", shape, f"{tag}_one", g.init(f"{tag}_two", np.array([2], np.int64)), out=f"{tag}_hk")
        td = g.op("Slice", shape, f"{tag}_two", g.init(f"{tag}_four", np.array([4], np.int64)), out=f"{tag}_td")
        expand_to = g.op("Concat", b, hk, "g", td, axis=0, out=f"{tag}_expand_to")
        reshape_to = g.op("Concat", b, "heads", td, axis=0, out=f"{tag}_reshape_to")
        u = g.op("Unsqueeze", t, "ax2", out=f"{tag}_u")
        e = g.op("Expand", u, expand_to, out=f"{tag}_e")
        return g.op("Reshape", e, reshape_to, out=f"{tag}_rep")
    kr, vr = repeat(present_k, "k"), repeat(present_v, "v")
    sq = g.init("sqrt_scale", np.array(float(D) ** -0.25, np_dt))
    qs = g.op("Mul", q, sq, out="q_scaled")
    kt = g.op("Mul", g.op("Transpose", kr, perm=[0, 1, 3, 2], out="k_t"), sq, out="k_t_scaled")
    s = g.op("Add", g.op("MatMul", qs, kt, out="scores"), mask, out="logits")
    p = g.op("Softmax", s, axis=-1, out="probs")
    o = g.op("MatMul", p, vr, out="o")
    ot = g.op("Transpose", o, perm=[0, 2, 1, 3], out="o_t")
    g.op("Reshape", ot, g.init("out_shape", np.array([0, 0, H * D], np.int64)), out="out")
    g.output("out", ["batch", "seq", H * D], dtype)
    g.output("present_key", ["batch", Hkv, "past+seq", D], dtype)
    g.output("present_value", ["batch", Hkv, "past+seq", D], dtype)
    return g.model()


def kv_cache_feeds(heads: int, kv_heads: int, head_dim: int, batch: int, seq: int, past: int, seed: int = 0,
                   dtype=np.float32) -> dict:
    """Random q/k/v/past and a causal mask (bottom-right) with the first positions of the last batch row
    padded (transformers' lowest-float additive mask)."""
    rng = np.random.default_rng(seed)
    T = past + seq
    out = {"q": rng.standard_normal((batch, heads, seq, head_dim)),
           "k": rng.standard_normal((batch, kv_heads, seq, head_dim)),
           "v": rng.standard_normal((batch, kv_heads, seq, head_dim)),
           "past_key": rng.standard_normal((batch, kv_heads, past, head_dim)),
           "past_value": rng.standard_normal((batch, kv_heads, past, head_dim))}
    out = {k: v.astype(dtype) for k, v in out.items()}
    i = np.arange(seq)[:, None] + past
    j = np.arange(T)[None, :]
    keep = np.broadcast_to(j <= i, (batch, 1, seq, T)).copy()
    if batch > 1:
        keep[-1, :, :, :min(3, T - 1)] = False        # left padding of the last row
    out["mask"] = np.where(keep, 0.0, np.finfo(dtype).min).astype(dtype)
    return out
