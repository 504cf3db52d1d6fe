"""A quantized linear layer as quantize_static writes it (QDQ: int8 activation with a zero point, a constant int8 weight
[K, N] with per-column scales, bias, ReLU, the consumer's requantization), rewritten for sm_90a with the 8-bit
mma.sync tiles taken out of the menu so its routes take the 8-bit TMA tiles (gemm_sm90a_ws.cuh, B transposed in
shared memory): the plan carries int8 tensor maps, and `plus-ep verify` runs the kernels through the launcher and
the emulated driver on the PTX interpreter, each against its node's body, the output against ORT CPU on the
original quantized layer."""
from __future__ import annotations

import numpy as np
import onnx

import plus_ep
from plus_ep.kernels.families.gemm import configs as gemm_configs
from plus_ep.rewrite import rewrite_detailed
from tests.support.quant_models import K8, linear_model


def test_qdq_linear_on_the_8bit_tma_gemm(tmp_path, monkeypatch):
    monkeypatch.setenv("PLUS_EP_CACHE_DIR", str(tmp_path / "cache"))      # renders with this menu only
    monkeypatch.setitem(gemm_configs.CONFIGS, gemm_configs.MATH_INT8, ())
    model = linear_model("qdq")
    r = rewrite_detailed(model, archs=["sm_90a"])
    assert not r.kernels.failures, r.kernels.failures
    node = next(n for n in r.model.graph.node if n.domain == "ai.plus_ep" and "gemm" in n.name)
    plan = next(a.s.decode() for a in node.attribute if a.name == "plus_plan")
    kernels = [ln for ln in plan.splitlines() if ln.startswith("kernel ")]
    tmaps = [ln.split() for ln in plan.splitlines() if ln.startswith("tmap ")]
    assert kernels and len(tmaps) == 2 * len(kernels)
    assert {t[1] for t in tmaps} == {"3"}                        # int8 maps: A [M, K], B [K, N] in 128 x 128 boxes
    assert all(t[-4:] == ["128", "128", "1", "128"] for t in tmaps[1::2])
    path = tmp_path / "l.plus.onnx"
    onnx.save(r.model, path)
    x = (np.random.default_rng(12).standard_normal((2, 70, K8)) * 3).astype(np.float32)
    x[0, 0, :4] = [1e4, -1e4, 0.025, -0.375]                        # saturation, ties of x / 0.05
    np.savez(tmp_path / "x.npz", x=x)
    rep = plus_ep.verify(str(path), inputs=str(tmp_path / "x.npz"), cubins=False, stress=False,
                         outputs_to=str(tmp_path / "y.npz"))
    assert rep["ok"], plus_ep.verify_text(rep)
    gemm_row = next(n for n in rep["nodes"] if "gemm" in n["node"])
    assert gemm_row["executed"] and all(o["bound"] == "element" for o in gemm_row["outputs"])
    import onnxruntime as ort
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = np.load(tmp_path / "y.npz")["sm_90a/y"]
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max() + 0.04    # y is requantized: a step of 0.04
