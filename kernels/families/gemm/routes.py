"""GEMM shape routes: which GEMM variant runs for which shapes, chosen by an analytic model, not by tuning.

A GEMM's candidates are the arch's tile menu (kernels/families/gemm/configs.py, sm90a_configs.py), each alone or
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
the same choice form one route `M <= bound`, the last route is `1` (kernels/routes.py sampled_routes, shared
by every family).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ... import arch as arch_table
from ... import perfmodel
from ...codegen import symdim
from ...routes import LAUNCH_PREFERENCE, NoConfig, _static, _usable, sampled_routes
from . import configs as gemm_configs
from . import sm90a_configs as gemm_sm90a_configs

SCRATCH_SPLITS = (2, 4)           # split-K through scratch (two launches): K >= 1024, each part >= 128
CLUSTER_SPLITS = (2, 4, 8)        # split-K inside a cluster (sm_90a wgmma template, PLUS_SPLITK_CLUSTER)
MAX_CLUSTER = 8                   # portable thread-block clusters


def gemm_math(dtype, fp32_math) -> int:
    from onnx import TensorProto
    if dtype in (TensorProto.FLOAT16, TensorProto.BFLOAT16):
        return gemm_configs.MATH_F16
    if dtype in (TensorProto.INT8, TensorProto.UINT8):
        return gemm_configs.MATH_INT8
    return gemm_configs.MATH_TF32 if fp32_math == "tf32" else gemm_configs.MATH_SIMT


def gemm_menu(math_, arch, tma=False, gated=False, b_kmajor=False):
    """The plain GEMM menu of a math path on an arch; on sm_90a the wgmma tiles plus the small ones (64 x 64)
    that spread a weight-dominated GEMM over more SMs, and with `tma` (the operands have tensor maps,
    tma.py) the warp-specialised persistent TMA tiles; `gated` (two products side by side in a tile) keeps
    the TMA tiles whose halves are whole 64-column boxes (BN 128 or 256). 8-bit operands: the mma.sync menu,
    plus on sm_90a with `tma` the 8-bit TMA tiles: for B stored [N, K] (`b_kmajor`) or, transposing its boxes in
    shared memory, [K, N] (8-bit wgmma reads K-major operands only)."""
    if math_ == gemm_configs.MATH_INT8 and tma and not gated and arch_table.get(arch).wgmma:
        return gemm_configs.configs(math_) + (gemm_sm90a_configs.WS8_CONFIGS if b_kmajor
                                              else gemm_sm90a_configs.WS8T_CONFIGS)
    if math_ == gemm_configs.MATH_F16 and arch_table.get(arch).wgmma:
        ws = tuple(c for c in gemm_sm90a_configs.WS_CONFIGS if not gated or c.bn % 128 == 0) if tma else ()
        return gemm_sm90a_configs.CONFIGS + gemm_sm90a_configs.SMALL_CONFIGS + ws
    return gemm_configs.configs(math_)


def forced_exclusions(arch) -> frozenset:
    """The sm_90a GEMM tiles PLUS_EP_GEMM_TILES (comma-separated fnmatch patterns) keeps out of the menus: every
    wgmma/TMA tile whose name matches none of them. Empty when unset or for another arch."""
    from fnmatch import fnmatch

    from .... import config     # the owner of every PLUS_EP_* variable
    pats = [p.strip() for p in (config.get("PLUS_EP_GEMM_TILES") or "").split(",") if p.strip()]
    if not pats or not arch_table.get(arch).wgmma:
        return frozenset()
    names = [c.name for c in gemm_sm90a_configs.CONFIGS + gemm_sm90a_configs.CLUSTER_CONFIGS
             + gemm_sm90a_configs.WS_CONFIGS + gemm_sm90a_configs.WS8_CONFIGS + gemm_sm90a_configs.WS8T_CONFIGS]
    return frozenset(n for n in names if not any(fnmatch(n, p) for p in pats))


def _is_sm90a(cfg) -> bool:
    return cfg.name.startswith(("wg_", "ws_", "ws8_", "ws8t_"))


def gemm_header(cfg) -> str:
    if gemm_sm90a_configs.is_ws(cfg):
        return "gemm_sm90a_ws.cuh"
    return "gemm_sm90a.cuh" if _is_sm90a(cfg) else "gemm.cuh"


def ws_grid(cfg, units: int, arch) -> int:
    """CTAs of a persistent gemm_sm90a_ws.cuh launch: one per SM (the ring fills an SM's shared memory), never
    more than its work units (units: groups of m tiles with B multicast, one per cluster of as many CTAs)."""
    cl = gemm_sm90a_configs.ws_cluster(cfg)
    # clusters stay inside a GPC: the clusters that fit at once (perfmodel.slots), as many CTAs each
    slots = perfmodel.slots(arch, perfmodel.occupancy(arch, cfg.threads, cfg.smem_bytes), cl) // cl
    return max(1, min(units, slots)) * cl


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
    row_tile: bool = False    # the one-kernel GEMM + row normalisation (gemm_rownorm/tile.py)
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
    return {gemm_configs.MATH_F16: 2, gemm_configs.MATH_INT8: 1}.get(math_, 4)


def _tensor(cfg, flops) -> dict:
    """The config's FLOPs by tensor-core instruction class (kernels/perfmodel.py `launch_time` tensor=): the
    sm_90a tiles issue wgmma, the other f16/bf16, TF32 and 8-bit tiles mma.sync, SIMT tiles none."""
    if cfg.math == gemm_configs.MATH_SIMT:
        return {}
    unit = "wgmma" if _is_sm90a(cfg) else "mma"
    prec = {gemm_configs.MATH_F16: "fp16", gemm_configs.MATH_INT8: "int8"}.get(cfg.math, "tf32")
    return {f"{unit}.{prec}": flops}


def gemm_time(cfg, m, n, k, batch, arch, split=1, csplit=1, cx=1, a_batch=None, out_bytes=None,
              persistent=True) -> float:
    """Modelled microseconds of a GEMM variant on the arch's reference part (kernels/perfmodel.py): the
    plus_gemm launch, plus plus_splitk_reduce and a launch gap when the split goes through scratch.
    `a_batch`: distinct A matrices (a horizontal group shares one; default `batch`); `out_bytes`: bytes per
    C element the epilogue stores (default the operand size); `cx`: CTAs along a row of C in one cluster
    (the row tile of GEMM + row normalisation; its cluster is cx x csplit CTAs); `persistent` False: a TMA tile
    (gemm_sm90a_ws.cuh) launched with one work unit per CTA. An 8-bit GEMM's C is 4 bytes by default (the exact
    s32 sum, or the float its dequantizing epilogue makes), not its operands' 1."""
    elem = _elem(cfg.math)
    out_b = (4 if cfg.math == gemm_configs.MATH_INT8 else elem) if out_bytes is None else out_bytes
    a_batch = batch if a_batch is None else a_batch
    parts = max(split, csplit)
    ktiles = math.ceil(k / cfg.bk)
    k_part = min(k, math.ceil(ktiles / parts) * cfg.bk)
    tiles_m, tiles_n = math.ceil(m / cfg.bm), math.ceil(n / cfg.bn)
    ctas = tiles_m * tiles_n * batch * parts
    busiest = 1                   # work units of the busiest CTA (a persistent kernel's CTAs take several)
    mcast = gemm_sm90a_configs.ws_cluster(cfg)     # CTAs sharing one n tile's B through TMA multicast
    if gemm_sm90a_configs.is_ws(cfg) and persistent:
        units = math.ceil(tiles_m / mcast) * tiles_n * batch * parts
        ctas = ws_grid(cfg, units, arch)
        busiest = math.ceil(units / (ctas // mcast))
    # mma.sync and SIMT tiles feed their math from shared memory through registers: a tile whose
    # reuse bm*bn/(bm+bn) is under 64 issues that much more shared-memory traffic per FLOP, modelled as that
    # much more work (the previous route model's rule). wgmma reads its operands from shared memory itself.
    reuse = 1.0 if _is_sm90a(cfg) else min(1.0, (cfg.bm * cfg.bn / (cfg.bm + cfg.bn)) / 64.0)
    # a persistent launch is charged as if every CTA did the busiest one's units (the model sees one wave)
    flops = 2.0 * cfg.bm * cfg.bn * k_part * ctas * busiest / reuse
    c_tile = cfg.bm * cfg.bn * (4 if split > 1 else out_b) / csplit
    dsmem = cfg.bm * cfg.bn * 4 * (csplit - 1) / csplit      # the other splits' rows, read through DSMEM
    # A rows past M and B columns past N are zero-filled, not read; a multicast B is read once per cluster
    l2 = ctas * busiest * ((min(cfg.bm, m) + min(cfg.bn, n) / mcast) * k_part * elem + c_tile + dsmem)
    dram = (a_batch * m * k + batch * k * n) * elem + batch * m * n * out_b
    if split > 1:
        dram += batch * m * n * (4 * split - out_b)         # the fp32 partials instead of C
    # the sm_90a tiles' issues as the interpreter counts them (sm90a_configs.ISSUES); the others uncharged
    issued = (ctas * busiest * gemm_sm90a_configs.issues(cfg, math.ceil(k_part / cfg.bk))
              if _is_sm90a(cfg) else 0.0)
    est = perfmodel.launch_time(arch, ctas=ctas, threads=cfg.threads, smem=cfg.smem_bytes, flops=flops,
                                tensor=_tensor(cfg, flops), dram_bytes=dram, l2_bytes=l2,
                                warp_instructions=issued, cluster=cx * csplit * mcast)
    us = est.modelled_us
    if split > 1:          # plus_splitk_reduce: every partial read once, C written once; 256 threads
        total = batch * m * n
        red = perfmodel.launch_time(arch, ctas=math.ceil(total / 256), threads=256, smem=0, flops=total * split,
                                    dram_bytes=total * (4 * split + out_b), l2_bytes=total * (4 * split + out_b))
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
            if _is_sm90a(c) and cluster_split and not gemm_sm90a_configs.is_ws(c):
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


def gemm_routes(M, N, K, batch, dtype, target, syms, allow_splitk=True, menu=None, a_batch=None,
                cluster_split=True, tma=False, gated=False):
    """[(condition rpn, GemmChoice)] in order; the last condition is ALWAYS. `menu`: the configs to choose
    from (default: the arch's menu for the math, with the TMA tiles when `tma`, those a gated pair fits when
    `gated`); `a_batch`: distinct A matrices (a group shares one); `cluster_split`: see gemm_candidates."""
    arch = target.arch
    menu = gemm_menu(gemm_math(dtype, target.fp32_math), arch, tma, gated) if menu is None else menu
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
                                 l2_bytes=nbytes).modelled_us


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


def gemm_norm_routes(M, N, K, dtype, target, syms, tile_menus=None, a_batch=None, finish=False, tma=False):
    """Routes of GEMM + row normalisation (one batch): [(condition rpn, kind, GemmChoice)], kind "tile" (one
    kernel: the row tile over a cluster of cx x csplit CTAs, sm_90a), "two" (the GEMM epilogue writes the
    row input to fp32 scratch, plus_row finishes the rows: two launches) or, with `finish`, "one" (the same
    GEMM, whose last CTA of each row group finishes those rows: one launch). `tile_menus`: [(cx, configs)],
    one per width, of the row tile (None: no row tile route). Each sample of M takes the faster by the model."""
    arch = target.arch
    n, k = _static(N), _static(K)
    menu = gemm_menu(gemm_math(dtype, target.fp32_math), arch, tma)
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
                if finish and gemm_sm90a_configs.ws_cluster(two.cfg) == 1:
                    # the TMA kernel finishes rows with one work unit per CTA (not persistent)
                    gemm_us = (gemm_time(two.cfg, m, n, k, 1, arch, out_bytes=4, persistent=False)
                               if gemm_sm90a_configs.is_ws(two.cfg) else two.us)
                    us = gemm_us + row_finish_time(m, n, arch, two.cfg, two.csplit, elem)
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
    if gemm_sm90a_configs.is_ws(cfg):
        return gemm_sm90a_configs.ws_defines(cfg, b_trans=int(trans_b), splitk=splitk)
    if _is_sm90a(cfg):
        return gemm_sm90a_configs.defines(cfg, b_trans=int(trans_b), aligned=int(bool(aligned)), splitk=splitk,
                                          splitk_cluster=splitk_cluster)
    if splitk_cluster > 1:
        raise ValueError(f"{cfg.name}: split-K in a cluster needs the sm_90a wgmma template")
    return gemm_configs.defines(cfg, b_trans=int(trans_b), aligned=int(bool(aligned)), splitk=splitk)


def gemm_rows_aligned(K, ldb, dtype) -> bool:
    """Static proof for PLUS_ALIGNED=1: operand bases are 16-byte aligned (CONTRACT §2.1), lda = K and
    ldb are whole 16-byte chunks, and batch offsets are multiples of lda / ldb rows. Symbolic K or ldb:
    no proof (the templates then check alignment at run time)."""
    from ...codegen import dtypes
    elem = dtypes.itemsize(dtype)
    k, ld = symdim.parse(K), symdim.parse(ldb)
    return bool(k.is_Integer and ld.is_Integer and (int(k) * elem) % 16 == 0 and (int(ld) * elem) % 16 == 0)


__all__ = ["GemmChoice", "gemm_defines", "gemm_header", "gemm_norm_routes", "gemm_routes"]
