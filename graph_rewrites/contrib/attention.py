"""Attention-family contrib ops: Attention (BERT's fused Q/K/V projection + attention), MultiHeadAttention,
RotaryEmbedding, and the pieces GroupQueryAttention shares (gqa.py).

The expansions are written in the form the warehouse matches for exported models: three sibling
projections MatMul(x, W_q|k|v) + bias -> Reshape [B,S,N,D] -> Transpose [B,N,S,D] (the `gemm_group`
pattern groups them into one launch), then softmax(Q·Kᵀ·scale + masks)·V -> Transpose -> Reshape (the
`attention` pattern). ORT's CPU kernels are the reference for every choice below (tests compare them on
random inputs): masks *add* `mask_filter_value` (default -10000) to the scores of masked keys."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

from .emit import Emitter, Refused, attr, inp, np_dtype, out


# ---- the attention core --------------------------------------------------------------------------
def repeat_kv(e: Emitter, x, groups: int, heads: int, head_size: int):
    """[B, Nkv, T, D] -> [B, Nkv·groups, T, D], each K/V head shared by `groups` query heads (the
    Unsqueeze/Expand/Reshape form of transformers' repeat_kv, which the attention template folds into its
    loads)."""
    if groups == 1:
        return x
    wide = e.op("Expand", e.unsqueeze(x, [2]), e.ints([1, 1, groups, 1, 1]))
    return e.reshape(wide, [0, heads, -1, head_size])


def attend(e: Emitter, q, k, v, dt: int, scale: float, masks, y, softcap: float = 0.0):
    """softmax(q·kᵀ·scale [+ masks]) · v for q [B,N,S,D], k/v [B,N,T,D] of element type `dt`; written to
    `y` as [B,S,N·Dv]. `softcap` > 0: scores become softcap·tanh(scores/softcap) before the masks."""
    scores = e.op("Mul", e.op("MatMul", q, e.op("Transpose", k, perm=[0, 1, 3, 2])), e.scalar(scale, dt))
    if softcap:
        scores = e.op("Mul", e.op("Tanh", e.op("Div", scores, e.scalar(softcap, dt))), e.scalar(softcap, dt))
    for m in masks:
        scores = e.op("Add", scores, m)
    probs = e.op("Softmax", scores, axis=-1)
    ctx = e.op("Transpose", e.op("MatMul", probs, v), perm=[0, 2, 1, 3])
    return e.reshape(ctx, [0, 0, -1]) if y is None else e.op("Reshape", ctx, e.ints([0, 0, -1]), out=y)


def to_heads(e: Emitter, x, heads: int, head_size: int):
    """[B, S, N·D] -> [B, N, S, D]."""
    return e.op("Transpose", e.reshape(x, [0, 0, heads, head_size]), perm=[0, 2, 1, 3])


def seq_range(e: Emitter, x, axis: int = 1):
    """int64 [L] = 0..x.shape[axis]-1 (a shape computation: ORT runs it, no data kernel)."""
    return e.op("Range", e.ints(0), e.dim_scalar(x, axis), e.ints(1))


def additive(e: Emitter, keep, dtype: int, filter_value: float):
    """0 where `keep` is true, `filter_value` elsewhere, in `dtype`."""
    return e.op("Where", keep, e.scalar(0.0, dtype), e.scalar(filter_value, dtype))


def _sym(facts, t, axis):
    s = facts.shape.get(t)
    if s is None or not -len(s) <= axis < len(s) or s[axis] is None or str(s[axis]).startswith("?"):
        return None
    return str(s[axis])


def key_mask(e: Emitter, mask, keys, batch_of, dtype: int, filter_value: float, what: str):
    """The additive key mask [B,1,1,T] (or [B,1,S,T] for a 3-D mask) of ORT's mask forms: 1-D [B] end
    positions, 1-D [2B] end and start positions, 2-D [B,T] raw (0 = masked), 3-D [B,S,T] raw. `keys`:
    (tensor, axis) whose extent is the key length T. Shared between the nodes reading the same mask."""
    rank = e.facts.rank(mask)
    if rank is None:
        raise Refused(f"the rank of {what} '{mask}' is unknown")
    if rank == 1:
        b = _sym(e.facts, batch_of, 0)
        m = _sym(e.facts, mask, 0)
        if b is None or m is None:
            raise Refused(f"cannot tell whether {what} '{mask}' is [batch] or [2*batch] (dims unknown)")
        if m == b:
            kind = "end"
        elif m.replace(" ", "") in (f"2*{b}", f"{b}*2") or (b.isdigit() and m == str(2 * int(b))):
            kind = "end_start"
        else:
            raise Refused(f"{what} '{mask}' is 1-D of {m}, neither [batch] ({b}) nor [2*batch]")
    elif rank in (2, 3):
        kind = f"raw{rank}"
    else:
        raise Refused(f"{what} '{mask}' of rank {rank} (the 4-D Megatron mask does not expand)")
    tsym = _sym(e.facts, *keys) or keys

    def make():
        if kind.startswith("raw"):
            keep = e.op("Greater", mask, e.const(np.zeros((), np_dtype(e.facts.dtype.get(mask, TensorProto.INT32)))))
            m = additive(e, keep, dtype, filter_value)
            return e.unsqueeze(m, [1, 2] if rank == 2 else [1])
        t = seq_range(e, *keys)                                            # [T]
        m64 = e.cast(mask, TensorProto.INT64, e.facts.dtype.get(mask))
        if kind == "end":
            end = e.unsqueeze(m64, [1])                                    # [B,1]
            keep = e.op("Less", t, end)
        else:
            halves = e.reshape(m64, [2, -1])                               # [2,B]: end then start
            end = e.unsqueeze(e.op("Gather", halves, e.ints(0), axis=0), [1])
            start = e.unsqueeze(e.op("Gather", halves, e.ints(1), axis=0), [1])
            keep = e.op("And", e.op("Less", t, end), e.op("Not", e.op("Less", t, start)))
        return e.unsqueeze(additive(e, keep, dtype, filter_value), [1, 2])   # [B,1,1,T]

    return e.shared(("key_mask", mask, kind, tsym, dtype, float(filter_value)), make)


def causal_mask(e: Emitter, queries, keys, past, dtype: int, filter_value: float):
    """[S,T] additive: key t is masked for query s when t > s + past (past: an int64 scalar tensor or
    None for 0). `queries`, `keys`: (tensor, axis) whose extents are S and T."""
    def make():
        s = e.unsqueeze(seq_range(e, *queries), [1])                       # [S,1]
        t = seq_range(e, *keys)                                            # [T]
        limit = s if past is None else e.op("Add", s, past)
        return additive(e, e.op("LessOrEqual", t, limit), dtype, filter_value)
    key = ("causal", _sym(e.facts, *queries) or queries, _sym(e.facts, *keys) or keys, past, dtype,
           float(filter_value))
    return e.shared(key, make)


# ---- Attention (BERT) ----------------------------------------------------------------------------
def _split_columns(e: Emitter, t, sizes):
    """Column blocks of a [K, N] weight (or an [N] bias): constant slices when `t` is a constant, else
    Slice nodes."""
    arr = e.facts.const.get(t)
    bounds = np.cumsum([0] + list(sizes))
    if arr is not None:
        return [e.const(np.ascontiguousarray(arr[..., a:b])) for a, b in zip(bounds[:-1], bounds[1:])]
    return [e.slice(t, int(a), int(b), -1) for a, b in zip(bounds[:-1], bounds[1:])]


def attention(e: Emitter):
    """Attention(input, weights, bias, mask_index, past, attention_bias): the Q/K/V projections of one
    packed weight, then multi-head attention with ORT's mask forms and optional causal masking."""
    n = e.node
    x, w, b, mask, past, bias_add = (inp(n, k) for k in range(6))
    if past or inp(n, 6):
        raise Refused("it has a past state input (GPT-2-style cache); only cache-free Attention expands")
    if out(n, 1):
        raise Refused("its present output is used; only cache-free Attention expands")
    if attr(n, "do_rotary", 0):
        raise Refused("do_rotary=1 (rotary inside Attention does not expand)")
    dt = e.need_float(x)
    heads = int(attr(n, "num_heads"))
    if e.facts.rank(x) != 3:
        raise Refused(f"input of rank {e.facts.rank(x)}; Attention takes [batch, seq, hidden]")
    width = e.facts.dim(w, 1)
    sizes = attr(n, "qkv_hidden_sizes")
    sizes = [int(s) for s in sizes] if sizes else ([width // 3] * 3 if width else None)
    if sizes is None or any(s % heads for s in sizes):
        raise Refused(f"Q/K/V widths {sizes} unknown or not divisible by num_heads={heads}")
    dq, dv = sizes[0] // heads, sizes[2] // heads
    if sizes[0] != sizes[1]:
        raise Refused(f"Q width {sizes[0]} != K width {sizes[1]}")
    ws = _split_columns(e, w, sizes)
    bs = _split_columns(e, b, sizes) if b else [None] * 3
    proj = []
    for wk, bk, d in zip(ws, bs, (dq, dq, dv)):
        y = e.op("MatMul", x, wk)
        if bk is not None:
            y = e.op("Add", y, bk)
        proj.append(to_heads(e, y, heads, d))
    filt = float(attr(n, "mask_filter_value", -10000.0))
    masks = []
    if mask:
        masks.append(key_mask(e, mask, (x, 1), x, dt, filt, "mask_index"))
    if attr(n, "unidirectional", 0):
        masks.append(causal_mask(e, (x, 1), (x, 1), None, dt, filt))
    if bias_add:
        masks.append(bias_add)
    scale = attr(n, "scale", 0.0) or 1.0 / np.sqrt(dq)
    attend(e, proj[0], proj[1], proj[2], dt, float(scale), masks, out(n, 0))


# ---- MultiHeadAttention --------------------------------------------------------------------------
def multi_head_attention(e: Emitter):
    """MultiHeadAttention(query, key, value, bias, key_padding_mask, attention_bias, past_key, past_value):
    separate Q/K/V [B,S,N·D] (or K/V already [B,N,L,D]), optional packed bias, past concatenated into
    present_key/present_value."""
    n = e.node
    q, k, v, bias, kpm, bias_add, pk, pv = (inp(n, i) for i in range(8))
    if inp(n, 8) or inp(n, 9) or out(n, 3):
        raise Refused("past_sequence_length / cache_indirection / qk output (decoder-masked forms) do not expand")
    if k is None or v is None:
        raise Refused("packed Q/K/V (key and value absent) does not expand")
    dt = e.need_float(q)
    heads = int(attr(n, "num_heads"))
    rq, rk = e.facts.rank(q), e.facts.rank(k)
    if rq != 3 or rk not in (3, 4) or e.facts.rank(v) != rk:
        raise Refused(f"query rank {rq}, key rank {rk}: only [B,S,N·D] query with [B,L,N·D] or [B,N,L,D] "
                      "key/value expand (packed forms do not)")
    hq = e.facts.dim(q, 2)
    if hq is None or hq % heads:
        raise Refused(f"query width {hq} unknown or not divisible by num_heads={heads}")
    d = hq // heads
    if rk == 4:
        if bias or pk:
            raise Refused("bias or past with key/value in [B,N,L,D] form does not expand")
        hv = e.facts.dim(v, 3)
        kh, vh = k, v
    else:
        hk, hv_full = e.facts.dim(k, 2), e.facts.dim(v, 2)
        if hk is None or hv_full is None or hk != hq or hv_full % heads:
            raise Refused(f"key width {hk} / value width {hv_full} do not fit num_heads={heads}")
        hv = hv_full // heads
        if bias:
            bq, bk, bv = _split_columns(e, bias, [hq, hk, hv_full])
            q, k, v = e.op("Add", q, bq), e.op("Add", k, bk), e.op("Add", v, bv)
        kh, vh = to_heads(e, k, heads, d), to_heads(e, v, heads, hv)
    qh = to_heads(e, q, heads, d)
    past_len = None
    if pk or pv:
        if not (pk and pv):
            raise Refused("past_key and past_value must both be given")
        kh = e.op("Concat", pk, kh, axis=2, out=out(n, 1))
        vh = e.op("Concat", pv, vh, axis=2, out=out(n, 2))
        past_len = e.dim_scalar(pk, 2)
    else:
        for j, t in ((1, kh), (2, vh)):
            if out(n, j):
                e.op("Identity", t, out=out(n, j))
    keys = (kh, 2)
    filt = float(attr(n, "mask_filter_value", -10000.0))
    masks = []
    if kpm:
        masks.append(key_mask(e, kpm, keys, q, dt, filt, "key_padding_mask"))
    if attr(n, "unidirectional", 0):
        masks.append(causal_mask(e, (q, 1), keys, past_len, dt, filt))
    if bias_add:
        masks.append(bias_add)
    scale = attr(n, "scale", 0.0) or 1.0 / np.sqrt(d)
    attend(e, qh, kh, vh, dt, float(scale), masks, out(n, 0))


# ---- rotary ---------------------------------------------------------------------------------------
def rotate(e: Emitter, x, cos, sin, rot: int, head: int, interleaved: bool, rank: int = 4):
    """Rotary embedding of the last axis of x (head size `head`, the first `rot` dims rotated; the rest pass
    through). cos/sin broadcast against x's leading axes with rot/2 values in the last."""
    half = rot // 2
    parts = []
    if not interleaved:
        x1, x2 = e.slice(x, 0, half, -1), e.slice(x, half, rot, -1)
        parts += [e.op("Sub", e.op("Mul", x1, cos), e.op("Mul", x2, sin)),
                  e.op("Add", e.op("Mul", x2, cos), e.op("Mul", x1, sin))]
        rotated = None
    else:
        head_part = x if rot == head else e.slice(x, 0, rot, -1)
        pairs = e.reshape(head_part, [0] * (rank - 1) + [half, 2])
        xe, xo = e.slice(pairs, 0, 1, -1), e.slice(pairs, 1, 2, -1)
        c, s = e.unsqueeze(cos, [-1]), e.unsqueeze(sin, [-1])
        ye = e.op("Sub", e.op("Mul", xe, c), e.op("Mul", xo, s))
        yo = e.op("Add", e.op("Mul", xo, c), e.op("Mul", xe, s))
        rotated = e.reshape(e.op("Concat", ye, yo, axis=-1), [0] * (rank - 1) + [rot])
        parts.append(rotated)
    if rot < head:
        parts.append(e.slice(x, rot, head, -1))
    return parts[0] if len(parts) == 1 else e.op("Concat", *parts, axis=-1)


def rotary_embedding(e: Emitter):
    """RotaryEmbedding(input, position_ids, cos_cache, sin_cache): input [B,S,N·H] or [B,N,S,H]; position
    ids [B,S] (or one start offset); the first rotary_embedding_dim dims of each head rotated."""
    n = e.node
    x, pos, cos_cache, sin_cache = (inp(n, k) for k in range(4))
    if attr(n, "is_packed_batching", 0):
        raise Refused("is_packed_batching=1 does not expand")
    if float(attr(n, "scale", 1.0)) != 1.0:
        raise Refused(f"scale={attr(n, 'scale')} (only 1.0 expands)")
    e.need_float(x)
    rank = e.facts.rank(x)
    half = e.facts.dim(cos_cache, 1)
    if rank not in (3, 4) or half is None:
        raise Refused(f"input rank {rank} / cos_cache width unknown")
    rot = int(attr(n, "rotary_embedding_dim", 0)) or 2 * half
    heads = int(attr(n, "num_heads", 0))
    if rank == 4:
        head = e.facts.dim(x, 3)
    else:
        width = e.facts.dim(x, 2)
        if width is None:
            raise Refused("input width unknown")
        head = width // heads if heads else rot
        heads = width // head
    if head is None or rot != 2 * half or rot > head:
        raise Refused(f"rotary dim {rot} / head size {head} / cache width {half} do not fit")
    prank = e.facts.rank(pos)
    if prank == 2:
        ids = pos
    elif prank == 1:            # one start offset: positions offset + 0..S-1
        seq_axis = 2 if rank == 4 else 1
        ids = e.unsqueeze(e.op("Add", seq_range(e, x, seq_axis), pos), [0])
    else:
        raise Refused(f"position_ids of rank {prank}")
    cos = e.op("Gather", cos_cache, ids, axis=0)          # [B,S,half]
    sin = e.op("Gather", sin_cache, ids, axis=0)
    if rank == 4:                                          # [B,N,S,H]: cos [B,1,S,half]
        cos, sin = e.unsqueeze(cos, [1]), e.unsqueeze(sin, [1])
        xs = x
    else:                                                  # [B,S,N,H]: cos [B,S,1,half]
        cos, sin = e.unsqueeze(cos, [2]), e.unsqueeze(sin, [2])
        xs = e.reshape(x, [0, 0, heads, head])
    y = rotate(e, xs, cos, sin, rot, head, bool(attr(n, "interleaved", 0)))
    if rank == 4:
        e.op("Identity", y, out=out(n, 0))
    else:
        e.op("Reshape", y, e.ints([0, 0, -1]), out=out(n, 0))
