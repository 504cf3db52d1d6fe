"""GEMM subgraphs: MatMul/Gemm + element-wise epilogue (bias, GELU, residual, reshape/transpose
stores), and GEMM + row normalisation (LayerNorm/RMSNorm) as a two-kernel plan: the GEMM epilogue
writes the normalised row's input to fp32 scratch, a row program finishes the rows."""
from __future__ import annotations

import re

from ..codegen import dtypes, symdim
from .. import routes
from ..codegen.cexpr import attr, lit
from ..codegen.forward import bind_forward, emit_stores, forward_map
from . import configs as gemm_configs, nbits
from .hooks import frontier, gemm_hooks, hook_text
from .norm_render import cluster_variants
from ..codegen.pull import RenderError, describe
from ..codegen.row import ROW_OPS

HOOKS = "gemm"


def _operands(job, em, seed, roles=None):
    """A and B: the roles identification found (warehouse/roles.py gemm_roles), else the seed's."""
    roles = job.roles if roles is None else roles
    a, b = (roles["a"], roles["b"]) if roles else (seed.input[0], seed.input[1])
    for role, t in (("A", a), ("B", b)):
        if t not in job.inputs:
            raise RenderError(f"{describe(seed)}: operand {role} '{t}' is computed inside the subgraph; "
                              "the gemm template reads its operands from memory")
    dta, dtb = em.dtype(a), em.dtype(b)
    if dta != dtb or dta not in dtypes.FLOATS:
        raise RenderError(f"{describe(seed)}: operand types {dta}/{dtb} (need one of float/float16/bfloat16)")
    return a, b, dta


def _problem(em, seed, a, b):
    """(batch dims, M, N, K, trans_b, A offset fn, B offset fn, C index fn)."""
    sa, sb, sc = em.shape(a), em.shape(b), em.shape(seed.output[0])
    if seed.op_type == "Gemm":
        if attr(seed, "transA", 0):
            raise RenderError(f"{describe(seed)}: transA=1 is not supported by the gemm template")
        tb = bool(attr(seed, "transB", 0))
        M, K = sa
        N = sb[0] if tb else sb[1]
        return [], M, N, K, tb, (lambda b_: "0"), (lambda b_: "0"), (lambda: ["m", "n"])
    if len(sa) < 2 or len(sb) < 2:
        raise RenderError(f"{describe(seed)}: 1-D MatMul operands are not supported by the gemm template")
    K, N = sa[-1], sb[-1]
    if len(sb) == 2 or all(d == 1 for d in sb[:-2]):
        M = symdim.numel(sa[:-1])
        return [], M, N, K, False, (lambda b_: "0"), (lambda b_: "0"), (lambda: em.delinear("m", sc[:-1]) + ["n"])
    M = sa[-2]
    batch = sc[:-2]

    def offset(shape, rows, cols):
        def f(bvar):
            bidx = em.delinear(bvar, batch)
            own = em.broadcast(bidx, shape[:-2], batch)
            lin = em.linear(own, shape[:-2])
            return "0" if lin == "0" else f"({lin}) * {em.c(rows * cols)}"
        return f
    return (batch, M, N, K, False, offset(sa, M, K), offset(sb, K, N),
            lambda: em.delinear("b", batch) + ["m", "n"])


def render_gemm(job):
    seed = job.view.nodes[job.roles["gemm"] if job.roles else job.sg.seed]
    if seed.op_type not in ("MatMul", "Gemm"):
        raise RenderError(f"{describe(seed)}: the gemm template grows from MatMul or Gemm")
    em = job.emitter()
    nb = (job.roles or {}).get("nbits")       # B decoded from MatMulNBits' packed weights (nbits.py)
    a, b, dt = _nbits_operands(job, em, seed) if nb else _operands(job, em, seed)
    batch, M, N, K, trans_b, a_off, b_off, c_index = _problem(em, seed, a, b)
    ka = job.inputs.index(a)
    kb = ka if nb else job.inputs.index(b)
    if nb:
        trans_b = True                       # the decoder reads B as [N][K]
    nbatch = symdim.numel(batch)

    # ---- the accumulator and what follows it --------------------------------------------------
    cout = _bind_acc(em, seed)
    row_nodes = [n for n in job.nodes if n.op_type in ROW_OPS]
    em.emit("(void)args; (void)b;")
    fwd = forward_map(em, cout, c_index(), barriers={id(n) for n in row_nodes})
    bind_forward(em, fwd, cout)
    dep_c = job.depends_on([cout])
    dep_row = job.depends_on([o for n in row_nodes for o in n.output])
    epi = {t: (*job.out_ptr(t), em.shape(t)) for t in job.outputs if t in dep_c and t not in dep_row}
    row_out = [t for t in job.outputs if t in dep_row]
    side = [t for t in job.outputs if t not in dep_c]
    if row_nodes and not nb:     # sm_90a, static N <= 4096: one kernel over a thread-block cluster
        one = cluster_variants(job, em, cout, fwd, row_nodes, dep_c, dep_row, epi, row_out, side,
                               (M, N, K, nbatch, trans_b, ka, kb, a_off, b_off, dt))
        if one:
            return one
    extra = []
    to_scratch = {}       # GEMM-side tensors the row program reads; stored besides any output store of them
    if row_nodes:
        keep = frontier(job, em, cout, row_nodes, dep_c, dep_row)
        for k, x in enumerate(keep):
            if x not in fwd:
                raise RenderError(f"{describe(em.producer.get(x, seed))}: '{x}' feeds the row normalisation "
                                  "but is not an element-wise function of the GEMM result")
            to_scratch[x] = (f"args.scratch[{k}]", 1, em.shape(x))      # fp32 (onnx FLOAT = 1)
            job.plan.scratch.append(f"{job.syms.rpn(symdim.numel(em.shape(x)))},4,*")

        def bind_x(em2):
            for k, x in enumerate(keep):
                em2.bound[x] = lambda idx, k=k, x=x: (em2.tmp(
                    f"plus_load<float>(args.scratch[{k}], {em2.linear(idx, em2.shape(x))})", "float", "x"), "float")
        src, entry, launch, _ = job.row_kernel(row_nodes, {t: job.out_ptr(t) for t in row_out}, bind_x)
        extra.append((src, entry, launch))
    m_fastest = _m_fastest(fwd, {**epi, **to_scratch})
    emit_stores(em, fwd, epi)     # every subgraph output, including one the row program also reads
    emit_stores(em, fwd, to_scratch)
    hooks = gemm_hooks(em, M, N, K, nbatch, trans_b, ka, kb, a_off, b_off, dt)
    menu = None
    if nb:
        hooks += nbits.chunk_hook(job, em, nb)
        menu = gemm_configs.configs(routes.gemm_math(dt, job.fp32_math))    # gemm.cuh's menu on every arch
    extra += job.side_kernels(side)
    return _variants(job, M, N, K, nbatch, dt, trans_b, hooks, m_fastest, extra, allow_splitk=not row_nodes,
                     menu=menu)


def _nbits_operands(job, em, seed):
    """A (from memory) and B (the decoded weight, computed inside the subgraph) of a MatMulNBits GEMM."""
    if seed.op_type != "MatMul":
        raise RenderError(f"{describe(seed)}: a quantised B is decoded for MatMul only")
    a, b = seed.input[0], seed.input[1]
    if a not in job.inputs:
        raise RenderError(f"{describe(seed)}: operand A '{a}' is computed inside the subgraph; the gemm template "
                          "reads its operands from memory")
    dt = em.dtype(a)
    if dt not in dtypes.FLOATS or em.dtype(b) != dt:
        raise RenderError(f"{describe(seed)}: operand types {dt}/{em.dtype(b)} (need one float type)")
    return a, b, dt


def render_gemm_group(job):
    """A horizontal group (warehouse/patterns/gemm_group.py): G sibling GEMMs with one A, equal M, N, K,
    one dtype and B layout, as one launch whose batch is G x the members' batch. Batch index bg of the
    template is member g = bg / batch, batch b = bg % batch: plus_b_ptr and plus_epilogue switch on g,
    so every member keeps its own weights, bias and stores (a stored Kᵀ included)."""
    parts = job.roles["members"]
    if any(n.op_type in ROW_OPS for n in job.nodes):
        raise RenderError(f"{job.node_name}: a gemm group has no row normalisation")
    first, bodies, kbs, covered, m_fast = None, [], [], set(), []
    for part in parts:
        seed = job.view.nodes[part["gemm"]]
        em = job.emitter()
        a, b, dt = _operands(job, em, seed, part)
        batch, M, N, K, trans_b, a_off, b_off, c_index = _problem(em, seed, a, b)
        key = (str(batch), str(M), str(N), str(K), trans_b, a_off("b"), b_off("b"), dt)
        if first is None:
            first = key
            ka, nbatch, em0 = job.inputs.index(a), symdim.numel(batch), em
            shape = (M, N, K, trans_b, a_off, b_off, dt)
        elif key != first:
            raise RenderError(f"{describe(seed)}: problem {key} differs from the group's first member {first}")
        cout = _bind_acc(em, seed)
        fwd = forward_map(em, cout, c_index())
        bind_forward(em, fwd, cout)
        dep = job.depends_on([cout])
        epi = {t: (*job.out_ptr(t), em.shape(t)) for t in job.outputs if t in dep}
        m_fast.append(_m_fastest(fwd, epi))
        emit_stores(em, fwd, epi)
        bodies.append(em.take())
        kbs.append(job.inputs.index(b))
        covered |= dep
    M, N, K, trans_b, a_off, b_off, dt = shape
    G = len(parts)
    nb = em0.c(nbatch)
    split = f"  const long long plus_g = plus_bg / {nb}, b = plus_bg % {nb};\n  (void)plus_g; (void)b;\n"
    bases = " : ".join(f"plus_g == {g} ? (const plus_ab_t*)args.in[{k}]" for g, k in enumerate(kbs[:-1]))
    b_ptr = split + f"  const plus_ab_t* base = {bases} : (const plus_ab_t*)args.in[{kbs[-1]}];\n" \
        f"  return base + {b_off('b')};\n"
    a_ptr = f"  const long long b = plus_bg % {nb};\n  (void)b;\n  return (const plus_ab_t*)args.in[{ka}] + {a_off('b')};\n"
    branches = []
    for g, body in enumerate(bodies):
        head = "  if" if g == 0 else " else if" if g < G - 1 else " else"
        cond = f" (plus_g == {g})" if g < G - 1 else ""
        branches.append(f"{head}{cond} {{\n{body}\n  }}")
    epilogue = split + "  (void)args;\n" + "".join(branches)
    hooks = hook_text(em0, epilogue, M, N, K, em0.c(nbatch * G), trans_b, dt, "plus_bg", a_ptr, b_ptr)
    extra = job.side_kernels([t for t in job.outputs if t not in covered])
    per_group = ""
    if any(m_fast) and not all(m_fast):   # members disagree: the sm_90a epilogue picks its order per member
        which = " || ".join(f"plus_g == {g}" for g, f in enumerate(m_fast) if f)
        per_group = ("#define PLUS_HAS_EPI_M_FASTEST 1\n"
                     "PLUS_DEV bool plus_epi_m_fastest(const PlusArgs& args, long long plus_bg) {\n"
                     f"  const long long plus_g = plus_bg / {nb};\n  return {which};\n}}\n")
    return _variants(job, M, N, K, nbatch * G, dt, trans_b, hooks, all(m_fast), extra, m_fastest_hook=per_group)


def _bind_acc(em, seed) -> str:
    """Bind the GEMM's output to the accumulator `acc` (Gemm's alpha, beta and C applied); returns its name."""
    cout = seed.output[0]
    if seed.op_type == "Gemm" and len(seed.input) > 2 and seed.input[2]:
        alpha, beta = attr(seed, "alpha", 1.0), attr(seed, "beta", 1.0)
        cin = seed.input[2]

        def acc(idx):
            c, ct = em.value(cin, em.broadcast(idx, em.shape(cin), em.shape(cout)))
            return em.tmp(f"{lit(alpha)} * acc + {lit(beta)} * {c}", "float"), "float"
        em.bound[cout] = acc
    else:
        alpha = attr(seed, "alpha", 1.0) if seed.op_type == "Gemm" else 1.0
        em.bound[cout] = (lambda idx: ("acc", "float")) if alpha == 1.0 else (
            lambda idx: (em.tmp(f"{lit(alpha)} * acc", "float"), "float"))
    return cout


def _variants(job, M, N, K, nbatch, dt, trans_b, hooks, m_fastest, extra, allow_splitk=True, m_fastest_hook="",
              menu=None):
    """One variant per route: (name, prefix, kernels, condition). `m_fastest`: every store is contiguous
    along m; `m_fastest_hook`: the source of plus_epi_m_fastest(args, b) when that holds per batch index;
    `menu`: the configs to choose from (default: the arch's menu)."""
    out = []
    choices = routes.gemm_routes(M, N, K, nbatch, dt, job.target, job.syms,
                                 allow_splitk=allow_splitk, menu=menu)
    max_split = max(s for _, _, s in choices)
    if max_split > 1:      # split-K partials live in scratch[0] (no row program in this subgraph)
        job.plan.scratch.append(f"{job.syms.rpn(nbatch * M * N)},{max_split},*,4,*")
    aligned = routes.gemm_rows_aligned(K, K if trans_b else N, dt)
    for cond, cfg, splitk in choices:
        defines = routes.gemm_defines(cfg, splitk, trans_b, aligned)
        per_batch = ""
        if splitk == 1 and routes.gemm_header(cfg) == "gemm_sm90a.cuh":
            if m_fastest:
                defines["PLUS_EPI_M_FASTEST"] = 1
            elif m_fastest_hook:
                defines["PLUS_EPI_M_FASTEST"], per_batch = 2, m_fastest_hook
        prefix = "".join(f"#define {k} {v}\n" for k, v in defines.items())
        prefix += hooks + per_batch + f'#include "{routes.gemm_header(cfg)}"\n'
        grid = (f"{job.syms.rpn(N)},{cfg.bn},cdiv", f"{job.syms.rpn(M)},{cfg.bm},cdiv",
                f"{job.syms.rpn(nbatch)},{splitk},*")
        kernels = [("", "plus_gemm", (grid, (str(cfg.threads), "1", "1"), str(cfg.smem_bytes)))]
        if splitk > 1:
            total = job.syms.rpn(nbatch * M * N)
            kernels.append(("", "plus_splitk_reduce", ((f"{total},256,cdiv", "1", "1"), ("256", "1", "1"), "0")))
        out.append((f"{cfg.name}/splitk{splitk}", prefix, kernels + extra, cond))
    return out


def _m_fastest(fwd, targets) -> bool:
    """Every epilogue store is contiguous along m (its last index reads m, not n; e.g. a stored Kᵀ): the
    sm_90a template then walks its staged C tile with m fastest, so each warp stores consecutive addresses."""
    lasts = [str(fwd[t][0][-1]) for t in targets if t in fwd]
    return bool(lasts) and all(re.search(r"\bm\b", x) and not re.search(r"\bn\b", x) for x in lasts)
