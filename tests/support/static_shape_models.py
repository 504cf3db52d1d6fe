"""A model whose static dims reach a Pad and Reshapes only through run-time shape arithmetic, the way
TorchScript exports Swin's window padding: pad = (window - W % window) % window from Shape(x)[2], through
Mod (which ONNX Runtime's symbolic shape inference does not evaluate) and torch's reversed-pads
Slice/Transpose/Reshape/Cast. Batch is symbolic; every other dim is static."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def padded_window_model(H=6, W=6, C=8, window=3, seed=0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    n = helper.make_node
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    inits = [i64("two", [2]), i64("win", window), i64("zeros6", [0] * 6), i64("zero1", [0]),
             i64("m1", [-1]), i64("rev_start", [-1]), i64("rev_end", [-(2 ** 63) + 1]), i64("ax0", [0]),
             i64("shape_m1_2", [-1, 2]), i64("perm_shape", [-1]), i64("win_c", [-1, window, window, C]),
             numpy_helper.from_array((1 + 0.3 * rng.standard_normal(C)).astype(np.float32), "g"),
             numpy_helper.from_array((0.2 * rng.standard_normal(C)).astype(np.float32), "b"),
             numpy_helper.from_array((rng.standard_normal((C, 2 * C)) / np.sqrt(C)).astype(np.float32), "Wt"),
             numpy_helper.from_array((0.1 * rng.standard_normal(2 * C)).astype(np.float32), "B")]
    nodes = [
        n("LayerNormalization", ["X", "g", "b"], ["ln"], axis=-1, epsilon=1e-5),
        n("Shape", ["ln"], ["s"]), n("Gather", ["s", "two"], ["w"], axis=0),          # W, static
        n("Mod", ["w", "win"], ["wm"]), n("Sub", ["win", "wm"], ["wp"]), n("Mod", ["wp", "win"], ["pad_w"]),
        # torch pads (last dim first, begin/end pairs) -> ONNX pads: reverse the pairs, transpose, flatten
        n("Concat", ["zeros6", "zero1", "pad_w"], ["tpads"], axis=0),
        n("Reshape", ["tpads", "shape_m1_2"], ["pairs"]),
        n("Slice", ["pairs", "rev_start", "rev_end", "ax0", "m1"], ["rpairs"]),
        n("Transpose", ["rpairs"], ["tp"], perm=[1, 0]), n("Reshape", ["tp", "perm_shape"], ["pads8"]),
        n("Cast", ["pads8"], ["pads"], to=TensorProto.INT64),
        n("Pad", ["ln", "pads"], ["padded"]),
        n("Reshape", ["padded", "win_c"], ["windows"]),
        n("MatMul", ["windows", "Wt"], ["mm"]), n("Add", ["mm", "B"], ["Y"]),
    ]
    g = helper.make_graph(nodes, "padded_window", [helper.make_tensor_value_info("X", TensorProto.FLOAT,
                                                                                   ["batch", H, W, C])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch_windows", window, window, 2 * C])],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def batch_size_leak_model(seed=0) -> onnx.ModelProto:
    """TorchScript's way of reshaping: the batch size is Gather(Shape(mm), 0) of an inner tensor (a support
    node the GEMM's subgraph takes in, so contracting it stays acyclic), and a Reshape outside reads it too."""
    rng = np.random.default_rng(seed)
    n = helper.make_node
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    inits = [numpy_helper.from_array((rng.standard_normal((8, 8)) / 3).astype(np.float32), "W"),
             numpy_helper.from_array((0.1 * rng.standard_normal(8)).astype(np.float32), "B"),
             i64("zero", 0), i64("ax0", [0]), i64("c32", [32]), i64("m1", [-1])]
    nodes = [n("MatMul", ["X", "W"], ["mm"]), n("Add", ["mm", "B"], ["mb"]),
             n("Shape", ["mb"], ["s"]), n("Gather", ["s", "zero"], ["b"], axis=0),
             n("Unsqueeze", ["b", "ax0"], ["bu"]), n("Concat", ["bu", "c32"], ["shp"], axis=0),
             n("Reshape", ["mb", "shp"], ["Y"]),
             n("Unsqueeze", ["b", "ax0"], ["bu2"]), n("Concat", ["bu2", "m1"], ["shp2"], axis=0),
             n("Reshape", ["X2", "shp2"], ["Z"])]
    g = helper.make_graph(nodes, "leak", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 4, 8]),
                                          helper.make_tensor_value_info("X2", TensorProto.FLOAT, ["batch", 3, 5])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 32]),
                           helper.make_tensor_value_info("Z", TensorProto.FLOAT, ["batch", 15])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
