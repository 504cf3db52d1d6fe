"""Rendered attention (rewrite -> route -> render -> NVRTC -> the CPU PTX interpreter) at every head dim the
routes admit, element by element against the graph in float64 with verify's bounds (issue 37).

The routes take any multiple of 8 up to 256 (padded to the menu's multiple of 16: D = 24 runs a D = 32 tile
whose last 8 columns are masked off by the hooks), and every rendered attention the other tests run had
D % 16 == 0 or D <= 16. Each case is a decoder-style block: a causal mask (bool, through Where(mask, 0, -inf)
as exporters write it) and a key-padding mask that hides the last keys of batch row 1, the NaN guard, B = 2
and H = 3 (grid z and y both > 1 and different), and Sq = Skv = BKV + 1 for the chosen route's key tile:
the last query row's last visible key is the first key of the second key tile. The default run covers the
head dims the issue names (24, 40, 72, 80, 96, 112) and both ends (8, 256), each on one math path in
rotation (exact SIMT fp32, TF32 and f16 tensor cores); every multiple of 8 on every path is `slow`."""
from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import TensorProto, numpy_helper

from plus_ep.kernels.render import render
from plus_ep.kernels.target import Target
from plus_ep.rewrite import rewrite_detailed
from plus_ep.verification.bounds import compare, evaluate
from tests.support.graphs import Graph
from tests.support.run_rendered import run_rendered, static_value

B, H = 2, 3
MATHS = ("exact", "tf32", "fp16")


def causal_attention(S: int, D: int, dtype) -> object:
    g = Graph("causal_attention", opset=18, ir_version=10)
    for t in "qkv":
        g.input(t, [B, H, S, D], dtype)
    g.input("causal", [1, 1, S, S], TensorProto.BOOL)
    g.input("pad", [B, 1, 1, S], dtype)
    npdt = np.float16 if dtype == TensorProto.FLOAT16 else np.float32
    g.init("scale", np.array(1 / np.sqrt(D), npdt))
    g.init("zero", np.array(0, npdt))
    g.init("ninf", np.array(-np.inf, npdt))
    s = g.op("Mul", g.op("MatMul", "q", g.op("Transpose", "k", perm=[0, 1, 3, 2])), "scale")
    s = g.op("Add", g.op("Add", s, g.op("Where", "causal", "zero", "ninf")), "pad")
    p = g.op("Softmax", s, axis=-1)
    p = g.op("Where", g.op("IsNaN", p), "zero", p)
    g.op("MatMul", p, "v", out="o")
    g.output("o", [B, H, S, D], dtype)
    return g.model()


def _render(S, D, math):
    dtype = TensorProto.FLOAT16 if math == "fp16" else TensorProto.FLOAT
    model = causal_attention(S, D, dtype)
    r = rewrite_detailed(model, archs=None)
    (sg,) = r.subgraphs
    assert sg.pattern.name == "attention", sg.pattern.name
    ins, outs = r.view.graph_index.boundary(sg.nodes)
    rd = render(r.view, sg, ins, outs, Target("sm_80", "tf32" if math == "tf32" else "exact"), node_name=f"attn_d{D}")
    defines = {k: int(v) for k, v in re.findall(r"#define (PLUS_\w+) (\d+)\n", rd.variants[0].source)}
    return model, rd, ins, defines


def run_head_dim(D: int, math: str):
    """Render at a first length, then at Sq = Skv = BKV + 1 for the key tile of the route chosen there."""
    S = 65
    for _ in range(3):
        model, rd, ins, defs = _render(S, D, math)
        if S == defs["PLUS_BKV"] + 1:
            break
        S = defs["PLUS_BKV"] + 1
    assert S == defs["PLUS_BKV"] + 1, (S, defs)
    assert defs["PLUS_HEAD_DIM"] == max(16, -(-D // 16) * 16) and defs["PLUS_MATH"] == MATHS.index(math)
    rng = np.random.default_rng(D * 3 + MATHS.index(math))
    npdt = np.float16 if math == "fp16" else np.float32
    feeds = {t: rng.standard_normal((B, H, S, D)).astype(npdt) for t in "qkv"}
    feeds["causal"] = np.tril(np.ones((S, S), bool))[None, None]
    pad = np.zeros((B, 1, 1, S), npdt)
    pad[1, ..., S - 3:] = -np.inf                        # batch row 1: its last 3 keys hidden
    feeds["pad"] = pad
    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    (launch,) = rd.plan.routes[0].launches
    gx, gy, gz = (static_value(g) for g in launch.grid)
    assert (gy, gz) == (H, B) and gx == -(-S // defs["PLUS_BQ"]), (gx, gy, gz)
    (got,) = run_rendered(rd, [feeds[t] if t in feeds else consts[t] for t in ins], [np.zeros((B, H, S, D), npdt)],
                          name=f"attn_d{D}_{math}")
    want = evaluate(model.graph, [feeds[i.name] for i in model.graph.input], math=math).outputs[0]
    c = compare(got, want)
    assert c["ok"], f"D {D} {math} S {S} (BQ {defs['PLUS_BQ']}, BKV {defs['PLUS_BKV']}): {c}"
    # the last query row reads the first key of the second tile: its output differs from the one without it
    assert np.isfinite(got.astype(np.float32)).all()


DEFAULT = [(8, "fp16"), (24, "fp16"), (40, "tf32"), (72, "exact"), (80, "fp16"), (96, "tf32"), (112, "exact"),
           (256, "tf32")]


@pytest.mark.parametrize("D,math", DEFAULT, ids=[f"d{d}-{m}" for d, m in DEFAULT])
def test_head_dim_through_the_routes(D, math):
    run_head_dim(D, math)


@pytest.mark.slow
@pytest.mark.parametrize("math", MATHS)
@pytest.mark.parametrize("D", range(8, 257, 8))
def test_every_head_dim_on_every_path(D, math):
    run_head_dim(D, math)
