"""A decoder's attention with a KV cache (tests/support/decoder_graphs.py, transformers' form): one attention
node takes the present concatenations, its kernel stores present itself (no side kernel), reads K and V
per KV head, and routes decode shapes to the packed split-KV variant; the rewritten model still computes
the original on ORT CPU. Rendering only (the kernels run in tests/emulated/test_decode_attention_verify.py)."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto

from plus_ep.graph_rewrites.graph import GraphView
from plus_ep.graph_rewrites.identify import Identifier
from plus_ep.kernels.render import render
from plus_ep.kernels.target import Target
from plus_ep.rewrite import rewrite_detailed
from plus_ep.warehouse import default_warehouse
from tests.support.decoder_graphs import kv_cache_attention, kv_cache_feeds


def _attention(model):
    view = GraphView.build(model)
    subs = Identifier(view, default_warehouse(), kernels=True).run()
    att = [sg for sg in subs if sg.pattern.name == "attention"]
    assert len(att) == 1, [sg.pattern.name for sg in subs]
    return view, att[0]


def _render(model, arch="sm_80", math="tf32"):
    view, sg = _attention(model)
    ins, outs = view.graph_index.boundary(sg.nodes)
    return render(view, sg, ins, outs, Target(arch, math), node_name="attn"), outs


@pytest.mark.parametrize("heads,kv_heads,dtype,math,strided", [
    (4, 2, TensorProto.FLOAT, "tf32", True),
    (8, 2, TensorProto.FLOAT16, "tf32", True),
    (4, 4, TensorProto.FLOAT, "exact", False),       # no repeat_kv (MHA); SIMT reads the past by its hook
])
def test_cache_attention_is_one_node_writing_present(heads, kv_heads, dtype, math, strided):
    rd, outs = _render(kv_cache_attention(heads, kv_heads, 32, dtype), math=math)
    assert set(outs) == {"present_key", "present_value", "out"}
    names = [v.name for v in rd.variants]
    assert names[0].endswith("_decode") and len(names) >= 2 and not any(n.endswith("_decode") for n in names[1:])
    decode, general = rd.variants[0].source, rd.variants[-1].source
    for src in (decode, general):
        assert "#define PLUS_ATTN_KV_CACHE 1" in src and "plus_k_present" in src and "plus_v_present" in src
        assert "plus_pointwise" not in src          # no side kernel copies the cache
        assert ("#define PLUS_K_PAST_STRIDED 1" in src) == strided
        assert "(s * " in src                       # Kᵀ's sqrt(scale) applied to the score
    group = heads // kv_heads
    assert f"#define PLUS_ATTN_GQA_PACK {group}" in decode and "#define PLUS_ATTN_SPLIT 1" in decode
    assert "PLUS_ATTN_GQA_PACK" not in general and "PLUS_ATTN_SPLIT" not in general
    plan = rd.plan.text()
    seq = rd.plan.syms.index("seq")
    assert f"route 0 s{seq},{group},*,16,<=" in plan          # decode: G * seq rows within one 16-row tile
    assert "plus_attention_combine" in plan and "scratch 0 " in plan
    assert rd.plan.routes[-1].cond == "1"


def test_computed_past_is_not_a_cache():
    """A past that is computed inside the subgraph (here: scaled) is not read from the past input: the
    attention keeps the generic form: the present is a side output, computed by the attention launch's own
    threads (PLUS_HAS_ATTN_SIDE), not a launch of its own."""
    m = kv_cache_attention(4, 2, 32)
    g = m.graph
    for n in g.node:
        if n.op_type == "Concat" and n.output[0] == "present_key":
            n.input[0] = "past_key_scaled"
    import onnx
    g.node.insert(0, onnx.helper.make_node("Mul", ["past_key", "sqrt_scale"], ["past_key_scaled"]))
    rd, _ = _render(m)
    src = rd.variants[0].source
    assert "PLUS_ATTN_KV_CACHE" not in src and "PLUS_HAS_ATTN_SIDE" in src and "plus_pointwise" not in src
    assert [k.entry for r in rd.plan.routes for k in r.launches] == ["plus_attention"]


@pytest.mark.parametrize("batch,seq,past", [(2, 1, 20), (2, 5, 0), (1, 1, 1)])
def test_rewritten_cache_attention_computes_the_original(batch, seq, past):
    m = kv_cache_attention(4, 2, 32)
    out = rewrite_detailed(m).model
    assert [n.op_type for n in out.graph.node] == ["Fused"]
    feeds = kv_cache_feeds(4, 2, 32, batch, seq, past)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    want = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = ort.InferenceSession(out.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)
    for w, x in zip(want, got):
        np.testing.assert_allclose(x, w, rtol=1e-5, atol=1e-5)
