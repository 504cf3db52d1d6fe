"""Regression found by `plus-ep verify` on the zoo (bench/results/2026-11-23-verify-emulated.json):
Relu of a NaN is NaN (ONNX, onnxruntime), not the 0 that CUDA fmaxf(x, 0) gives; likewise Max, Min,
Clip and HardSigmoid follow onnxruntime's NaN results."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

import plus_ep

from tests.support.bsh_models import H, bsh_graph, bsh_model, rewritten as _rewritten  # noqa: E402


def relu_nan_model() -> onnx.ModelProto:
    """Y = Relu(X @ W + B) with a NaN in X: rows holding it are NaN after the MatMul, and Relu keeps them NaN."""
    rng = np.random.default_rng(2)
    g = bsh_graph(["X"], {"W": rng.standard_normal((H, H)) / 6, "B": rng.standard_normal(H)})
    g.op("MatMul", "X", "W", out="mm", name="mm")
    g.op("Add", "mm", "B", out="y", name="bias")
    g.op("Relu", "y", out="Y", name="relu")
    return bsh_model(g, ["Y"])


@pytest.mark.parametrize("arch", ["sm_80"])
def test_relu_keeps_nan(arch):
    m, fused = _rewritten(relu_nan_model())
    assert len(fused) == 1
    x = np.random.default_rng(3).standard_normal((1, 4, H)).astype(np.float32)
    x[0, 1, 5] = np.nan                               # row 1 of the GEMM result is all NaN
    rep = plus_ep.verify(m, archs=[arch], batch=1, seq=4, inputs={"X": x})
    text = plus_ep.verify_text(rep)
    assert rep["ok"], text
    (r,) = rep["nodes"]
    assert r["executed"] and r["n_findings"] == 0, r


def minmax_clip_nan_model() -> onnx.ModelProto:
    """y = X @ W + B; Max(y, R), Min(y, R), Clip(y, -0.5, 0.5), HardSigmoid(y): NaN rows come from X, single
    NaN elements from R."""
    rng = np.random.default_rng(4)
    g = bsh_graph(["X", "R"], {"W": rng.standard_normal((H, H)) / 6, "B": rng.standard_normal(H),
                               "lo": np.array(-0.5), "hi": np.array(0.5)})
    g.op("MatMul", "X", "W", out="mm", name="mm")
    g.op("Add", "mm", "B", out="y", name="bias")
    g.op("Max", "y", "R", out="Ymax", name="max")
    g.op("Min", "y", "R", out="Ymin", name="min")
    g.op("Clip", "y", "lo", "hi", out="Yclip", name="clip")
    g.op("HardSigmoid", "y", out="Yhs", name="hsig")
    return bsh_model(g, ["Ymax", "Ymin", "Yclip", "Yhs"])


def test_max_min_clip_hardsigmoid_keep_nan():
    m, fused = _rewritten(minmax_clip_nan_model())
    # the kernels compute every output (none left to ORT's own CPU kernels)
    assert {"Ymax", "Ymin", "Yclip", "Yhs"} <= {o for n in fused for o in n.output}, [list(n.output) for n in fused]
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 4, H)).astype(np.float32)
    r = rng.standard_normal((1, 4, H)).astype(np.float32)
    x[0, 2, 7] = np.nan                               # row 2 of y is all NaN
    r[0, 0, 3] = r[0, 3, 30] = np.nan                 # NaN in the second operand only
    rep = plus_ep.verify(m, archs=["sm_80"], batch=1, seq=4, inputs={"X": x, "R": r})
    text = plus_ep.verify_text(rep)
    assert rep["ok"], text
    assert rep["nodes"] and all(n["executed"] and n["n_findings"] == 0 for n in rep["nodes"]), text
    assert len(rep["outputs"]) == 4, text
