"""GEMM + residual + LayerNorm/RMSNorm as one kernel on sm_90a (thread-block clusters).

The two-kernel plan (render.py: the GEMM epilogue writes the row program's input to fp32 scratch,
a row program normalises the rows) costs a scratch round trip and a second launch. On sm_90a, when the
row length N is static and cdiv(N, BN) <= 8 for some BN (gemm_sm90a_configs.cluster_bn: N <= 4096), the
CTAs of one row of C tiles form a thread-block cluster (`__cluster_dims__(C, 1, 1)`, grid.x = C), and
the wgmma template's PLUS_HAS_ROW_TILE hook runs the subgraph's row program (row.py, tile mode) over
each CTA's slice of the staged accumulator tile, with every row reduction made cluster-wide through
distributed shared memory. Each CTA:

  1. `plus_row_x(args, b, m, n, acc)`: stores the GEMM-side outputs (e.g. a residual sum that is also a
     graph output) and returns x, the row program's input, rounded to x's element type as the graph
     holds it; x overwrites the staged fp32 accumulator in shared memory;
  2. the row program's passes over its columns, each reduction combined over the cluster's ranks in
     rank order (the same bits in every CTA), LayerNorm two-pass (mean, then the centred squares);
  3. stores the row program's outputs; a trailing cluster barrier keeps its partials alive until
     every rank has read them.

The same holds for any row program of template gemm_rownorm (e.g. a user's GEMM + Softmax). With
PLUS_SPLITK_CLUSTER = S the cluster is cx x S CTAs: S CTAs split each tile's K range and sum their partial
tiles through distributed shared memory before the row program (gemm_sm90a.cuh), so a small M still
spreads its weights over more SMs. The route model (kernels/families/gemm/routes.py gemm_norm_routes) weighs every
such tile against the two-kernel plan at each M. Anything else (other archs, symbolic or longer N, batched
GEMMs, fp32 operands, a row program that needs more than one GEMM-side tensor or reads it transposed or
sliced) keeps the two-kernel plan: `tile_parts` returns None.
"""
from __future__ import annotations

from onnx import TensorProto

from ... import arch as arch_table
from ...codegen import dtypes, symdim
from ...routes import NoConfig, _usable
from ..gemm import routes
from ..gemm import sm90a_configs as sm90a
from ...codegen.forward import emit_stores
from ..gemm.hooks import frontier, gemm_hooks
from ..gemm.render import ENTRY
from ...codegen.pull import RenderError
from ....limits import LITERAL_ELEMENTS
from ...codegen.row import RowProgram, bind_at

X_FN = "plus_row_x"


def cluster_size(N, arch, dt, nbatch) -> tuple | None:
    """(BN, C) of the one-kernel route, or None when it does not apply."""
    n, nb = symdim.parse(N), symdim.parse(nbatch)
    if not arch_table.get(arch).wgmma or dt not in (TensorProto.FLOAT16, TensorProto.BFLOAT16):
        return None
    if not (n.is_Integer and nb.is_Integer and int(nb) == 1):
        return None
    bn = sm90a.cluster_bn(int(n))
    return (bn, -(-int(n) // bn)) if bn else None


def tile_parts(job, st) -> tuple | None:
    """([(cx, configs) per tile width], x_fn, tile hook, GEMM hooks) of the one-kernel route of a GEMM + row normalisation
    subgraph (`st`: render.py's _setup state, whose emitter this consumes), or None when it does not apply
    (the caller renders the two-kernel plan). Every tile width from the narrowest with cdiv(N, BN) <= 8 up
    is offered to the route model (wider tiles leave room in the cluster for split-K); widths whose configs
    all failed to compile (target.excluded) are left out."""
    size = cluster_size(st.N, job.arch, st.dt, st.nbatch)
    if size is None:
        return None
    menus = []
    for bn in (b for b in sm90a.CLUSTER_WIDTHS if b >= size[0]):
        try:
            menus.append((-(-int(symdim.parse(st.N)) // bn),
                          _usable(sm90a.cluster_menu(bn), job.target, f"GEMM (tile width {bn})")))
        except NoConfig:
            continue
    if not menus:
        return None
    try:
        x_fn, tile = _hooks_text(job, st.em, st.cout, st.fwd, st.row_nodes, st.dep_c, st.dep_row, st.epi,
                                 st.row_out, st.N)
    except RenderError:
        return None          # e.g. two GEMM-side tensors feed the rows: the two-kernel plan handles it
    hooks = gemm_hooks(st.em, st.M, st.N, st.K, st.nbatch, st.trans_b, st.ka, st.kb, st.a_off, st.b_off, st.dt)
    return menus, x_fn, tile, hooks       # plus_epilogue stays empty


def tile_variant(job, st, parts, cond, choice, extra) -> tuple:
    """(name, prefix, kernels, condition) of one one-kernel route: `choice.cx` CTAs along a row of C, K split
    `choice.csplit` ways inside the same cluster (PLUS_SPLITK_CLUSTER)."""
    _, x_fn, tile, hooks = parts
    cfg = choice.cfg
    aligned = routes.gemm_rows_aligned(st.K, st.K if st.trans_b else st.N, st.dt)
    defines = {**routes.gemm_defines(cfg, 1, st.trans_b, aligned, splitk_cluster=choice.csplit),
               "PLUS_CLUSTER_X": choice.cx}
    prefix = "".join(f"#define {k} {v}\n" for k, v in defines.items())
    prefix += hooks + x_fn + tile + f'#include "{routes.gemm_header(cfg)}"\n'
    grid = (str(choice.cx), f"{job.syms.rpn(st.M)},{cfg.bm},cdiv", str(choice.csplit))
    kernels = [("", ENTRY, (grid, (str(cfg.threads), "1", "1"), str(cfg.smem_bytes)))]
    return (choice.label, prefix, kernels + extra, cond)


def in_gemm_order(em, fwd, cout, x, N) -> bool:
    """x is the GEMM result pushed forward through element-wise ops, Casts and the Reshape family only (no
    Transpose, Slice or Split, no condition), with rows of length N: its element (row, j) in row-major order
    is C[m = row, n = j], so a CTA's C tile holds x's rows m0.., columns n0.."""
    if x not in fwd or fwd[x][1] or symdim.parse(em.shape(x)[-1]) != symdim.parse(N):
        return False
    todo, seen = [x], set()
    while todo:
        t = todo.pop()
        if t == cout or t in seen:
            continue
        seen.add(t)
        node = em.producer.get(t)
        if node is None or node.op_type in ("Transpose", "Slice", "Split"):
            return False
        todo += [i for i in node.input if i in fwd]
    return True


def _hooks_text(job, em, cout, fwd, row_nodes, dep_c, dep_row, epi, row_out, N) -> tuple:
    """(plus_row_x, plus_row_tile) sources; raises RenderError when the row tile cannot express the
    subgraph (then nothing was emitted into `em` that the caller keeps)."""
    keep = frontier(job, em, cout, row_nodes, dep_c, dep_row)
    if len(keep) != 1 or not in_gemm_order(em, fwd, cout, keep[0], N):
        raise RenderError(f"{job.node_name}: the row tile reads one GEMM-side tensor in the GEMM's element order")
    x = keep[0]
    rows = job.emitter()
    n_c = rows.c(symdim.parse(N))
    want = f"(row) * {n_c} + j"

    def tile_x(idx):
        lin = rows.linear(idx, rows.shape(x))
        if lin == want:     # the element of this row and column (the passes; plain stores)
            return rows.tmp("tile[r * ld + c]", "float", "x"), "float"
        # pulled through a view (e.g. an output reshaped to [rows, N] in another shape): the same element
        # of the CTA's rows and columns, located from its row-major offset
        return rows.tmp(f"tile[(({lin}) / {n_c} - m0) * ld + (({lin}) % {n_c} - n0)]", "float", "x"), "float"
    rows.bound[x] = tile_x
    prog = RowProgram(rows, row_nodes)
    if not prog.trailing or symdim.parse(prog.length) != symdim.parse(N):
        raise RenderError(f"{job.node_name}: the rows are not the GEMM's N")
    saved = list(em.lines), dict(em.memo), dict(em.bound)
    used = _bind_columns(em, x, fwd[x][0], N)
    emit_stores(em, fwd, epi)          # GEMM-side outputs, e.g. the residual sum when it is an output
    val, ct = em.value(x, fwd[x][0])
    val = dtypes.convert(val, ct, "float")
    st = dtypes.storage(em.dtype(x))
    if st != "float":                  # x as the graph holds it (fp16/bf16), then widened again
        val = f"plus_f(plus_cvt<{st}>({val}))"
    em.emit(f"return {val};")
    em.bound = saved[2]
    cols = [t for t in used if used[t]]
    try:
        tile = prog.tile_hook({t: job.out_ptr(t) for t in row_out}, X_FN, cols)
    except RenderError:
        em.lines, em.memo = saved[0], saved[1]
        raise
    body = em.take()
    params = "".join(f", {used[t]} col{k}" for k, t in enumerate(cols))
    x_fn = (f"PLUS_DEV float {X_FN}(const PlusArgs& args, long long b, long long m, long long n, float acc{params}) "
            f"{{\n{body}\n}}\n")
    return x_fn, tile


def _bind_columns(em, x, idx, N) -> dict:
    """Bind each input of the GEMM-side subgraph that varies along the row only (a bias [N]) to a parameter
    `col<k>` of the x hook where it is read at x's own column; returns {input: its C type, or None while no
    read used the parameter}, in parameter order. The row tile loads them once per CTA (row.py
    _column_weights); any other read is pulled as before."""
    shape_x = em.shape(x)
    used = {}
    for t in em.inputs:
        arr = em._const(t)
        shp = em.shape(t) if t not in em.bound else None
        if not shp or (arr is not None and arr.size <= LITERAL_ELEMENTS) or len(shp) > len(shape_x) or \
                symdim.parse(shp[-1]) != symdim.parse(N) or any(symdim.parse(d) != 1 for d in shp[:-1]):
            continue
        canon = em.broadcast(idx, shp, shape_x)
        k, ct = len(used), dtypes.compute(em.dtype(t))
        used[t] = None

        def param(i, t=t, k=k, ct=ct):
            used[t] = ct
            return f"col{k}", ct
        bind_at(em, t, lambda i, canon=canon: list(i) == list(canon), param)
    return used
