"""Attention subgraphs: MatMul(Q, Kᵀ) -> score ops (scale, masks) -> Softmax -> NaN guard ->
MatMul(P, V) -> stores (transpose/reshape), for the FlashAttention-style template. The nodes of each
role come from identification (Subgraph.roles: AttentionRoles, the family's graph half).
Q, K and V are pulled through whatever produces them inside the subgraph (scaling, RoPE, GQA expand),
the score hook is everything between the first MatMul and the Softmax, the output hook is pushed forward. Between the Softmax and
the PV MatMul only what the role finder accepted sits: Identity, Cast to a float type, Dropout at
inference, the NaN guard, which decides what a fully masked row gives (0, else NaN), and a per-tensor
quantization of the probabilities (the probability hook, applied to exact probabilities in a second pass).

A decoder's KV cache (`kv_cache`): when K and V are grouped-query repetitions of Concat(past, new) along
the keys, and those concatenations are the subgraph's `present` outputs, the kernel reads the past and
the new rows itself, indexed by KV head, and stores present from its shared tiles (attention.cuh
PLUS_ATTN_KV_CACHE): no side kernel copies the cache. Small query counts (G * Sq <= 16: a decode step)
then take a packed, split-KV route (`decode_route`)."""
from __future__ import annotations

import re
from dataclasses import dataclass

import sympy

from ...codegen import cexpr, dtypes, symdim
from ...routes import ALWAYS, NoConfig, _usable, sm_count
from ...wire.plan import tmap
from . import routes
from ...codegen.forward import bind_forward, emit_stores, forward_map
from ...codegen.pull import RenderError, attr, describe
from ....warehouse.families.flash_attention import AttentionRoles

ENTRY, COMBINE_ENTRY = "plus_attention", "plus_attention_combine"    # the kernels attention.cuh defines


def _structure(job):
    """The QKᵀ MatMul, the Softmax and the PV MatMul from the roles identification found (the family's role
    finder refused every subgraph whose nodes this renderer would not read); whether the graph guards fully
    masked rows (Where(IsNaN(p), 0, p))."""
    roles = job.roles
    if not isinstance(roles, AttentionRoles):
        raise RenderError(f"{job.node_name}: the attention template needs the roles its family finds "
                          "(q, k, v, qk, softmax, pv)")
    nodes = job.view.nodes
    return nodes[roles.qk], nodes[roles.softmax], nodes[roles.pv], roles.nan_guard


@dataclass
class KVCache:
    """The cache form of an attention: present K/V (Concat outputs) and what the kernel needs of them."""
    k: str                 # present K: Concat(past K, new K) along the keys, [B, Hkv, P + S, D]
    v: str
    k_past: str            # the subgraph inputs holding the past
    v_past: str
    hkv: int               # KV heads
    group: int             # query heads per KV head
    past: object           # P (sympy)
    k_scale: float = 1.0   # K as the QKᵀ MatMul reads it = k_scale * present K (moved into the scores)


def _past_source(job, t):
    """The subgraph input `t` copies: itself, or through Identity and one-input Concat nodes of the subgraph
    (transformers' cache concatenates layer 0's past with an empty tensor; TorchScript keeps a Concat of
    one input); None when `t` is computed."""
    producers = {o: n for n in job.nodes for o in n.output}
    while t not in job.inputs:
        n = producers.get(t)
        if n is None or not (n.op_type == "Identity" or (n.op_type == "Concat" and len([i for i in n.input if i]) == 1)):
            return None
        t = next(i for i in n.input if i)
    return t


def _cache_concats(job, em, D):
    """Concat nodes of the subgraph that build a KV cache: two inputs along axis 2 of a rank-4 tensor, the
    first a copy of a subgraph input (the past), the output a subgraph output (present) [B, Hkv, P + S, D].
    Returns {present: (node, past input)}."""
    out = {}
    for n in job.nodes:
        if n.op_type != "Concat" or len([i for i in n.input if i]) != 2 or n.output[0] not in job.outputs:
            continue
        shape = em.shape(n.output[0])
        past = _past_source(job, n.input[0])
        if len(shape) != 4 or attr(n, "axis") not in (2, -2) or past is None:
            continue
        if not (shape[1].is_Integer and shape[3].is_Integer and int(shape[3]) == D):
            continue
        out[n.output[0]] = (n, past)
    return out


def _c_int(expr: str, values: dict) -> int:
    """Evaluate an index expression the emitter wrote (C over int64: `args.v[k]`, `5LL`, / and % on
    non-negative values, ternaries never) with the given variable values."""
    py = re.sub(r"args\.v\[(\d+)\]", lambda m: f"_v[{m.group(1)}]", expr)
    py = re.sub(r"(\d+)LL\b", r"\1", py).replace("/", "//")
    return int(eval(py, {"__builtins__": {}}, dict(values)))  # noqa: S307 (our own index expressions)


_INDEX_OPS = {"Transpose", "Reshape", "Unsqueeze", "Squeeze", "Expand", "Identity", "Flatten"}


def _chain_scale(job, operand, present) -> float | None:
    """The constant c with operand = c * (an index rearrangement of present), when every node from `present`
    to `operand` is an index op (transformers' repeat_kv: Unsqueeze, Expand, Reshape; the key transpose) or
    a Mul / Div by a scalar constant (the exporters' sqrt(scale) on K); None otherwise."""
    t, scale = operand, 1.0
    producers = {o: n for n in job.nodes for o in n.output}
    while t != present:
        n = producers.get(t)
        if n is None:
            return None
        if n.op_type in _INDEX_OPS:
            t = n.input[0]
        elif n.op_type in ("Mul", "Div"):
            consts = [job.view.const(i) for i in n.input[:2]]
            k = 1 if n.op_type == "Div" else next((i for i, c in enumerate(consts) if c is not None and c.size == 1), None)
            if k is None or consts[k] is None or consts[k].size != 1 or (n.op_type == "Div" and k != 1):
                return None
            c = float(consts[k].reshape(-1)[0])
            scale = scale / c if n.op_type == "Div" else scale * c
            t = n.input[1 - k]
        else:
            return None
    return scale


def _reads_group(job, operand, order, present, heads: int, group: int, sizes: dict) -> float | None:
    """c when element [b, h, x, y] of `operand` (`order` names its axes) is c times element [b, h // group,
    j, d] of `present` (`_chain_scale`), checked on the emitter's index expressions evaluated at sample
    points; None otherwise."""
    scale = _chain_scale(job, operand, present)
    if scale is None:
        return None
    em = job.emitter()
    seen = []
    em.bound[present] = lambda idx: (seen.append(list(idx)) or ("0.0f", "float"))
    try:
        em.value(operand, list(order))
    except RenderError:
        return None
    if len(seen) != 1:
        return None
    syms = [sympy.Symbol(n, integer=True, nonnegative=True) for n in job.syms.names]
    vals = {k: sizes.get(n, 7 + 2 * k) for k, n in enumerate(job.syms.names)}
    for b in (0, 2):
        for h in range(heads):
            for j, d in ((0, 0), (3, 5), (6, 1)):
                env = {"b": b, "h": h, "j": j, "d": d, "_v": [vals[k] for k in range(len(syms))]}
                try:
                    got = [_c_int(x, env) for x in seen[0]]
                except Exception:       # noqa: BLE001 - not plain index arithmetic
                    return None
                if got != [b, h // group, j, d]:
                    return None
    return scale


def kv_cache(job, em, mm1, mm2, H, D) -> KVCache | None:
    """The cache form of this attention, or None (see the module doc)."""
    if not H.is_Integer:
        return None
    cats = _cache_concats(job, em, D)
    found = {}
    for role, operand, order in (("k", mm1.input[1], "bhdj"), ("v", mm2.input[1], "bhjd")):
        for present, (node, past) in cats.items():
            hkv = int(em.shape(present)[1])
            scale = _reads_group(job, operand, order, present, int(H), int(H) // hkv, {}) \
                if int(H) % hkv == 0 else None
            if scale is not None and (role == "k" or scale == 1.0):
                found[role] = (present, node, hkv, scale, past)
                break
    if len(found) != 2 or found["k"][2] != found["v"][2] or found["k"][0] == found["v"][0]:
        return None
    (k, _, hkv, k_scale, k_past), (v, _, _, _, v_past) = found["k"], found["v"]
    past = em.shape(k_past)[2]
    if sympy.simplify(past - em.shape(v_past)[2]) != 0:
        return None
    return KVCache(k, v, k_past, v_past, hkv, int(H) // hkv, past, k_scale)


def _splits(job, cache: KVCache, B, Skv, bkv: int):
    """Split count of the decode route, as (C expression, plan RPN): enough blocks for two per SM of the
    arch (B * Hkv blocks without splitting), at least two key tiles per split, at least one split."""
    target = 2 * sm_count(job.arch)
    c_tiles = f"(({job.syms.c(Skv)} + {2 * bkv - 1}LL) / {2 * bkv}LL)"
    c_want = f"(({target}LL + {job.syms.c(B)} * {cache.hkv}LL - 1) / ({job.syms.c(B)} * {cache.hkv}LL))"
    c = f"max(1LL, min({c_tiles}, {c_want}))"
    rpn = (f"{job.syms.rpn(Skv)},{2 * bkv},cdiv,{target},{job.syms.rpn(B)},{cache.hkv},*,cdiv,min,1,max")
    return c, rpn


@dataclass
class _Attention:
    """What every hook of one attention subgraph reads: its QKᵀ, Softmax and PV nodes, Q, Kᵀ and V as the
    MatMuls read them, the dims, the index prefixes of the (b, h) loop and the math path."""
    mm1: object
    sm: object
    mm2: object
    nan_guard: bool
    q: str
    kt: str
    v: str
    s_shape: list          # the scores' shape
    l_shape: list          # the logits' shape (the Softmax's input)
    B: object
    H: object
    Sq: object
    Skv: object
    D: int
    lead: object           # (b, h) -> the index prefix of Q, K, V, the scores and O
    lead_l: object         # (b, h) -> the index prefix of the logits
    full_q: list
    qkv_types: set
    math_: int             # 0 exact SIMT, 1 TF32, 2 f16/bf16 tensor cores (routes.attention_math)
    qkv_t: str
    cache: KVCache | None


def render_attention(job):
    """One variant per route of the attention template (attention.cuh): the shape, Q/K/V, score and output
    hooks, then the route's defines and launches."""
    em = job.emitter()
    a = _problem(job, em)
    hooks, strided, past_strided = _operand_hooks(job, em, a)
    hooks += _score_hooks(job, em, a)
    hooks += _causal_hooks(job, a)
    hooks += _prob_hooks(job, em, a)
    hooks += _output_hooks(job, a)
    return _variants(job, a, hooks, strided, past_strided)


def _problem(job, em) -> _Attention:
    """The subgraph's attention: nodes, dims, index prefixes, math path and KV cache form."""
    mm1, sm, mm2, nan_guard = _structure(job)
    q, kt, v = mm1.input[0], mm1.input[1], mm2.input[1]
    s_shape, o_shape = em.shape(mm1.output[0]), em.shape(mm2.output[0])
    rank = len(s_shape)
    axis = sm.attribute[0].i if sm.attribute else -1
    if axis not in (-1, rank - 1):
        raise RenderError(f"{describe(sm)}: softmax over axis {axis}, not the key axis")
    if rank not in (3, 4):
        raise RenderError(f"{describe(mm1)}: scores of rank {rank} (need 3 or 4)")
    B = s_shape[0]
    H = s_shape[1] if rank == 4 else 1
    Sq, Skv, D = s_shape[-2], s_shape[-1], o_shape[-1]
    if not D.is_Integer:
        raise RenderError(f"{describe(mm2)}: head dimension {D} is not static")
    D = int(D)
    lead = (lambda b, h: [b, h]) if rank == 4 else (lambda b, h: [b])
    lead_l = lead                  # the index prefix of the logits (the Softmax's input)
    l_shape = em.shape(sm.input[0])
    if rank == 3 and len(l_shape) == 4 and sympy.simplify(l_shape[0] * l_shape[1] - s_shape[0]) == 0:
        # batched [B*H, S, D] operands with the scores viewed as [B, H, S, T] around the Softmax (DeBERTa):
        # the kernel runs (b, h) over the 4-D view, the 3-D tensors are read at b * H + h
        B, H = l_shape[0], l_shape[1]
        hc = em.c(H)
        lead = lambda b, h: [f"({b}) * {hc} + ({h})"]        # noqa: E731
        lead_l = lambda b, h: [b, h]                          # noqa: E731
    full_q = s_shape[:-1] + [symdim.parse(D)]
    # f16/bf16 Q, K and V: the tensor-core path (mma.sync m16n8k16, fp32 accumulation and softmax); fp32 ones:
    # TF32 tensor cores (m16n8k8) under fp32_math "tf32", the GEMMs' default, else the exact SIMT path
    qkv_types = {em.dtype(t) for t in (q, kt, v)}
    math_ = routes.attention_math(qkv_types, job.fp32_math)
    qkv_t = dtypes.storage(next(iter(qkv_types))) if math_ == 2 else "float"
    cache = kv_cache(job, em, mm1, mm2, H, D) if rank == 4 else None
    return _Attention(mm1, sm, mm2, nan_guard, q, kt, v, s_shape, l_shape, B, H, Sq, Skv, D, lead, lead_l, full_q,
                      qkv_types, math_, qkv_t, cache)


def _operand_hooks(job, em, a: _Attention) -> tuple:
    """([the shape hook, the Q, K and V element hooks, their row pointers where stored contiguously, the KV
    cache's hooks], the strided operands {name: input}, the strided pasts {name: input})."""
    B, H, Sq, Skv, D, lead, cache = a.B, a.H, a.Sq, a.Skv, a.D, a.lead, a.cache

    def hook(tensor, idx_fn, shape_ref):
        em.reset()
        val, ct = em.value(tensor, em.broadcast(idx_fn(), em.shape(tensor), shape_ref))
        body = em.take()
        return body, val if ct == "float" else f"(float)({val})"

    hkv_c = em.c(H) if cache is None else f"{cache.hkv}LL"
    hooks = [f"typedef {a.qkv_t} plus_qkv_t;\n#define PLUS_HAS_ATTN_SHAPE 1\n"
             "PLUS_DEV PlusAttnShape plus_attn_shape(const PlusArgs& args) {\n"
             f"  return PlusAttnShape{{{em.c(B)}, {em.c(H)}, {hkv_c}, {em.c(Sq)}, {em.c(Skv)}}};\n}}\n"]
    operands = [("q", a.q, lambda: lead("b", "h") + ["i", "d"], a.full_q),
                ("k", a.kt, lambda: lead("b", "h") + ["d", "j"], a.s_shape[:-2] + [symdim.parse(D), Skv]),
                ("v", a.v, lambda: lead("b", "h") + ["j", "d"], a.s_shape[:-2] + [Skv, symdim.parse(D)])]
    if cache is not None:       # K and V by KV head: the present tensors themselves, past rows then new ones
        operands[1:] = [(name, t, lambda: ["b", "h", "j", "d"], em.shape(t)) for name, t in (("k", cache.k), ("v", cache.v))]
    for name, tensor, order, ref in operands:
        body, val = hook(tensor, order, ref)
        pos = "i" if name == "q" else "j"
        hooks.append(f"#define PLUS_HAS_{name.upper()} 1\n"
                     f"PLUS_DEV float plus_{name}(const PlusArgs& args, long long b, long long h, long long {pos}, int d) {{\n"
                     f"  if (d >= {D}) return 0.0f;\n{body}\n  return {val};\n}}\n")
    # Q and V stored contiguously as [B, H, S, D] (the projections' GEMMs materialise them): the
    # tensor-core paths copy their tiles with 16-byte cp.async instead of calling the element hooks.
    strided = {}
    if a.math_ != 0 and len(a.s_shape) == 4 and D % 16 == 0:
        for name, tensor, rows in (("q", a.q, Sq), ("v", a.v, Skv)):
            if tensor in job.inputs and list(em.shape(tensor)) == [B, H, rows, symdim.parse(D)]:
                strided[name] = job.inputs.index(tensor)
    if strided:
        ptrs = "#define PLUS_HAS_QKV_PTR 1\n"
        for name, k in strided.items():
            hv, heads, rows = ("h", "H", "Sq") if name == "q" else ("hkv", "Hkv", "Skv")
            ptrs += (f"PLUS_DEV const plus_qkv_t* plus_{name}_ptr(const PlusArgs& args, long long b, long long {hv}) {{\n"
                     "  const PlusAttnShape s = plus_attn_shape(args);\n"
                     f"  return (const plus_qkv_t*)args.in[{k}] + (b * s.{heads} + {hv}) * s.{rows} * {D}LL;\n}}\n"
                     f"PLUS_DEV long long plus_{name}_ld(const PlusArgs&) {{ return {D}; }}\n")
        hooks.append(ptrs)
    past_strided = {}
    if cache is not None:
        hooks.append(_cache_hooks(job, em, cache, D))
        # a past stored as plain [B, Hkv, P, D] rows of the operand type: copied with cp.async
        for name, past in (("k", cache.k_past), ("v", cache.v_past)):
            if a.math_ != 0 and D % 16 == 0 and em.dtype(past) in a.qkv_types and len(a.qkv_types) == 1 \
                    and list(em.shape(past)) == [B, sympy.Integer(cache.hkv), cache.past, symdim.parse(D)]:
                past_strided[name] = job.inputs.index(past)
        if past_strided:
            ptrs = "#define PLUS_HAS_QKV_PTR 1\n" if not strided else ""
            for name, k in past_strided.items():
                ptrs += (f"PLUS_DEV const plus_qkv_t* plus_{name}_ptr(const PlusArgs& args, long long b, long long hkv) {{\n"
                         f"  return (const plus_qkv_t*)args.in[{k}] + (b * {cache.hkv}LL + hkv) * {em.c(cache.past)} * {D}LL;\n}}\n"
                         f"PLUS_DEV long long plus_{name}_ld(const PlusArgs&) {{ return {D}; }}\n")
            hooks.append(ptrs)
    return hooks, strided, past_strided


def _score_hooks(job, em, a: _Attention) -> list:
    """The score hook: the tensors between the QKᵀ MatMul and the Softmax, with the product bound to `s`; a
    term added last that depends on the key only (a padding mask) becomes the key-bias hook, which the
    template loads once per key tile with coalesced loads (not with a KV cache: its decode route packs
    several heads into one block, whose key tile would need a copy per head)."""
    mm1, sm, cache, lead_l, l_shape = a.mm1, a.sm, a.cache, a.lead_l, a.l_shape
    hooks = []
    score_t, bias_t = _key_bias_split(job, em, mm1, sm, len(l_shape)) if cache is None else (sm.input[0], None)
    em.reset()
    s_val = "s" if cache is None or cache.k_scale == 1.0 else f"(s * {cexpr.lit(cache.k_scale)})"
    em.bound[mm1.output[0]] = lambda idx: (s_val, "float")
    # the logits' own index (lead_l, l_shape: the 4-D view around a batched [B*H, S, T] product, DeBERTa)
    val, ct = em.value(score_t, em.broadcast(lead_l("b", "h") + ["i", "j"], em.shape(score_t), l_shape))
    hooks.append("#define PLUS_HAS_SCORE 1\n"
                 "PLUS_DEV float plus_score(const PlusArgs& args, long long b, long long h, long long i, long long j, float s) {\n"
                 f"{em.take()}\n  return {val if ct == 'float' else f'(float)({val})'};\n}}\n")
    if bias_t is not None:
        em.reset()
        val, ct = em.value(bias_t, em.broadcast(lead_l("b", "h") + ["i", "j"], em.shape(bias_t), l_shape))
        hooks.append("#define PLUS_HAS_KEY_BIAS 1\n"
                     "PLUS_DEV float plus_key_bias(const PlusArgs& args, long long b, long long h, long long j) {\n"
                     f"{em.take()}\n  return {dtypes.convert(val, ct, 'float')};\n}}\n")
    return hooks


def _causal_hooks(job, a: _Attention) -> list:
    """PLUS_HAS_ATTN_CAUSAL with the diagonal offset the roles proved (AttentionRoles.causal): each block then stops
    at the key tile of its last row's last visible key; the score hook still masks inside it. Not with a KV cache
    (its writer block stores every key tile)."""
    c = job.roles.causal
    if c is None or a.cache is not None:
        return []
    return ["#define PLUS_HAS_ATTN_CAUSAL 1\n"
            f"PLUS_DEV long long plus_attn_causal(const PlusArgs&) {{ return {c}LL; }}\n"]


def _prob_hooks(job, em, a: _Attention) -> list:
    """The probability hook when the graph quantizes the probabilities between the Softmax and the PV MatMul
    (QuantizeLinear/DequantizeLinear per tensor, AttentionRoles.quantized_probs): what the PV MatMul reads, as a
    function of the normalised probability `p` (attention.cuh PLUS_HAS_PROB: the kernel walks the keys twice).
    E.g. DequantizeLinear(QuantizeLinear(p, s, z), s, z) returns (saturate(rint(p / s) + z) - z) * s."""
    if not job.roles.quantized_probs:
        return []
    if a.cache is not None:
        raise RenderError(f"{describe(a.sm)}: quantized probabilities with a KV cache (the two-pass kernel "
                          "needs whole rows in one block)")
    em.reset()
    em.bound[a.sm.output[0]] = lambda idx: ("p", "float")
    val, ct = em.value(a.mm2.input[0], em.broadcast(a.lead_l("b", "h") + ["i", "j"], em.shape(a.mm2.input[0]),
                                                    a.l_shape))
    return ["#define PLUS_HAS_PROB 1\n"
            "PLUS_DEV float plus_prob(const PlusArgs& args, long long b, long long h, long long i, long long j, float p) {\n"
            f"{em.take()}\n  return {dtypes.convert(val, ct, 'float')};\n}}\n"]


def _output_hooks(job, a: _Attention) -> list:
    """The output hook (O pushed forward to the subgraph outputs, in a fresh emitter), and the side hook:
    outputs that do not depend on the scores (the extended mask a later layer reads), computed by the
    attention kernel's own threads before their tiles (PLUS_HAS_ATTN_SIDE), no launch of their own."""
    em = job.emitter()
    out = a.mm2.output[0]
    em.bound[out] = lambda idx: ("o", "float")
    em.emit(f"if (d >= {a.D}) return;")
    fwd = forward_map(em, out, a.lead("b", "h") + ["i", "d"])
    bind_forward(em, fwd, out)
    dep_s = job.depends_on([a.mm1.output[0]])
    epi = {t: (*job.out_ptr(t), em.shape(t)) for t in job.outputs if t in dep_s}
    emit_stores(em, fwd, epi)
    hooks = ["#define PLUS_HAS_ATTN_OUT 1\n"
             "PLUS_DEV void plus_attn_out(const PlusArgs& args, long long b, long long h, long long i, int d, float o) {\n"
             f"{em.take()}\n}}\n"]
    written = {a.cache.k, a.cache.v} if a.cache is not None else set()
    side_outs = [t for t in job.outputs if t not in dep_s and t not in written]
    if side_outs:
        hooks.append("#define PLUS_HAS_ATTN_SIDE 1\n" + job.side_device(side_outs, "plus_attn_side"))
    return hooks


def _wgmma_operands(job, em, a: _Attention) -> tuple | None:
    """(Q, K, V job input indices, K key-major) when the sm_90a body (attention_sm90a.cuh) can read them through
    tensor maps: f16/bf16 Q and V subgraph inputs of shape [B, H, S, D], and Kᵀ either a Transpose (perm 0, 1, 3,
    2) of a K input [B, H, Skv, D] or itself an input [B, H, D, Skv] (a materialised Kᵀ, key-major: its map's
    row stride Skv must be whole 16-byte chunks, `_wgmma_guard`), all of one type; no KV cache, one head per K/V
    head, D 64 or 128. None otherwise: the mma.sync body keeps every other form (hooks in the loads such as
    RoPE, DeBERTa's batched products, GQA, past-KV)."""
    if a.math_ != 2 or a.cache is not None or len(a.s_shape) != 4 or a.D not in (64, 128) or len(a.qkv_types) != 1:
        return None
    if job.roles.quantized_probs:        # the probability hook's second pass is the mma.sync body's
        return None
    d = symdim.parse(a.D)
    if not (a.q in job.inputs and list(em.shape(a.q)) == [a.B, a.H, a.Sq, d]):
        return None
    if not (a.v in job.inputs and list(em.shape(a.v)) == [a.B, a.H, a.Skv, d]):
        return None
    if a.kt in job.inputs and list(em.shape(a.kt)) == [a.B, a.H, d, a.Skv]:
        skv = symdim.parse(a.Skv)
        if skv.is_Integer and int(skv) % 8:
            return None
        return job.inputs.index(a.q), job.inputs.index(a.kt), job.inputs.index(a.v), True
    node = em.producer.get(a.kt)
    if node is None or node.op_type != "Transpose" or list(attr(node, "perm") or []) != [0, 1, 3, 2]:
        return None
    k = node.input[0]
    if not (k in job.inputs and list(em.shape(k)) == [a.B, a.H, a.Skv, d] and em.dtype(k) in a.qkv_types):
        return None
    return job.inputs.index(a.q), job.inputs.index(k), job.inputs.index(a.v), False


def _wgmma_guard(job, a: _Attention, plan, today) -> list:
    """The routes with a materialised Kᵀ of symbolic length: the body's tensor map of Kᵀ needs Skv a multiple of 8
    (its row stride whole 16-byte chunks), so each body route also requires that, and today's routes follow
    for the lengths that are not (then every route after an unconditional one is dropped)."""
    aligned = f"{job.syms.rpn(a.Skv)},8,%,0,=="
    out = [(aligned if cond == ALWAYS else f"{cond},{aligned},&&", cfg) if cfg.wgmma else (cond, cfg)
           for cond, cfg in plan] + list(today)
    end = next(i for i, (cond, _) in enumerate(out) if cond == ALWAYS)
    return out[:end + 1]


def _wgmma_tmaps(job, a: _Attention, cfg, operands) -> tuple:
    """The sm_90a body's `tmap` records: Q over (D, Sq, B * H) in [64 d][64 rows] boxes, K and V over (D, Skv,
    B * H) in [64 d][BKV keys] boxes (a materialised Kᵀ: over (Skv, D, B * H) in [64 keys][D] boxes), all under
    the 128-byte swizzle (attention_sm90a.cuh)."""
    rpn, dt = job.syms.rpn, next(iter(a.qkv_types))
    (qi, ki, vi, key_major), D = operands, a.D
    bh = rpn(a.B * a.H)
    k = (tmap(dt, "in", ki, (rpn(a.Skv), str(D), bh), (rpn(a.Skv), rpn(a.Skv * D)), (64, D, 1), 128) if key_major
         else tmap(dt, "in", ki, (str(D), rpn(a.Skv), bh), (str(D), rpn(a.Skv * D)), (64, cfg.bkv, 1), 128))
    return (tmap(dt, "in", qi, (str(D), rpn(a.Sq), bh), (str(D), rpn(a.Sq * D)), (64, 64, 1), 128), k,
            tmap(dt, "in", vi, (str(D), rpn(a.Skv), bh), (str(D), rpn(a.Skv * D)), (64, cfg.bkv, 1), 128))


def _variants(job, a: _Attention, hooks, strided, past_strided) -> list:
    """(name, prefix, kernels, condition) per route: the shape routes of the menu (on wgmma archs the sm_90a
    body where its operands allow it and the model says it is faster), the decode route first for a decoder's
    small query counts (`decode_route`)."""
    B, H, Sq, Skv, D, cache = a.B, a.H, a.Sq, a.Skv, a.D, a.cache
    out_variants = []
    wg_ops = _wgmma_operands(job, job.emitter(), a)
    causal = job.roles.causal if cache is None else None      # the key tiles the route model counts
    plan = routes.attention_routes(B, H, Sq, Skv, D, job.target, job.syms, math_=a.math_, wgmma=wg_ops is not None,
                                   causal=causal)
    if wg_ops is not None and wg_ops[3] and not symdim.parse(Skv).is_Integer and any(c.wgmma for _, c in plan):
        plan = _wgmma_guard(job, a, plan, routes.attention_routes(B, H, Sq, Skv, D, job.target, job.syms,
                                                                  math_=a.math_, causal=causal))
    decode = decode_route(job, cache, a.math_, D, Sq) if cache is not None else None
    if decode is not None:      # a static query count small enough: the decode route alone
        plan = [decode] if decode[0] == ALWAYS else [decode] + plan
    for cond, cfg in plan:
        if cfg.wgmma:
            defines = {**routes.attention_defines(cfg, D), "PLUS_MASKED_ROW_NAN": 0 if a.nan_guard else 1}
            if wg_ops[3]:
                defines["PLUS_K_KEY_MAJOR"] = 1
            prefix = "".join(f"#define {k} {v}\n" for k, v in defines.items()) + "".join(hooks)
            grid = (f"{job.syms.rpn(Sq)},{cfg.bq},cdiv", job.syms.rpn(H), job.syms.rpn(B))
            kernels = [("", ENTRY, (grid, (str(cfg.threads), "1", "1"), str(cfg.smem_bytes),
                                    _wgmma_tmaps(job, a, cfg, wg_ops)))]
            out_variants.append((cfg.name, prefix + '#include "attention.cuh"\n', kernels, cond))
            continue
        packed = decode is not None and cfg is decode[1]
        defines = routes.attention_defines(cfg, D)
        if a.math_ != 0 and a.kt in job.inputs and cache is None:      # a materialised Kᵀ: keys contiguous in memory
            defines["PLUS_K_KEY_MAJOR"] = 1
        for name in strided:
            if not (packed and name == "q"):
                defines[f"PLUS_{name.upper()}_STRIDED"] = 1
        if cache is not None:
            defines["PLUS_ATTN_KV_CACHE"] = 1
            for name in past_strided:
                defines[f"PLUS_{name.upper()}_PAST_STRIDED"] = 1
        if packed:
            defines["PLUS_ATTN_GQA_PACK"] = cache.group
            defines["PLUS_ATTN_SPLIT"] = 1
        # a fully masked row: NaN as the graph's softmax gives it, 0 where the graph guards it
        defines["PLUS_MASKED_ROW_NAN"] = 0 if a.nan_guard else 1
        prefix = "".join(f"#define {k} {v}\n" for k, v in defines.items()) + "".join(hooks)
        block = (str(cfg.warps * 32), "1", "1")
        if packed:
            c_split, rpn_split = _splits(job, cache, B, Skv, cfg.bkv)
            prefix += ("#define PLUS_HAS_ATTN_SPLITS 1\n"
                       f"PLUS_DEV int plus_attn_splits(const PlusArgs& args) {{ return (int){c_split}; }}\n")
            rows = f"{job.syms.rpn(Sq)},{cache.group},*"
            grid = (f"{rows},{cfg.bq},cdiv,{rpn_split},*", str(cache.hkv), job.syms.rpn(B))
            out_rows = f"{job.syms.rpn(B)},{job.syms.rpn(H)},*,{job.syms.rpn(Sq)},*"
            combine = (f"{rpn_split},1,>,{out_rows},{cfg.head_dim},*,256,cdiv,0,?", "1", "1")
            kernels = [("", ENTRY, (grid, block, str(cfg.smem_bytes))),
                       ("", COMBINE_ENTRY, (combine, ("256", "1", "1"), "0"))]
            # scratch[0]: splits x rows x (D partial outputs + m + l) floats (attention.cuh split_row/split_ml)
            parts = f"{rpn_split},{out_rows},*,{cfg.head_dim + 2},*,4,*"
            job.plan.scratch.append(f"{cond},{parts},0,?")
        else:
            grid = (f"{job.syms.rpn(Sq)},{cfg.bq},cdiv", job.syms.rpn(H), job.syms.rpn(B))
            kernels = [("", ENTRY, (grid, block, str(cfg.smem_bytes)))]
        prefix += '#include "attention.cuh"\n'
        out_variants.append((cfg.name, prefix, kernels, cond))
    return out_variants


def _cache_hooks(job, em, cache: KVCache, D) -> str:
    """plus_attn_past and the present stores (the present tensors are the node's outputs, row-major)."""
    out = ["#define PLUS_HAS_KV_PRESENT 1\n",
           f"PLUS_DEV long long plus_attn_past(const PlusArgs& args) {{ return {em.c(cache.past)}; }}\n"]
    for name, t in (("k", cache.k), ("v", cache.v)):
        ptr, dt = job.out_ptr(t)
        lin = em.linear(["b", "hkv", "j", "d"], em.shape(t))
        out.append(f"PLUS_DEV void plus_{name}_present(const PlusArgs& args, long long b, long long hkv, long long j, "
                   f"int d, float x) {{\n  if (d >= {D}) return;\n  {dtypes.store(dt, ptr, lin, 'x')}\n}}\n")
    return "".join(out)


def decode_route(job, cache: KVCache, math_: int, D: int, Sq):
    """(condition, config) of the decode route: G * Sq query rows (the group's heads packed) within one
    16-row tile, the keys split across blocks (`_splits`). None when Sq is static and larger, or the arch
    has no config left."""
    from . import configs as ac
    rows = symdim.parse(Sq) * cache.group
    if rows.is_Integer and int(rows) > 16:
        return None
    dp = routes._padded(D)
    # the menu's 16-row tile, under names of its own (a spill excludes the decode config, not the prefill
    # routes' one), then the same tile with a 255-register budget (a decode hook set is heavy: RoPE's
    # sinf/cosf for the new key rows, the mask; ptxas's own target spilled the SIMT tile on sm_90a).
    # Where both spill (D = 256 packed on sm_90a) there is no decode route: the full-sequence routes serve
    menu = []
    for e in ac.entries(math_, dp):
        if e[0] == 16:
            base = ac.make_config(math_, dp, *e[:3], None, *e[3:])
            menu.append(ac.make_config(math_, dp, *e[:3], f"{base.name}_decode", *e[3:]))
            blocks = max(1, 8 // e[2])          # a 256-register budget: 65536 / (blocks * 32 * warps)
            menu.append(ac.make_config(math_, dp, *e[:3], f"{base.name}_decode_b{blocks}", blocks))
    try:
        usable = _usable(menu, job.target, f"decode attention (head dim {D})") if menu else []
    except NoConfig:
        return None
    if not usable:
        return None
    cond = ALWAYS if rows.is_Integer else f"{job.syms.rpn(Sq)},{cache.group},*,16,<="
    return cond, usable[0]


def _key_bias_split(job, em, mm1, sm, rank) -> tuple:
    """(score tensor, key-bias tensor or None): when the Softmax reads an Add of a term computed from the
    QKᵀ product and a term that is not and has extent 1 along the query axis (a padding mask broadcast over
    queries), the logit is plus_score (the first) + plus_key_bias (the second), both in fp32 as the Add's
    element expression adds them (a + b in float); anything else stays one score hook."""
    t = sm.input[0]
    node = em.producer.get(t)
    if node is None or node.op_type != "Add" or len(node.input) != 2:
        return t, None
    dep = job.depends_on([mm1.output[0]])
    x, y = node.input
    if y in dep and x not in dep:
        x, y = y, x
    if x not in dep or y in dep:
        return t, None
    ys = em.shape(y)
    if len(ys) > rank or (len(ys) >= 2 and symdim.parse(ys[-2]) != 1):
        return t, None
    if any(em.dtype(v) not in dtypes.FLOATS for v in (x, y, t)):
        return t, None
    return x, y
