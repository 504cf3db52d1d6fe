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
