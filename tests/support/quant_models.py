"""Small quantized models as ORT's quantization tools write them (shared by tests/cpu and tests/emulated)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper, numpy_helper

K8, N8 = 96, 80


def linear_model(kind: str):
    """A quantized linear layer as ORT's tools write it. "qdq" (quantize_static, QDQ): Q/DQ of the activation
    (int8, zero point -7), a constant int8 weight with per-column scales, bias, ReLU and the requantization of the
    consumer. "dynamic" (quantize_dynamic): DynamicQuantizeLinear (uint8, a zero point computed per run),
    MatMulInteger with that zero point, the scales' product and the bias. "qdq_view": "qdq" whose activation reaches
    the MatMul through a Transpose and a Reshape of the dequantized values (BERT's attention output projection)."""
    rng = np.random.default_rng(11)
    w = rng.integers(-127, 128, (K8, N8)).astype(np.int8)
    sw = (rng.random(N8) * 0.01 + 0.002).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(sw, "sw"),
             numpy_helper.from_array(rng.standard_normal(N8).astype(np.float32), "bias")]
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
    xshape = ["B", 2, 70, K8 // 2] if kind == "qdq_view" else ["B", 70, K8]
    g = helper.make_graph(nodes, kind, [helper.make_tensor_value_info("x", T.FLOAT, xshape)],
                          [helper.make_tensor_value_info("y", T.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=10)
    return onnx.shape_inference.infer_shapes(m)
