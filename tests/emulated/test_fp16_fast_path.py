"""The H100 fast path end to end on the PTX interpreter: a small BERT in fp16 rewritten for sm_90a
renders the wgmma GEMM with PLUS_ALIGNED=1 (static proof), the K projection's GEMM with the m-fastest
epilogue (it stores Kᵀ), and the attention reading that Kᵀ key-major: the sm_90a body (TMA, wgmma) where
seq % 8 == 0, else the mma.sync body with Q and V by cp.async tiles and a staged output;
`plus-ep verify` runs every kernel through the launcher and compares each fused node with its function."""
from __future__ import annotations

import onnx
import pytest

import plus_ep
from bench.harness.bert_fp16 import to_fp16
from plus_ep.demo_model import build_bert
from plus_ep.graph_rewrites.partition import boundary
from plus_ep.kernels.families.gemm import sm90a_configs
from plus_ep.kernels.render import render
from plus_ep.rewrite import rewrite_detailed
from plus_ep.kernels.target import Target


# the cp.async wgmma tiles (gemm_sm90a.cuh), whose static alignment proof this checks: the TMA tiles kept out
CP_ASYNC = Target("sm_90a", "exact", frozenset(c.name for c in sm90a_configs.WS_CONFIGS))


@pytest.fixture(scope="module")
def model():
    return to_fp16(build_bert(layers=1, hidden=128, heads=2, intermediate=256))


def test_fast_path_sources(model):
    r = rewrite_detailed(model)
    seen = {"aligned": 0, "m_fastest": 0, "key_major": 0}
    for sg in r.subgraphs:
        if sg.pattern.name not in ("gemm", "gemm_group", "gemm_layernorm", "attention"):
            continue
        ins, outs = boundary(r.view.model, [r.view.index[i] for i in sg.nodes])
        variants = render(r.view, sg, ins, outs, CP_ASYNC, node_name="n").variants
        src = variants[0].source
        if sg.pattern.name == "attention":
            # the sm_90a body (TMA reads Q, V and the stored Kᵀ) where seq % 8 == 0, the mma.sync bodies elsewhere
            # (the route model puts a q64 tile ahead of it for short sequences)
            (wg,) = [v for v in variants if v.name.startswith("wg_")]
            assert "#define PLUS_ATTN_WGMMA 1\n" in wg.source and "#define PLUS_K_KEY_MAJOR 1\n" in wg.source
            mma = [v.source for v in variants if not v.name.startswith("wg_")]
            assert mma and all("#define PLUS_MATH 2\n" in m and "PLUS_ATTN_WGMMA" not in m for m in mma)
            seen["key_major"] += all("#define PLUS_K_KEY_MAJOR 1\n" in m for m in mma)
            # Q and V are stored [b, h, s, d] by their GEMMs: 16-byte cp.async tiles, not element hooks
            assert all("#define PLUS_Q_STRIDED 1\n" in m and "#define PLUS_V_STRIDED 1\n" in m for m in mma)
        else:
            assert '#include "gemm_sm90a.cuh"' in src and "#define PLUS_ALIGNED 1\n" in src
            seen["aligned"] += 1
            # the Q/K/V group walks the stored Kᵀ member m-fastest, the others n-fastest (chosen per member)
            seen["m_fastest"] += "#define PLUS_EPI_M_FASTEST 2\n" in src and "plus_epi_m_fastest" in src
    assert seen == {"aligned": 4, "m_fastest": 1, "key_major": 1}, seen


def test_fast_path_verifies_on_the_interpreter(model, tmp_path):
    r = rewrite_detailed(model, archs=["sm_90a"])
    path = tmp_path / "bert16.plus.onnx"
    onnx.save(r.model, path)
    for seq in (5, 72):           # the mma.sync body (seq <= 64 or odd), then the sm_90a body (seq % 8 == 0)
        rep = plus_ep.verify(str(path), batch=2, seq=seq)
        assert rep["ok"], plus_ep.verify_text(rep)
