"""GEMM subgraphs: MatMul/Gemm + element-wise epilogue (bias, GELU, residual, reshape/transpose
stores), and GEMM + row normalisation (LayerNorm/RMSNorm) as a two-kernel plan: the GEMM epilogue
writes the normalised row's input to fp32 scratch, a row program finishes the rows."""
from __future__ import annotations

import re
from types import SimpleNamespace

from ...codegen import dtypes, shapevals, symdim
from . import routes
from ...codegen.cexpr import attr, lit
from ...codegen.forward import bind_forward, emit_stores, forward_map
from . import configs as gemm_configs, nbits
from .hooks import frontier, gemm_hooks, hook_text
from ..gemm_rownorm.tile import in_gemm_order, tile_parts, tile_variant
from ...codegen.pull import RenderError, describe
from ...codegen.row import ROW_OPS

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


def _setup(job):
    """A GEMM subgraph's problem and a fresh emitter holding the accumulator's forward map (called once per
    kernel plan rendered: the one-kernel row tile and the two-kernel plan each take their own emitter)."""
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
    return SimpleNamespace(seed=seed, em=em, dt=dt, M=M, N=N, K=K, trans_b=trans_b, a_off=a_off, b_off=b_off,
                           ka=ka, kb=kb, nbatch=nbatch, cout=cout, row_nodes=row_nodes, fwd=fwd, dep_c=dep_c,
                           dep_row=dep_row, epi=epi, row_out=row_out, side=side, nb=nb)


def render_gemm(job):
    st = _setup(job)
    extra = job.side_kernels(st.side)
    # a MatMulNBits B is decoded by gemm.cuh's mainloop (nbits.py): that template's menu on every arch
    menu = gemm_configs.configs(routes.gemm_math(st.dt, job.fp32_math)) if st.nb else None
    if not st.row_nodes:
        m_fastest = _m_fastest(st.fwd, st.epi)
        emit_stores(st.em, st.fwd, st.epi)
        hooks = gemm_hooks(st.em, st.M, st.N, st.K, st.nbatch, st.trans_b, st.ka, st.kb, st.a_off, st.b_off, st.dt)
        if st.nb:
            hooks += nbits.chunk_hook(job, st.em, st.nb)
        return _variants(job, st.M, st.N, st.K, st.nbatch, st.dt, st.trans_b, hooks, m_fastest, extra, menu=menu)
    # GEMM + row program: per route, one kernel over a thread-block cluster (sm_90a, static N <= 4096:
    # gemm_rownorm/tile.py) or two (the GEMM epilogue writes the row program's input to fp32 scratch, a row kernel
    # finishes the rows), whichever the route model finds faster at that M
    tile = None if st.nb else tile_parts(job, st)
    if symdim.parse(st.nbatch) == 1 and not st.nb:
        plan = routes.gemm_norm_routes(st.M, st.N, st.K, st.dt, job.target, job.syms,
                                       tile_menus=tile[0] if tile else None, finish=_finish_applies(job, st))
    else:
        plan = [(cond, "two", c) for cond, c in routes.gemm_routes(st.M, st.N, st.K, st.nbatch, st.dt, job.target,
                                                                    job.syms, allow_splitk=False, menu=menu)]
    two = None
    if any(kind != "tile" for _, kind, _ in plan):
        two = _two_kernel_parts(job, st if tile is None else _setup(job),
                                finish=any(kind == "one" for _, kind, _ in plan))
    out = []
    for cond, kind, choice in plan:
        if kind == "tile":
            out.append(tile_variant(job, st, tile, cond, choice, extra))
        elif kind == "one":
            hooks, _, m_fastest, (finish_src, words) = two
            out.append(_variant(job, st.M, st.N, st.nbatch, st.trans_b, st.K, st.dt, hooks + finish_src, m_fastest,
                                extra, cond, choice, finish=words))
        else:
            hooks, row_extra, m_fastest, _ = two
            out.append(_variant(job, st.M, st.N, st.nbatch, st.trans_b, st.K, st.dt, hooks, m_fastest,
                                row_extra + extra, cond, choice))
    return out


def _finish_applies(job, st) -> bool:
    """The one-launch plan (route kind "one") can finish the rows of a two-kernel GEMM + row program: one batch,
    one GEMM-side tensor x feeds the rows, and x is the GEMM result in the GEMM's element order with rows of
    length N (row r of x is row m = r of C), so the CTAs of one row tile wrote every element of its rows."""
    if st.nb or symdim.parse(st.nbatch) != 1:
        return False
    try:
        keep = frontier(job, st.em, st.cout, st.row_nodes, st.dep_c, st.dep_row)
    except RenderError:
        return False
    return len(keep) == 1 and in_gemm_order(st.em, st.fwd, st.cout, keep[0], st.N)


def _two_kernel_parts(job, st, finish=False) -> tuple:
    """(hooks, [row kernel], m_fastest, finish) of the two-kernel plan: the GEMM epilogue stores the GEMM-side
    tensors the row program reads to fp32 scratch (besides any output store of them). With `finish`, also
    (the row program as row.FINISH_FN reading that scratch, the scratch index of the row groups' arrival
    words) for the one-launch plan; else None."""
    em, seed, fwd = st.em, st.seed, st.fwd
    to_scratch = {}
    keep = frontier(job, em, st.cout, st.row_nodes, st.dep_c, st.dep_row)
    for k, x in enumerate(keep):
        if x not in fwd:
            raise RenderError(f"{describe(em.producer.get(x, seed))}: '{x}' feeds the row normalisation "
                              "but is not an element-wise function of the GEMM result")
        to_scratch[x] = (f"args.scratch[{k}]", 1, em.shape(x))      # fp32 (onnx FLOAT = 1)
        job.plan.scratch.append(f"{job.syms.rpn(symdim.numel(em.shape(x)))},4,*")

    def binder(load):
        """Binds each scratch tensor's element to `load` (k, linear index) in the row program's emitter."""
        def bind(em2):
            for k, x in enumerate(keep):
                em2.bound[x] = lambda idx, k=k, x=x: (em2.tmp(load(k, em2.linear(idx, em2.shape(x))), "float", "x"),
                                                      "float")
        return bind
    src, entry, launch, _ = job.row_kernel(st.row_nodes, {t: job.out_ptr(t) for t in st.row_out},
                                           binder(lambda k, i: f"plus_load<float>(args.scratch[{k}], {i})"))
    finished = None
    if finish:
        # the finishing CTA reads what other CTAs stored in this launch: from L2 (.cg)
        bind_cg = binder(lambda k, i: f"__ldcg((const float*)args.scratch[{k}] + ({i}))")
        words = len(job.plan.scratch)
        # one 64-bit arrival word per row group: cdiv(M, BM) x split <= M / 8 + 8 groups (BM / split >= 8)
        job.plan.scratch.append(f"{job.syms.rpn(st.M)},8,+,8,*")
        finished = (job.row_finish(st.row_nodes, {t: job.out_ptr(t) for t in st.row_out}, bind_cg), words)
    m_fastest = _m_fastest(fwd, {**st.epi, **to_scratch})
    emit_stores(em, fwd, st.epi)     # every subgraph output, including one the row program also reads
    emit_stores(em, fwd, to_scratch)
    hooks = gemm_hooks(em, st.M, st.N, st.K, st.nbatch, st.trans_b, st.ka, st.kb, st.a_off, st.b_off, st.dt)
    if st.nb:
        hooks += nbits.chunk_hook(job, em, st.nb)
    return hooks, [(src, entry, launch)], m_fastest, finished


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
    """A horizontal group (warehouse/families/gemm_group.py): G sibling GEMMs with one A, equal M and K (N may
    differ: a ragged group, PLUS_HAS_GROUP_N), one dtype and B layout, as one launch whose batch is G x the
    members' batch. Batch index bg of the
    template is member g = bg / batch, batch b = bg % batch: plus_b_ptr and plus_epilogue switch on g,
    so every member keeps its own weights, bias and stores (a stored Kᵀ included)."""
    parts = job.roles["members"]
    if any(n.op_type in ROW_OPS for n in job.nodes):
        raise RenderError(f"{job.node_name}: a gemm group has no row normalisation")
    first, bodies, kbs, kas, covered, m_fast, ns = None, [], [], [], set(), [], []
    for part in parts:
        seed = job.view.nodes[part["gemm"]]
        em = job.emitter()
        a, b, dt = _operands(job, em, seed, part)
        batch, M, N, K, trans_b, a_off, b_off, c_index = _problem(em, seed, a, b)
        ns.append(symdim.parse(N))
        key = (str(batch), str(M), str(K), trans_b, a_off("b"), b_off("b"), dt)   # N may differ (static)
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
        kas.append(job.inputs.index(a))
        covered |= dep
    M, N, K, trans_b, a_off, b_off, dt = shape
    G = len(parts)
    nb = em0.c(nbatch)
    split = f"  const long long plus_g = plus_bg / {nb}, b = plus_bg % {nb};\n  (void)plus_g; (void)b;\n"
    ragged = ""
    if len({str(n) for n in ns}) > 1:      # a ragged group (GQA: Q wider than K and V): per-member N and ldb
        if not all(n.is_Integer for n in ns):
            raise RenderError(f"{job.node_name}: group members of different widths {ns} that are not static")
        N = max(ns, key=int)

        def per_member(vals):
            return " : ".join(f"plus_g == {g} ? {em0.c(v)}" for g, v in enumerate(vals[:-1])) + f" : {em0.c(vals[-1])}"
        lds = [K if trans_b else n for n in ns]
        ragged = ("#define PLUS_HAS_GROUP_N 1\n"
                  "PLUS_DEV long long plus_group_n(const PlusArgs& args, long long plus_bg) {\n"
                  f"  const long long plus_g = plus_bg / {nb};\n  (void)args;\n  return {per_member(ns)};\n}}\n"
                  "PLUS_DEV long long plus_group_ldb(const PlusArgs& args, long long plus_bg) {\n"
                  f"  const long long plus_g = plus_bg / {nb};\n  (void)args;\n  return {per_member(lds)};\n}}\n")
    bases = " : ".join(f"plus_g == {g} ? (const plus_ab_t*)args.in[{k}]" for g, k in enumerate(kbs[:-1]))
    b_ptr = split + f"  const plus_ab_t* base = {bases} : (const plus_ab_t*)args.in[{kbs[-1]}];\n" \
        f"  return base + {b_off('b')};\n"
    if len(set(kas)) == 1:
        a_ptr = f"  const long long b = plus_bg % {nb};\n  (void)b;\n  return (const plus_ab_t*)args.in[{ka}] + {a_off('b')};\n"
    else:       # members with their own A (A's of one shape, from one subgraph)
        abases = " : ".join(f"plus_g == {g} ? (const plus_ab_t*)args.in[{k}]" for g, k in enumerate(kas[:-1]))
        a_ptr = split + f"  const plus_ab_t* base = {abases} : (const plus_ab_t*)args.in[{kas[-1]}];\n" \
            f"  return base + {a_off('b')};\n"
    branches = []
    for g, body in enumerate(bodies):
        head = "  if" if g == 0 else " else if" if g < G - 1 else " else"
        cond = f" (plus_g == {g})" if g < G - 1 else ""
        branches.append(f"{head}{cond} {{\n{body}\n  }}")
    epilogue = split + "  (void)args;\n" + "".join(branches)
    hooks = hook_text(em0, epilogue, M, N, K, em0.c(nbatch * G), trans_b, dt, "plus_bg", a_ptr, b_ptr) + ragged
    extra = job.side_kernels([t for t in job.outputs if t not in covered])
    per_group = ""
    if any(m_fast) and not all(m_fast):   # members disagree: the sm_90a epilogue picks its order per member
        which = " || ".join(f"plus_g == {g}" for g, f in enumerate(m_fast) if f)
        per_group = ("#define PLUS_HAS_EPI_M_FASTEST 1\n"
                     "PLUS_DEV bool plus_epi_m_fastest(const PlusArgs& args, long long plus_bg) {\n"
                     f"  const long long plus_g = plus_bg / {nb};\n  return {which};\n}}\n")
    aligned = all(routes.gemm_rows_aligned(K, K if trans_b else n, dt) for n in ns)
    return _variants(job, M, N, K, nbatch * G, dt, trans_b, hooks, all(m_fast), extra, m_fastest_hook=per_group,
                     aligned=aligned, a_batch=nbatch)


def render_gemm_gated(job):
    """A gated MLP (warehouse/families/gemm_gated.py): the template's two products (PLUS_GATED) are the gate and
    up projections, two GEMMs of one A (weights in[kb0], in[kb1]) or the halves of one combined weight (B1 =
    B0 + N columns, or rows with transB). Both product tensors (`parts`) are bound to the sums acc0 / acc1 at the
    element (m, n) the epilogue is called for; the meet (act(g) * u) and everything after it are pushed forward
    from there to the stores, as the plain GEMM's epilogue is from its accumulator."""
    roles = job.roles
    if not roles or "parts" not in roles:
        raise RenderError(f"{job.node_name}: the gemm_gated template needs the roles its patterns find")
    if any(n.op_type in ROW_OPS for n in job.nodes):
        raise RenderError(f"{job.node_name}: a gated GEMM has no row normalisation")
    em = job.emitter()
    nbs = roles.get("nbits")          # the members' MatMulNBits decoders, B0's and B1's (contrib/decoders.py)
    decode = ""
    if roles["form"] == "pair":
        got = []
        for m in roles["members"]:
            seed = job.view.nodes[m["gemm"]]
            a, b, dt = _nbits_operands(job, em, seed) if nbs else _operands(job, em, seed, m)
            got.append((seed, b, dt, _problem(em, seed, a, b)))
        keys = [(str(pr[0]), str(pr[1]), str(pr[2]), str(pr[3]), pr[4], pr[5]("b"), pr[6]("b"), dt)
                for _, _, dt, pr in got]
        if keys[0] != keys[1]:
            raise RenderError(f"{describe(got[1][0])}: problem {keys[1]} differs from the gate's {keys[0]}")
        seeds = [g[0] for g in got]
        batch, M, N, K, trans_b, a_off, b_off, c_index = got[0][3]
        dt = got[0][2]
        if nbs:          # both weights decoded in the mainloop (nbits.py): B0 by plus_b_chunk, B1 by plus_b1_chunk
            nbits.check_pair(nbs, job.node_name)
            trans_b = True                   # the decoders read B as [N][K]; B0/B1 pointers are never read
            decode = nbits.chunk_hook(job, em, nbs[0]) + nbits.chunk_hook(job, em, nbs[1], fn="plus_b1_chunk")
            kb = kb1 = job.inputs.index(roles["a"])
        else:
            kb, kb1 = job.inputs.index(got[0][1]), job.inputs.index(got[1][1])
        ldb = K if trans_b else N
        b1_ptr = f"  return (const plus_ab_t*)args.in[{kb1}] + {b_off('b')};\n"
        b1_aligned = True
        parts = list(roles["parts"])
    else:
        if nbs:
            raise RenderError(f"{job.node_name}: a combined gate/up projection with a MatMulNBits weight is not "
                              "decoded by the gated template")
        seed = job.view.nodes[roles["gemm"]]
        a, b, dt = _operands(job, em, seed, roles)
        batch, M, N2, K, trans_b, a_off, b_off, c_index = _problem(em, seed, a, b)
        seeds = [seed, seed]
        parts = _ordered_halves(job, roles)
        N, ldb = symdim.parse(roles["half"]), (K if trans_b else N2)
        kb = job.inputs.index(b)
        step = f"{em.c(N)} * {em.c(K)}" if trans_b else em.c(N)
        b1_ptr = f"  return (const plus_ab_t*)args.in[{kb}] + {b_off('b')} + {step};\n"
        b1_aligned = routes.gemm_rows_aligned(N, N, dt)       # B1 = B0 + N columns (or N rows of K)
    ka = job.inputs.index(roles["a"])
    nbatch = symdim.numel(batch)
    idx0 = c_index()
    em.emit("(void)args; (void)b;")
    for k, (t, seed) in enumerate(zip(parts, seeds)):
        alpha = attr(seed, "alpha", 1.0) if seed.op_type == "Gemm" else 1.0
        acc = f"acc{k}" if alpha == 1.0 else f"{lit(alpha)} * acc{k}"

        def bound(idx, t=t, acc=acc):
            if [str(i) for i in idx] != [str(i) for i in idx0]:
                raise RenderError(f"{job.node_name}: '{t}' is read at another element than the product's own "
                                  "before the products meet (a reshape or transpose before the gating)")
            return (acc, "float") if acc.startswith("acc") else (em.tmp(acc, "float"), "float")
        em.bound[t] = bound
    meet = roles["meet"]
    fwd = {}
    for src in parts + [meet]:       # side outputs on a product's chain, then the gated result
        fwd.update(forward_map(em, src, idx0))
    bind_forward(em, {t: v for t, v in fwd.items() if t not in parts}, meet)
    epi = {t: (*job.out_ptr(t), em.shape(t)) for t in job.outputs}
    emit_stores(em, fwd, epi)
    hooks = hook_text(em, em.take(), M, N, K, em.c(nbatch), trans_b, dt, "b",
                      f"  return (const plus_ab_t*)args.in[{ka}] + {a_off('b')};\n",
                      f"  return (const plus_ab_t*)args.in[{kb}] + {b_off('b')};\n", ldb=ldb, b1_ptr=b1_ptr)
    aligned = routes.gemm_rows_aligned(K, ldb, dt) and b1_aligned
    # decoded weights: gemm.cuh's menu on every arch (the wgmma template has no decoding loader), as render_gemm
    menu = gemm_configs.configs(routes.gemm_math(dt, job.fp32_math)) if nbs else None
    return _variants(job, M, N, K, nbatch, dt, trans_b, hooks + decode, False, [], gated=True, aligned=aligned,
                     menu=menu)


def _ordered_halves(job, roles) -> list:
    """The combined projection's parts as (first half, second half): the role finder's order where it read
    constant bounds, else the values of the Slices' shape-computed starts (TorchScript's chunk(2))."""
    parts, starts, half = list(roles["parts"]), list(roles["starts"]), roles["half"]
    for k, t in enumerate(parts):
        if starts[k] is None:
            node = job.view.nodes[job.view.producer[t]]
            vals = shapevals.values(job.view, node.input[1]) if len(node.input) > 1 else None
            v = vals[0] if vals and len(vals) == 1 else None
            if v is None or not v.is_Integer:
                raise RenderError(f"{describe(node)}: the start of a half of the combined projection is not "
                                  "a value the codegen can compute")
            starts[k] = int(v)
    if sorted(starts) != [0, half]:
        raise RenderError(f"{job.node_name}: the combined projection's parts start at {starts}, not at 0 and {half}")
    return parts if starts[0] == 0 else parts[::-1]


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
              a_batch=None, menu=None, gated=False, aligned=None):
    """One variant per route: (name, prefix, kernels, condition). `m_fastest`: every store is contiguous
    along m; `m_fastest_hook`: the source of plus_epi_m_fastest(args, b) when that holds per batch index;
    `a_batch`: distinct A matrices when not one per batch index (a horizontal group shares its A); `menu`:
    the configs to choose from (default: the arch's menu).
    `gated`: two products of N columns each (PLUS_GATED): tiles are chosen and the grid covers 2N interleaved
    columns, split-K keeps two partial planes; its epilogue reads both products of a column pair, so split-K
    goes through scratch, never inside a cluster. `aligned`: the caller's PLUS_ALIGNED proof (default: lda = K
    and ldb = N, or K with trans_b, whole 16-byte chunks)."""
    width = 2 * symdim.parse(N) if gated else N
    choices = routes.gemm_routes(M, width, K, nbatch, dt, job.target, job.syms, allow_splitk=allow_splitk,
                                 a_batch=a_batch, menu=menu, cluster_split=not gated)
    max_split = max(c.split for _, c in choices)
    if max_split > 1:      # split-K partials live in scratch[0] (no row program in this subgraph)
        job.plan.scratch.append(f"{job.syms.rpn(nbatch * M * N)},{max_split * (2 if gated else 1)},*,4,*")
    return [_variant(job, M, N, nbatch, trans_b, K, dt, hooks, m_fastest, extra, cond, choice, m_fastest_hook,
                     gated=gated, aligned=aligned)
            for cond, choice in choices]


def _variant(job, M, N, nbatch, trans_b, K, dt, hooks, m_fastest, extra, cond, choice, m_fastest_hook="",
             gated=False, aligned=None, finish=None):
    """(name, prefix, kernels, condition) of one route's GemmChoice (no row tile). `finish`: the scratch index
    of the row groups' arrival words of the one-launch GEMM + row program (its `hooks` define row.FINISH_FN)."""
    cfg, splitk, csplit = choice.cfg, choice.split, choice.csplit
    if aligned is None:
        aligned = routes.gemm_rows_aligned(K, K if trans_b else N, dt)
    defines = routes.gemm_defines(cfg, splitk, trans_b, aligned, splitk_cluster=csplit)
    if gated:
        defines["PLUS_GATED"] = 1
    if finish is not None:
        defines["PLUS_HAS_ROW_FINISH"], defines["PLUS_ROW_FINISH"] = 1, finish
    per_batch = ""
    if splitk == 1 and routes.gemm_header(cfg) == "gemm_sm90a.cuh" and not gated:
        if m_fastest:
            defines["PLUS_EPI_M_FASTEST"] = 1
        elif m_fastest_hook:
            defines["PLUS_EPI_M_FASTEST"], per_batch = 2, m_fastest_hook
    prefix = "".join(f"#define {k} {v}\n" for k, v in defines.items())
    prefix += hooks + per_batch + f'#include "{routes.gemm_header(cfg)}"\n'
    # gated: the logical width 16 * cdiv(N, 8) of the interleaved products (gemm_hooks.cuh plus_gated_width)
    gx = f"{job.syms.rpn(N)},8,cdiv,16,*,{cfg.bn},cdiv" if gated else f"{job.syms.rpn(N)},{cfg.bn},cdiv"
    grid = (gx, f"{job.syms.rpn(M)},{cfg.bm},cdiv", f"{job.syms.rpn(nbatch)},{splitk * csplit},*")
    kernels = [("", "plus_gemm", (grid, (str(cfg.threads), "1", "1"), str(cfg.smem_bytes)))]
    if splitk > 1:
        total = job.syms.rpn(nbatch * M * N)
        kernels.append(("", "plus_splitk_reduce", ((f"{total},256,cdiv", "1", "1"), ("256", "1", "1"), "0")))
    return (choice.label, prefix, kernels + extra, cond)


def _m_fastest(fwd, targets) -> bool:
    """Every epilogue store is contiguous along m (its last index reads m, not n; e.g. a stored Kᵀ): the
    sm_90a template then walks its staged C tile with m fastest, so each warp stores consecutive addresses."""
    lasts = [str(fwd[t][0][-1]) for t in targets if t in fwd]
    return bool(lasts) and all(re.search(r"\bm\b", x) and not re.search(r"\bn\b", x) for x in lasts)
