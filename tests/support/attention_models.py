"""Small attention graphs with the variants the role finder must accept or refuse: softmax(Q·Kᵀ·s +
mask) -> [what sits between the Softmax and the PV MatMul] -> ·V -> transpose."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

from tests.support.graphs import Graph

F = TensorProto.FLOAT
B, H, S, D = 2, 2, 8, 64

# what sits between the Softmax and the PV MatMul
GUARD = "guard"                  # Where(IsNaN(p), 0, p)
NONE = "none"                    # nothing
WHERE_KEEP = "where_keep"        # Where(keep, p, 0): a post-softmax mask
DROPOUT_TRAIN = "dropout_train"  # Dropout(p, ratio, training_mode=true)
DROPOUT_EVAL = "dropout_eval"    # Dropout(p, ratio, training_mode=false)
SPELLED = "spelled"              # no Softmax node: Exp / ReduceSum / Div (with max subtraction)


def attention_model(variant: str, opset: int = 18, S: int = S, logit_scale: float = 1.0, key_major: bool = False):
    """(model, feeds) of one attention block; `mask` is additive [B, 1, 1, S] (0 or -inf): batch 0 sees its
    first S // 2 keys, batch 1 none. `logit_scale` multiplies q (scores of standard deviation about
    logit_scale: a peaky softmax above 1). `key_major`: K comes as the input kt = Kᵀ [B, H, D, S] (a
    materialised Kᵀ, the key index contiguous) instead of k [B, H, S, D] through a Transpose."""
    g = Graph("attention", opset=opset, ir_version=10)   # IR 10: what onnxruntime 1.31 reads
    for t in ("q", "k", "v"):
        if t == "k" and key_major:
            g.input("kt", [B, H, D, S])
        else:
            g.input(t, [B, H, S, D])
    g.input("mask", [B, 1, 1, S])
    g.init("scale", np.array(0.125, np.float32))
    g.init("zero", np.array(0.0, np.float32))
    if not key_major:
        g.op("Transpose", "k", out="kt", perm=[0, 1, 3, 2])
    g.op("MatMul", "q", "kt", out="s0")
    g.op("Mul", "s0", "scale", out="s1")
    g.op("Add", "s1", "mask", out="s")
    if variant == SPELLED:
        g.init("axes", np.array([-1], np.int64))
        g.op("ReduceMax", "s", "axes", out="mx", keepdims=1)
        g.op("Sub", "s", "mx", out="sc")
        g.op("Exp", "sc", out="e")
        g.op("ReduceSum", "e", "axes", out="z", keepdims=1)
        g.op("Div", "e", "z", out="p")
    else:
        g.op("Softmax", "s", out="p", axis=-1)
    if variant == GUARD:
        g.op("IsNaN", "p", out="nan")
        g.op("Where", "nan", "zero", "p", out="pp")
    elif variant == WHERE_KEEP:
        g.input("keep", [B, 1, S, S], TensorProto.BOOL)
        g.op("Where", "keep", "p", "zero", out="pp")
    elif variant in (DROPOUT_TRAIN, DROPOUT_EVAL):
        g.init("ratio", np.array(0.1, np.float32))
        g.init("training", np.array(variant == DROPOUT_TRAIN))
        g.op("Dropout", "p", "ratio", "training", out="pp")
    else:
        g.op("Identity", "p", out="pp")
    g.op("MatMul", "pp", "v", out="o")
    g.op("Transpose", "o", out="y", perm=[0, 2, 1, 3])
    g.output("y", [B, S, H, D])
    model = g.model()
    rng = np.random.default_rng(0)
    feeds = {t: rng.standard_normal((B, H, S, D)).astype(np.float32) for t in ("q", "k", "v")}
    feeds["q"] = (feeds["q"] * np.float32(logit_scale)).astype(np.float32)
    if key_major:
        feeds["kt"] = np.ascontiguousarray(feeds.pop("k").transpose(0, 1, 3, 2))
    mask = np.zeros((B, 1, 1, S), np.float32)
    mask[0, ..., S // 2:] = -np.inf
    mask[1] = -np.inf                      # batch 1: every key masked (fully masked rows)
    feeds["mask"] = mask
    if variant == WHERE_KEEP:
        feeds["keep"] = rng.random((B, 1, S, S)) > 0.3
    return model, feeds
