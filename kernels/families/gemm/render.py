"""GEMM subgraphs: MatMul/Gemm + element-wise epilogue (bias, GELU, residual, reshape/transpose
stores); the problem, accumulator and route variants the families rendering into the gemm templates share."""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace

from ...codegen import dtypes, symdim
from . import routes
from ...codegen.cexpr import attr, lit
from ...codegen.forward import bind_forward, emit_stores, forward_map
from . import configs as gemm_configs, int8, nbits, sm90a_configs, tma
from .hooks import gemm_hooks
from ...codegen.pull import RenderError, describe
from ...codegen.row import ROW_OPS

ENTRY, SPLITK_ENTRY = "plus_gemm", "plus_splitk_reduce"     # the kernels gemm.cuh and gemm_sm90a.cuh define

def _operands(job, em, seed, roles=None):
    """A and B: the roles identification found (`roles`: a GemmOperands, default the subgraph's), else the
    seed's."""
    roles = job.roles if roles is None else roles
    a, b = (roles.a, roles.b) if roles is not None else (seed.input[0], seed.input[1])
    for role, t in (("A", a), ("B", b)):
        if t not in job.inputs:
            raise RenderError(f"{describe(seed)}: operand {role} '{t}' is computed inside the subgraph; "
                              "the gemm template reads its operands from memory")
    dta, dtb = em.dtype(a), em.dtype(b)
    if seed.op_type == "MatMulInteger":
        dta = int8.a_type(job, em, dta)             # quantized in the kernel: the QuantizeLinear's type
        int8.check(seed, dta, dtb)
        return a, b, dta
    if dta != dtb or dta not in dtypes.FLOATS:
        raise RenderError(f"{describe(seed)}: operand types {dta}/{dtb} (need one of float/float16/bfloat16)")
    return a, b, dta


@dataclass(frozen=True)
class GemmProblem:
    """One GEMM node's problem: C [batch.., M, N] = A [.., M, K] · B [.., K, N] (B [N, K] with `trans_b`).
    `a_off(bvar)` / `b_off(bvar)`: the C offset of batch `bvar`'s A / B matrix; `c_index()`: the index of C's
    element (m, n) in the node's output."""
    batch: list
    M: object
    N: object
    K: object
    trans_b: bool
    a_off: Callable[[str], str]
    b_off: Callable[[str], str]
    c_index: Callable[[], list]

    def key(self, with_n: bool = True) -> tuple:
        """What the GEMMs of one launch share (a group's members may differ in N)."""
        dims = (str(self.batch), str(self.M)) + ((str(self.N),) if with_n else ()) + (str(self.K),)
        return dims + (self.trans_b, self.a_off("b"), self.b_off("b"))


def _problem(em, seed, a, b) -> GemmProblem:
    """The problem of GEMM node `seed` with operands `a` and `b`."""
    sa, sb, sc = em.shape(a), em.shape(b), em.shape(seed.output[0])
    if seed.op_type == "Gemm":
        if attr(seed, "transA", 0):
            raise RenderError(f"{describe(seed)}: transA=1 is not supported by the gemm template")
        tb = bool(attr(seed, "transB", 0))
        M, K = sa
        N = sb[0] if tb else sb[1]
        return GemmProblem([], M, N, K, tb, (lambda b_: "0"), (lambda b_: "0"), (lambda: ["m", "n"]))
    if len(sa) < 2 or len(sb) < 2:
        raise RenderError(f"{describe(seed)}: 1-D MatMul operands are not supported by the gemm template")
    K, N = sa[-1], sb[-1]
    if len(sb) == 2 or all(d == 1 for d in sb[:-2]):
        M = symdim.numel(sa[:-1])
        return GemmProblem([], M, N, K, False, (lambda b_: "0"), (lambda b_: "0"),
                           (lambda: em.delinear("m", sc[:-1]) + ["n"]))
    M = sa[-2]
    batch = sc[:-2]

    def offset(shape, rows, cols):
        def f(bvar):
            bidx = em.delinear(bvar, batch)
            own = em.broadcast(bidx, shape[:-2], batch)
            lin = em.linear(own, shape[:-2])
            return "0" if lin == "0" else f"({lin}) * {em.c(rows * cols)}"
        return f
    return GemmProblem(batch, M, N, K, False, offset(sa, M, K), offset(sb, K, N),
                       lambda: em.delinear("b", batch) + ["m", "n"])


def _setup(job):
    """A GEMM subgraph's problem and a fresh emitter holding the accumulator's forward map (called once per
    kernel plan rendered: the one-kernel row tile and the two-kernel plan each take their own emitter)."""
    seed = job.view.nodes[job.roles.gemm if job.roles is not None else job.sg.seed]
    if seed.op_type not in ("MatMul", "Gemm", "MatMulInteger"):
        raise RenderError(f"{describe(seed)}: the gemm template grows from MatMul, Gemm or MatMulInteger")
    em = job.emitter()
    nb = job.roles.nbits if job.roles is not None else None    # B decoded from MatMulNBits' packed weights (nbits.py)
    a, b, dt = _nbits_operands(job, em, seed) if nb else _operands(job, em, seed)
    pr = _problem(em, seed, a, b)
    ka = job.inputs.index(a)
    kb = ka if nb else job.inputs.index(b)
    trans_b = True if nb else pr.trans_b     # a decoder reads B as [N][K]
    nbatch = symdim.numel(pr.batch)
    # ---- the accumulator and what follows it --------------------------------------------------
    cout = _bind_acc(em, seed)
    row_nodes = [n for n in job.nodes if n.op_type in ROW_OPS]
    em.emit("(void)args; (void)b;")
    fwd = forward_map(em, cout, pr.c_index(), barriers={id(n) for n in row_nodes})
    bind_forward(em, fwd, cout)
    dep_c = job.depends_on([cout])
    dep_row = job.depends_on([o for n in row_nodes for o in n.output])
    epi = {t: (*job.out_ptr(t), em.shape(t)) for t in job.outputs if t in dep_c and t not in dep_row}
    row_out = [t for t in job.outputs if t in dep_row]
    side = [t for t in job.outputs if t not in dep_c]
    tmaps = None if nb or int8.quantizes_a(job) else tma.operands(dt, pr.M, pr.K, nbatch, trans_b, pr.batch, [(ka, em.shape(a))],
                                         [(kb, em.shape(b), pr.N, pr.K if trans_b else pr.N)])
    return SimpleNamespace(seed=seed, em=em, dt=dt, M=pr.M, N=pr.N, K=pr.K, trans_b=trans_b, a_off=pr.a_off, b_off=pr.b_off,
                           ka=ka, kb=kb, nbatch=nbatch, cout=cout, row_nodes=row_nodes, fwd=fwd, dep_c=dep_c,
                           dep_row=dep_row, epi=epi, row_out=row_out, side=side, nb=nb,
                           i8=seed.op_type == "MatMulInteger", tma=tmaps)


def render_gemm(job):
    """MatMul/Gemm with an element-wise epilogue (bias, GELU, residual, reshape/transpose stores)."""
    st = _setup(job)
    if st.row_nodes:
        raise RenderError(f"{describe(st.row_nodes[0])} reduces after the GEMM: the gemm template's epilogue is "
                          "element-wise (a row normalisation after a GEMM has a family of its own)")
    return _render_plain(job, st, *_side_and_menu(job, st))


def _side_and_menu(job, st) -> tuple:
    """(point-wise kernels of the outputs the GEMM does not compute, the config menu: None for the arch's)."""
    extra = job.side_kernels(st.side)
    # a MatMulNBits B is decoded by gemm.cuh's mainloop (nbits.py): that template's menu on every arch
    # an 8-bit GEMM (MatMulInteger): the mma.sync m16n8k32 menu on every arch, and on sm_90a the 8-bit TMA tiles
    # when the operands have tensor maps; exact sums, never split (int8.py)
    if st.i8:
        return extra, routes.gemm_menu(gemm_configs.MATH_INT8, job.target.arch, tma=st.tma is not None,
                                       b_kmajor=st.trans_b)
    menu = gemm_configs.configs(routes.gemm_math(st.dt, job.fp32_math)) if st.nb else None
    return extra, menu


def _render_plain(job, st, extra, menu) -> list:
    """The variants of a GEMM whose epilogue stores every output the GEMM result reaches."""
    m_fastest = _m_fastest(st.fwd, st.epi)
    emit_stores(st.em, st.fwd, st.epi)
    hooks = gemm_hooks(st.em, st.M, st.N, st.K, st.nbatch, st.trans_b, st.ka, st.kb, st.a_off, st.b_off, st.dt)
    if st.nb:
        hooks += nbits.chunk_hook(job, st.em, st.nb)
    if st.i8:
        hooks = int8.b_typedef(st.em, st.seed) + hooks + int8.a_quant_hook(job)
    return _variants(job, st.M, st.N, st.K, st.nbatch, st.dt, st.trans_b, hooks, m_fastest, extra, menu=menu,
                     allow_splitk=not st.i8, tmaps=st.tma)


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
    elif seed.op_type == "MatMulInteger":          # the exact s32 sum, an int in the epilogue (int8.py)
        em.bound[cout] = lambda idx: ("((long long)acc)", "long long")
    else:
        alpha = attr(seed, "alpha", 1.0) if seed.op_type == "Gemm" else 1.0
        em.bound[cout] = (lambda idx: ("acc", "float")) if alpha == 1.0 else (
            lambda idx: (em.tmp(f"{lit(alpha)} * acc", "float"), "float"))
    return cout


def _variants(job, M, N, K, nbatch, dt, trans_b, hooks, m_fastest, extra, allow_splitk=True, m_fastest_hook="",
              a_batch=None, menu=None, gated=False, aligned=None, tmaps=None):
    """One variant per route: (name, prefix, kernels, condition). `m_fastest`: every store is contiguous
    along m; `m_fastest_hook`: the source of plus_epi_m_fastest(args, b) when that holds per batch index;
    `a_batch`: distinct A matrices when not one per batch index (a horizontal group shares its A); `menu`:
    the configs to choose from (default: the arch's menu).
    `gated`: two products of N columns each (PLUS_GATED): tiles are chosen and the grid covers 2N interleaved
    columns, split-K keeps two partial planes; its epilogue reads both products of a column pair, so split-K
    goes through scratch, never inside a cluster. `aligned`: the caller's PLUS_ALIGNED proof (default: lda = K
    and ldb = N, or K with trans_b, whole 16-byte chunks). `tmaps`: the operands' tensor maps (tma.py) when
    they can have them: the TMA tiles (gemm_sm90a_ws.cuh) join the menu."""
    width = 2 * symdim.parse(N) if gated else N
    choices = routes.gemm_routes(M, width, K, nbatch, dt, job.target, job.syms, allow_splitk=allow_splitk,
                                 a_batch=a_batch, menu=menu, cluster_split=not gated, tma=tmaps is not None,
                                 gated=gated)
    max_split = max(c.split for _, c in choices)
    if max_split > 1:      # split-K partials live in scratch[0] (no row program in this subgraph)
        job.plan.scratch.append(f"{job.syms.rpn(nbatch * M * N)},{max_split * (2 if gated else 1)},*,4,*")
    return [_variant(job, M, N, nbatch, trans_b, K, dt, hooks, m_fastest, extra, cond, choice, m_fastest_hook,
                     gated=gated, aligned=aligned, tmaps=tmaps)
            for cond, choice in choices]


def _variant(job, M, N, nbatch, trans_b, K, dt, hooks, m_fastest, extra, cond, choice, m_fastest_hook="",
             gated=False, aligned=None, finish=None, tmaps=None):
    """(name, prefix, kernels, condition) of one route's GemmChoice (no row tile). `finish`: the scratch index
    of the row groups' arrival words of the one-launch GEMM + row program (its `hooks` define row.FINISH_FN).
    `tmaps`: the operands' tensor maps, for a TMA tile (gemm_sm90a_ws.cuh)."""
    cfg, splitk, csplit = choice.cfg, choice.split, choice.csplit
    if sm90a_configs.is_ws(cfg):
        return _ws_variant(job, M, N, nbatch, trans_b, dt, hooks, m_fastest, extra, cond, choice, m_fastest_hook,
                           gated, finish, tmaps)
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
    kernels = [("", ENTRY, (grid, (str(cfg.threads), "1", "1"), str(cfg.smem_bytes)))]
    if splitk > 1:
        total = job.syms.rpn(nbatch * M * N)
        kernels.append(("", SPLITK_ENTRY, ((f"{total},256,cdiv", "1", "1"), ("256", "1", "1"), "0")))
    return (choice.label, prefix, kernels + extra, cond)


def _ws_variant(job, M, N, nbatch, trans_b, dt, hooks, m_fastest, extra, cond, choice, m_fastest_hook, gated,
                finish, tmaps):
    """(name, prefix, kernels, condition) of a TMA tile's route (gemm_sm90a_ws.cuh): its defines, the map hooks,
    and one plus_gemm launch over min(work units, the CTAs the SMs hold) persistent CTAs (one unit per CTA with
    the row finish) that takes the kernel line's tensor maps."""
    cfg, splitk = choice.cfg, choice.split
    defines = sm90a_configs.ws_defines(cfg, b_trans=int(trans_b), splitk=splitk, persistent=finish is None)
    if gated:
        defines["PLUS_GATED"] = 1
    if finish is not None:
        defines["PLUS_HAS_ROW_FINISH"], defines["PLUS_ROW_FINISH"] = 1, finish
    per_batch = ""
    if splitk == 1 and not gated:
        if m_fastest:
            defines["PLUS_EPI_M_FASTEST"] = 1
        elif m_fastest_hook:
            defines["PLUS_EPI_M_FASTEST"], per_batch = 2, m_fastest_hook
    prefix = "".join(f"#define {k} {v}\n" for k, v in defines.items())
    prefix += hooks + per_batch + tmaps.hooks() + f'#include "{routes.gemm_header(cfg)}"\n'
    cols = cfg.bn // 2 if gated else cfg.bn
    cl = sm90a_configs.ws_cluster(cfg)          # CTAs per cluster (B multicast): units count groups of m tiles
    units = (f"{job.syms.rpn(N)},{cols},cdiv,{job.syms.rpn(M)},{cfg.bm * cl},cdiv,*,{job.syms.rpn(nbatch)},*,"
             f"{splitk},*")
    cap = routes.ws_grid(cfg, 1 << 30, job.target.arch) // cl
    grid = (units if finish is not None else f"{units},{cap},min" + (f",{cl},*" if cl > 1 else ""), "1", "1")
    kernels = [("", ENTRY, (grid, (str(cfg.threads), "1", "1"), str(cfg.smem_bytes),
                            tmaps.records(cfg, job.syms, gated, cl)))]
    if splitk > 1:
        total = job.syms.rpn(nbatch * M * N)
        kernels.append(("", SPLITK_ENTRY, ((f"{total},256,cdiv", "1", "1"), ("256", "1", "1"), "0")))
    return (choice.label, prefix, kernels + extra, cond)


def _m_fastest(fwd, targets) -> bool:
    """Every epilogue store is contiguous along m (its last index reads m, not n; e.g. a stored Kᵀ): the
    sm_90a template then walks its staged C tile with m fastest, so each warp stores consecutive addresses."""
    lasts = [str(fwd[t][0][-1]) for t in targets if t in fwd]
    return bool(lasts) and all(re.search(r"\bm\b", x) and not re.search(r"\bn\b", x) for x in lasts)
