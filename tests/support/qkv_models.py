"""Q/K/V projection models for the horizontal GEMM group tests: one input X [batch, seq, H] read by
sibling MatMul (+bias) + head Reshape + Transpose branches, K optionally stored transposed (Kᵀ, as BERT
exports feed QKᵀ), a projection with a smaller N (GQA K/V), a branch whose result feeds another."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

H, HEADS = 32, 2


def qkv_model(dtype=TensorProto.FLOAT, projections=(("q", H, False), ("k", H, True), ("v", H, False)),
              bias=True, chain=False) -> onnx.ModelProto:
    """`projections`: (name, N, store transposed); each output is [batch, N/hd, seq, hd] (Kᵀ:
    [batch, N/hd, hd, seq]). `chain`: the last projection reads the first one's output instead of X."""
    rng = np.random.default_rng(7)
    np_dt = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16}[dtype]
    hd = H // HEADS
    nodes, inits, outs = [], [], []
    for k, (name, n, trans) in enumerate(projections):
        x = "X"
        if chain and k == len(projections) - 1:
            x = f"{projections[0][0]}_flat"
        inits.append(numpy_helper.from_array((rng.standard_normal((H, n)) / 6).astype(np_dt), f"W{name}"))
        y = f"{name}_mm"
        nodes.append(helper.make_node("MatMul", [x, f"W{name}"], [y], name=f"{name}/MatMul"))
        if bias:
            inits.append(numpy_helper.from_array(rng.standard_normal(n).astype(np_dt), f"B{name}"))
            nodes.append(helper.make_node("Add", [y, f"B{name}"], [f"{name}_b"], name=f"{name}/Add"))
            y = f"{name}_b"
        if chain and k == 0:
            nodes.append(helper.make_node("Identity", [y], [f"{name}_flat"], name=f"{name}/Identity"))
            y = f"{name}_flat"
        inits.append(numpy_helper.from_array(np.array([0, 0, n // hd, hd], np.int64), f"S{name}"))
        nodes.append(helper.make_node("Reshape", [y, f"S{name}"], [f"{name}_r"], name=f"{name}/Reshape"))
        nodes.append(helper.make_node("Transpose", [f"{name}_r"], [name.upper()], name=f"{name}/Transpose",
                                      perm=[0, 2, 3, 1] if trans else [0, 2, 1, 3]))
        dims = ["batch", n // hd, hd, "seq"] if trans else ["batch", n // hd, "seq", hd]
        outs.append(helper.make_tensor_value_info(name.upper(), dtype, dims))
    g = helper.make_graph(nodes, "qkv", [helper.make_tensor_value_info("X", dtype, ["batch", "seq", H])],
                          outs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def siblings_model(count: int, n: int = 16) -> onnx.ModelProto:
    """`count` MatMul + Add siblings on X [batch, seq, H], each output a graph output."""
    return qkv_model(projections=tuple((f"p{k}", n, False) for k in range(count)))


def nonconvex_model() -> onnx.ModelProto:
    """Q and K read X, but K's bias add also reads ReduceSum(Q): a path from Q through a row reduction
    (its own subgraph) back into K, so the union of the two is not convex."""
    rng = np.random.default_rng(3)
    w = {k: numpy_helper.from_array((rng.standard_normal((H, H)) / 6).astype(np.float32), k) for k in ("Wq", "Wk")}
    nodes = [helper.make_node("MatMul", ["X", "Wq"], ["Q"], name="q/MatMul"),
             helper.make_node("ReduceSum", ["Q", "axes"], ["qs"], keepdims=1, name="q/ReduceSum"),
             helper.make_node("MatMul", ["X", "Wk"], ["km"], name="k/MatMul"),
             helper.make_node("Add", ["km", "qs"], ["K"], name="k/Add")]
    vi = helper.make_tensor_value_info
    g = helper.make_graph(nodes, "nonconvex", [vi("X", TensorProto.FLOAT, ["batch", "seq", H])],
                          [vi("Q", TensorProto.FLOAT, ["batch", "seq", H]), vi("K", TensorProto.FLOAT, ["batch", "seq", H])],
                          [*w.values(), numpy_helper.from_array(np.array([-1], np.int64), "axes")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
