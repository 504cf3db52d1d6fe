"""The sm_90a attention body end to end: ONNX attentions rewritten for sm_90a, whose route renders
attention_sm90a.cuh, run through the real launcher (tensor maps encoded from the plan's tmap records by the
emulated driver) on the PTX interpreter and compared with ONNX Runtime CPU by `plus-ep verify`: a decoder-style
block (bool causal mask through Where, key padding, the NaN guard) at head dim 128 and odd lengths spanning two
query and two key tiles, a symbolic-shape encoder attention with an additive padding mask at head dim 64, and a
materialised Kᵀ behind its `seq % 8 == 0` route (and today's kernel where the length is not)."""
from __future__ import annotations

import numpy as np
import onnx

import plus_ep
from plus_ep.rewrite import rewrite_detailed
from tests.support.golden import wgmma_attention_model
from tests.support.wg_attention_cases import attention_graph


def _verify(tmp_path, model, **kw):
    r = rewrite_detailed(model, archs=["sm_90a"])
    assert not r.kernels.failures, r.kernels.failures
    names = [v.name for rd in r.kernels.rendered.values() for v in rd.variants]
    assert any(n.startswith("wg_d") for n in names), names
    path = tmp_path / "m.plus.onnx"
    onnx.save(r.model, path)
    rep = plus_ep.verify(str(path), stress=False, **kw)
    assert rep["ok"], plus_ep.verify_text(rep)
    return rep


def test_causal_padded_d128_odd_lengths(tmp_path):
    S = 193                                          # two query tiles of 128, two key tiles of 128, ragged
    rng = np.random.default_rng(2)
    pad = np.zeros((2, 1, 1, S), np.float16)
    pad[1, ..., S - 70:] = -np.inf                   # batch row 1: a whole key tile and part of another hidden
    feeds = {t: rng.standard_normal((2, 3, S, 128)).astype(np.float16) for t in "qkv"}
    feeds.update(causal=np.tril(np.ones((S, S), bool))[None, None], mask=pad)
    _verify(tmp_path, attention_graph(128, S=S, B=2, H=3, form="causal"), inputs=feeds)


def test_symbolic_encoder_d64(tmp_path):
    _verify(tmp_path, wgmma_attention_model(), batch=2, seq=131)


def test_materialised_kt_and_its_guard(tmp_path):
    """Kᵀ an input [batch, 4, 64, seq] (as BERT's Q/K/V group stores it) with a padding mask: at seq 136 the route
    `seq % 8 == 0` runs the body (Kᵀ's tensor map, MN-major B), at seq 13 today's kernel runs."""
    model = attention_graph(64, form="key_major")
    r = rewrite_detailed(model, archs=["sm_90a"])
    assert not r.kernels.failures, r.kernels.failures
    (rd,) = r.kernels.rendered.values()
    body = [r.cond for r in rd.plan.routes if r.label == "wg_d64_q128_kv128_s2"]
    assert body and all(c.endswith(",8,%,0,==") for c in body) and rd.plan.routes[-1].cond == "1", \
        [(r.cond, r.label) for r in rd.plan.routes]
    path = tmp_path / "kt.plus.onnx"
    onnx.save(r.model, path)
    for seq in (136, 13):
        rep = plus_ep.verify(str(path), batch=2, seq=seq, stress=False)
        assert rep["ok"], plus_ep.verify_text(rep)
