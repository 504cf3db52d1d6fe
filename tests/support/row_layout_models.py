"""Models whose row-normalised result is also returned in another layout (issue 23, the wrong answer):
Add -> LayerNorm/RMSNorm -> Y, plus Transpose(Y) (or a reshaped/permuted copy) as a second graph output;
the GEMM + residual + LayerNorm variant; and graphs that read a row's statistics from another row in a way
no store order can fix (they must stay unfused). Random non-trivial weights (norm weights != 1, biases != 0)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 23


def _model(nodes, inputs, outputs, inits, dtype=TensorProto.FLOAT):
    g = helper.make_graph(nodes, "row_layout", inputs, outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=10)


def _init(name, arr, dtype=np.float32):
    return numpy_helper.from_array(np.asarray(arr).astype(dtype), name)


def norm_transposed(kind="ln", shape=(6, 16), perm=(1, 0), reshape=None) -> onnx.ModelProto:
    """X[shape] + R -> LayerNorm (kind "ln") or RMSNorm ("rms") over the last axis -> Y, and Transpose(Y,
    perm) (then optionally a Reshape to `reshape`) as output YT. Dims given as strings are symbolic."""
    rng = np.random.default_rng(0)
    n = helper.make_node
    H = shape[-1]
    r_shape = [d if isinstance(d, int) else 1 for d in shape]
    inits = [_init("g", 1 + 0.5 * rng.standard_normal(H)), _init("b", rng.standard_normal(H)),
             _init("R", rng.standard_normal(r_shape))]
    nodes = [n("Add", ["X", "R"], ["s"])]
    if kind == "ln":
        nodes.append(n("LayerNormalization", ["s", "g", "b"], ["Y"], axis=-1, epsilon=1e-5))
    else:
        nodes.append(n("RMSNormalization", ["s", "g"], ["Y"], axis=-1, epsilon=1e-5))
    t_shape = [shape[p] for p in perm]
    nodes.append(n("Transpose", ["Y"], ["YT" if reshape is None else "Yt"], perm=list(perm)))
    if reshape is not None:
        inits.append(_init("rs", np.array(reshape), np.int64))
        nodes.append(n("Reshape", ["Yt", "rs"], ["YT"]))
    out_t = t_shape if reshape is None else [d if d > 0 else None for d in reshape]
    return _model(nodes, [helper.make_tensor_value_info("X", TensorProto.FLOAT, list(shape))],
                  [helper.make_tensor_value_info("Y", TensorProto.FLOAT, list(shape)),
                   helper.make_tensor_value_info("YT", TensorProto.FLOAT, out_t)], inits)


def gemm_layernorm_transposed(M=5, K=24, N=32, dtype=TensorProto.FLOAT) -> onnx.ModelProto:
    """X[M, K] @ W + bias + residual -> LayerNorm -> Y, and Transpose(Y) as output YT (fp32 or fp16)."""
    rng = np.random.default_rng(1)
    n = helper.make_node
    npt = np.float16 if dtype == TensorProto.FLOAT16 else np.float32
    inits = [_init("W", rng.standard_normal((K, N)) / np.sqrt(K), npt), _init("B", rng.standard_normal(N), npt),
             _init("g", 1 + 0.5 * rng.standard_normal(N), npt), _init("b", rng.standard_normal(N), npt)]
    nodes = [n("MatMul", ["X", "W"], ["mm"]), n("Add", ["mm", "B"], ["mb"]), n("Add", ["mb", "Res"], ["s"]),
             n("LayerNormalization", ["s", "g", "b"], ["Y"], axis=-1, epsilon=1e-5),
             n("Transpose", ["Y"], ["YT"], perm=[1, 0])]
    return _model(nodes, [helper.make_tensor_value_info("X", dtype, [M, K]),
                          helper.make_tensor_value_info("Res", dtype, [M, N])],
                  [helper.make_tensor_value_info("Y", dtype, [M, N]),
                   helper.make_tensor_value_info("YT", dtype, [N, M])], inits)


def square_mixed(kind="transposed_product", H=8) -> onnx.ModelProto:
    """Square rows where an output element needs statistics of two rows: Y * Transpose(Y), or X minus a
    keepdims=0 ReduceMean broadcast along the columns (mean[j] for element (i, j)). No row kernel can
    compute these; they must stay unfused (ONNX Runtime runs them)."""
    n = helper.make_node
    inits = [_init("ax", np.array([-1]), np.int64), _init("g", 1 + 0.5 * np.random.default_rng(3).standard_normal(H))]
    if kind == "transposed_product":
        nodes = [n("LayerNormalization", ["X", "g"], ["Y"], axis=-1, epsilon=1e-5),
                 n("Transpose", ["Y"], ["Yt"], perm=[1, 0]), n("Mul", ["Y", "Yt"], ["Z"])]
    else:
        nodes = [n("ReduceMean", ["X", "ax"], ["mu"], keepdims=0), n("Sub", ["X", "mu"], ["Z"])]
    return _model(nodes, [helper.make_tensor_value_info("X", TensorProto.FLOAT, [H, H])],
                  [helper.make_tensor_value_info("Z", TensorProto.FLOAT, [H, H])], inits)


def feeds(model: onnx.ModelProto, sizes=None, seed=2) -> dict:
    """Random inputs for `model`; symbolic dims from `sizes` (name -> int)."""
    rng = np.random.default_rng(seed)
    out = {}
    for vi in model.graph.input:
        tt = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else sizes[d.dim_param] for d in tt.shape.dim]
        npt = np.float16 if tt.elem_type == TensorProto.FLOAT16 else np.float32
        out[vi.name] = (1.5 * rng.standard_normal(dims) + 0.3).astype(npt)
    return out
