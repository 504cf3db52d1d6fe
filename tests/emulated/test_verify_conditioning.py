"""`plus-ep verify`'s bounds follow the conditioning of what a correct fp32 kernel computes (issue 37): a GEMM +
bias + GELU kernel is clean in saturation, where GELU = 0.5 x (1 + tanh(z)) cancels (the kernel's -0.0
against an exact -4e-16 is what fp32 gives), and a GELU with a wrong cubic term is caught with verify's own
defaults."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import plus_ep
from tests.support import planted
from tests.support.graphs import Graph

K, N = 64, 48
NODE = "plus_ep/gemm/0"


def gemm_gelu_model(approximate: str = "tanh"):
    rng = np.random.default_rng(3)
    g = Graph("gemm_gelu", opset=20, ir_version=10)
    g.input("X", ["batch", "seq", K])
    g.init("W", (rng.standard_normal((K, N)) / 4).astype(np.float32))
    g.init("B", rng.standard_normal(N).astype(np.float32))
    g.op("Gelu", g.op("Add", g.op("MatMul", "X", "W"), "B"), approximate=approximate, out="Y")
    g.output("Y", ["batch", "seq", N])
    return g.model()


def _rewrite(model, monkeypatch, dump=None, override=None):
    m = planted.rewrite(model, monkeypatch, dump=dump, override=override, fp32_math="exact")
    assert [n.name for n in m.graph.node if n.domain == "ai.plus_ep"] == [NODE]
    return m


@pytest.mark.parametrize("approximate", ["tanh", "none"])
def test_gemm_bias_gelu_verifies_clean_in_saturation(approximate, monkeypatch):
    """Inputs scaled so that a third of the GEMM outputs lie below -6 (1 + tanh(z), 1 + erf(x / sqrt 2) round to
    0 in fp32), then verify's defaults (the stress runs on their own synthetic inputs)."""
    model = _rewrite(gemm_gelu_model(approximate), monkeypatch)
    x = (np.random.default_rng(4).standard_normal((2, 5, K)) * 6).astype(np.float32)
    w = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "W")).astype(np.float64)
    assert (x.astype(np.float64) @ w < -6).mean() > 0.25, "the inputs do not reach saturation"
    rep = plus_ep.verify(model, archs=["sm_80"], batch=2, seq=5, inputs={"X": x})
    assert rep["ok"], plus_ep.verify_text(rep)
    rep = plus_ep.verify(model, archs=["sm_80"])
    assert rep["ok"], plus_ep.verify_text(rep)


def test_a_wrong_cubic_term_fails_verify_with_its_defaults(tmp_path, monkeypatch):
    """0.0447 x^3 -> 0.0472 x^3 in the generated GELU (within a model tolerance on N(0, 1) inputs)."""
    dump, override = tmp_path / "dump", tmp_path / "override"
    _rewrite(gemm_gelu_model("tanh"), monkeypatch, dump=dump)
    assert planted.plant(dump, override, NODE, planted.replace_once("0.044715f", "0.047215f")) >= 1
    model = _rewrite(gemm_gelu_model("tanh"), monkeypatch, override=override)
    monkeypatch.delenv("PLUS_EP_OVERRIDE_DIR")
    path = tmp_path / "bug.plus.onnx"
    onnx.save(model, path)
    rep = plus_ep.verify(str(path))
    assert not rep["ok"], plus_ep.verify_text(rep)
    (row,) = [r for r in rep["nodes"] if not r["ok"]]
    assert row["node"] == NODE and max(o.get("ratio", 0) for o in row["outputs"]) > 3, plus_ep.verify_text(rep)
