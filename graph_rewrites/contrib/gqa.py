"""GroupQueryAttention (onnxruntime-genai's attention): packed or separate Q/K/V, rotary from cos/sin
caches, the KV cache update, grouped heads, causal (and sliding-window) masking.

The semantics, per batch row b (ORT's CPU kernel is the reference; tests compare it on random inputs):

* ``total_b = seqlens_k[b] + 1`` tokens are valid after this step; ``past_b = max(total_b - S, 0)`` of
  them come from the cache (0 for a first prompt, where a shorter row is padding at the end).
* New token s of row b sits at position ``past_b + s``; rotary uses that position (padding included).
* ``present[b, :, t]`` is ``past[b, :, t]`` for ``t < past_b``, the new K/V ``t - past_b`` for
  ``past_b <= t < past_b + S``, and 0 after (one formula for ORT's two cache layouts: a growing cache,
  where present is the past followed by the new tokens, and a shared buffer, where past and present are
  one preallocated ``max_length`` buffer and the new tokens go in place at ``past_b``).
* ORT sizes present ``max(total_sequence_length, P)`` (P = the past's length), a value known only at run
  time; kernels need a dim the launcher can bind, so the expansion picks the layout when it expands:
  the shared buffer (present length P) when the model's graph inputs and outputs declare present's
  length as the past's (the same dim), or when
  total_sequence_length is a constant not above P; otherwise the growing cache, P + S, which is ORT's
  length whenever total_sequence_length = past + new tokens, i.e. how onnxruntime-genai and every caller
  of a growing cache drive it. (Run as a growing cache with a max-length past buffer, present would come
  out S rows longer than ORT's, the extra rows zero and never attended: the attention output is the same.)
* Query s attends keys ``t <= past_b + s`` (and ``t > past_b + s - local_window_size`` with a window);
  excluded keys get the dtype's lowest score, so their weight is exactly 0, as ORT excludes them.

The pieces are separate functions so KV-cache decode work can reuse them: `cache_positions` (the per-row
index arithmetic, shared by every layer), `kv_update` (present from past + new), `causal_window_mask`,
and attention.attend / repeat_kv for the grouped softmax(QKᵀ)V."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

from .attention import additive, attend, repeat_kv, rotate, seq_range, to_heads
from .emit import Emitter, Refused, attr, inp, np_dtype, out


class CachePositions:
    """Per-row cache arithmetic of one (seqlens_k, S, P, T) combination, built once per model:
    past [B,1] (past_b), s_pos [B,S] (rotary positions), src/valid [B,T] (where present[t] comes from in
    Concat(past, new) and whether it is defined), t [T] and the total length T."""

    def __init__(self, e: Emitter, seqlens, total, q_bsd, past_k, shared_buffer: bool):
        self.q = (q_bsd, 1)
        S = e.dim_scalar(q_bsd, 1)                                   # int64 scalars: S, P, T
        b_valid = e.op("Add", e.cast(seqlens, TensorProto.INT64, e.facts.dtype.get(seqlens)), e.ints(1))  # [B]
        past = e.op("Max", e.op("Sub", b_valid, S), e.ints(0))       # [B]
        self.past = e.unsqueeze(past, [1])                           # [B,1]
        s = e.unsqueeze(seq_range(e, q_bsd, 1), [0])                 # [1,S]
        self.s_pos = e.op("Add", self.past, s)                       # [B,S] rotary positions
        self.S = S
        if past_k is None:
            self.P = None
            return
        P = e.dim_scalar(past_k, 2)
        self.P = P
        self.width = e.op("Add", P, S)                               # P + S
        t = e.op("Range", e.ints(0), P if shared_buffer else self.width, e.ints(1))   # [T]
        self.t = t
        before = e.op("Less", t, self.past)                          # [B,T]: from the past
        self.valid = e.op("Less", t, e.op("Add", self.past, S))      # [B,T]: defined
        from_new = e.op("Add", e.op("Sub", t, self.past), P)         # index into Concat(past, new)
        src = e.op("Where", before, t, from_new)
        self.src = e.op("Where", self.valid, src, e.ints(0))         # [B,T], in range everywhere


def shared_buffer(e: Emitter, node) -> bool:
    """Whether present is the past's max-length buffer (length P) rather than a growing cache (P + S)."""
    pk, total, present = inp(node, 3), inp(node, 6), out(node, 1)
    if pk is None:
        return False
    tv = e.facts.const.get(total)
    P = e.facts.dim(pk, 2)
    if tv is not None and P is not None:
        return int(np.asarray(tv).reshape(-1)[0]) <= P
    declared, past = e.facts.declared.get(present), e.facts.declared.get(pk)
    if declared and past and len(declared) == 4 and len(past) == 4 and declared[2] is not None:
        return str(declared[2]) == str(past[2])
    return False


def cache_positions(e: Emitter, seqlens, total, q_bsd, past_k, shared: bool = False) -> CachePositions:
    facts = e.facts
    key = ("gqa_cache", seqlens, total, _dim_key(facts, q_bsd, 1), _dim_key(facts, past_k, 2) if past_k else None,
           shared)
    hit = facts.shared.get(key)
    if hit is not None:
        for t in vars(hit).values():
            if isinstance(t, str):
                e.uses_shared.add(t)
        return hit
    start = len(e.nodes)
    cp = CachePositions(e, seqlens, total, q_bsd, past_k, shared)
    facts.shared[key] = cp
    for n in e.nodes[start:]:
        for o in n.output:
            facts.shared_nodes[o] = n
    return cp


def _dim_key(facts, t, axis):
    s = facts.shape.get(t)
    d = s[axis] if s is not None and -len(s) <= axis < len(s) else None
    return str(d) if d is not None and not str(d).startswith("?") else t


def kv_update(e: Emitter, cp: CachePositions, past, new, heads: int, head_size: int, dt: int, y):
    """present [B,N,T,D] = past rows before past_b, the new rows after, zeros beyond (see module doc)."""
    cat = e.op("Concat", past, new, axis=2)                          # [B,N,P+S,D]
    flat = e.reshape(cat, [-1, head_size])                           # [B·N·(P+S), D]
    def row_starts():                                                # [B,N,1]: (b·N + h)·(P + S)
        bn = e.op("Mul", e.dim_scalar(past, 0), e.ints(heads))
        ramp = e.reshape(e.op("Range", e.ints(0), bn, e.ints(1)), [-1, heads, 1])
        return e.op("Mul", ramp, cp.width)
    rows = e.shared(("gqa_rows", id(cp), heads), row_starts)
    idx = e.op("Add", rows, e.unsqueeze(cp.src, [1]))                # [B,N,T]
    gathered = e.op("Gather", flat, idx, axis=0)                     # [B,N,T,D]
    keep = e.unsqueeze(cp.valid, [1, 3])                             # [B,1,T,1]
    return e.op("Where", keep, gathered, e.scalar(0, dt), out=y)


def causal_window_mask(e: Emitter, cp: CachePositions, keys, window: int, dt: int):
    """[B,1,S,T] additive mask: key t allowed for query s iff past_b + s - window < t <= past_b + s."""
    def make():
        s = e.unsqueeze(seq_range(e, *cp.q), [0, 2])                # [1,S,1]
        qpos = e.op("Add", e.unsqueeze(cp.past, [2]), s)             # [B,S,1]
        t = seq_range(e, *keys)                                      # [T]
        keep = e.op("LessOrEqual", t, qpos)
        if window > 0:
            keep = e.op("And", keep, e.op("Greater", t, e.op("Sub", qpos, e.ints(window))))
        return e.unsqueeze(additive(e, keep, dt, float(np.finfo(np_dtype(dt)).min)), [1])
    key = ("gqa_mask", id(cp), _dim_key(e.facts, *keys), window, dt)
    return e.shared(key, make)


def group_query_attention(e: Emitter):
    n = e.node
    q, k, v, pk, pv, seqlens, total, cos_c, sin_c = (inp(n, i) for i in range(9))
    for i, what in ((9, "position_ids"), (10, "attention_bias"), (11, "head_sink")):
        if inp(n, i):
            raise Refused(f"input {i} ({what}) is given; it does not expand")
    if out(n, 3):
        raise Refused("its output_qk is used; it does not expand")
    if attr(n, "smooth_softmax", 0) == 1:     # ORT's kernels: only 1 is smooth; ORT writes its default -1
        raise Refused("smooth_softmax=1 does not expand")
    for name in ("k_quant_type", "v_quant_type"):
        if attr(n, name, b"NONE") not in (b"NONE", "NONE"):
            raise Refused(f"{name}={attr(n, name).decode()!r} (a quantised KV cache) does not expand")
    if attr(n, "causal", 1) != 1:
        raise Refused("causal=0 does not expand (ORT's kernel requires causal=1)")
    if (pk is None) != (pv is None):
        raise Refused("past_key and past_value must both be given or both be absent")
    dt = e.need_float(q)
    heads, kv_heads = int(attr(n, "num_heads")), int(attr(n, "kv_num_heads"))
    if heads % kv_heads:
        raise Refused(f"num_heads={heads} is not a multiple of kv_num_heads={kv_heads}")
    width = e.facts.dim(q, 2)
    packed = k is None
    if width is None or e.facts.rank(q) != 3:
        raise Refused("query must be [batch, seq, width] with a static width")
    d = width // (heads + 2 * kv_heads) if packed else width // heads
    if packed:
        q_, k_, v_ = (e.slice(q, a * d, b * d, -1) for a, b in
                      ((0, heads), (heads, heads + kv_heads), (heads + kv_heads, heads + 2 * kv_heads)))
    else:
        q_, k_, v_ = q, k, v
    qh, kh, vh = to_heads(e, q_, heads, d), to_heads(e, k_, kv_heads, d), to_heads(e, v_, kv_heads, d)
    cp = cache_positions(e, seqlens, total, q, pk, shared_buffer(e, n))
    if attr(n, "do_rotary", 0):
        half = e.facts.dim(cos_c, 1)
        if cos_c is None or sin_c is None or half is None:
            raise Refused("do_rotary=1 without cos_cache/sin_cache of known width")
        cos = e.unsqueeze(e.op("Gather", cos_c, cp.s_pos, axis=0), [1])   # [B,1,S,half]
        sin = e.unsqueeze(e.op("Gather", sin_c, cp.s_pos, axis=0), [1])
        inter = bool(attr(n, "rotary_interleaved", 0))
        qh = rotate(e, qh, cos, sin, 2 * half, d, inter)
        kh = rotate(e, kh, cos, sin, 2 * half, d, inter)
    if pk is None:
        present_k = e.op("Identity", kh, out=out(n, 1)) if out(n, 1) else kh
        present_v = e.op("Identity", vh, out=out(n, 2)) if out(n, 2) else vh
        keys = (kh, 2)
    else:
        present_k = kv_update(e, cp, pk, kh, kv_heads, d, dt, out(n, 1))
        present_v = kv_update(e, cp, pv, vh, kv_heads, d, dt, out(n, 2))
        keys = (present_k, 2)
    mask = causal_window_mask(e, cp, keys, int(attr(n, "local_window_size", -1)), dt)
    groups = heads // kv_heads
    kr = repeat_kv(e, present_k, groups, heads, d)
    vr = repeat_kv(e, present_v, groups, heads, d)
    scale = float(attr(n, "scale", 0.0) or 1.0 / np.sqrt(d))
    attend(e, qh, kr, vr, dt, scale, [mask], out(n, 0), softcap=float(attr(n, "softcap", 0.0)))
