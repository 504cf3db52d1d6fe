"""The gemm_gated template family's renderer: a gated MLP's two products of one A in one GEMM (PLUS_GATED)."""
from __future__ import annotations

from ...codegen import shapevals, symdim
from ...codegen.cexpr import attr, lit
from ...codegen.forward import bind_forward, emit_stores, forward_map
from ...codegen.pull import RenderError, describe
from ...codegen.row import ROW_OPS
from ..gemm import configs as gemm_configs, nbits, routes, tma
from ..gemm.hooks import hook_text
from ..gemm.render import _nbits_operands, _operands, _problem, _variants
from ....warehouse.families.gemm_gated import GatedRoles


def render_gemm_gated(job):
    """A gated MLP (GatedRoles): the template's two products (PLUS_GATED) are the gate and
    up projections, two GEMMs of one A (weights in[kb0], in[kb1]) or the halves of one combined weight (B1 =
    B0 + N columns, or rows with transB). Both product tensors (`parts`) are bound to the sums acc0 / acc1 at the
    element (m, n) the epilogue is called for; the meet (act(g) * u) and everything after it are pushed forward
    from there to the stores, as the plain GEMM's epilogue is from its accumulator."""
    roles = job.roles
    if not isinstance(roles, GatedRoles):
        raise RenderError(f"{job.node_name}: the gated template needs the roles its family finds")
    if any(n.op_type in ROW_OPS for n in job.nodes):
        raise RenderError(f"{job.node_name}: a gated GEMM has no row normalisation")
    em = job.emitter()
    nbs = roles.nbits                 # the members' MatMulNBits decoders, B0's and B1's (contrib/decoders.py)
    decode = ""
    if roles.pair:
        got = []
        for m in roles.members:
            seed = job.view.nodes[m.gemm]
            a, b, dt = _nbits_operands(job, em, seed) if nbs else _operands(job, em, seed, m)
            got.append((seed, b, dt, _problem(em, seed, a, b)))
        keys = [pr.key() + (dt,) for _, _, dt, pr in got]
        if keys[0] != keys[1]:
            raise RenderError(f"{describe(got[1][0])}: problem {keys[1]} differs from the gate's {keys[0]}")
        seeds = [g[0] for g in got]
        pr = got[0][3]
        batch, M, N, K, trans_b, b_off, c_index = pr.batch, pr.M, pr.N, pr.K, pr.trans_b, pr.b_off, pr.c_index
        dt = got[0][2]
        if nbs:          # both weights decoded in the mainloop (nbits.py): B0 by plus_b_chunk, B1 by plus_b1_chunk
            nbits.check_pair(nbs, job.node_name)
            trans_b = True                   # the decoders read B as [N][K]; B0/B1 pointers are never read
            decode = nbits.chunk_hook(job, em, nbs[0]) + nbits.chunk_hook(job, em, nbs[1], fn="plus_b1_chunk")
            kb = kb1 = job.inputs.index(roles.a)
        else:
            kb, kb1 = job.inputs.index(got[0][1]), job.inputs.index(got[1][1])
        ldb = K if trans_b else N
        b1_ptr = f"  return (const plus_ab_t*)args.in[{kb1}] + {b_off('b')};\n"
        b1_aligned = True
        parts = list(roles.parts)
        tma_b = None if nbs else ([(kb, em.shape(got[0][1]), N, ldb)], (kb1, em.shape(got[1][1]), N, ldb, 0))
    else:
        if nbs:
            raise RenderError(f"{job.node_name}: a combined gate/up projection with a MatMulNBits weight is not "
                              "decoded by the gated template")
        seed = job.view.nodes[roles.combined.gemm]
        a, b, dt = _operands(job, em, seed, roles.combined)
        pr = _problem(em, seed, a, b)
        batch, M, N2, K, trans_b, b_off, c_index = pr.batch, pr.M, pr.N, pr.K, pr.trans_b, pr.b_off, pr.c_index
        seeds = [seed, seed]
        parts = _ordered_halves(job, roles)
        N, ldb = symdim.parse(roles.combined.half), (K if trans_b else N2)
        kb = job.inputs.index(b)
        step = f"{em.c(N)} * {em.c(K)}" if trans_b else em.c(N)
        tma_b = ([(kb, em.shape(b), N, ldb)], (kb, em.shape(b), N, ldb, N * K if trans_b else N))
        b1_ptr = f"  return (const plus_ab_t*)args.in[{kb}] + {b_off('b')} + {step};\n"
        b1_aligned = routes.gemm_rows_aligned(N, N, dt)       # B1 = B0 + N columns (or N rows of K)
    ka = job.inputs.index(roles.a)
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
    meet = roles.meet
    fwd = {}
    for src in parts + [meet]:       # side outputs on a product's chain, then the gated result
        fwd.update(forward_map(em, src, idx0))
    bind_forward(em, {t: v for t, v in fwd.items() if t not in parts}, meet)
    epi = {t: (*job.out_ptr(t), em.shape(t)) for t in job.outputs}
    emit_stores(em, fwd, epi)
    hooks = hook_text(em, em.take(), M, N, K, em.c(nbatch), trans_b, dt, "b",
                      f"  return (const plus_ab_t*)args.in[{ka}] + {pr.a_off('b')};\n",
                      f"  return (const plus_ab_t*)args.in[{kb}] + {b_off('b')};\n", ldb=ldb, b1_ptr=b1_ptr)
    aligned = routes.gemm_rows_aligned(K, ldb, dt) and b1_aligned
    # decoded weights: gemm.cuh's menu on every arch (the wgmma template has no decoding loader), as render_gemm
    menu = gemm_configs.configs(routes.gemm_math(dt, job.fp32_math)) if nbs else None
    tmaps = tma.operands(dt, M, K, nbatch, trans_b, batch, [(ka, em.shape(roles.a))], tma_b[0], b1=tma_b[1]) \
        if tma_b else None
    return _variants(job, M, N, K, nbatch, dt, trans_b, hooks + decode, False, [], gated=True, aligned=aligned,
                     menu=menu, tmaps=tmaps)


def _ordered_halves(job, roles) -> list:
    """The combined projection's parts as (first half, second half): the role finder's order where it read
    constant bounds, else the values of the Slices' shape-computed starts (TorchScript's chunk(2))."""
    parts, starts, half = list(roles.parts), list(roles.combined.starts), roles.combined.half
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
