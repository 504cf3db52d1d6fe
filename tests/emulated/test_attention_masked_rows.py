"""A fused attention subgraph, rendered and compiled to PTX by NVRTC, executed on the CPU PTX
interpreter and compared with onnxruntime on the original graph: a fully masked row (every key -inf)
is NaN without the graph's NaN guard and 0 with it, as ORT computes it."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from plus_ep.kernels.render import render
from plus_ep.rewrite import rewrite_detailed
from plus_ep.kernels.target import Target
from tests.support.attention_models import GUARD, NONE, attention_model
from tests.support.run_rendered import run_rendered


@pytest.mark.parametrize("variant", [GUARD, NONE])
def test_fused_attention_masked_rows_match_ort(variant):
    model, feeds = attention_model(variant)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    r = rewrite_detailed(model)
    (sg,) = r.subgraphs
    assert sg.pattern.name == "attention"
    ins, outs = r.view.graph_index.boundary(sg.nodes)
    rd = render(r.view, sg, ins, outs, Target("sm_80", "exact"), node_name=f"attention_{variant}")
    assert not rd.plan.syms
    inputs = [feeds[t] if t in feeds else np.asarray(r.view.const(t)) for t in ins]
    (got,) = run_rendered(rd, inputs, [want], name=f"attention_{variant}")
    masked = np.isnan(want)
    if variant == NONE:
        assert masked.any(), "the model must have fully masked rows"
    assert np.array_equal(np.isnan(got), masked)
    np.testing.assert_allclose(got[~masked], want[~masked], rtol=1e-5, atol=1e-5)
    if variant == GUARD:
        assert not np.any(got[1])          # batch 1 is fully masked: 0 through the guard
