"""Swin's window partition as the exporters write it, without torch: LayerNorm -> Reshape [B, H, W, C] ->
Pad (pads 0: H and W are multiples of the window) -> torch.roll by -shift on H and W (Slice/Slice/Concat per
axis) -> Reshape [B, H/w, w, W/w, w, C] -> Transpose -> Reshape [B*nW, w*w, C] -> a projection (MatMul +
bias) whose result goes back: Reshape -> Transpose -> Reshape -> roll by +shift -> Reshape -> + residual ->
LayerNorm (Swin's layernorm_after; the residual sum is an output too).
And a Pad with real padding (a constant around the input) between element-wise ops."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _i64(name, v):
    return numpy_helper.from_array(np.array(v, np.int64), name)


def _roll(nodes, inits, x, out, axis, size, shift, tag):
    """torch.roll(x, shift, axis) as Concat(x[-shift:], x[:-shift]) along `axis` (shift may be negative)."""
    s = shift % size
    inits += [_i64(f"{tag}_a", [axis]), _i64(f"{tag}_s0", [size - s]), _i64(f"{tag}_e0", [size]),
              _i64(f"{tag}_s1", [0]), _i64(f"{tag}_e1", [size - s])]
    nodes += [helper.make_node("Slice", [x, f"{tag}_s0", f"{tag}_e0", f"{tag}_a"], [f"{tag}_tail"]),
              helper.make_node("Slice", [x, f"{tag}_s1", f"{tag}_e1", f"{tag}_a"], [f"{tag}_head"]),
              helper.make_node("Concat", [f"{tag}_tail", f"{tag}_head"], [out], axis=axis)]


def window_block(H=6, W=6, C=16, window=3, shift=1, seed=0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    n = helper.make_node
    nh, nw = H // window, W // window
    inits = [numpy_helper.from_array((1 + 0.3 * rng.standard_normal(C)).astype(np.float32), "g"),
             numpy_helper.from_array((0.2 * rng.standard_normal(C)).astype(np.float32), "b"),
             numpy_helper.from_array((rng.standard_normal((C, C)) / np.sqrt(C)).astype(np.float32), "Wp"),
             numpy_helper.from_array((0.1 * rng.standard_normal(C)).astype(np.float32), "Bp"),
             _i64("hw", [-1, H, W, C]), _i64("pads", [0] * 8),
             _i64("win6", [-1, nh, window, nw, window, C]), _i64("win3", [-1, window * window, C]),
             _i64("back6", [-1, nh, nw, window, window, C]), _i64("seq3", [-1, H * W, C])]
    nodes = [n("LayerNormalization", ["X", "g", "b"], ["ln"], axis=-1, epsilon=1e-5),
             n("Reshape", ["ln", "hw"], ["img"]), n("Pad", ["img", "pads"], ["padded"])]
    _roll(nodes, inits, "padded", "r1", 1, H, -shift, "rh")
    _roll(nodes, inits, "r1", "r2", 2, W, -shift, "rw")
    nodes += [n("Reshape", ["r2", "win6"], ["w6"]), n("Transpose", ["w6"], ["wt"], perm=[0, 1, 3, 2, 4, 5]),
              n("Reshape", ["wt", "win3"], ["windows"]),
              n("MatMul", ["windows", "Wp"], ["proj"]), n("Add", ["proj", "Bp"], ["projb"]),
              n("Reshape", ["projb", "back6"], ["b6"]), n("Transpose", ["b6"], ["bt"], perm=[0, 1, 3, 2, 4, 5]),
              n("Reshape", ["bt", "hw"], ["bimg"])]
    _roll(nodes, inits, "bimg", "u1", 1, H, shift, "uh")
    _roll(nodes, inits, "u1", "u2", 2, W, shift, "uw")
    nodes += [n("Reshape", ["u2", "seq3"], ["back"]), n("Add", ["X", "back"], ["Y"]),
              n("LayerNormalization", ["Y", "g2", "b2"], ["Y2"], axis=-1, epsilon=1e-5)]
    inits += [numpy_helper.from_array((1 + 0.3 * rng.standard_normal(C)).astype(np.float32), "g2"),
              numpy_helper.from_array((0.2 * rng.standard_normal(C)).astype(np.float32), "b2")]
    g = helper.make_graph(nodes, "window_block", [helper.make_tensor_value_info("X", TensorProto.FLOAT,
                                                                                ["batch", H * W, C])],
                          [helper.make_tensor_value_info(t, TensorProto.FLOAT, ["batch", H * W, C]) for t in ("Y", "Y2")],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def padded_elementwise(seed=0) -> onnx.ModelProto:
    """Relu(X) padded by (1, 2) rows and (0, 3) columns with 0.5, then * 2 + Y."""
    n = helper.make_node
    inits = [_i64("pads", [0, 1, 0, 0, 2, 3]), numpy_helper.from_array(np.array(0.5, np.float32), "val"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two")]
    nodes = [n("Relu", ["X"], ["r"]), n("Pad", ["r", "pads", "val"], ["p"]), n("Mul", ["p", "two"], ["m"]),
             n("Add", ["m", "Yin"], ["Z"])]
    g = helper.make_graph(nodes, "padded", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 5, 6]),
                                            helper.make_tensor_value_info("Yin", TensorProto.FLOAT, ["batch", 8, 9])],
                          [helper.make_tensor_value_info("Z", TensorProto.FLOAT, ["batch", 8, 9])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
