"""Decoders exported with past key/values (plus_ep/zoo/decoders.py: Llama-style, 2 layers, GQA, RoPE, SwiGLU,
RMSNorm, both exporters): every layer's attention is one node that takes its KV-cache concatenations and
writes present itself, with a decode route; greedy generation through the kernels on the PTX interpreter
(stock ORT session with the launcher library on the emulated driver) gives the original's tokens with
logits within verify's bounds at past 0 (prefill), 1 and >= 20. The 24-token runs of the issue's
acceptance are `slow` (PLUS_EP_SLOW_TESTS=1) and in `python -m bench.runs.kv_decode generate`."""
from __future__ import annotations

import functools

import onnx
import pytest

from plus_ep.kernels.render import render
from plus_ep.kernels.target import Target
from plus_ep.report import data_kernels
from plus_ep.rewrite import rewrite_detailed

pytestmark = pytest.mark.zoo

LAYERS = 2
PROMPTS = [[11, 523, 7, 99, 402, 18, 3, 77, 250, 9, 640, 31, 5, 808, 14, 2, 390, 61, 27, 4],   # 20 tokens
           [815, 42, 6, 170, 95, 333, 12, 708, 50, 1, 263, 88, 19]]                            # 13, left-padded


@functools.lru_cache(maxsize=None)
def export(family, exporter):
    decoders = pytest.importorskip("plus_ep.zoo.decoders")
    return str(decoders.export(family, exporter, "small", layers=LAYERS))


@functools.lru_cache(maxsize=None)
def rewritten(family, exporter, tmp, archs=("sm_80", "sm_90a")):
    res = rewrite_detailed(export(family, exporter), archs=list(archs))
    assert not res.kernels.failures, res.kernels.failures
    path = f"{tmp}/{family}-{exporter}-{'-'.join(archs)}.plus.onnx"
    onnx.save(res.model, path)
    return path


@pytest.mark.parametrize("family,exporter", [("llama", "torchscript"), ("qwen2", "dynamo")])
def test_each_layer_attention_takes_its_kv_cache(family, exporter):
    res = rewrite_detailed(export(family, exporter))
    view = res.view
    att = [sg for sg in res.subgraphs if sg.pattern.name == "attention"]
    assert len(att) == LAYERS
    for i, sg in enumerate(sorted(att, key=lambda s: min(s.nodes))):
        assert {f"present.{i}.key", f"present.{i}.value"} <= set(sg.outputs), sg.outputs
        ins, outs = view.graph_index.boundary(sg.nodes)
        for arch in ("sm_80", "sm_90a"):
            rd = render(view, sg, ins, outs, Target(arch, "tf32"), node_name=f"attention{i}")
            assert rd.variants[0].name.endswith("_decode")
            for v in rd.variants:
                assert "#define PLUS_ATTN_KV_CACHE 1" in v.source and "plus_k_present" in v.source
                assert "#define PLUS_K_PAST_STRIDED 1" in v.source
    # per layer: Q/K/V (one ragged group), attention, o_proj + residual + RMSNorm, gate/up x SiLU (one gated
    # GEMM), down + residual + RMSNorm; besides: the embedding's RMSNorm, the LM head and, in dynamo exports,
    # the mask's Cast and GatherND (issue 25: at most 6 per layer)
    assert data_kernels(res.model) <= 5 * LAYERS + 4, data_kernels(res.model)


def test_greedy_generation_through_the_kernels(tmp_path_factory):
    """Qwen2 (Q/K/V biases), dynamo export: prefill of two left-padded prompts (20 and 13 tokens) and two decode steps (past 20, 21), then a
    one-token prompt and its first decode step (past 0, 1), with the sm_80 kernels (sm_90a's run in
    tests/emulated/test_decode_attention_verify.py and the slow test; compiling both doubles the cost)."""
    from plus_ep.verification.generate import generate, generate_text
    tmp = str(tmp_path_factory.mktemp("decoders"))
    model = rewritten("qwen2", "dynamo", tmp, ("sm_80",))
    for prompts, steps, pasts in ((PROMPTS, 3, [0, 20, 21]), ([[17]], 2, [0, 1])):
        rep = generate(export("qwen2", "dynamo"), model, prompts, steps)
        assert rep["ok"], generate_text(rep)
        for a in rep["archs"]:          # ok means: tokens equal, logits in bounds, every node launched, no finding
            assert [r["past"] for r in a["steps"]] == pasts


@pytest.mark.slow
@pytest.mark.parametrize("family,exporter", [("llama", "torchscript"), ("llama", "dynamo"), ("qwen2", "torchscript"),
                                             ("qwen2", "dynamo")])
def test_24_tokens_of_a_padded_batch(family, exporter, tmp_path_factory):
    from plus_ep.verification.generate import generate, generate_text
    model = rewritten(family, exporter, str(tmp_path_factory.mktemp("decoders24")))
    rep = generate(export(family, exporter), model, PROMPTS, 24)
    assert rep["ok"], generate_text(rep)
    assert all(len(a["steps"]) == 24 and a["steps"][-1]["past"] == 42 for a in rep["archs"])
