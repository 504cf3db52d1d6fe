"""Models of the axis_softmax family's tests: a softmax or log-softmax over one axis, with element-wise and
transpose neighbours, and its float64 reference."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F32, F16 = TensorProto.FLOAT, TensorProto.FLOAT16
NP = {F32: np.float32, F16: np.float16}


def axis_model(op, shape, axis, dtype=F32, neighbours=False, side=False) -> onnx.ModelProto:
    """X -> [Mul by 0.5 -> ] op(axis) [-> Add 1 -> Transpose last two] -> Y; `side`: X * 0.5 is an output too."""
    n, x, nodes = helper.make_node, "X", []
    inits = [numpy_helper.from_array(np.array(0.5, NP[dtype]), "half"),
             numpy_helper.from_array(np.array(1.0, NP[dtype]), "one")]
    if neighbours or side:
        nodes.append(n("Mul", ["X", "half"], ["Xh"]))
        x = "Xh"
    nodes.append(n(op, [x], ["S"], axis=axis))
    out_shape = list(shape)
    if neighbours:
        perm = list(range(len(shape)))
        perm[-2:] = perm[-1:-3:-1]
        nodes += [n("Add", ["S", "one"], ["A"]), n("Transpose", ["A"], ["T"], perm=perm)]
        out_shape = [shape[p] for p in perm]
    nodes[-1].output[0] = "Y"
    outputs = [helper.make_tensor_value_info("Y", dtype, out_shape)]
    if side:
        outputs.append(helper.make_tensor_value_info("Xh", dtype, list(shape)))
    g = helper.make_graph(nodes, "axis_softmax", [helper.make_tensor_value_info("X", dtype, list(shape))],
                          outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


def reference(op, x, axis, neighbours=False) -> np.ndarray:
    """float64 numpy of axis_model's Y."""
    x = x.astype(np.float64) * (0.5 if neighbours else 1.0)
    z = x - x.max(axis=axis, keepdims=True)
    s = np.exp(z).sum(axis=axis, keepdims=True)
    y = z - np.log(s) if op == "LogSoftmax" else np.exp(z) / s
    return np.swapaxes(y + 1.0, -1, -2) if neighbours else y
