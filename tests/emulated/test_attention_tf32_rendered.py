"""A fused fp32 attention rendered with fp32_math="tf32" (the TF32 tensor-core path of attention.cuh:
cp.async Q/V, K through its hook, scale and key-padding mask in the score hook; 8 keys, and 37 keys ending
inside a key tile with K given key-major), compiled by NVRTC and executed on the CPU PTX interpreter,
against onnxruntime on the original graph: TF32-sized error (about 1e-3 of the output's scale, not the
exact path's 1e-6) and fully masked rows as ORT gives them (NaN without the graph's NaN guard, 0 with
it), into a poisoned output buffer (an unwritten row fails)."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from plus_ep.kernels.render import render
from plus_ep.rewrite import rewrite_detailed
from plus_ep.kernels.target import Target
from tests.support.attention_models import GUARD, NONE, attention_model
from tests.support.run_rendered import run_rendered


@pytest.mark.parametrize("variant,S,key_major", [(GUARD, 8, False), (NONE, 8, False), (GUARD, 37, True)])
def test_tf32_attention_matches_ort(variant, S, key_major):
    """S = 37 keys end inside a key tile, K given as a materialised Kᵀ (the key-major K hook, as a fused QKV
    GEMM's Kᵀ store feeds it): its loads past the last key must stay guarded (the last head's keys end the
    tensor, so an unguarded load reads out of it)."""
    model, feeds = attention_model(variant, S=S, key_major=key_major)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    r = rewrite_detailed(model)
    (sg,) = r.subgraphs
    ins, outs = r.view.graph_index.boundary(sg.nodes)
    rd = render(r.view, sg, ins, outs, Target("sm_80", "tf32"), node_name=f"attention_tf32_{variant}_{S}")
    src = rd.variants[0].source
    assert "#define PLUS_MATH 1\n" in src and "typedef float plus_qkv_t;" in src
    assert ("#define PLUS_K_KEY_MAJOR 1\n" in src) == key_major
    inputs = [feeds[t] if t in feeds else np.asarray(r.view.const(t)) for t in ins]
    (got,) = run_rendered(rd, inputs, [want], name=f"attention_tf32_{variant}_{S}")
    masked = np.isnan(want)
    assert np.array_equal(np.isnan(got), masked)
    err = np.abs(got[~masked].astype(np.float64) - want[~masked])
    scale = np.abs(want[~masked]).max()
    assert err.max() <= 2e-3 * scale, err.max() / scale
    assert err.max() >= 1e-6 * scale, "no TF32 rounding visible: the exact path ran?"
    if variant == GUARD:
        assert np.all(got[1] == 0)         # batch 1 is fully masked: 0 through the guard
