"""Which attentions the sm_90a body (attention_sm90a.cuh) serves, rendered without compiling: plain f16/bf16
[B, H, S, D] Q, K (under a Transpose) and V at head dims 64 and 128 on sm_90a, with its three tmap records; and
every form it must refuse, which keeps the mma.sync body: other archs, fp32, other head dims, a materialised Kᵀ,
K computed inside the subgraph (RoPE-like), grouped-query K/V, DeBERTa's batched [B*H, S, D] products, a config
the build excluded. The route takes the body only where kernels/perfmodel.py models it faster."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from plus_ep.kernels.codegen import symdim
from plus_ep.kernels.families.flash_attention import configs as ac
from plus_ep.kernels.families.flash_attention import routes as ar
from plus_ep.kernels.render import render
from plus_ep.kernels.target import Target
from plus_ep.rewrite import rewrite_detailed
from tests.support.graphs import Graph

F16, BF16, F32 = TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.FLOAT


def attention(D=64, dtype=F16, S="seq", B="batch", H=4, form="plain"):
    """softmax(Q·Kᵀ·D^-0.5 + key padding mask)·V; `form`: plain | key_major (Kᵀ an input) | rope (K scaled by a
    tensor inside the subgraph) | gqa (K, V with H/2 heads, repeated) | batched ([B*H, S, D] products)."""
    g = Graph("attn", opset=18, ir_version=10)
    npdt = {F16: np.float16, BF16: np.float32, F32: np.float32}[dtype]
    hk = H // 2 if form == "gqa" else H
    lead = [B, H] if form != "batched" else [f"{B}*{H}" if isinstance(B, str) else B * H]
    g.input("q", lead + [S, D], dtype)
    g.input("k", ([B, hk, D, S] if form == "key_major" else [B, hk, S, D]) if form != "batched" else lead + [S, D], dtype)
    g.input("v", [B, hk, S, D] if form != "batched" else lead + [S, D], dtype)
    scale = g.init("scale", np.array(D ** -0.5, npdt)) if dtype != BF16 else \
        g.op("Cast", g.init("scale32", np.array(D ** -0.5, np.float32)), to=BF16)
    k, v = "k", "v"
    if form == "rope":
        g.input("cos", [S, D], dtype)
        k = g.op("Mul", k, "cos")
    if form == "gqa":
        shape = g.init("rep", np.array([1, 1, 2, 1, 1], np.int64))
        full = g.init("full", np.array([0, H, -1, D], np.int64))
        k = g.op("Reshape", g.op("Expand", g.op("Unsqueeze", k, g.init("ax", np.array([2], np.int64))), shape), full)
        v = g.op("Reshape", g.op("Expand", g.op("Unsqueeze", v, "ax"), shape), full)
    kt = k if form == "key_major" else g.op("Transpose", k, perm=[0, 2, 1] if form == "batched" else [0, 1, 3, 2])
    s = g.op("Mul", g.op("MatMul", "q", kt), scale)
    if form != "batched":
        g.input("mask", [B, 1, 1, S], dtype)
        s = g.op("Add", s, "mask")
    g.op("MatMul", g.op("Softmax", s, axis=-1), v, out="o")
    g.output("o", lead + [S, D], dtype)
    return g.model()


def rendered(model, arch="sm_90a", excluded=frozenset()):
    r = rewrite_detailed(model, archs=[arch], compile_kernels=False)
    (sg,) = [s for s in r.subgraphs if s.pattern.name == "attention"]
    ins, outs = r.view.graph_index.boundary(sg.nodes)
    return render(r.view, sg, ins, outs, Target(arch, "tf32", excluded), node_name="attn")


def wgmma_variants(rd) -> list:
    return [v.name for v in rd.variants if "#define PLUS_ATTN_WGMMA 1" in v.source]


@pytest.mark.parametrize("D,dtype", [(64, F16), (128, F16), (64, BF16)])
def test_plain_attention_takes_the_body_with_three_maps(D, dtype):
    rd = rendered(attention(D, dtype))
    assert wgmma_variants(rd) == [f"wg_d{D}_q128_kv128_s2"], [v.name for v in rd.variants]
    text = rd.plan.text()
    assert text.count("\ntmap ") == 3 and " 64 128 1 128\n" in text and " 64 64 1 128\n" in text
    assert f"tmap {dtype} 3 in" in text


@pytest.mark.parametrize("arch", ["sm_80", "sm_89", "sm_90"])
def test_other_archs_keep_mma_sync(arch):
    rd = rendered(attention(64), arch)
    assert not wgmma_variants(rd) and "\ntmap " not in rd.plan.text()


@pytest.mark.parametrize("kw", [dict(D=80), dict(D=32), dict(D=256), dict(dtype=F32), dict(form="key_major"),
                                dict(form="rope"), dict(form="gqa", H=4), dict(form="batched", B=2)],
                         ids=["d80", "d32", "d256", "fp32", "key-major", "rope", "gqa", "batched"])
def test_forms_it_cannot_read_keep_mma_sync(kw):
    rd = rendered(attention(**kw))
    assert not wgmma_variants(rd), [v.name for v in rd.variants]
    assert "\ntmap " not in rd.plan.text()


def test_an_excluded_config_falls_back():
    """A body config the build excluded (it spilled) leaves the mma.sync routes."""
    rd = rendered(attention(128), excluded=frozenset({"wg_d128_q128_kv128_s2"}))
    assert not wgmma_variants(rd) and rd.variants


@pytest.mark.parametrize("b,h,s,d", [(1, 12, 128, 64), (16, 12, 128, 64), (1, 32, 4096, 64), (1, 32, 4096, 128),
                                     (2, 4, 40, 128)])
def test_route_takes_the_faster_modelled(b, h, s, d):
    """At each static shape the route's pick is the faster, by perfmodel, of today's pick and the body."""
    target = Target("sm_90a")
    today = ar.attention_routes(b, h, s, s, d, target, symdim.Symbols(), math_=ac.MATH_F16)[0][1]
    pick = ar.attention_routes(b, h, s, s, d, target, symdim.Symbols(), math_=ac.MATH_F16, wgmma=True)[0][1]
    body = ac.WGMMA_CONFIGS[d][0]
    t_today, t_body = ar.attention_time(today, b, h, s, s, "sm_90a"), ar.attention_time(body, b, h, s, s, "sm_90a")
    assert pick == (body if t_body < t_today else today), (today.name, t_today, t_body)


def test_modelled_body_beats_mma_sync_at_long_prefill():
    """b1 x 32 heads x 4096: the body models faster than every mma.sync tile of the menu (wgmma's peak, fewer
    instructions per score)."""
    for d in (64, 128):
        body = ar.attention_time(ac.WGMMA_CONFIGS[d][0], 1, 32, 4096, 4096, "sm_90a")
        best = min(ar.attention_time(c, 1, 32, 4096, 4096, "sm_90a") for c in ac.configs_for(ac.MATH_F16, d))
        assert body < 0.6 * best, (d, body, best)
