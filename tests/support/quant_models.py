"""Small quantized models as ORT's quantization tools write them (shared by tests/cpu and tests/emulated)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper, numpy_helper

K8, N8 = 96, 80


def linear_model(kind: str, k: int = K8, n: int = N8, rows=70):
    """A quantized linear layer as ORT's tools write it. "qdq" (quantize_static, QDQ): Q/DQ of the activation
    (int8, zero point -7), a constant int8 weight with per-column scales, bias, ReLU and the requantization of the
    consumer. "dynamic" (quantize_dynamic): DynamicQuantizeLinear (uint8, a zero point computed per run),
    MatMulInteger with that zero point, the scales' product and the bias. "qdq_view": "qdq" whose activation reaches
    the MatMul through a Transpose and a Reshape of the dequantized values (BERT's attention output projection).
    "dynamic_ln": "dynamic" with N = K, the residual x and a LayerNormalization after the bias (BERT's output
    projections, opset 17). `k`, `n`, `rows`: the weight's [K, N] and x's second axis (the "dynamic" kind's)."""
    rng = np.random.default_rng(11)
    n8 = k if kind == "dynamic_ln" else n
    w = rng.integers(-127, 128, (k, n8)).astype(np.int8)
    sw = (rng.random(n8) * 0.01 + 0.002).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(sw, "sw"),
             numpy_helper.from_array(rng.standard_normal(n8).astype(np.float32), "bias")]
    if kind in ("qdq", "qdq_view"):
        inits += [numpy_helper.from_array(np.array(0.05, np.float32), "sx"),
                  numpy_helper.from_array(np.array(-7, np.int8), "zx"), numpy_helper.from_array(np.zeros(N8, np.int8), "zw"),
                  numpy_helper.from_array(np.array(0.04, np.float32), "sy"), numpy_helper.from_array(np.array(3, np.int8), "zy")]
        nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
                 helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"] if kind == "qdq" else ["xv"]),
                 helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wd"], axis=1),
                 helper.make_node("MatMul", ["xd", "wd"], ["mm"]),
                 helper.make_node("Add", ["mm", "bias"], ["h"]),
                 helper.make_node("Relu", ["h"], ["r"]),
                 helper.make_node("QuantizeLinear", ["r", "sy", "zy"], ["yq"]),
                 helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"])]
        if kind == "qdq_view":          # x [B, 2, 70, 48] -> [B, 70, 2, 48] -> [B, 70, 96]
            inits.append(numpy_helper.from_array(np.array([0, 70, K8], np.int64), "shape"))
            nodes[2:2] = [helper.make_node("Transpose", ["xv"], ["xt"], perm=[0, 2, 1, 3]),
                          helper.make_node("Reshape", ["xt", "shape"], ["xd"])]
    else:
        nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "sx", "zx"]),
                 helper.make_node("MatMulInteger", ["xq", "w", "zx"], ["acc"]),
                 helper.make_node("Cast", ["acc"], ["accf"], to=T.FLOAT),
                 helper.make_node("Mul", ["sx", "sw"], ["s"]),
                 helper.make_node("Mul", ["accf", "s"], ["mm"]),
                 helper.make_node("Add", ["mm", "bias"], ["y"])]
        if kind == "dynamic_ln":
            inits += [numpy_helper.from_array((rng.random(n8) + 0.5).astype(np.float32), "gamma"),
                      numpy_helper.from_array(rng.standard_normal(n8).astype(np.float32), "beta")]
            nodes[-1].output[0] = "h"
            nodes += [helper.make_node("Add", ["h", "x"], ["hr"]),
                      helper.make_node("LayerNormalization", ["hr", "gamma", "beta"], ["y"], axis=-1, epsilon=1e-5)]
    xshape = ["B", 2, 70, K8 // 2] if kind == "qdq_view" else ["B", rows, k]
    g = helper.make_graph(nodes, kind, [helper.make_tensor_value_info("x", T.FLOAT, xshape)],
                          [helper.make_tensor_value_info("y", T.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17 if kind == "dynamic_ln" else 13)],
                          ir_version=10)
    return onnx.shape_inference.infer_shapes(m)


def linear_input(kind: str) -> np.ndarray:
    """x for linear_model(kind): [2, 70, K8] (the qdq_view model's: its [2, 2, 70, K8/2] view), with values
    that saturate int8 and land on ties of x / 0.05."""
    x = (np.random.default_rng(12).standard_normal((2, 70, K8)) * 3).astype(np.float32)
    x[0, 0, :4] = [1e4, -1e4, 0.025, -0.375]
    if kind == "qdq_view":
        x = np.ascontiguousarray(x.reshape(2, 70, 2, K8 // 2).transpose(0, 2, 1, 3))
    return x


def verify_linear(path, model, x, arch, tmp_path):
    """Run `plus-ep verify` on the rewritten linear layer at `path` with input x; it must pass and its GEMM node
    must have executed within element bounds. Returns (the kernels' y on `arch`, ORT CPU's y on `model`)."""
    import onnxruntime as ort

    import plus_ep
    np.savez(tmp_path / "x.npz", x=x)
    rep = plus_ep.verify(str(path), inputs=str(tmp_path / "x.npz"), cubins=False, stress=False,
                         outputs_to=str(tmp_path / "y.npz"))
    assert rep["ok"], plus_ep.verify_text(rep)
    gemm_row = next(n for n in rep["nodes"] if "gemm" in n["node"])
    assert gemm_row["executed"] and all(o["bound"] == "element" for o in gemm_row["outputs"])
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    return np.load(tmp_path / "y.npz")[f"{arch}/y"], want


def attention_model(heads: int = 2, dim: int = 32, probs=("uint8", 1 / 255, 0), float_type=T.FLOAT):
    """Self-attention as ORT's quantize_static writes BERT's (QDQ, int8 activations): Q, K and V arrive through
    QuantizeLinear -> DequantizeLinear, the scores, the scaled scores and the masked logits are fake-quantized,
    the probabilities after the Softmax too (`probs`: their type, scale and zero point; ORT writes int8 with a
    zero point of -128), and the output. Inputs q, k, v [B, H, S, D] and an additive key mask [B, 1, 1, S], of
    `float_type` (float16: the scales too, opset 21)."""
    dtype, p_scale, p_zero = probs
    onnx_t = {"uint8": T.UINT8, "int8": T.INT8}[dtype]
    np_t = np.float16 if float_type == T.FLOAT16 else np.float32
    inits, nodes = [], []

    def qdq(x, name, scale, zero, qt=T.INT8):
        inits.extend([numpy_helper.from_array(np.array(scale, np_t), f"{name}_s"),
                      helper.make_tensor(f"{name}_z", qt, [], [zero])])
        nodes.extend([helper.make_node("QuantizeLinear", [x, f"{name}_s", f"{name}_z"], [f"{name}_q"]),
                      helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_s", f"{name}_z"], [f"{name}_d"])])
        return f"{name}_d"

    q, k, v = (qdq(t, t + "x", 0.03, z) for t, z in (("q", 3), ("k", -5), ("v", 0)))
    nodes.append(helper.make_node("Transpose", [k], ["kt"], perm=[0, 1, 3, 2]))
    inits.append(numpy_helper.from_array(np.array(1 / np.sqrt(dim), np_t), "scale"))
    nodes.append(helper.make_node("MatMul", [q, "kt"], ["s"]))
    s = qdq("s", "sq", 0.02, 1)
    nodes.append(helper.make_node("Mul", [s, "scale"], ["sc"]))
    sc = qdq("sc", "scq", 0.004, 0)
    nodes.append(helper.make_node("Add", [sc, "mask"], ["lg"]))
    lg = qdq("lg", "lgq", 0.05, 2)
    nodes.append(helper.make_node("Softmax", [lg], ["p"], axis=-1))
    p = qdq("p", "pq", p_scale, p_zero, onnx_t)
    nodes.append(helper.make_node("MatMul", [p, v], ["o"]))
    o = qdq("o", "oq", 0.01, -1)
    nodes.append(helper.make_node("Transpose", [o], ["y"], perm=[0, 2, 1, 3]))
    shape = ["B", heads, "S", dim]
    g = helper.make_graph(nodes, "qdq_attention",
                          [helper.make_tensor_value_info(t, float_type, shape) for t in "qkv"]
                          + [helper.make_tensor_value_info("mask", float_type, ["B", 1, 1, "S"])],
                          [helper.make_tensor_value_info("y", float_type, None)], inits)
    opset = 21 if float_type == T.FLOAT16 else 13
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    return onnx.shape_inference.infer_shapes(m)


def attention_feeds(batch: int = 2, seq: int = 150, heads: int = 2, dim: int = 32, seed: int = 5,
                    np_type=np.float32) -> dict:
    """Inputs of attention_model: q, k, v in a few quantization steps' range, a key padding mask (the
    transformers form: 0 or the float type's lowest) with a different number of real keys per batch."""
    rng = np.random.default_rng(seed)
    feeds = {t: (rng.standard_normal((batch, heads, seq, dim)) * 1.5).astype(np_type) for t in "qkv"}
    mask = np.zeros((batch, 1, 1, seq), np_type)
    for b in range(batch):
        mask[b, ..., seq - 7 * (b + 1):] = np.finfo(np_type).min
    feeds["mask"] = mask
    return feeds
