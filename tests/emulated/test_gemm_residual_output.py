"""Regression found by `plus-ep verify` on the zoo (bench/results/2026-11-23-verify-emulated.json): a
GEMM + residual + LayerNorm node whose residual sum is also a graph output (the pre-norm transformer
pattern: the sum is the residual stream the next block reads) must store that sum, not only the fp32
scratch its row program reads."""
from __future__ import annotations

import numpy as np
import onnx

import plus_ep

from tests.support.bsh_models import H, bsh_graph, bsh_model, rewritten as _rewritten  # noqa: E402


def residual_layernorm_model() -> onnx.ModelProto:
    """S = X @ W + B + R (a graph output, as the residual stream the next block reads); Y = LayerNorm(S)."""
    rng = np.random.default_rng(1)
    g = bsh_graph(["X", "R"], {"W": rng.standard_normal((H, H)) / 6, "B": rng.standard_normal(H),
                               "g": rng.standard_normal(H), "b": rng.standard_normal(H)})
    g.op("MatMul", "X", "W", out="mm", name="mm")
    g.op("Add", "mm", "B", out="mb", name="bias")
    g.op("Add", "mb", "R", out="S", name="residual")
    g.op("LayerNormalization", "S", "g", "b", out="Y", axis=-1, epsilon=1e-5, name="ln")
    return bsh_model(g, ["S", "Y"])


def test_residual_sum_that_is_a_graph_output_is_stored():
    m, fused = _rewritten(residual_layernorm_model())
    # one fused node computes both S and Y, so S can only come from that node's kernels
    assert len(fused) == 1 and {"S", "Y"} <= set(fused[0].output), [(n.name, list(n.output)) for n in fused]
    rep = plus_ep.verify(m, batch=1, seq=5)
    text = plus_ep.verify_text(rep)
    assert rep["ok"], text
    assert {r["arch"] for r in rep["nodes"]} == {"sm_80", "sm_90a"}
    for r in rep["nodes"]:
        assert r["executed"] and r["n_findings"] == 0, r
        model_run = [o for o in r["outputs"] if o["run"] == "model"]
        assert len(model_run) == 2 and all(o["ok"] for o in r["outputs"]), r
    assert len(rep["outputs"]) == 4 and all(o["ok"] for o in rep["outputs"]), text
