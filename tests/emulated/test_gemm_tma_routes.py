"""The TMA GEMM (templates/gemm_sm90a_ws.cuh) on every GEMM kind it serves, forced (PLUS_EP_GEMM_TILES=ws_*) and
verified end to end: rewritten for sm_90a, run through the real launcher (tensor maps from the plan's tmap
records, encoded by the emulated driver) on the PTX interpreter, each fused node compared with its function on
ONNX Runtime CPU (`plus-ep verify`): fp16 BERT (the Q/K/V group storing Kᵀ m-fastest, FFN + GELU, the GEMM +
LayerNorm row program), gated MLPs (pair and combined weight), a ragged GQA group. Shapes span several tiles
along M and N."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto

import plus_ep
from bench.harness.bert_fp16 import to_fp16
from plus_ep.demo_model import build_bert
from plus_ep.rewrite import rewrite_detailed
from tests.support.gated_models import gated_combined_model, gated_pair_model, gqa_long_k_model
from tests.support.gemm_norm_cases import norm_model


@pytest.fixture
def ws_only(monkeypatch):
    monkeypatch.setenv("PLUS_EP_GEMM_TILES", "ws_*")


def _sources(r) -> dict:
    """{node: [generated sources]} of the rewrite's fused nodes."""
    out = {}
    for k, rd in r.kernels.rendered.items():
        out[k] = [v.source for v in rd.variants]
    return out


def _verify(tmp_path, model, batch, seq, expect_ws: int):
    r = rewrite_detailed(model, archs=["sm_90a"])
    assert not r.kernels.failures, r.kernels.failures
    ws = sum(any('#include "gemm_sm90a_ws.cuh"' in s for s in srcs) for srcs in _sources(r).values())
    assert ws >= expect_ws, f"{ws} nodes render the TMA GEMM"
    path = tmp_path / "m.plus.onnx"
    onnx.save(r.model, path)
    rep = plus_ep.verify(str(path), batch=batch, seq=seq)
    assert rep["ok"], plus_ep.verify_text(rep)
    return r


def test_gemm_layernorm_finish_and_two_kernel_plans(tmp_path, ws_only):
    """GEMM + bias + residual + LayerNorm: the route model picks the one-launch row finish (TMA GEMM, one unit per
    CTA) at M = 20 and the two-kernel plan (TMA GEMM writing the row input to scratch, plus_row) at M = 64."""
    model, feeds = norm_model("m", 264, 136)
    r = rewrite_detailed(model, archs=["sm_90a"])
    assert not r.kernels.failures, r.kernels.failures
    names = [v.name for rd in r.kernels.rendered.values() for v in rd.variants]
    assert any(n.startswith("ws_") and n.endswith("-finish") for n in names), names
    path = tmp_path / "norm.plus.onnx"
    onnx.save(r.model, path)
    for rows in (20, 64):
        rep = plus_ep.verify(str(path), inputs={k: feeds[k][:rows].astype(np.float16) for k in ("X", "R")},
                             stress=False)
        assert rep["ok"], plus_ep.verify_text(rep)


@pytest.mark.slow
def test_bert_fp16_on_tma_gemms(tmp_path, ws_only):
    model = to_fp16(build_bert(layers=1, hidden=128, heads=2, intermediate=384))
    r = _verify(tmp_path, model, batch=2, seq=70, expect_ws=3)
    srcs = [s for v in _sources(r).values() for s in v]
    # the group's members disagree on the store order (Kᵀ): picked per member at run time
    assert any("gemm_sm90a_ws.cuh" in s and "#define PLUS_EPI_M_FASTEST 2\n" in s for s in srcs)


@pytest.mark.slow
def test_bert_fp16_on_four_cta_multicast_tiles(tmp_path, monkeypatch):
    """Every GEMM forced onto 128 x 192 tiles whose clusters of four share B (the launcher's cluster launch, the
    tmap records' boxes): M = 600 is two clusters of m tiles, the second with three tiles past M; FFN1's 384
    columns two n tiles; the LayerNorm GEMMs through scratch and plus_row."""
    monkeypatch.setenv("PLUS_EP_GEMM_TILES", "ws_128x192x64_s5_c4")
    model = to_fp16(build_bert(layers=1, hidden=128, heads=2, intermediate=384))
    r = _verify(tmp_path, model, batch=5, seq=120, expect_ws=3)
    assert all("#define PLUS_WS_CLUSTER 4\n" in s for v in _sources(r).values() for s in v
               if "gemm_sm90a" in s), "a GEMM left the forced tile"


@pytest.mark.parametrize("make", [lambda: gated_pair_model(TensorProto.FLOAT16, act="silu", inter=136),
                                  lambda: gated_combined_model(TensorProto.FLOAT16, form="slice", inter=136)],
                         ids=["pair", "combined"])
def test_gated_mlp_on_tma_gemms(tmp_path, ws_only, make):
    r = _verify(tmp_path, make(), batch=3, seq=50, expect_ws=1)
    assert any("#define PLUS_GATED 1\n" in s and "gemm_sm90a_ws.cuh" in s for v in _sources(r).values() for s in v)


@pytest.mark.slow
def test_ragged_gqa_group_on_tma_gemms(tmp_path, ws_only):
    r = _verify(tmp_path, gqa_long_k_model(TensorProto.FLOAT16, k=256, widths=(264, 136, 136)), batch=1, seq=150,
                expect_ws=1)
    assert any("#define PLUS_HAS_GROUP_N 1\n" in s and "gemm_sm90a_ws.cuh" in s for v in _sources(r).values()
               for s in v)
