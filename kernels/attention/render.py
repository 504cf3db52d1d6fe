"""Attention subgraphs: MatMul(Q, Kᵀ) -> score ops (scale, masks) -> Softmax -> NaN guard ->
MatMul(P, V) -> stores (transpose/reshape), for the FlashAttention-style template. The nodes of each
role come from identification (Subgraph.roles, attention_roles in warehouse/patterns/attention.py).
Q, K and V are pulled through whatever produces them inside the subgraph (scaling, RoPE, GQA expand),
the score hook is everything between the first MatMul and the Softmax, the output hook is pushed forward. Between the Softmax and
the PV MatMul only what the role finder accepted sits: Identity, Cast to a float type, Dropout at
inference, and the NaN guard, which decides what a fully masked row gives (0, else NaN)."""
from __future__ import annotations

from ..codegen import dtypes, symdim
from .. import routes
from ..codegen.forward import bind_forward, emit_stores, forward_map
from ..codegen.pull import RenderError, describe


def _structure(job):
    """The QKᵀ MatMul, the Softmax and the PV MatMul from the roles identification found (the role
    finder, warehouse/patterns/attention.py, refused every subgraph whose nodes this renderer would not read);
    whether the graph guards fully masked rows (Where(IsNaN(p), 0, p))."""
    roles = job.roles
    if not roles or "qk" not in roles:
        raise RenderError(f"{job.node_name}: the attention template needs the roles its pattern finds "
                          "(q, k, v, qk, softmax, pv)")
    nodes = job.view.nodes
    return nodes[roles["qk"]], nodes[roles["softmax"]], nodes[roles["pv"]], bool(roles["nan_guard"])


def render_attention(job):
    mm1, sm, mm2, nan_guard = _structure(job)
    em = job.emitter()
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
    full_q = s_shape[:-1] + [symdim.parse(D)]

    def hook(tensor, idx_fn, shape_ref):
        em.reset()
        val, ct = em.value(tensor, em.broadcast(idx_fn(), em.shape(tensor), shape_ref))
        body = em.take()
        return body, val if ct == "float" else f"(float)({val})"

    # f16/bf16 Q, K and V: the tensor-core path (mma.sync m16n8k16, fp32 accumulation and softmax); fp32 ones:
    # TF32 tensor cores (m16n8k8) under fp32_math "tf32", the GEMMs' default, else the exact SIMT path
    qkv_types = {em.dtype(t) for t in (q, kt, v)}
    math_ = routes.attention_math(qkv_types, job.fp32_math)
    qkv_t = dtypes.storage(qkv_types.pop()) if math_ == 2 else "float"
    hooks = [f"typedef {qkv_t} plus_qkv_t;\n#define PLUS_HAS_ATTN_SHAPE 1\n"
             "PLUS_DEV PlusAttnShape plus_attn_shape(const PlusArgs& args) {\n"
             f"  return PlusAttnShape{{{em.c(B)}, {em.c(H)}, {em.c(H)}, {em.c(Sq)}, {em.c(Skv)}}};\n}}\n"]
    for name, tensor, order, ref in (
            ("q", q, lambda: lead("b", "h") + ["i", "d"], full_q),
            ("k", kt, lambda: lead("b", "h") + ["d", "j"], s_shape[:-2] + [symdim.parse(D), Skv]),
            ("v", v, lambda: lead("b", "h") + ["j", "d"], s_shape[:-2] + [Skv, symdim.parse(D)])):
        body, val = hook(tensor, order, ref)
        pos = "i" if name == "q" else "j"
        hooks.append(f"#define PLUS_HAS_{name.upper()} 1\n"
                     f"PLUS_DEV float plus_{name}(const PlusArgs& args, long long b, long long h, long long {pos}, int d) {{\n"
                     f"  if (d >= {D}) return 0.0f;\n{body}\n  return {val};\n}}\n")
    # Q and V stored contiguously as [B, H, S, D] (the projections' GEMMs materialise them): the
    # tensor-core paths copy their tiles with 16-byte cp.async instead of calling the element hooks.
    strided = {}
    if math_ != 0 and rank == 4 and D % 16 == 0:
        for name, tensor, rows in (("q", q, Sq), ("v", v, Skv)):
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
    # score hook: the tensors between the QKᵀ MatMul and the Softmax, with the product bound to `s`
    em.reset()
    em.bound[mm1.output[0]] = lambda idx: ("s", "float")
    val, ct = em.value(sm.input[0], lead("b", "h") + ["i", "j"])
    hooks.append("#define PLUS_HAS_SCORE 1\n"
                 "PLUS_DEV float plus_score(const PlusArgs& args, long long b, long long h, long long i, long long j, float s) {\n"
                 f"{em.take()}\n  return {val if ct == 'float' else f'(float)({val})'};\n}}\n")
    # output hook: push O forward to the subgraph outputs
    em = job.emitter()
    out = mm2.output[0]
    em.bound[out] = lambda idx: ("o", "float")
    em.emit(f"if (d >= {D}) return;")
    fwd = forward_map(em, out, lead("b", "h") + ["i", "d"])
    bind_forward(em, fwd, out)
    dep_s = job.depends_on([mm1.output[0]])
    epi = {t: (*job.out_ptr(t), em.shape(t)) for t in job.outputs if t in dep_s}
    emit_stores(em, fwd, epi)
    hooks.append("#define PLUS_HAS_ATTN_OUT 1\n"
                 "PLUS_DEV void plus_attn_out(const PlusArgs& args, long long b, long long h, long long i, int d, float o) {\n"
                 f"{em.take()}\n}}\n")
    side = job.side_kernels([t for t in job.outputs if t not in dep_s])
    out_variants = []
    for cond, cfg in routes.attention_routes(B, H, Sq, Skv, D, job.target, job.syms, math_=math_):
        defines = routes.attention_defines(cfg, D)
        if math_ != 0 and kt in job.inputs:      # a materialised Kᵀ: keys are contiguous in memory
            defines["PLUS_K_KEY_MAJOR"] = 1
        for name in strided:
            defines[f"PLUS_{name.upper()}_STRIDED"] = 1
        # a fully masked row: NaN as the graph's softmax gives it, 0 where the graph guards it
        defines["PLUS_MASKED_ROW_NAN"] = 0 if nan_guard else 1
        prefix = "".join(f"#define {k} {v}\n" for k, v in defines.items()) + "".join(hooks)
        prefix += '#include "attention.cuh"\n'
        grid = (f"{job.syms.rpn(Sq)},{cfg.bq},cdiv", job.syms.rpn(H), job.syms.rpn(B))
        kernels = [("", "plus_attention", (grid, (str(cfg.warps * 32), "1", "1"), str(cfg.smem_bytes)))]
        out_variants.append((cfg.name, prefix, kernels + side, cond))
    return out_variants
