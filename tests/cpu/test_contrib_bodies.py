"""A fused node's function body keeps the ORIGINAL contrib nodes whose whole expansion it fused
(graph_rewrites/contrib/model.py: original_body), so a rewritten model run without PlusEP computes with ONNX
Runtime's own contrib kernels: an onnxruntime-genai-form int4 decoder whose MatMulNBits carry
accuracy_level 4 (ORT's CPU kernel quantises activations to int8) gives the original's logits and greedy
tokens on plain ORT CPU. Before, the bodies held the expansions (dequantise + fp32 MatMul): prefill logits
0.09 apart here, 0.5 on the real builder's model (issue 38)."""
from __future__ import annotations

import collections

import numpy as np
import onnx
import pytest
from onnx import helper

ort = pytest.importorskip("onnxruntime")
ortopt = pytest.importorskip("plus_ep.zoo.ortopt")


@pytest.fixture(scope="module")
def int4_level4():
    """The zoo's genai-form int4 decoder (fp32 activations, 2 layers) with accuracy_level 4 on every
    MatMulNBits, and its rewrite without kernels (bodies only: what runs where PlusEP is absent)."""
    import plus_ep
    m = onnx.load(str(ortopt.genai_llama(layers=2, dtype="float32")))
    for n in m.graph.node:
        if n.op_type == "MatMulNBits":
            kept = [a for a in n.attribute if a.name != "accuracy_level"]
            del n.attribute[:]
            n.attribute.extend(kept + [helper.make_attribute("accuracy_level", 4)])
    r = plus_ep.rewrite_detailed(m, archs=[])
    return m, r.model


def _session(model):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _body_ops(model) -> collections.Counter:
    return collections.Counter(f"{n.domain}:{n.op_type}" for f in model.functions for n in f.node)


def test_bodies_hold_the_contrib_nodes_not_their_expansions(int4_level4):
    original, rewritten = int4_level4
    fused = [n for n in rewritten.graph.node if n.domain == "ai.plus_ep"]
    assert len(fused) >= 10, [n.op_type for n in rewritten.graph.node]
    assert not any(n.op_type == "MatMulNBits" for n in rewritten.graph.node)      # all of them fused
    ops = _body_ops(rewritten)
    want = collections.Counter(n.op_type for n in original.graph.node if n.domain == "com.microsoft")
    # every MatMulNBits sits in a body as itself (functions are shared between identical layers: at least one each)
    assert ops["com.microsoft:MatMulNBits"] >= 1 and ops["com.microsoft:SkipSimplifiedLayerNormalization"] >= 1, ops
    assert not {k for k in ops if k in (":BitShift", ":BitwiseAnd")}, ops            # no dequantisation chain left
    assert want["MatMulNBits"] == 11
    for f in rewritten.functions:
        for n in f.node:
            if n.op_type == "MatMulNBits":
                assert helper.get_attribute_value(next(a for a in n.attribute if a.name == "accuracy_level")) == 4


def test_rewritten_int4_level4_model_on_ort_cpu_is_the_original(int4_level4):
    original, rewritten = int4_level4
    feeds = ortopt.genai_feeds(original, batch=1, seq=8, past=0)
    a, b = _session(original), _session(rewritten)
    names = [o.name for o in a.get_outputs()]
    want, got = dict(zip(names, a.run(None, feeds))), dict(zip(names, b.run(None, feeds)))
    assert float(np.abs(want["logits"] - got["logits"]).max()) <= 1e-5          # ORT's own kernels, same numerics

    def runner(s):
        outs = [o.name for o in s.get_outputs()]
        return lambda f: dict(zip(outs, s.run(None, f)))
    prompt = [1, 5, 9, 13]
    assert ortopt.genai_greedy(runner(b), original, prompt, 16) == ortopt.genai_greedy(runner(a), original, prompt, 16)


def test_a_split_contrib_node_keeps_its_expansion_body():
    """A contrib node whose expansion spans several fused nodes (none holds it whole) cannot be put back in
    one body: each keeps its part of the expansion, and the rewritten model still computes the original."""
    from plus_ep.graph_rewrites.contrib import expand_model, original_body
    m = onnx.load(str(ortopt.genai_llama(layers=1, dtype="float32")))
    ex = expand_model(m)
    g = next(g for g in ex.groups if g.node.op_type == "MatMulNBits")
    by_name = {n.name: n for n in ex.model.graph.node}
    half = [by_name[nm] for nm in g.names[: len(g.names) // 2]]
    assert original_body(ex, half) is None                                       # half an expansion: not put back
    whole = original_body(ex, [by_name[nm] for nm in g.names])
    assert whole is not None and [n.op_type for n in whole] == ["MatMulNBits"] and whole[0] is g.node


# ---------------------------------------------------------------- GroupQueryAttention as ORT writes it


def test_gqa_with_ort_default_attributes_expands_and_computes_ort():
    """A model ORT has saved (the graph the plugin EP's planner plans on: ep.ort_basic_graph) spells every
    GroupQueryAttention attribute out, smooth_softmax=-1 among them (ORT's default; only 1 is smooth). It
    expands, and the expansion computes what ORT's kernel computes."""
    from plus_ep.graph_rewrites.contrib import expand_model
    from tests.support import contrib_cases as cc
    defaults = dict(smooth_softmax=-1, causal=1, k_quant_type="NONE", v_quant_type="NONE", qk_output=0,
                    sliding_window_cache=0, qk_norm_epsilon=1e-6)
    r = cc.rng(3)
    f = cc.gqa_inputs(r, 2, 1, 4, 2, 16, 5, np.float32, [6, 4])
    ins = ["qkv", "", "", "pk", "pv", "seqlens_k", "total", "cos", "sin"]
    gqa = helper.make_node("GroupQueryAttention", ins, ["y", "present_k", "present_v"], domain=cc.MS, name="gqa",
                           do_rotary=1, num_heads=4, kv_num_heads=2, **defaults)
    case = cc.Case("GQA_ort_defaults", gqa, f, tol=5e-5)
    model = cc.single_node_model(case)
    ex = expand_model(model)
    assert ex.refused == {} and ex.groups, ex.refused
    want, got = cc.reference(case), cc.run_ort(ex.model, case.feeds)
    for name in ("y", "present_k", "present_v"):
        assert cc.rel_err(got[name], want[name]) <= case.tol, name
    for bad, needle in (({"smooth_softmax": 1}, "smooth_softmax=1"), ({"k_quant_type": "PER_TENSOR"}, "k_quant_type"),
                        ({"causal": 0}, "causal=0")):
        node = helper.make_node("GroupQueryAttention", ins, ["y"], domain=cc.MS, name="gqa", do_rotary=1,
                                num_heads=4, kv_num_heads=2, **{**defaults, **bad})
        refused = expand_model(cc.single_node_model(cc.Case("bad", node, f))).refused
        assert needle in refused.get("GroupQueryAttention node 'gqa'", ""), refused


def test_the_planners_view_of_the_genai_model_expands_every_gqa():
    """The planner plans on the model as ONNX Runtime holds it (default attributes written out): both
    GroupQueryAttention nodes of the zoo's genai-form decoder expand there as in the file."""
    from plus_ep.ep import ort_basic_graph
    from plus_ep.graph_rewrites.contrib import expand_model
    ex = expand_model(ort_basic_graph(str(ortopt.genai_llama(layers=2, dtype="float16"))))
    assert ex.refused == {} and sum(g.node.op_type == "GroupQueryAttention" for g in ex.groups) == 2, ex.refused
