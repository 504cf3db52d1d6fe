"""A TorchScript-style shape chain into a fused node (Shape -> Concat -> Reshape after a GEMM): the
rewritten node binds `seq` from the Concat's values (a `shapev` plan line), since its data input is
`[batch*seq, C]`. Used by the CPU-resident shape input tests (tests/native, tests/emulated)."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper


def gpt2_like(width: int = 32, seed: int = 0):
    """Y = Reshape(X2 @ W + B, Concat(Shape(mask), [3*width])); X2 is [batch*seq, width], mask [batch, seq]."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((width, 3 * width)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(3 * width).astype(np.float32), "B")
    c = numpy_helper.from_array(np.array([3 * width], np.int64), "C3")
    nodes = [
        helper.make_node("Shape", ["mask"], ["mshape"]),
        helper.make_node("Concat", ["mshape", "C3"], ["shape"], axis=0),
        helper.make_node("MatMul", ["X2", "W"], ["mm"]),
        helper.make_node("Add", ["mm", "B"], ["biased"]),
        helper.make_node("Reshape", ["biased", "shape"], ["Y"]),
    ]
    g = helper.make_graph(
        nodes, "gpt2_like",
        [helper.make_tensor_value_info("X2", TensorProto.FLOAT, ["batch*seq", width]),
         helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", "seq", 3 * width])], [w, b, c])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def feeds(width: int = 32, batch: int = 2, seq: int = 3, seed: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    return {"X2": rng.standard_normal((batch * seq, width)).astype(np.float32),
            "mask": np.ones((batch, seq), np.int64)}
