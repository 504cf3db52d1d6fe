"""Which attentions the sm_90a body (attention_sm90a.cuh) serves, rendered without compiling: plain f16/bf16
[B, H, S, D] Q, K (under a Transpose) and V at head dims 64 and 128 on sm_90a, with its three tmap records;
a materialised Kᵀ (behind a `Skv % 8 == 0` route when Skv is symbolic); and every form it must refuse, which
keeps the mma.sync body: other archs, fp32, other head dims, a materialised Kᵀ of a length not a multiple of 8,
K computed inside the subgraph (RoPE-like), grouped-query K/V, DeBERTa's batched [B*H, S, D] products, a config
the build excluded. The route takes the body only where kernels/perfmodel.py models it faster."""
from __future__ import annotations

import pytest
from onnx import TensorProto

from plus_ep.kernels.codegen import symdim
from plus_ep.kernels.families.flash_attention import configs as ac
from plus_ep.kernels.families.flash_attention import routes as ar
from plus_ep.kernels.render import render
from plus_ep.kernels.target import Target
from plus_ep.rewrite import rewrite_detailed
from tests.support.wg_attention_cases import attention_graph as attention

F16, BF16, F32 = TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.FLOAT


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


@pytest.mark.parametrize("kw", [dict(D=80), dict(D=32), dict(D=256), dict(dtype=F32), dict(form="key_major", S=131),
                                dict(form="rope"), dict(form="gqa", H=4), dict(form="batched", B=2)],
                         ids=["d80", "d32", "d256", "fp32", "key-major-skv-131", "rope", "gqa", "batched"])
def test_forms_it_cannot_read_keep_mma_sync(kw):
    rd = rendered(attention(**kw))
    assert not wgmma_variants(rd), [v.name for v in rd.variants]
    assert "\ntmap " not in rd.plan.text()


def test_materialised_kt_takes_the_body_where_its_rows_are_whole_chunks():
    """Kᵀ an input [B, H, D, Skv] (BERT's Q/K/V group stores it): its tensor map's row stride Skv must be a multiple
    of 8 f16 elements, so a symbolic Skv gets the body behind `Skv % 8 == 0` and today's routes after it; a static
    one that is a multiple of 8 takes it unguarded."""
    rd = rendered(attention(64, form="key_major"))
    assert wgmma_variants(rd) == ["wg_d64_q128_kv128_s2"]
    conds = [r.cond for r in rd.plan.routes]
    body = [r.cond for r in rd.plan.routes if r.label.startswith("wg_")]
    assert body and all(c.endswith(",8,%,0,==") for c in body) and conds[-1] == "1" and len(conds) >= 2, conds
    assert "#define PLUS_K_KEY_MAJOR 1" in rd.variants[0].source
    assert "\ntmap 10 3 in 1 0 s" in rd.plan.text() and " 64 64 1 128\n" in rd.plan.text()
    rd = rendered(attention(64, form="key_major", S=136))
    assert wgmma_variants(rd) == ["wg_d64_q128_kv128_s2"] and len(rd.plan.routes) == 1


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
