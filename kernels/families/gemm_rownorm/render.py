"""GEMM + row normalisation (LayerNorm/RMSNorm, or any row program after a GEMM): per route, one kernel over
a thread-block cluster (sm_90a, tile.py), one launch whose last CTA of each row group finishes the rows, or
two kernels (the GEMM epilogue writes the row program's input to fp32 scratch, a row kernel finishes the rows)."""
from __future__ import annotations

from ...codegen import symdim
from ...codegen.forward import emit_stores
from ...codegen.pull import RenderError, describe
from ..gemm import int8, nbits, routes
from ..gemm.hooks import frontier, gemm_hooks
from ..gemm.render import _m_fastest, _render_plain, _setup, _side_and_menu, _variant
from .tile import in_gemm_order, tile_parts, tile_variant


def render_gemm_rownorm(job):
    st = _setup(job)
    extra, menu = _side_and_menu(job, st)
    if not st.row_nodes:
        return _render_plain(job, st, extra, menu)
    # GEMM + row program: per route, one kernel over a thread-block cluster (sm_90a, static N <= 4096:
    # gemm_rownorm/tile.py) or two (the GEMM epilogue writes the row program's input to fp32 scratch, a row kernel
    # finishes the rows), whichever the route model finds faster at that M
    tile = None if st.nb or st.i8 else tile_parts(job, st)
    if symdim.parse(st.nbatch) == 1 and not st.nb and not st.i8:
        plan = routes.gemm_norm_routes(st.M, st.N, st.K, st.dt, job.target, job.syms,
                                       tile_menus=tile[0] if tile else None, finish=_finish_applies(job, st),
                                       tma=st.tma is not None)
    else:
        plan = [(cond, "two", c) for cond, c in routes.gemm_routes(st.M, st.N, st.K, st.nbatch, st.dt, job.target,
                                                                    job.syms, allow_splitk=False, menu=menu,
                                                                    tma=st.tma is not None)]
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
                                extra, cond, choice, finish=words, tmaps=st.tma))
        else:
            hooks, row_extra, m_fastest, _ = two
            out.append(_variant(job, st.M, st.N, st.nbatch, st.trans_b, st.K, st.dt, hooks, m_fastest,
                                row_extra + extra, cond, choice, tmaps=st.tma))
    return out




def _finish_applies(job, st) -> bool:
    """The one-launch plan (route kind "one") can finish the rows of a two-kernel GEMM + row program: one batch,
    one GEMM-side tensor x feeds the rows, and x is the GEMM result in the GEMM's element order with rows of
    length N (row r of x is row m = r of C), so the CTAs of one row tile wrote every element of its rows."""
    if st.nb or st.i8 or symdim.parse(st.nbatch) != 1:
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
    if st.i8:
        hooks = int8.b_typedef(em, st.seed) + hooks + int8.a_quant_hook(job)
    return hooks, [(src, entry, launch)], m_fastest, finished
