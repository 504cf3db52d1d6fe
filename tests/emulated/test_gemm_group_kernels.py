"""A horizontal GEMM group (Q, K, V projections reading one X, with bias and head Reshape/Transpose
stores, K stored transposed) as one launch on every route: SIMT fp32 (exact), TF32 mma and f16 mma.sync
on sm_80, f16 wgmma on sm_90a (whose epilogue walks the K member's tile m-fastest and the others' n-fastest,
PLUS_EPI_M_FASTEST 2 with the generated plus_epi_m_fastest hook). `plus_ep.verify` runs the kernels' PTX on the CPU interpreter through the
launcher and compares every output with the node's function body on ORT."""
from __future__ import annotations

import pytest
from onnx import TensorProto

import plus_ep
from plus_ep.kernels.render import render
from plus_ep.kernels.target import Target
from tests.support.qkv_models import H, qkv_model


def _headers(r, arch):
    sg = r.subgraphs[0]
    ins, outs = r.view.graph_index.boundary(sg.nodes)
    rd = render(r.view, sg, ins, outs, Target(arch, r.fp32_math), node_name="g")
    lines = {ln for v in rd.variants for ln in v.source.splitlines()
             if ln.startswith(('#include "gemm', "#define PLUS_MATH", "#define PLUS_EPI_M_FASTEST"))}
    # either sm_90a wgmma template (cp.async or TMA tiles, as the route model finds faster) counts as one
    sm90a = {'#include "gemm_sm90a.cuh"', '#include "gemm_sm90a_ws.cuh"'}
    return lines - sm90a | ({"wgmma template"} if lines & sm90a else set())


def _verify_group(model, fp32_math, math_defines):
    r = plus_ep.rewrite_detailed(model, archs=["sm_80", "sm_90a"], fp32_math=fp32_math)
    assert not r.kernels.failures, r.kernels.failures
    assert [s.pattern.name for s in r.subgraphs] == ["gemm_group"]
    for arch, want in math_defines.items():
        assert want <= _headers(r, arch), (arch, _headers(r, arch))
    rep = plus_ep.verify(r.model, batch=2, seq=5)
    text = plus_ep.verify_text(rep)
    assert rep["ok"], text
    assert sorted(x["arch"] for x in rep["nodes"]) == ["sm_80", "sm_90a"]
    for row in rep["nodes"]:
        assert row["executed"] and row["kernels"] == ["plus_gemm"] and row["n_findings"] == 0, row
        assert len([o for o in row["outputs"] if o["run"] == "model"]) == len(model.graph.output)
        assert all(o["ok"] for o in row["outputs"]), row
    return r, rep


@pytest.mark.parametrize("dtype,math,defines", [
    (TensorProto.FLOAT, "exact", {"sm_80": {"#define PLUS_MATH 0"}, "sm_90a": {"#define PLUS_MATH 0"}}),
    (TensorProto.FLOAT, "tf32", {"sm_80": {"#define PLUS_MATH 1"}, "sm_90a": {"#define PLUS_MATH 1"}}),
    (TensorProto.FLOAT16, "exact", {"sm_80": {"#define PLUS_MATH 2", '#include "gemm.cuh"'},
                                    "sm_90a": {"wgmma template", "#define PLUS_EPI_M_FASTEST 2"}}),
], ids=["fp32-simt", "fp32-tf32", "f16-mma-wgmma"])
def test_qkv_group_with_bias_and_kt_store(dtype, math, defines):
    _verify_group(qkv_model(dtype), math, defines)


def test_group_of_transposed_stores_walks_m_fastest_on_sm90a():
    """Every member stores transposed (contiguous along m): the wgmma epilogue walks its C tile m-fastest."""
    model = qkv_model(TensorProto.FLOAT16, projections=(("k", H, True), ("k2", H, True)), bias=False)
    _verify_group(model, "exact", {"sm_90a": {"#define PLUS_EPI_M_FASTEST 1"}})


def test_bert_layer_is_five_kernels_and_verifies():
    """A BERT-style layer (the demo builder, 1 layer): Q/K/V as one group, then attention, out-projection +
    LayerNorm, FFN1 + GELU, FFN2 + LayerNorm: 5 fused nodes besides the embedding LayerNorm."""
    import numpy as np

    from plus_ep.demo_model import build_bert, sample_inputs
    model = build_bert(layers=1, hidden=32, heads=2, intermediate=64, vocab=50, max_pos=16)
    r = plus_ep.rewrite_detailed(model, archs=["sm_80", "sm_90a"])
    assert not r.kernels.failures, r.kernels.failures
    assert [s.pattern.name for s in r.subgraphs] == ["layernorm", "gemm_group", "attention", "gemm_layernorm",
                                                     "gemm", "gemm_layernorm"]
    feeds = {k: np.asarray(v) for k, v in sample_inputs(batch=1, seq=6, vocab=50).items()}
    rep = plus_ep.verify(r.model, inputs=feeds)
    assert rep["ok"], plus_ep.verify_text(rep)
    assert all(row["executed"] and row["n_findings"] == 0 for row in rep["nodes"])
    assert len(rep["nodes"]) == 12 and all(o["ok"] for o in rep["outputs"])
