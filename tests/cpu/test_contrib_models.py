"""An onnxruntime-genai-style int4 decoder (plus_ep/zoo/ortopt.genai_llama: GroupQueryAttention with
rotary and a KV cache, MatMulNBits int4 weights by ORT's quantizer, (Skip)SimplifiedLayerNormalization):
every contrib node expands and fuses, the rewritten model computes what ORT's contrib kernels compute on a
padded prompt and on decode steps, and every fused subgraph runs on the +Graph interpreter. Kernels:
tests/emulated/test_contrib_kernels.py."""
from __future__ import annotations

import onnx
import pytest

from plus_ep.report import report
from plus_ep.rewrite import rewrite_detailed
from plus_ep.zoo import ortopt
from tests.support import subgraph_check as sc
from tests.support.contrib_cases import rel_err, run_ort

LAYERS = 2


@pytest.fixture(scope="module", params=["float16", "float32"])
def genai(request):
    path = ortopt.genai_llama(layers=LAYERS, dtype=request.param)
    model = onnx.load(str(path))
    return request.param, model, rewrite_detailed(model)


def test_every_contrib_node_expands_and_fuses(genai):
    _, model, r = genai
    rep = report(r)
    assert rep["contrib_ops"] == {
        "GroupQueryAttention": {"expanded": LAYERS, "fused": LAYERS},
        "MatMulNBits": {"expanded": 5 * LAYERS + 1, "fused": 5 * LAYERS + 1},
        "SimplifiedLayerNormalization": {"expanded": 1, "fused": 1},
        "SkipSimplifiedLayerNormalization": {"expanded": 2 * LAYERS, "fused": 2 * LAYERS}}
    assert rep["contrib_opaque"] == {}
    assert rep["patterns"]["attention"] == LAYERS
    assert not any(n.domain == "com.microsoft" for n in r.model.graph.node)
    assert rep["data_kernels_after"] < rep["data_kernels_before"]


# (batch, new tokens, past, valid tokens per row after the step)
STEPS = {"padded_prompt": (2, 5, 0, [5, 3]), "decode": (2, 1, 5, [6, 6]), "ragged_decode": (2, 1, 5, [6, 4])}


@pytest.mark.parametrize("step", list(STEPS))
def test_rewritten_model_matches_ort_contrib_kernels(genai, step):
    dtype, model, r = genai
    batch, seq, past, lengths = STEPS[step]
    feeds = ortopt.genai_feeds(model, batch, seq, past, lengths=lengths)
    want = run_ort(model, feeds)
    got = run_ort(r.model, feeds)
    tol = 1e-2 if dtype == "float16" else 1e-4
    for b, total in enumerate(lengths):              # real tokens only: ORT leaves padding rows undefined
        rows = slice(0, total - past)
        assert rel_err(got["logits"][b, rows], want["logits"][b, rows]) < tol, (step, b)
        for name in want:
            if name.startswith("present."):
                assert rel_err(got[name][b, :, :total], want[name][b, :, :total]) < tol, (step, name, b)


def test_each_fused_subgraph_on_the_interpreter(genai):
    dtype, model, r = genai
    feeds = ortopt.genai_feeds(r.view.model, 2, 1, 5, lengths=[6, 4])
    names = sorted({t for ins, outs in sc.boundaries(r) for t in ins + outs if t not in r.view.initializers})
    ref = run_ort(sc.with_outputs(r.view.model, names), feeds)
    checks = sc.check_subgraphs(r, {**feeds, **ref}, rtol=2e-2 if dtype == "float16" else 1e-3, atol=1e-3)
    bad = [c for c in checks if c.status != "passed"]
    assert not bad, [(c.pattern, c.reason, c.detail[:300]) for c in bad]
