"""f16/bf16 attention renders the tensor-core path of attention.cuh (PLUS_MATH 2, plus_qkv_t = the
storage type); fp32 attention keeps the exact SIMT path (PLUS_MATH 0)."""
from __future__ import annotations

import pytest

from bench.harness.bert_fp16 import to_fp16
from plus_ep.demo_model import build_bert
from plus_ep.graph_rewrites.partition import boundary
from plus_ep.kernels.render import render
from plus_ep.rewrite import rewrite_detailed
from plus_ep.kernels.target import Target


def _attention_source(model, arch="sm_80"):
    r = rewrite_detailed(model)
    sg = next(s for s in r.subgraphs if s.pattern.name == "attention")
    ins, outs = boundary(r.view.model, [r.view.index[i] for i in sg.nodes])
    return render(r.view, sg, ins, outs, Target(arch, "exact"), node_name="attn").variants[0].source


@pytest.mark.parametrize("fp16,math,qkv", [(True, 2, "__half"), (False, 0, "float")])
def test_attention_math_follows_qkv_type(fp16, math, qkv):
    model = build_bert(layers=1, hidden=128, heads=2, intermediate=256, vocab=50)
    src = _attention_source(to_fp16(model) if fp16 else model)
    assert f"#define PLUS_MATH {math}\n" in src
    assert f"typedef {qkv} plus_qkv_t;" in src
    # the K projection's GEMM materialises Kᵀ ([b, h, d, s]): the tensor-core path reads it key-major
    assert ("#define PLUS_K_KEY_MAJOR 1\n" in src) == fp16
