"""A fused attention subgraph, rendered and compiled to PTX by NVRTC, executed on the CPU PTX
interpreter and compared with onnxruntime on the original graph: a fully masked row (every key -inf)
is NaN without the graph's NaN guard and 0 with it, as ORT computes it. The output buffer starts poisoned
(tests/support/poison.py), so a masked row the kernel leaves unwritten fails even where the answer is NaN.
The guarded graph also runs at 40 keys and queries (several key and query tiles, half the keys of batch 0
masked, batch 1 fully masked) with peaky scores (standard deviation 4)."""
from __future__ import annotations

import re

import numpy as np
import onnxruntime as ort
import pytest

from plus_ep.kernels.render import render
from plus_ep.rewrite import rewrite_detailed
from plus_ep.kernels.target import Target
from tests.support.attention_models import GUARD, NONE, attention_model
from tests.support.run_rendered import run_rendered


@pytest.mark.parametrize("variant,S,logit_scale", [(GUARD, 8, 1.0), (NONE, 8, 1.0), (GUARD, 40, 4.0)])
def test_fused_attention_masked_rows_match_ort(variant, S, logit_scale):
    model, feeds = attention_model(variant, S=S, logit_scale=logit_scale)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    r = rewrite_detailed(model)
    (sg,) = r.subgraphs
    assert sg.pattern.name == "attention"
    ins, outs = r.view.graph_index.boundary(sg.nodes)
    rd = render(r.view, sg, ins, outs, Target("sm_80", "exact"), node_name=f"attention_{variant}")
    assert not rd.plan.syms
    if S > 8:     # more than one query tile and one key tile of the route's config
        src = rd.variants[0].source
        tiles = {k: int(re.search(rf"#define {k} (\d+)", src).group(1)) for k in ("PLUS_BQ", "PLUS_BKV")}
        assert S > max(tiles.values()), tiles
    inputs = [feeds[t] if t in feeds else np.asarray(r.view.const(t)) for t in ins]
    (got,) = run_rendered(rd, inputs, [want], name=f"attention_{variant}")
    masked = np.isnan(want)
    if variant == NONE:
        assert masked.any(), "the model must have fully masked rows"
    assert np.array_equal(np.isnan(got), masked)
    np.testing.assert_allclose(got[~masked], want[~masked], rtol=1e-5, atol=1e-5)
    if variant == GUARD:
        assert np.all(got[1] == 0)         # batch 1 is fully masked: 0 through the guard


@pytest.mark.parametrize("math", ["exact", "tf32"])
def test_rows_masked_with_the_lowest_finite_value_are_uniform(math):
    """A mask of finfo(float32).min instead of -inf (DeBERTa's masked_fill; BERT's extended mask): a row whose
    every key carries it has its maximum near -FLT_MAX, and the softmax is uniform over the keys, as ORT gives
    it; scaling such logits by log2(e) before subtracting the maximum overflowed to inf (the tensor-core path)."""
    model, feeds = attention_model(NONE)
    feeds["mask"] = np.where(np.isinf(feeds["mask"]), np.finfo(np.float32).min, 0.0).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    # batch 1: every query row gets the mean of V over the keys (y is [B, S, H, D], v [B, H, S, D])
    np.testing.assert_allclose(want[1], np.broadcast_to(feeds["v"][1].mean(axis=1), want[1].shape), atol=1e-5)
    r = rewrite_detailed(model)
    (sg,) = r.subgraphs
    ins, outs = r.view.graph_index.boundary(sg.nodes)
    rd = render(r.view, sg, ins, outs, Target("sm_80", math), node_name=f"attention_finite_min_{math}")
    inputs = [feeds[t] if t in feeds else np.asarray(r.view.const(t)) for t in ins]
    (got,) = run_rendered(rd, inputs, [want], name=f"attention_finite_min_{math}")
    tol = 1e-5 if math == "exact" else 5e-3
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("Sq,Skv", [(5, 12), (12, 5)])
def test_a_full_mask_of_more_keys_than_queries_matches_ort(Sq, Skv):
    """A mask of its own per query and key ([B, 1, Sq, Skv], bottom-right causal plus random holes, every row
    keeping a key) with Sq != Skv: the score hook must read mask[b, 0, i, j] for query i and key j; a kernel that
    swapped the two, or read [Skv, Sq], gives other rows (or reads past the mask), which ORT shows."""
    from tests.support.graphs import Graph
    b, h, d = 2, 2, 16
    g = Graph("attention_sq_skv", opset=18, ir_version=10)
    g.input("q", [b, h, Sq, d])
    g.input("k", [b, h, Skv, d])
    g.input("v", [b, h, Skv, d])
    g.input("mask", [b, 1, Sq, Skv])
    g.init("scale", np.array(0.25, np.float32))
    g.op("Transpose", "k", out="kt", perm=[0, 1, 3, 2])
    g.op("MatMul", "q", "kt", out="s0")
    g.op("Mul", "s0", "scale", out="s1")
    g.op("Add", "s1", "mask", out="s")
    g.op("Softmax", "s", out="p", axis=-1)
    g.op("MatMul", "p", "v", out="o")
    g.op("Transpose", "o", out="y", perm=[0, 2, 1, 3])
    g.output("y", [b, Sq, h, d])
    model = g.model()
    rng = np.random.default_rng(3)
    feeds = {"q": rng.standard_normal((b, h, Sq, d)).astype(np.float32),
             "k": rng.standard_normal((b, h, Skv, d)).astype(np.float32),
             "v": rng.standard_normal((b, h, Skv, d)).astype(np.float32)}
    i, j = np.arange(Sq)[:, None], np.arange(Skv)[None, :]
    keep = (j <= i + max(Skv - Sq, 0)) & (rng.random((b, 1, Sq, Skv)) > 0.25)
    keep[..., 0] = True                                     # every row keeps a key: no fully masked row
    feeds["mask"] = np.where(keep, 0.0, -1e4).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    r = rewrite_detailed(model)
    (sg,) = r.subgraphs
    assert sg.pattern.name == "attention"
    ins, outs = r.view.graph_index.boundary(sg.nodes)
    rd = render(r.view, sg, ins, outs, Target("sm_80", "exact"), node_name="attention_sq_skv")
    inputs = [feeds[t] if t in feeds else np.asarray(r.view.const(t)) for t in ins]
    (got,) = run_rendered(rd, inputs, [want], name="attention_sq_skv")
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
