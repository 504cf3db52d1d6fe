"""Normalisations: SkipLayerNormalization, SkipSimplifiedLayerNormalization, SimplifiedLayerNormalization,
EmbedLayerNormalization.

The normalisation itself is the form the warehouse's row patterns are written in: a
LayerNormalization node where the opset has one (17+), else ReduceMean -> Sub -> Mul -> ReduceMean ->
Add(eps) -> Sqrt -> Div -> Mul(gamma) [-> Add(beta)]; RMS norms as Mul(Div(x, Sqrt(Add(ReduceMean(x*x),
eps))), gamma) (the rmsnorm / gemm_rmsnorm patterns). ORT's CPU kernels accumulate in float: a float16 /
bfloat16 input is cast to float first and the result cast back (LayerNormalization does that itself
with stash_type=1)."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from .emit import Emitter, Refused, attr, inp, out


def _gamma_as(e: Emitter, t, dtype):
    """A weight in `dtype`: converted at expansion time when it is a constant, else a Cast node."""
    if t is None or e.facts.dtype.get(t) == dtype:
        return t
    arr = e.facts.const.get(t)
    if arr is not None:
        return e.const(np.asarray(arr).astype(np.float32 if dtype == TensorProto.FLOAT else arr.dtype))
    return e.cast(t, dtype)


def layer_norm(e: Emitter, x, gamma, beta, eps, simplified: bool, y=None):
    """LayerNorm (or RMS norm when `simplified`) over the last axis of x, written to `y`."""
    dt = e.need_float(x)
    if not simplified and e.opset >= 17:
        return e.op("LayerNormalization", x, gamma, beta, out=y, axis=-1, epsilon=float(eps), stash_type=1)
    low = dt in (TensorProto.FLOAT16, TensorProto.BFLOAT16)
    xf = e.cast(x, TensorProto.FLOAT) if low else x
    cdt = TensorProto.FLOAT if low else dt
    if simplified:
        d = xf
    else:
        d = e.op("Sub", xf, e.reduce("ReduceMean", xf, [-1]))
    var = e.reduce("ReduceMean", e.op("Mul", d, d), [-1])
    normed = e.op("Div", d, e.op("Sqrt", e.op("Add", var, e.scalar(eps, cdt))))
    g = _gamma_as(e, gamma, cdt)
    last = not beta
    res = e.op("Mul", normed, g, out=y if last and not low else None)
    if beta:
        res = e.op("Add", res, _gamma_as(e, beta, cdt), out=None if low else y)
    if low:
        res = e.op("Cast", res, out=y, to=dt)
    return res


def _no_stats(node, first_stat: int, names=("mean", "inv_std_var")):
    for k, what in enumerate(names):
        if out(node, first_stat + k):
            raise Refused(f"its output {first_stat + k} ({what}) is used; the expansion computes only the "
                          "normalised output and the sum")


def skip_layer_norm(e: Emitter, simplified: bool):
    """SkipLayerNormalization(input, skip, gamma, beta, bias) / SkipSimplifiedLayerNormalization(input,
    skip, gamma, bias): s = input + skip (+ bias); y = norm(s); output 3 is s."""
    n = e.node
    x, skip, gamma = inp(n, 0), inp(n, 1), inp(n, 2)
    beta = None if simplified else inp(n, 3)
    bias = inp(n, 3 if simplified else 4)
    _no_stats(n, 1)
    if e.facts.rank(x) not in (None, 2, 3):
        raise Refused(f"input of rank {e.facts.rank(x)} (the op takes 2 or 3)")
    s_out = out(n, 3)
    s = e.op("Add", x, skip, out=s_out if bias is None else None)
    if bias is not None:
        s = e.op("Add", s, bias, out=s_out)
    layer_norm(e, s, gamma, beta, attr(n, "epsilon", 1e-12), simplified, y=out(n, 0))


def simplified_layer_norm(e: Emitter):
    """SimplifiedLayerNormalization(X, scale) over the last axis (ORT's RMS norm, default domain)."""
    n = e.node
    x = inp(n, 0)
    rank = e.facts.rank(x)
    axis = attr(n, "axis", -1)
    if rank is None or axis % rank != rank - 1:
        raise Refused(f"axis {axis} is not the last axis (rank {rank}); only last-axis normalisation expands")
    _no_stats(n, 1, ("inv_std_var",))
    layer_norm(e, x, inp(n, 1), None, attr(n, "epsilon", 1e-5), True, y=out(n, 0))


def embed_layer_norm(e: Emitter):
    """EmbedLayerNormalization(input_ids, segment_ids, word, position, segment embeddings, gamma, beta,
    mask, position_ids): LayerNorm(word[ids] + position[pos] + segment[seg]); mask_index = the number of
    1s of each mask row (int32 [B]), zeros without a mask; output 2 is the sum before the norm."""
    n = e.node
    ids, seg_ids, word, pos_emb, seg_emb, gamma, beta = (inp(n, k) for k in range(7))
    mask, pos_ids = inp(n, 7), inp(n, 8)
    if attr(n, "mask_index_type", 1) != 1 and out(n, 1):
        raise Refused(f"mask_index_type {attr(n, 'mask_index_type')} (only the 1-D mask index expands)")
    w = e.op("Gather", word, ids, axis=0)
    if pos_ids is None:
        pos_ids = e.op("Range", e.ints(0), e.dim_scalar(ids, 1), e.ints(1))
    p = e.op("Gather", pos_emb, pos_ids, axis=0)
    total = e.op("Add", w, p)
    if seg_ids is not None and seg_emb is not None:
        total = e.op("Add", total, e.op("Gather", seg_emb, seg_ids, axis=0), out=out(n, 2))
    elif out(n, 2):
        total = e.op("Identity", total, out=out(n, 2))
    layer_norm(e, total, gamma, beta, attr(n, "epsilon", 1e-12), False, y=out(n, 0))
    if out(n, 1):
        if mask is not None:
            e.op("Cast", e.reduce("ReduceSum", mask, [1], keepdims=0), out=out(n, 1), to=TensorProto.INT32)
        else:
            batch = e.dim_of(ids, 0)
            e.op("ConstantOfShape", batch, out=out(n, 1),
                 value=helper.make_tensor("zero", TensorProto.INT32, [1], [0]))
