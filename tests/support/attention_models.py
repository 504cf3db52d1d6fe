"""Small attention graphs with the variants the role finder must accept or refuse: softmax(Q·Kᵀ·s +
mask) -> [what sits between the Softmax and the PV MatMul] -> ·V -> transpose."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
B, H, S, D = 2, 2, 8, 64

# what sits between the Softmax and the PV MatMul
GUARD = "guard"                  # Where(IsNaN(p), 0, p)
NONE = "none"                    # nothing
WHERE_KEEP = "where_keep"        # Where(keep, p, 0): a post-softmax mask
DROPOUT_TRAIN = "dropout_train"  # Dropout(p, ratio, training_mode=true)
DROPOUT_EVAL = "dropout_eval"    # Dropout(p, ratio, training_mode=false)
SPELLED = "spelled"              # no Softmax node: Exp / ReduceSum / Div (with max subtraction)


def attention_model(variant: str, opset: int = 18):
    """(model, feeds) of one attention block; `mask` is additive [B, 1, 1, S] (0 or -inf)."""
    n = helper.make_node
    nodes = [n("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             n("MatMul", ["q", "kt"], ["s0"]),
             n("Mul", ["s0", "scale"], ["s1"]),
             n("Add", ["s1", "mask"], ["s"])]
    inits = [numpy_helper.from_array(np.array(0.125, np.float32), "scale"),
             numpy_helper.from_array(np.array(0.0, np.float32), "zero")]
    inputs = [helper.make_tensor_value_info(t, F, [B, H, S, D]) for t in ("q", "k", "v")]
    inputs.append(helper.make_tensor_value_info("mask", F, [B, 1, 1, S]))
    if variant == SPELLED:
        inits.append(numpy_helper.from_array(np.array([-1], np.int64), "axes"))
        nodes += [n("ReduceMax", ["s", "axes"], ["mx"], keepdims=1), n("Sub", ["s", "mx"], ["sc"]),
                  n("Exp", ["sc"], ["e"]), n("ReduceSum", ["e", "axes"], ["z"], keepdims=1),
                  n("Div", ["e", "z"], ["p"])]
    else:
        nodes.append(n("Softmax", ["s"], ["p"], axis=-1))
    if variant == GUARD:
        nodes += [n("IsNaN", ["p"], ["nan"]), n("Where", ["nan", "zero", "p"], ["pp"])]
    elif variant == WHERE_KEEP:
        inputs.append(helper.make_tensor_value_info("keep", TensorProto.BOOL, [B, 1, S, S]))
        nodes.append(n("Where", ["keep", "p", "zero"], ["pp"]))
    elif variant in (DROPOUT_TRAIN, DROPOUT_EVAL):
        inits += [numpy_helper.from_array(np.array(0.1, np.float32), "ratio"),
                  numpy_helper.from_array(np.array(variant == DROPOUT_TRAIN), "training")]
        nodes.append(n("Dropout", ["p", "ratio", "training"], ["pp"]))
    else:
        nodes.append(n("Identity", ["p"], ["pp"]))
    nodes += [n("MatMul", ["pp", "v"], ["o"]), n("Transpose", ["o"], ["y"], perm=[0, 2, 1, 3])]
    g = helper.make_graph(nodes, "attention", inputs, [helper.make_tensor_value_info("y", F, [B, S, H, D])],
                          inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10                 # what onnxruntime 1.31 reads
    rng = np.random.default_rng(0)
    feeds = {t: rng.standard_normal((B, H, S, D)).astype(np.float32) for t in ("q", "k", "v")}
    mask = np.zeros((B, 1, 1, S), np.float32)
    mask[0, ..., S // 2:] = -np.inf
    mask[1] = -np.inf                      # batch 1: every key masked (fully masked rows)
    feeds["mask"] = mask
    if variant == WHERE_KEEP:
        feeds["keep"] = rng.random((B, 1, S, S)) > 0.3
    return model, feeds
