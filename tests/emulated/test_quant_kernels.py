"""QuantizeLinear / DequantizeLinear inside fused kernels on the CPU PTX interpreter, checked by `plus-ep verify`
(each node against its function body with the integer bounds of plus_ep/verification/bounds.py, the model outputs
against ORT CPU): per-axis int8 with negative zero points, uint8 and int16 per tensor, float8 e4m3fn / e5m2 with
saturate 1 and 0, on edge inputs (ties at .5, both saturation
bounds and past them, NaN, infinities). The blocked int4 weight's DequantizeLinear reads initializers only (no data
kernel: ORT computes it)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import plus_ep
from plus_ep.rewrite import rewrite_detailed
from tests.support.quant_models import attention_feeds, attention_model, linear_input, linear_model, verify_linear

C = 48


def quant_model():
    rng = np.random.default_rng(3)
    sc = ((rng.random(C) + 0.5) * 0.05).astype(np.float32)          # one scale per channel, all different
    zp = rng.integers(-20, 20, C).astype(np.int8)                      # negative and positive zero points
    w4 = rng.integers(-8, 8, (8, C)).astype(np.int8)
    inits = [numpy_helper.from_array(sc, "s"), numpy_helper.from_array(zp, "z"),
             numpy_helper.from_array(np.array(0.02, np.float32), "s8"),
             numpy_helper.from_array(np.array(0.37, np.float32), "su"), helper.make_tensor("zu", T.UINT8, [], [201]),
             numpy_helper.from_array(np.array(0.001, np.float32), "s16"), helper.make_tensor("z16", T.INT16, [], [-9]),
             helper.make_tensor("w4", T.INT4, [8, C], w4.reshape(-1).tolist()),
             numpy_helper.from_array(((rng.random((2, C)) + 0.5) * 0.1).astype(np.float32), "s4")]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["dq"], axis=1),
        helper.make_node("QuantizeLinear", ["x", "su", "zu"], ["qu"]),
        helper.make_node("DequantizeLinear", ["qu", "su", "zu"], ["du"]),
        helper.make_node("QuantizeLinear", ["x", "s16", "z16"], ["q16"]),
        helper.make_node("DequantizeLinear", ["q16", "s16", "z16"], ["d16"]),
        helper.make_node("QuantizeLinear", ["x", "s8"], ["e4"], output_dtype=T.FLOAT8E4M3FN, saturate=1),
        helper.make_node("DequantizeLinear", ["e4", "s8"], ["de4"]),
        helper.make_node("QuantizeLinear", ["x", "s8"], ["e4n"], output_dtype=T.FLOAT8E4M3FN, saturate=0),
        helper.make_node("DequantizeLinear", ["e4n", "s8"], ["de4n"]),
        helper.make_node("QuantizeLinear", ["x", "s8"], ["e5"], output_dtype=T.FLOAT8E5M2, saturate=0),
        helper.make_node("DequantizeLinear", ["e5", "s8"], ["de5"]),
        helper.make_node("DequantizeLinear", ["w4", "s4"], ["dw"], axis=0, block_size=4),
        helper.make_node("Sum", ["dq", "du", "d16", "de4", "x"], ["y"]),
        helper.make_node("Add", ["de4n", "de5"], ["y8"]),
        helper.make_node("Mul", ["xw", "dw"], ["yw"]),
    ]
    g = helper.make_graph(nodes, "quant", [helper.make_tensor_value_info("x", T.FLOAT, ["B", C]),
                                           helper.make_tensor_value_info("xw", T.FLOAT, [8, C])],
                          [helper.make_tensor_value_info("y", T.FLOAT, None), helper.make_tensor_value_info("y8", T.FLOAT, None),
                           helper.make_tensor_value_info("q", T.INT8, None), helper.make_tensor_value_info("qu", T.UINT8, None),
                           helper.make_tensor_value_info("yw", T.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    return onnx.shape_inference.infer_shapes(m), sc


def edge_inputs(sc):
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((6, C)) * 4).astype(np.float32)
    ties = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5], np.float32)
    x[0, :6] = ties * sc[:6]                                            # x / scale on .5 ties (per channel)
    x[1, :8] = np.array([200, -200, 1e6, -1e6, np.nan, np.inf, -np.inf, -0.0], np.float32)
    # float8 ties and overflow, outside the windows where ORT CPU's saturate=0 conversion departs from ONNX
    # (tests/cpu/test_quant_codegen.py: test_ort_float8_saturate0_windows)
    x[2, :6] = np.array([464.0, 470.0, 70000.0, 8.9, 9.5, 9.3], np.float32) * 0.02
    r = np.abs(x) / np.float32(0.02)
    x[(r >= 478) & (r < 498)] *= np.float32(0.9)
    return {"x": x, "xw": rng.standard_normal((8, C)).astype(np.float32)}


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_quant_ops_fuse_and_verify(arch, tmp_path):
    model, sc = quant_model()
    r = rewrite_detailed(model, archs=[arch])
    assert not r.kernels.failures, r.kernels.failures
    fused = [n for n in r.model.graph.node if n.domain == "ai.plus_ep"]
    assert fused and not [n for n in r.model.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")
                          and n.input[0] != "w4"]          # every Q/DQ of data runs inside a kernel
    path = tmp_path / "q.plus.onnx"
    onnx.save(r.model, path)
    np.savez(tmp_path / "x.npz", **edge_inputs(sc))
    rep = plus_ep.verify(str(path), inputs=str(tmp_path / "x.npz"), cubins=False, stress=False)
    assert rep["ok"], plus_ep.verify_text(rep)
    checks = [o for n in rep["nodes"] for o in n["outputs"]]
    assert checks and all(o["bound"] == "element" for o in checks)      # the bounds model, not a flat tolerance
    outs = {o["name"]: o for o in rep["outputs"]}
    assert outs["q"]["max_abs"] == 0 and outs["qu"]["max_abs"] == 0      # integers equal to ORT CPU's


# ---- quantized linear layers as 8-bit GEMMs (graph_rewrites/contrib/quant.py folds, kernels/families/gemm/int8.py) ----
@pytest.mark.parametrize("kind,arch", [("qdq", "sm_80"), ("dynamic", "sm_80"), ("qdq_view", "sm_80"),
                                       ("qdq", "sm_90a"), ("dynamic_ln", "sm_90a")])
def test_quantized_linear_runs_as_an_8bit_gemm(kind, arch, tmp_path):
    r = rewrite_detailed(linear_model(kind), archs=[arch])
    assert not r.kernels.failures, r.kernels.failures
    gemms = [sg for sg in r.subgraphs if sg.pattern.family.name in ("gemm", "gemm_rownorm")]
    assert len(gemms) == 1
    ops = [r.view.nodes[i].op_type for i in gemms[0].nodes]
    assert "MatMulInteger" in ops and "MatMul" not in ops          # the stored 8-bit operands are multiplied
    # the consumer's requantization fused (qdq), and the activation quantized as the kernel loads it (qdq: x is a
    # graph input, no producer's epilogue took it; dynamic: after the one-launch range, scale and zero point), no
    # 8-bit copy of x in memory; qdq_view: a Transpose/Reshape between them keeps it a point-wise kernel
    assert ops.count("QuantizeLinear") == {"qdq": 2, "qdq_view": 1}.get(kind, 1)
    if kind.startswith("dynamic"):
        assert sorted(sg.pattern.name for sg in r.subgraphs) == [
            "dynamic_range", "gemm_quantized_a" if kind == "dynamic" else "gemm_layernorm_quantized_a"]
    node = next(n for n in r.model.graph.node if n.domain == "ai.plus_ep" and "gemm" in n.name)
    assert "w" in node.input and "wd" not in node.input             # reads the int8 weight, no dequantised copy
    path = tmp_path / "l.plus.onnx"
    onnx.save(r.model, path)
    # verify checks each kernel against its node's body, which holds the fold: the kernels' output against the
    # original quantized layer on ORT CPU checks the fold too (qdq: y is requantized, a step of 0.04)
    got, want = verify_linear(path, linear_model(kind), linear_input(kind), arch, tmp_path)
    # dynamic_ln: the LayerNorm's reductions round in another order than ORT CPU's (values of size ~1)
    tol = 1e-5 * np.abs(want).max() + {"dynamic": 0.0, "dynamic_ln": 2e-5}.get(kind, 0.04)
    assert np.abs(got - want).max() <= tol


# ---- attention as quantize_static writes it: one kernel, the probabilities quantized exactly (PLUS_HAS_PROB) ----
@pytest.mark.parametrize("arch,math_,probs", [("sm_80", "exact", ("uint8", 1 / 255, 0)),
                                              ("sm_80", "exact", ("int8", 1 / 255, -128)),
                                              ("sm_80", "tf32", ("int8", 1 / 255, -128)),
                                              ("sm_90a", "tf32", ("uint8", 1 / 255, 0)),
                                              ("sm_90a", "fp16", ("int8", 1 / 255, -128))])
def test_qdq_attention_is_one_kernel_on_the_interpreter(arch, math_, probs, tmp_path):
    """Two key tiles and two query tiles per head (seq 70, the menu's 64-row tiles), a padding mask with a
    different length per batch. The exact path gives ORT CPU's bits (the probabilities are quantized after the
    kernel's first pass found each row's maximum and sum); TF32 or f16 scores may put a value across a
    quantization tie, so there the node's bound decides and the output is at most a few output quanta (0.01)
    away. "fp16": a float16 model (f16 tensor cores), judged by the node's bound alone: ORT CPU's float16 graph
    rounds the scores to f16 before quantizing them, so its output is not the exact one the bound is built on."""
    fp16 = math_ == "fp16"
    model = attention_model(heads=1, probs=probs, float_type=T.FLOAT16 if fp16 else T.FLOAT)
    r = rewrite_detailed(model, archs=[arch], fp32_math="tf32" if fp16 else math_)
    assert not r.kernels.failures, r.kernels.failures
    assert [sg.pattern.name for sg in r.subgraphs] == ["attention"]
    assert [n.op_type for n in r.model.graph.node] == ["Fused"]
    path = tmp_path / "a.plus.onnx"
    onnx.save(r.model, path)
    np.savez(tmp_path / "x.npz", **attention_feeds(seq=70, heads=1, np_type=np.float16 if fp16 else np.float32))
    rep = plus_ep.verify(str(path), inputs=str(tmp_path / "x.npz"), cubins=False, stress=False)
    (row,) = rep["nodes"]
    assert row["executed"] and all(o["ok"] for o in row["outputs"]), plus_ep.verify_text(rep)
    (out,) = rep["outputs"]
    if math_ == "exact":
        assert rep["ok"] and out["max_abs"] == 0, plus_ep.verify_text(rep)
    elif not fp16:          # ORT CPU's float16 graph rounds its own scores to f16 before quantizing them
        assert out["max_abs"] <= 0.0301, plus_ep.verify_text(rep)
