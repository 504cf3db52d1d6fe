"""Attentions whose causal mask the graph builds itself, as exporters write it, for the causal tile skip
(render.py `causal_offset`, attention.cuh PLUS_HAS_ATTN_CAUSAL): Q [B, H, Sq, D], K and V [B, H, Skv, D] inputs
(K under a Transpose), softmax(Q·Kᵀ·D^-0.5 + causal + key padding)·V with the NaN guard.

Mask forms (`form`):
  equal  torch.onnx's `is_causal`: Where(Equal(Trilu(Expand(1, [Sq, Skv]), k), 0), -inf, 0) added to the scores
  bool   Where(Cast(Trilu(ConstantOfShape([Sq, Skv], 1)), bool), scores, -inf) in the score chain, [1, 1, Sq, Skv]
  min    as `bool` with the float's lowest value as the fill (transformers' eager fill): not skippable
  upper  as `equal` with an upper Trilu (masks the wrong side): not skippable
  input  the bool mask a graph input, Where(mask, 0, -inf) added: not provable, not skippable
  row    as `equal` with the Trilu over [1, Skv] broadcast along the queries: not skippable
  const  the mask a constant [Sq, Skv] initializer, -inf above the diagonal, added (the dynamo exporter folds it)
  lowest as `const` filled with the float's lowest and no padding term (the dynamo exporter's fill): skippable
         in fp32 (every row keeps a visible key); fp16's lowest, -65504, is no proof that exp gives 0
  lowest_pad  as `lowest` with the padding term: a padded row could see no key, not skippable
k = Skv - Sq (bottom-right: query i sees keys j <= i + Skv - Sq), a constant since the shapes are static."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from tests.support.graphs import Graph

SKIPPABLE = ("equal", "bool", "const")
FORMS = ("equal", "bool", "min", "upper", "input", "row", "const", "lowest", "lowest_pad")


def model(form: str, B: int, H: int, Sq: int, Skv: int, D: int, dtype=TensorProto.FLOAT16, k: int | None = None):
    g = Graph(f"causal_{form}", opset=18, ir_version=10)
    npdt = np.float16 if dtype == TensorProto.FLOAT16 else np.float32
    g.input("q", [B, H, Sq, D], dtype)
    g.input("k", [B, H, Skv, D], dtype)
    g.input("v", [B, H, Skv, D], dtype)
    if form != "lowest":
        g.input("pad", [B, 1, 1, Skv], dtype)
    g.init("scale", np.array(D ** -0.5, npdt))
    g.init("zero", np.array(0, npdt))
    g.init("ninf", np.array(-np.inf, npdt))
    g.init("lowest", np.array(np.finfo(npdt).min, npdt))
    g.init("diag", np.array(Skv - Sq if k is None else k, np.int64))
    s = g.op("Mul", g.op("MatMul", "q", g.op("Transpose", "k", perm=[0, 1, 3, 2])), "scale")
    rows = 1 if form == "row" else Sq
    dims = g.init("dims", np.array([rows, Skv], np.int64))
    if form in ("equal", "upper", "row"):
        ones = g.op("Expand", g.init("one", np.array(1.0, npdt)), dims)
        tri = g.op("Trilu", ones, "diag", upper=int(form == "upper"))
        s = g.op("Add", s, g.op("Where", g.op("Equal", tri, "zero"), "ninf", "zero"))
    elif form in ("bool", "min"):
        ones = g.op("ConstantOfShape", dims, value=helper.make_tensor("v", TensorProto.INT64, [1], [1]))
        tri = g.op("Unsqueeze", g.op("Cast", g.op("Trilu", ones, "diag", upper=0), to=TensorProto.BOOL),
                   g.init("axes", np.array([0, 1], np.int64)))
        s = g.op("Where", tri, s, "ninf" if form == "bool" else "lowest")
    elif form in ("const", "lowest", "lowest_pad"):
        c = Skv - Sq if k is None else k
        visible = np.arange(Skv)[None, :] <= np.arange(Sq)[:, None] + c
        fill = -np.inf if form == "const" else np.finfo(npdt).min
        s = g.op("Add", s, g.init("causal_bias", np.where(visible, 0, fill).astype(npdt)))
    elif form == "input":
        g.input("causal", [1, 1, Sq, Skv], TensorProto.BOOL)
        s = g.op("Add", s, g.op("Where", "causal", "zero", "ninf"))
    else:
        raise ValueError(form)
    if form != "lowest":
        s = g.op("Add", s, "pad")
    p = g.op("Softmax", s, axis=-1)
    p = g.op("Where", g.op("IsNaN", p), "zero", p)
    g.op("MatMul", p, "v", out="o")
    g.output("o", [B, H, Sq, D], dtype)
    return g.model()


def feeds(form: str, B: int, H: int, Sq: int, Skv: int, D: int, dtype=TensorProto.FLOAT16, seed: int = 0,
          pad_keys: int = 3) -> dict:
    """Random Q, K, V; the padding mask hides the first `pad_keys` keys of batch row 1 (-inf; left padding: its
    first query rows of a bottom-right mask then see no key) and the last key of row 0 (the float's lowest)."""
    npdt = np.float16 if dtype == TensorProto.FLOAT16 else np.float32
    rng = np.random.default_rng(seed)
    out = {"q": rng.standard_normal((B, H, Sq, D)).astype(npdt), "k": rng.standard_normal((B, H, Skv, D)).astype(npdt),
           "v": rng.standard_normal((B, H, Skv, D)).astype(npdt)}
    pad = np.zeros((B, 1, 1, Skv), npdt)
    pad[0, ..., -1] = np.finfo(npdt).min
    if B > 1:
        pad[1, ..., :pad_keys] = -np.inf
    if form != "lowest":
        out["pad"] = pad
    if form == "input":
        out["causal"] = (np.arange(Skv)[None, :] <= np.arange(Sq)[:, None] + (Skv - Sq))[None, None]
    return out
