"""Gated-MLP and GQA-projection test models (warehouse/families/gemm_gated.py, ragged gemm_group): X [batch, seq,
H] read by a gate and an up projection (two weights, or one combined weight split by Slice or Split) whose
SwiGLU/GeGLU product is scaled and stored; the pair with MatMulNBits weights (int2/4/8, each with its own scales
and zero points); Q/K/V projections of different widths with a long K (split-K routes). Random non-trivial
weights and biases."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

from tests.support.contrib_cases import quantize_nbits
from tests.support.graphs import Graph

H, INTER = 48, 40              # I = 40: not a multiple of 16, so the last 16-column pair of the interleave is partial
NP = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16}


def _act(g, x, act):
    if act == "silu":
        return g.op("Mul", x, g.op("Sigmoid", x))
    if act == "gelu":            # erf GELU, as the exporters write it
        e = g.op("Erf", g.op("Div", x, g.init(f"sqrt2_{len(g.nodes)}", np.array(1.4142135, np.float32))))
        return g.op("Mul", g.op("Mul", x, g.init(f"half_{len(g.nodes)}", np.array(0.5, np.float32))),
                    g.op("Add", e, g.init(f"one_{len(g.nodes)}", np.array(1.0, np.float32))))
    raise ValueError(act)


def gated_pair_model(dtype=TensorProto.FLOAT, act="silu", bias=True, up_first=False, inter=INTER):
    """Separate gate and up projections (Llama/Qwen2): Y = 0.5 * act(X Wg + bg) * (X Wu + bu). `up_first`: the
    up MatMul comes first in the graph."""
    rng = np.random.default_rng(11)
    dt = NP[dtype]
    g = Graph("gated_pair")
    x = g.input("X", ["batch", "seq", H], dtype)
    wg = g.init("Wg", (rng.standard_normal((H, inter)) / 5).astype(dt))
    wu = g.init("Wu", (rng.standard_normal((H, inter)) / 5).astype(dt))

    def proj(w, name):
        y = g.op("MatMul", x, w, name=f"{name}/MatMul")
        if bias:
            y = g.op("Add", y, g.init(f"b{name}", (0.1 * rng.standard_normal(inter)).astype(dt)), name=f"{name}/Add")
        return y
    if up_first:
        u = proj(wu, "up")
        a = _act(g, proj(wg, "gate"), act)
    else:
        a = _act(g, proj(wg, "gate"), act)
        u = proj(wu, "up")
    y = g.op("Mul", a, u, name="gated/Mul")
    g.op("Mul", y, g.init("scale", np.array(0.5, dt)), out="Y", name="scale/Mul")
    g.output("Y", ["batch", "seq", inter], dtype)
    return g.model()


def gated_nbits_model(dtype=TensorProto.FLOAT16, bits=4, block=16, k=40, inter=37, zero_points=(True, False),
                      up_scale=4.0, gate_bias=True, up_block=None, plain_up=False, seed=21):
    """onnxruntime-genai's int4 MLP: Y = silu(MatMulNBits(X, gate) [+ bias]) * MatMulNBits(X, up), X [batch, seq, k].
    Each weight quantised with its own blockwise scales (the up weight `up_scale` times larger, so a decoder
    reading the other weight's scales is far off) and, where `zero_points` says so, its own packed uint8 zero
    points (asymmetric); k not a multiple of `block` leaves a partial last block, `inter` not a multiple of 8 a
    partial 8-column block of the interleave. `up_block`: another block size for the up weight; `plain_up`: the up
    projection a plain MatMul (both refused by the gated template)."""
    rng = np.random.default_rng(seed)
    dt = NP[dtype]
    g = Graph("gated_nbits", domains={"com.microsoft": 1})
    x = g.input("X", ["batch", "seq", k], dtype)
    outs = []
    for name, mag, zp, bs in (("gate", 1.0, zero_points[0], block), ("up", up_scale, zero_points[1], up_block or block)):
        w = mag * rng.standard_normal((k, inter)).astype(np.float32) / np.sqrt(k)
        if name == "up" and plain_up:
            outs.append(g.op("MatMul", x, g.init("up_W", w.astype(dt)), name="up/MatMul"))
            continue
        packed, scales, zpk, _ = quantize_nbits(w, bits, bs, not zp, rng)
        ins = [x, g.init(f"{name}_Q", packed), g.init(f"{name}_scales", scales.astype(dt)),
               g.init(f"{name}_zp", zpk) if zp else ""]
        if name == "gate" and gate_bias:
            ins += ["", g.init("gate_bias", (0.3 * rng.standard_normal(inter)).astype(dt))]
        while not ins[-1]:
            ins.pop()
        outs.append(g.op("MatMulNBits", *ins, name=f"{name}/MatMulNBits", domain="com.microsoft",
                         K=k, N=inter, bits=bits, block_size=bs))
    g.op("Mul", _act(g, outs[0], "silu"), outs[1], out="Y", name="gated/Mul")
    g.output("Y", ["batch", "seq", inter], dtype)
    return g.model()


def gated_combined_model(dtype=TensorProto.FLOAT, form="slice", swap=False, inter=INTER):
    """One combined projection [H, 2I] (Phi-3): its halves by two Slices (`form` "slice", the second one first in
    the graph with `swap`) or a Split, Y = silu(first half) * second half."""
    rng = np.random.default_rng(12)
    dt = NP[dtype]
    g = Graph("gated_combined", opset=18)
    x = g.input("X", ["batch", "seq", H], dtype)
    w = g.init("W", (rng.standard_normal((H, 2 * inter)) / 5).astype(dt))
    y = g.op("MatMul", x, w, name="gate_up/MatMul")
    if form == "slice":
        i64 = lambda v: np.array([v], np.int64)     # noqa: E731
        bounds = [(0, inter), (inter, 2 * inter)]
        made = {}
        for k in ([1, 0] if swap else [0, 1]):
            s, e = bounds[k]
            made[k] = g.op("Slice", y, g.init(f"s{k}", i64(s)), g.init(f"e{k}", i64(e)), g.init(f"a{k}", i64(-1)),
                           name=f"slice{k}")
        gate, up = made[0], made[1]
    else:
        gate, up = g.op("Split", y, outs=["gate", "up"], axis=-1, num_outputs=2, name="split")
    g.op("Mul", _act(g, gate, "silu"), up, out="Y", name="gated/Mul")
    g.output("Y", ["batch", "seq", inter], dtype)
    return g.model()


def gqa_long_k_model(dtype=TensorProto.FLOAT, k=1024, widths=(32, 16, 16)):
    """Q, K, V projections of a [batch, seq, k] input with widths `widths` (a ragged group) and a long K, so the
    routes for short rows split K."""
    rng = np.random.default_rng(13)
    dt = NP[dtype]
    g = Graph("gqa_long_k")
    x = g.input("X", ["batch", "seq", k], dtype)
    for name, n in zip("QKV", widths):
        y = g.op("MatMul", x, g.init(f"W{name}", (rng.standard_normal((k, n)) / 30).astype(dt)), name=f"{name}/MatMul")
        g.op("Add", y, g.init(f"B{name}", (0.1 * rng.standard_normal(n)).astype(dt)), out=name, name=f"{name}/Add")
        g.output(name, ["batch", "seq", n], dtype)
    return g.model()
