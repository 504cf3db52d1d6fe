"""Shape routes: which variant runs for which shapes, chosen by an analytic model, not by tuning.

A GEMM's candidates are the arch's tile menu (kernels/gemm/configs.py, sm90a_configs.py), each alone or
with its K range split: inside a thread-block cluster whose CTAs sum their partial tiles through
distributed shared memory (sm_90a, one launch), or through fp32 scratch and a second kernel
(plus_splitk_reduce; other archs). Each candidate's time is modelled by kernels/perfmodel.py, the same
wave-aware model `plus-ep profile --emulate` applies to the interpreter's counts, fed here with the
candidate's analytic counts: CTAs, the tile work it pads to, the bytes every CTA moves through L2 (its A
and B tiles over its K range, its share of C, the other splits' partial rows it reads through distributed
shared memory, counted like L2 traffic) and the compulsory DRAM bytes (A, B and C once, the split's
partials). A second launch costs a stream launch gap (perfmodel.GAP_STREAM_S), and a plan of two launches
must be modelled LAUNCH_PREFERENCE (10 %) faster than the best one-launch plan to be chosen. The fastest
candidate wins; ties go to the one kernel, then to the tile that pads least, then the larger tile, then no
split.
The symbolic dim (M = batch·seq for most GEMMs) is sampled at powers of two; neighbouring samples with
the same choice form one route `M <= bound`, the last route is `1`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from . import arch as arch_table
from . import perfmodel
from .gemm import configs as gemm_configs
from .codegen import symdim
from .codegen.pull import RenderError

ALWAYS = "1"
SAMPLES = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 65536]
GUESS = 512                       # a symbolic N/K (rare) is assumed to be this large
SCRATCH_SPLITS = (2, 4)           # split-K through scratch (two launches): K >= 1024, each part >= 128
CLUSTER_SPLITS = (2, 4, 8)        # split-K inside a cluster (sm_90a wgmma template, PLUS_SPLITK_CLUSTER)
MAX_CLUSTER = 8                   # portable thread-block clusters

class NoConfig(RenderError):
    """Every config of a menu is excluded or does not fit the arch."""


def _usable(menu, target, what):
    """The configs of `menu` the target allows: not excluded (the kernel build excludes configs that
    spilled or exceeded the arch's resources when compiled, so a smaller one replaces them) and
    fitting the arch's shared memory."""
    arch, excluded = target.arch, target.excluded
    room = arch_table.get(arch).smem_per_block - arch_table.RESERVED_SMEM_PER_BLOCK
    out = [c for c in menu if c.name not in excluded and c.smem_bytes <= room]
    if not out:
        raise NoConfig(f"no {what} configuration left for {arch} (excluded after compiling: "
                       f"{', '.join(sorted(excluded & {c.name for c in menu})) or 'none'}; "
                       f"shared memory per block {room} bytes)")
    return out



def sm_count(arch) -> int:
    return arch_table.get(arch).sms


def _value(expr, sample) -> int:
    expr = symdim.parse(expr)
    if expr.is_Integer:
        return int(expr)
    return max(1, int(expr.subs({s: 1 for s in expr.free_symbols if s != _main(expr)}).subs(_main(expr), sample)))


def _main(expr):
    syms = sorted(expr.free_symbols, key=str)
    return syms[-1] if syms else None


# ---- GEMM -------------------------------------------------------------------------------------
def gemm_math(dtype, fp32_math) -> int:
    from onnx import TensorProto
    if dtype in (TensorProto.FLOAT16, TensorProto.BFLOAT16):
        return gemm_configs.MATH_F16
    return gemm_configs.MATH_TF32 if fp32_math == "tf32" else gemm_configs.MATH_SIMT


def gemm_menu(math_, arch):
    """The plain GEMM menu of a math path on an arch; on sm_90a the wgmma tiles plus the small ones (64 x 64)
    that spread a weight-dominated GEMM over more SMs."""
    if math_ == gemm_configs.MATH_F16 and arch_table.get(arch).wgmma:
        from .gemm import sm90a_configs as gemm_sm90a_configs
        return gemm_sm90a_configs.CONFIGS + gemm_sm90a_configs.SMALL_CONFIGS
    return gemm_configs.configs(math_)


def _is_sm90a(cfg) -> bool:
    return cfg.name.startswith("wg_")


def gemm_header(cfg) -> str:
    return "gemm_sm90a.cuh" if _is_sm90a(cfg) else "gemm.cuh"


def padding_waste(cfg, m, n) -> float:
    return (math.ceil(m / cfg.bm) * cfg.bm * math.ceil(n / cfg.bn) * cfg.bn) / (m * n) - 1.0


@dataclass(frozen=True)
class GemmChoice:
    """One route's variant: a config, its K split (through scratch, or inside the cluster) and, for the row
    tile of GEMM + row normalisation, the CTAs of a cluster along a row of C (`cx`)."""
    cfg: object
    split: int = 1            # K parts summed through scratch[0] by plus_splitk_reduce (a second launch)
    csplit: int = 1           # K parts summed through distributed shared memory (the cluster's z)
    cx: int = 1               # CTAs along a row of C in the row tile's cluster
    row_tile: bool = False    # the one-kernel GEMM + row normalisation (norm_render.py)
    finish: bool = False      # GEMM + row program in one launch: the last CTA of a row group finishes its rows
    us: float = 0.0           # modelled time of the choice's launches (perfmodel), for reports and tests
    cost: float = 0.0         # what routes compare: `us`, raised by LAUNCH_PREFERENCE for a two-launch plan

    def key(self) -> tuple:
        return (self.cfg.name, self.split, self.csplit, self.cx, self.row_tile, self.finish)

    @property
    def label(self) -> str:
        parts = [f"cluster{self.cx}"] if self.row_tile else []
        if self.csplit > 1:
            parts.append(f"csplit{self.csplit}")
        if not parts:
            parts.append(f"splitk{self.split}")
        if self.finish:
            parts.append("finish")
        return f"{self.cfg.name}/" + "-".join(parts)


def _elem(math_) -> int:
    return 2 if math_ == gemm_configs.MATH_F16 else 4


def _model_math(math_) -> str:
    return {gemm_configs.MATH_F16: "fp16", gemm_configs.MATH_TF32: "tf32", gemm_configs.MATH_SIMT: "exact"}[math_]


def gemm_time(cfg, m, n, k, batch, arch, split=1, csplit=1, cx=1, a_batch=None, out_bytes=None) -> float:
    """Modelled microseconds of a GEMM variant on the arch's reference part (kernels/perfmodel.py): the
    plus_gemm launch, plus plus_splitk_reduce and a launch gap when the split goes through scratch.
    `a_batch`: distinct A matrices (a horizontal group shares one; default `batch`); `out_bytes`: bytes per
    C element the epilogue stores (default the operand size); `cx`: CTAs along a row of C in one cluster
    (the row tile of GEMM + row normalisation; its cluster is cx x csplit CTAs)."""
    elem = _elem(cfg.math)
    out_b = elem if out_bytes is None else out_bytes
    a_batch = batch if a_batch is None else a_batch
    parts = max(split, csplit)
    ktiles = math.ceil(k / cfg.bk)
    k_part = min(k, math.ceil(ktiles / parts) * cfg.bk)
    tiles_m, tiles_n = math.ceil(m / cfg.bm), math.ceil(n / cfg.bn)
    ctas = tiles_m * tiles_n * batch * parts
    # mma.sync and SIMT tiles feed their math from shared memory through registers: a tile whose
    # reuse bm*bn/(bm+bn) is under 64 issues that much more shared-memory traffic per FLOP, modelled as that
    # much more work (the previous route model's rule). wgmma reads its operands from shared memory itself.
    reuse = 1.0 if _is_sm90a(cfg) else min(1.0, (cfg.bm * cfg.bn / (cfg.bm + cfg.bn)) / 64.0)
    flops = 2.0 * cfg.bm * cfg.bn * k_part * ctas / reuse
    c_tile = cfg.bm * cfg.bn * (4 if split > 1 else out_b) / csplit
    dsmem = cfg.bm * cfg.bn * 4 * (csplit - 1) / csplit      # the other splits' rows, read through DSMEM
    # A rows past M and B columns past N are zero-filled, not read
    l2 = ctas * ((min(cfg.bm, m) + min(cfg.bn, n)) * k_part * elem + c_tile + dsmem)
    dram = (a_batch * m * k + batch * k * n) * elem + batch * m * n * out_b
    if split > 1:
        dram += batch * m * n * (4 * split - out_b)         # the fp32 partials instead of C
    est = perfmodel.launch_time(arch, ctas=ctas, threads=cfg.threads, smem=cfg.smem_bytes, flops=flops,
                                dram_bytes=dram, l2_bytes=l2, math_=_model_math(cfg.math),
                                cluster=cx * csplit)
    us = est.modelled_us
    if split > 1:          # plus_splitk_reduce: every partial read once, C written once; 256 threads
        total = batch * m * n
        red = perfmodel.launch_time(arch, ctas=math.ceil(total / 256), threads=256, smem=0, flops=total * split,
                                    dram_bytes=total * (4 * split + out_b), l2_bytes=total * (4 * split + out_b),
                                    math_="exact")
        us += red.modelled_us + perfmodel.GAP_STREAM_S * 1e6
    return us


def _cluster_splits(cfg, k, cx=1, max_cluster=MAX_CLUSTER) -> list:
    """K splits a config can take inside a cluster: each split reduces whole 8-row groups of the tile and
    gets at least one k-tile; the cluster (cx x split CTAs) stays within `max_cluster`."""
    if not _is_sm90a(cfg):
        return []
    ktiles = math.ceil(k / cfg.bk)
    return [s for s in CLUSTER_SPLITS if cfg.bm % (8 * s) == 0 and s <= ktiles and cx * s <= max_cluster]


def best_gemm(m, n, k, batch, menu, target, allow_splitk=True, a_batch=None, out_bytes=None,
              scratch_split=True) -> GemmChoice:
    """The fastest GEMM variant by the model; `scratch_split` False keeps scratch[0] free (no split-K through
    scratch, only inside a cluster)."""
    return gemm_candidates(m, n, k, batch, menu, target, allow_splitk, a_batch, out_bytes, scratch_split)[0]


def gemm_candidates(m, n, k, batch, menu, target, allow_splitk=True, a_batch=None, out_bytes=None,
                    scratch_split=True, cluster_split=True) -> list:
    """Every GEMM variant of the menu with its modelled time (GemmChoice.us), fastest first. `cluster_split`
    False (a gated GEMM, whose epilogue reads two interleaved products) offers the sm_90a configs split-K
    through scratch instead of inside a cluster."""
    arch = target.arch
    fits = _usable(menu, target, "GEMM")
    cands = []
    for c in fits:
        opts = [(1, 1)]
        if allow_splitk:
            if _is_sm90a(c) and cluster_split:
                opts += [(1, s) for s in _cluster_splits(c, k)]
            elif k >= 1024 and scratch_split:
                opts += [(s, 1) for s in SCRATCH_SPLITS if math.ceil(k / s) >= 128]
        for split, csplit in opts:
            us = gemm_time(c, m, n, k, batch, arch, split, csplit, a_batch=a_batch, out_bytes=out_bytes)
            cost = us * (1 + LAUNCH_PREFERENCE) if split > 1 else us        # split through scratch: two launches
            cands.append((round(cost, 6), _waste(c, m, n), -c.bm * c.bn, split * csplit,
                          GemmChoice(c, split, csplit, us=us, cost=cost)))
    return [x[4] for x in sorted(cands, key=lambda x: x[:4])]


def _waste(cfg, m, n) -> float:
    """Padding waste, rounded: among equally fast candidates the one that pads least wins."""
    return round(padding_waste(cfg, m, n), 3)


ROUTE_TOLERANCE = 0.05        # a neighbouring sample's choice within 5 % of the best is kept (fewer variants)
# A plan of more launches must be modelled this much faster to be chosen: beyond the GPU-side gap the model
# charges, a launch costs host time (the driver's launch call, ORT's dispatch when no CUDA graph replays the
# run) and the two-kernel plans' fp32 scratch costs an allocation and L2 capacity the model does not see.
LAUNCH_PREFERENCE = 0.10


def sampled_routes(M, syms, ranked) -> list:
    """[(condition rpn, choice)] from `ranked(m) -> [choices, fastest first]` (each with .key() and .cost) at
    static M, or at SAMPLES of the symbolic M; the last condition is ALWAYS. At a sample where the previous
    sample's choice is within ROUTE_TOLERANCE of the fastest, it is kept: the model is not that precise, and
    every distinct choice is another variant to compile."""
    M = symdim.parse(M)
    if M.is_Integer:
        return [(ALWAYS, ranked(int(M))[0])]
    picks, prev = [], None
    for s in SAMPLES:
        cands = ranked(_value(M, s))
        choice = cands[0]
        if prev is not None:
            same = [c for c in cands if c.key() == prev.key()]
            if same and same[0].cost <= choice.cost * (1 + ROUTE_TOLERANCE):
                choice = same[0]
        picks.append((s, choice))
        prev = choice
    routes = []
    for i, (s, choice) in enumerate(picks):
        last = i == len(picks) - 1
        if not last and picks[i + 1][1].key() == choice.key():
            continue
        routes.append((ALWAYS if last else f"{syms.rpn(M)},{_value(M, s)},<=", choice))
    return routes


def gemm_routes(M, N, K, batch, dtype, target, syms, allow_splitk=True, menu=None, a_batch=None,
                cluster_split=True):
    """[(condition rpn, GemmChoice)] in order; the last condition is ALWAYS. `menu`: the configs to choose
    from (default: the arch's menu for the math); `a_batch`: distinct A matrices (a group shares one);
    `cluster_split`: see gemm_candidates."""
    arch = target.arch
    menu = gemm_menu(gemm_math(dtype, target.fp32_math), arch) if menu is None else menu
    n, k = _static(N), _static(K)
    b = _static(batch, 1)
    ab = None if a_batch is None else _static(a_batch, 1)
    return sampled_routes(M, syms, lambda m: gemm_candidates(m, n, k, b, menu, target, allow_splitk, ab,
                                                             cluster_split=cluster_split))


def _rows_time(m, n, arch, out_bytes, ctas, threads) -> float:
    """Modelled microseconds of a row program over m rows of n fp32 inputs from scratch, writing rows of
    `out_bytes` elements, spread over `ctas` CTAs of `threads` threads."""
    nbytes = m * n * (4 + out_bytes)
    return perfmodel.launch_time(arch, ctas=ctas, threads=threads, smem=0, flops=8.0 * m * n, dram_bytes=nbytes,
                                 l2_bytes=nbytes, math_="exact").modelled_us


def row_kernel_time(m, n, arch, out_bytes=2) -> float:
    """Modelled microseconds of the two-kernel plan's row program (plus_row: one CTA of 256 threads per row,
    reading the fp32 scratch row, writing the output row) plus the launch gap it adds."""
    return _rows_time(m, n, arch, out_bytes, max(1, min(m, 65535)), 256) + perfmodel.GAP_STREAM_S * 1e6


def row_finish_time(m, n, arch, cfg, csplit, out_bytes=2) -> float:
    """Modelled microseconds the one-launch plan's row finish adds after its GEMM (gemm_hooks.cuh
    plus_finish_rows): the last CTA of each row group (cdiv(m, BM) x csplit groups) runs the row program
    over its rows with the GEMM's threads, after the group's other CTAs, so the model adds it whole
    (a serial tail, not overlapped with the GEMM)."""
    groups = max(1, math.ceil(m / cfg.bm) * csplit)
    return _rows_time(m, n, arch, out_bytes, groups, cfg.threads)


def gemm_norm_routes(M, N, K, dtype, target, syms, tile_menus=None, a_batch=None, finish=False):
    """Routes of GEMM + row normalisation (one batch): [(condition rpn, kind, GemmChoice)], kind "tile" (one
    kernel: the row tile over a cluster of cx x csplit CTAs, sm_90a), "two" (the GEMM epilogue writes the
    row input to fp32 scratch, plus_row finishes the rows: two launches) or, with `finish`, "one" (the same
    GEMM, whose last CTA of each row group finishes those rows: one launch). `tile_menus`: [(cx, configs)],
    one per width, of the row tile (None: no row tile route). Each sample of M takes the faster by the model."""
    arch = target.arch
    n, k = _static(N), _static(K)
    menu = gemm_menu(gemm_math(dtype, target.fp32_math), arch)
    elem = _elem(gemm_math(dtype, target.fp32_math))
    tiles = []
    for cx, configs in (tile_menus or []):
        for c in configs:
            for s in [1] + _cluster_splits(c, k, cx):
                tiles.append((c, cx, s))

    def ranked(m):
        cands = []
        for c, cx, s in tiles:
            us = gemm_time(c, m, n, k, 1, arch, csplit=s, cx=cx)
            cands.append((round(us, 6), 0, _waste(c, m, n), -c.bm * c.bn, s,
                          ("tile", GemmChoice(c, 1, s, cx, row_tile=True, us=us, cost=us))))
        try:
            row_us = row_kernel_time(m, n, arch, elem)
            for two in gemm_candidates(m, n, k, 1, menu, target, allow_splitk=True, a_batch=a_batch, out_bytes=4,
                                       scratch_split=False):
                us = two.us + row_us
                cost = us * (1 + LAUNCH_PREFERENCE)
                cands.append((round(cost, 6), 2, _waste(two.cfg, m, n), -two.cfg.bm * two.cfg.bn, two.csplit,
                              ("two", GemmChoice(two.cfg, 1, two.csplit, 1, us=us, cost=cost))))
                if finish:
                    us = two.us + row_finish_time(m, n, arch, two.cfg, two.csplit, elem)
                    cands.append((round(us, 6), 1, _waste(two.cfg, m, n), -two.cfg.bm * two.cfg.bn, two.csplit,
                                  ("one", GemmChoice(two.cfg, 1, two.csplit, 1, finish=True, us=us, cost=us))))
        except NoConfig:
            if not cands:
                raise
        return [_Kinded(*x[5]) for x in sorted(cands, key=lambda x: x[:5])]

    return [(cond, ch.kind, ch.choice) for cond, ch in sampled_routes(M, syms, ranked)]


@dataclass(frozen=True)
class _Kinded:
    kind: str
    choice: GemmChoice

    def key(self) -> tuple:
        return (self.kind,) + self.choice.key()

    @property
    def cost(self) -> float:
        return self.choice.cost


def gemm_defines(cfg, splitk, trans_b, aligned=False, splitk_cluster=1) -> dict:
    if _is_sm90a(cfg):
        from .gemm import sm90a_configs as mod
        return mod.defines(cfg, b_trans=int(trans_b), aligned=int(bool(aligned)), splitk=splitk,
                           splitk_cluster=splitk_cluster)
    if splitk_cluster > 1:
        raise ValueError(f"{cfg.name}: split-K in a cluster needs the sm_90a wgmma template")
    return gemm_configs.defines(cfg, b_trans=int(trans_b), aligned=int(bool(aligned)), splitk=splitk)


def gemm_rows_aligned(K, ldb, dtype) -> bool:
    """Static proof for PLUS_ALIGNED=1: operand bases are 16-byte aligned (CONTRACT §2.1), lda = K and
    ldb are whole 16-byte chunks, and batch offsets are multiples of lda / ldb rows. Symbolic K or ldb:
    no proof (the templates then check alignment at run time)."""
    from onnx import TensorProto
    elem = 4 if dtype == TensorProto.FLOAT else 2
    k, ld = symdim.parse(K), symdim.parse(ldb)
    return bool(k.is_Integer and ld.is_Integer and (int(k) * elem) % 16 == 0 and (int(ld) * elem) % 16 == 0)


def _static(expr, default=GUESS) -> int:
    e = symdim.parse(expr)
    return int(e) if e.is_Integer else default


# ---- attention ----------------------------------------------------------------------------------
def attention_math(dtypes, fp32_math) -> int:
    """PLUS_MATH of an attention whose Q, K and V have these ONNX dtypes: one 16-bit float type -> f16/bf16
    tensor cores (2); fp32 -> TF32 tensor cores (1) under fp32_math "tf32" (the default, as the GEMMs), else
    exact SIMT (0); mixed types -> SIMT."""
    from onnx import TensorProto

    from .attention import configs as ac
    dtypes = set(dtypes)
    if len(dtypes) == 1 and dtypes <= {TensorProto.FLOAT16, TensorProto.BFLOAT16}:
        return ac.MATH_F16
    if dtypes == {TensorProto.FLOAT} and fp32_math == "tf32":
        return ac.MATH_TF32
    return ac.MATH_SIMT


def attention_routes(B, H, Sq, Skv, D, target, syms, math_=0):
    from .attention import configs as ac
    arch = target.arch
    dp = _padded(D)
    def menu_of(m):
        return list(ac.CONFIGS.get((m, dp)) or [ac.make_config(m, dp, *e[:3], None, *e[3:]) for e in ac.entries(m, dp)])
    try:
        menu = _usable(menu_of(math_), target, f"attention (head dim {D})")
    except NoConfig:
        if math_ == ac.MATH_SIMT:
            raise
        # every tensor-core config spilled or does not fit: the SIMT fp32 path reads the same hooks
        # (plus_qkv_t is then unused) and needs other registers, so the subgraph keeps a kernel
        menu = _usable(menu_of(ac.MATH_SIMT), target, f"attention (head dim {D}, SIMT)")
    b, h = _static(B, 1), _static(H, 1)
    Sq = symdim.parse(Sq)

    def best(sq, skv):
        def cost(c):
            blocks = math.ceil(sq / c.bq) * b * h
            per_sm = max(1, arch_table.get(arch).threads_per_sm // (c.warps * 32))
            waves = math.ceil(blocks / (sm_count(arch) * per_sm))
            return waves * c.bq * skv, -c.bq
        return min(menu, key=cost)
    if Sq.is_Integer:
        return [(ALWAYS, best(int(Sq), _static(Skv, int(Sq))))]
    picks = [(s, best(_value(Sq, s), _value(Skv, s) if not symdim.parse(Skv).is_Integer else int(Skv)))
             for s in SAMPLES]
    routes = []
    for i, (s, cfg) in enumerate(picks):
        last = i == len(picks) - 1
        if not last and picks[i + 1][1] == cfg:
            continue
        routes.append((ALWAYS if last else f"{syms.rpn(Sq)},{_value(Sq, s)},<=", cfg))
    return routes


def _padded(d) -> int:
    return max(16, int(math.ceil(int(d) / 16) * 16))


def attention_defines(cfg, D) -> dict:
    from .attention import configs as ac
    return ac.defines(cfg)


__all__ = ["ALWAYS", "GemmChoice", "attention_defines", "attention_math", "attention_routes", "gemm_defines", "gemm_header",
           "gemm_norm_routes", "gemm_routes"]
