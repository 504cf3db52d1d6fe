"""Quantized linear layers as quantize_static writes them (QDQ: int8 activation with a zero point, constant int8 weights
[K, N] with per-column scales, bias; one layer with ReLU and the consumer's requantization, its activation
quantized by a point-wise kernel (a Transpose and Reshape before the MatMul, as BERT's attention output
projection: the GEMM reads the int8 copy, not quantizing A itself), and three layers of
different widths sharing their input: a horizontal group, as BERT's Q, K and V), rewritten for sm_90a with the
8-bit mma.sync tiles taken out of the menu so the routes take the 8-bit TMA tiles (gemm_sm90a_ws.cuh, B transposed
in shared memory): the plans carry int8 tensor maps, and `plus-ep verify` runs the kernels through the launcher and
the emulated driver on the PTX interpreter, each against its node's body, the outputs against ORT CPU on the
original quantized model."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import plus_ep
from plus_ep.kernels.families.gemm import configs as gemm_configs
from plus_ep.kernels.wire import plan as plan_text
from plus_ep.rewrite import rewrite_detailed
from tests.support.quant_models import K8, linear_input, linear_model, verify_linear


def _rewritten_on_tma_tiles(model, monkeypatch, tmp_path, maps_per_kernel):
    monkeypatch.setenv("PLUS_EP_CACHE_DIR", str(tmp_path / "cache"))      # renders with this menu only
    monkeypatch.setitem(gemm_configs.CONFIGS, gemm_configs.MATH_INT8, ())
    r = rewrite_detailed(model, archs=["sm_90a"])
    assert not r.kernels.failures, r.kernels.failures
    node = next(n for n in r.model.graph.node if n.domain == "ai.plus_ep" and "gemm" in n.name)
    plan = next(a.s.decode() for a in node.attribute if a.name == "plus_plan")
    kernels = [ln for r in plan_text.parse(plan).routes for ln in r.launches]
    tmaps = [plan_text.tmap_line(t).split() for ln in kernels for t in ln.tmaps]     # as the plan's records
    assert kernels and len(tmaps) == maps_per_kernel * len(kernels)
    assert {t[1] for t in tmaps} == {"3"}                        # int8 maps: A [M, K], B [K, N] in 128 x 128 boxes
    assert all(t[-4:] == ["128", "128", "1", "128"] for i, t in enumerate(tmaps) if i % maps_per_kernel)
    path = tmp_path / "m.plus.onnx"
    onnx.save(r.model, path)
    return path


def test_qdq_linear_on_the_8bit_tma_gemm(tmp_path, monkeypatch):
    model = linear_model("qdq_view")
    path = _rewritten_on_tma_tiles(model, monkeypatch, tmp_path, 2)
    got, want = verify_linear(path, model, linear_input("qdq_view"), "sm_90a", tmp_path)
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max() + 0.04    # y is requantized: a step of 0.04


def group_model(ns=(80, 80, 48)):
    """Three QDQ linear layers (+ bias) of widths `ns` reading one quantized activation x [B, 70, K8]."""
    rng = np.random.default_rng(21)
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "sx"), numpy_helper.from_array(np.array(-7, np.int8), "zx")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"])]
    outs = []
    for i, n in enumerate(ns):
        inits += [numpy_helper.from_array(rng.integers(-127, 128, (K8, n)).astype(np.int8), f"w{i}"),
                  numpy_helper.from_array((rng.random(n) * 0.01 + 0.002).astype(np.float32), f"sw{i}"),
                  numpy_helper.from_array(np.zeros(n, np.int8), f"zw{i}"),
                  numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), f"b{i}")]
        nodes += [helper.make_node("DequantizeLinear", [f"w{i}", f"sw{i}", f"zw{i}"], [f"wd{i}"], axis=1),
                  helper.make_node("MatMul", ["xd", f"wd{i}"], [f"mm{i}"]),
                  helper.make_node("Add", [f"mm{i}", f"b{i}"], [f"y{i}"])]
        outs.append(helper.make_tensor_value_info(f"y{i}", T.FLOAT, None))
    g = helper.make_graph(nodes, "group", [helper.make_tensor_value_info("x", T.FLOAT, ["B", 70, K8])], outs, inits)
    return onnx.shape_inference.infer_shapes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)],
                                                               ir_version=10))


def test_qdq_projection_group_on_the_8bit_tma_gemm(tmp_path, monkeypatch):
    """One launch for three members of two widths: a map of B per member, ragged N (48 of a 128-wide tile)."""
    model = group_model()
    path = _rewritten_on_tma_tiles(model, monkeypatch, tmp_path, 4)
    x = (np.random.default_rng(13).standard_normal((3, 70, K8)) * 3).astype(np.float32)
    np.savez(tmp_path / "x.npz", x=x)
    rep = plus_ep.verify(str(path), inputs=str(tmp_path / "x.npz"), cubins=False, stress=False,
                         outputs_to=str(tmp_path / "y.npz"))
    assert rep["ok"], plus_ep.verify_text(rep)
    import onnxruntime as ort
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = np.load(tmp_path / "y.npz")
    for i, w in enumerate(want):          # exact integer sums, then float32 scaling: a few ulps of the outputs
        assert np.abs(got[f"sm_90a/y{i}"] - w).max() <= 1e-5 * np.abs(w).max()
