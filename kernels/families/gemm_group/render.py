"""The gemm_group template family's renderer: sibling GEMMs reading one A as one launch of the gemm template."""
from __future__ import annotations

from ...codegen import dtypes, symdim
from ...codegen.forward import bind_forward, emit_stores, forward_map
from ...codegen.pull import RenderError, describe
from ...codegen.row import ROW_OPS
from ..gemm import int8, routes, tma
from ..gemm.hooks import hook_text
from ..gemm.render import _bind_acc, _m_fastest, _operands, _problem, _variants


def render_gemm_group(job):
    """A horizontal group (GemmGroupRoles): G sibling GEMMs with one A, equal M and K (N may
    differ: a ragged group, PLUS_HAS_GROUP_N), one dtype and B layout, as one launch whose batch is G x the
    members' batch. Batch index bg of the
    template is member g = bg / batch, batch b = bg % batch: plus_b_ptr and plus_epilogue switch on g,
    so every member keeps its own weights, bias and stores (a stored Kᵀ included)."""
    parts = job.roles.members
    if any(n.op_type in ROW_OPS for n in job.nodes):
        raise RenderError(f"{job.node_name}: a gemm group has no row normalisation")
    first, bodies, kbs, kas, covered, m_fast, ns, shapes = None, [], [], [], set(), [], [], []
    for part in parts:
        seed = job.view.nodes[part.gemm]
        em = job.emitter()
        a, b, dt = _operands(job, em, seed, part)
        pr = _problem(em, seed, a, b)
        ns.append(symdim.parse(pr.N))
        shapes.append((em.shape(a), em.shape(b)))
        key = pr.key(with_n=False) + (dt, em.dtype(b))       # N may differ (static)
        if first is None:
            first, first_seed = key, seed
            ka, nbatch, em0, batch = job.inputs.index(a), symdim.numel(pr.batch), em, pr.batch
            shape = (pr.M, pr.N, pr.K, pr.trans_b, pr.a_off, pr.b_off, dt)
        elif key != first:
            raise RenderError(f"{describe(seed)}: problem {key} differs from the group's first member {first}")
        cout = _bind_acc(em, seed)
        fwd = forward_map(em, cout, pr.c_index())
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
    if first_seed.op_type == "MatMulInteger":
        hooks = int8.b_typedef(em0, first_seed) + hooks
    extra = job.side_kernels([t for t in job.outputs if t not in covered])
    per_group = ""
    if any(m_fast) and not all(m_fast):   # members disagree: the sm_90a epilogue picks its order per member
        which = " || ".join(f"plus_g == {g}" for g, f in enumerate(m_fast) if f)
        per_group = ("#define PLUS_HAS_EPI_M_FASTEST 1\n"
                     "PLUS_DEV bool plus_epi_m_fastest(const PlusArgs& args, long long plus_bg) {\n"
                     f"  const long long plus_g = plus_bg / {nb};\n  return {which};\n}}\n")
    aligned = all(routes.gemm_rows_aligned(K, K if trans_b else n, dt) for n in ns)
    one_a = len(set(kas)) == 1
    tmaps = tma.operands(dt, M, K, nbatch, trans_b, batch,
                         [(kas[0], shapes[0][0])] if one_a else [(ka_, sh[0]) for ka_, sh in zip(kas, shapes)],
                         [(kb_, sh[1], n, K if trans_b else n) for kb_, sh, n in zip(kbs, shapes, ns)], members=G)
    return _variants(job, M, N, K, nbatch * G, dt, trans_b, hooks, all(m_fast), extra, m_fastest_hook=per_group,
                     aligned=aligned, a_batch=nbatch, allow_splitk=dt not in dtypes.INT8, tmaps=tmaps)
