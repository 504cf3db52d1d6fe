"""Tile configurations of the Hopper wgmma GEMM template (`gemm_sm90a.cuh`, sm_90a only).

f16/bf16 operands (PLUS_MATH 2), fp32 accumulation. A config is a CTA tile BM x BN x BK (BK is always 64:
one 128-byte swizzled row of 16-bit elements), split over (BM/WM) x (BN/WN) consumer warpgroups of 128
threads, each owning a WM x WN accumulator tile (WM 64 or 128 rows, WN 64..256 columns), and a ring of
`stages` shared-memory stages filled by cp.async (STAGES-2 k-tiles in flight ahead of the tensor cores).

`threads` and `smem_bytes` mirror the template's PLUS_THREADS and PLUS_SMEM_BYTES macros (same formulas;
tests/cpu/test_template_gemm_sm90a_compile.py checks them with static_asserts in the compiled source). Every config
needs more than 48 KB of dynamic shared memory, so the launcher must raise
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES before launching.

`GemmConfig`, `grid` and `reduce_grid` are the sm80 menu's (kernels/families/gemm/configs.py); here WM x WN
is a warpgroup's tile, not a warp's.
"""

from __future__ import annotations

from .configs import MATH_F16, MATH_INT8, GemmConfig, grid, reduce_grid
from .configs import defines as _defines

WARPGROUP = 128
BK = 64


def gemm_threads(bm: int, bn: int, wm: int, wn: int) -> int:
    """PLUS_THREADS: one warpgroup (128 threads) per WM x WN warpgroup tile."""
    return (bm // wm) * (bn // wn) * WARPGROUP


def gemm_smem_bytes(bm: int, bn: int, bk: int, stages: int) -> int:
    """PLUS_SMEM_BYTES: the stage ring (A and B tiles of 2-byte elements, no padding: the 128-byte swizzle
    avoids bank conflicts) plus 1 KB to realign the base to the 1024-byte swizzle-atom boundary."""
    return stages * (bm + bn) * bk * 2 + 1024


def _cfg(name: str, bm: int, bn: int, wm: int, wn: int, stages: int) -> GemmConfig:
    return GemmConfig(name, MATH_F16, bm, bn, BK, wm, wn, stages, gemm_threads(bm, bn, wm, wn),
                      gemm_smem_bytes(bm, bn, BK, stages))


CONFIGS = (
    # Big GEMMs: 2 warpgroups of 64 x 256 (128 accumulators/thread), 193 KB, one CTA per SM.
    _cfg("wg_128x256x64_w64x256_s4", 128, 256, 64, 256, 4),
    # Tall tiles for large M: 2 warpgroups of 128 x 128 (two m64 wgmmas each, 128 accumulators/thread).
    _cfg("wg_256x128x64_w128x128_s4", 256, 128, 128, 128, 4),
    # Mid-size GEMMs / N <= 128: 2 warpgroups of 64 x 128, 5 stages (161 KB).
    _cfg("wg_128x128x64_w64x128_s5", 128, 128, 64, 128, 5),
    # Small or skinny GEMMs (BERT-base M=2048, N=768: 192 CTAs): 1 warpgroup, 97 KB, two CTAs per SM.
    _cfg("wg_64x128x64_w64x128_s4", 64, 128, 64, 128, 4),
)

# GEMM + LayerNorm/RMSNorm in one kernel (kernels/families/gemm_rownorm/tile.py): a thread-block cluster spans one row
# of C = cdiv(N, BN) tiles, C <= CLUSTER_MAX (the portable cluster size), so BN follows N (cluster_bn) and
# BM follows M. These tiles serve only that route; the plain GEMM menu above is unchanged.
CLUSTER_MAX = 8
CLUSTER_WIDTHS = (64, 128, 256, 512)
CLUSTER_CONFIGS = (
    _cfg("wg_64x64x64_w64x64_s4", 64, 64, 64, 64, 4),
    _cfg("wg_128x64x64_w64x64_s4", 128, 64, 64, 64, 4),
    _cfg("wg_64x256x64_w64x256_s4", 64, 256, 64, 256, 4),
    # N up to 8 x 512 = 4096: two warpgroups side by side along N (64 x 256 each), 3 stages (218 KB).
    _cfg("wg_64x512x64_w64x256_s3", 64, 512, 64, 256, 3),
)


# Small tiles for the plain GEMM menu too: at small M a weight-dominated GEMM (BERT's FFN at batch 1: M = 128)
# spreads over more SMs with 64 x 64 tiles (the route model weighs them, kernels/families/gemm/routes.py).
SMALL_CONFIGS = tuple(c for c in CLUSTER_CONFIGS if c.name == "wg_64x64x64_w64x64_s4")


def cluster_bn(n: int) -> int | None:
    """The tile width of the one-kernel GEMM + row normalisation for a static row length N: the narrowest
    BN in 64, 128, 256, 512 with cdiv(N, BN) <= CLUSTER_MAX (most CTAs per row); None above 8 x 512 = 4096
    (16-CTA clusters need the non-portable opt-in, cuFuncSetAttribute, which the launcher does not set)."""
    for bn in CLUSTER_WIDTHS:
        if -(-n // bn) <= CLUSTER_MAX:
            return bn
    return None


def cluster_menu(bn: int) -> list:
    """Every config (plain and cluster-only) of tile width `bn`."""
    return [c for c in CONFIGS + CLUSTER_CONFIGS if c.bn == bn]


BY_NAME = {c.name: c for c in CONFIGS}      # the plain menu (the tests enumerate it)


# The warp-specialised, persistent TMA GEMM (`gemm_sm90a_ws.cuh`): a producer warpgroup (TMA) and
# BM/64 consumer warpgroups of 64 x BN each; `stages` k-tiles of A and B in a ring of mbarrier-guarded stages.
# Only where the operands have tensor maps (tma.py: f16/bf16 rows of whole 16-byte chunks, whole
# or shared batches); elsewhere the cp.async menu above serves.
WS_STAGING_FLOATS = 64 * 40   # the template's PLUS_WS_STAGE_FLOATS: one consumer's epilogue staging buffer


def ws_threads(bm: int) -> int:
    """PLUS_THREADS of gemm_sm90a_ws.cuh: the producer warpgroup and one consumer per 64 rows."""
    return WARPGROUP * (1 + bm // 64)


def ws_smem_bytes(bm: int, bn: int, stages: int) -> int:
    """PLUS_SMEM_BYTES of gemm_sm90a_ws.cuh: the stage ring (128-byte rows: 64 16-bit or 128 8-bit elements of k),
    each consumer's epilogue staging buffer (64 rows x 40 floats: 32 columns and a pad, or 16 of each product
    gated; 32 x 68 transposed fits too), the 2 x stages mbarriers, 1 KB to realign the base."""
    return stages * (bm + bn) * BK * 2 + (bm // 64) * WS_STAGING_FLOATS * 4 + stages * 16 + 1024


def _ws(name: str, bm: int, bn: int, stages: int, math: int = MATH_F16) -> GemmConfig:
    bk = BK if math == MATH_F16 else 2 * BK     # one 128-byte swizzle row: 64 16-bit or 128 8-bit elements
    return GemmConfig(name, math, bm, bn, bk, 64, bn, stages, ws_threads(bm), ws_smem_bytes(bm, bn, stages))


WS_CONFIGS = (
    # big GEMMs: 2 consumers of 64 x 256 (128 accumulators each; the producer gives them its registers)
    _ws("ws_128x256x64_s4", 128, 256, 4),
    _ws("ws_128x128x64_s6", 128, 128, 6),
    # three 64-column boxes of B: 2048 x 3072 is 256 tiles, under two per SM where 128 x 256 leaves a third idle
    _ws("ws_128x192x64_s5", 128, 192, 5),
    # one consumer: small M, or a narrow N
    _ws("ws_64x256x64_s5", 64, 256, 5),
    _ws("ws_64x128x64_s8", 64, 128, 8),
    # the CTAs of a cluster share one n tile's B, multicast by TMA (L2 reads B once per cluster)
    _ws("ws_128x256x64_s4_c2", 128, 256, 4),
    _ws("ws_128x128x64_s6_c2", 128, 128, 6),
    _ws("ws_128x192x64_s5_c2", 128, 192, 5),
    # four CTAs share B (three boxes: rank 3 loads only its A): L2 serves B once per four m tiles
    _ws("ws_128x192x64_s5_c4", 128, 192, 5),
)
# The same template on 8-bit integers (PLUS_MATH 3, ONNX MatMulInteger): wgmma m64nBNk32 with exact s32 sums,
# BK = 128 (a stage holds the same bytes as the f16 tile's), never split along K; the s32 accumulators take the
# fp32 ones' registers. 8-bit wgmma reads K-major operands only: WS8_CONFIGS take B stored [N, K] (B_TRANS 1),
# WS8T_CONFIGS a B stored [K, N] (B_TRANS 0, MatMulInteger's), which their consumers transpose in shared memory
# (boxes of 128 columns: BN 128 or 256), charged by the issue table.
WS8_CONFIGS = (
    _ws("ws8_128x256x128_s4", 128, 256, 4, MATH_INT8),
    _ws("ws8_128x128x128_s6", 128, 128, 6, MATH_INT8),
    _ws("ws8_128x192x128_s5", 128, 192, 5, MATH_INT8),
    _ws("ws8_64x256x128_s5", 64, 256, 5, MATH_INT8),
    _ws("ws8_64x128x128_s8", 64, 128, 8, MATH_INT8),
    # one consumer of 64 x 192: BERT-base's N = 768 projections at M = 2048 fill 128 SMs without a K split
    _ws("ws8_64x192x128_s6", 64, 192, 6, MATH_INT8),
    _ws("ws8_64x192x128_s6_c2", 64, 192, 6, MATH_INT8),
    _ws("ws8_128x256x128_s4_c2", 128, 256, 4, MATH_INT8),
    _ws("ws8_128x192x128_s5_c2", 128, 192, 5, MATH_INT8),
)
WS8T_CONFIGS = (
    _ws("ws8t_128x256x128_s4", 128, 256, 4, MATH_INT8),
    _ws("ws8t_128x128x128_s6", 128, 128, 6, MATH_INT8),
    _ws("ws8t_64x256x128_s5", 64, 256, 5, MATH_INT8),
    _ws("ws8t_64x128x128_s8", 64, 128, 8, MATH_INT8),
    _ws("ws8t_128x256x128_s4_c2", 128, 256, 4, MATH_INT8),
    _ws("ws8t_128x128x128_s6_c2", 128, 128, 6, MATH_INT8),
)
WS_BY_NAME = {c.name: c for c in WS_CONFIGS + WS8_CONFIGS + WS8T_CONFIGS}


def transposes_b(cfg) -> bool:
    """An 8-bit TMA tile for a B stored [K, N] (B_TRANS 0), transposed in shared memory by its consumers."""
    return cfg.name.startswith("ws8t_")


def is_ws(cfg) -> bool:
    return cfg.name.startswith(("ws_", "ws8_", "ws8t_"))


def ws_cluster(cfg) -> int:
    """CTAs of a TMA tile's cluster that share (multicast) one n tile's B: the name's `_c<n>`, else 1."""
    tail = cfg.name.rsplit("_", 1)[-1]
    return int(tail[1:]) if is_ws(cfg) and tail.startswith("c") and tail[1:].isdigit() else 1


def ws_defines(cfg: GemmConfig, *, b_trans: int = 0, splitk: int = 1, persistent: bool = True) -> dict[str, int]:
    """The `#define`s of a gemm_sm90a_ws.cuh variant."""
    out = {"PLUS_MATH": cfg.math, "PLUS_BM": cfg.bm, "PLUS_BN": cfg.bn, "PLUS_BK": cfg.bk, "PLUS_STAGES": cfg.stages,
           "PLUS_SPLITK": int(splitk), "PLUS_B_TRANS": int(bool(b_trans))}
    if ws_cluster(cfg) > 1:
        out["PLUS_WS_CLUSTER"] = ws_cluster(cfg)
    if not persistent:
        out["PLUS_PERSISTENT"] = 0
    return out


# Warp instructions one CTA issues per tile (setup and a plain f16 epilogue) and per k-tile of its main loop,
# counted by the PTX interpreter (kernels/ptx) on one-tile launches at K = 128 and 384 and fitted as
# a + b x k-tiles; the route model charges them (perfmodel's issue term). A multicast tile counts as its base.
# Re-measured by tests/emulated/test_gemm_issue_table.py (within 5 %).
ISSUES = {
    "wg_128x256x64_w64x256_s4": (31008, 1232), "wg_256x128x64_w128x128_s4": (30776, 1584),
    "wg_128x128x64_w64x128_s5": (16620, 922), "wg_64x128x64_w64x128_s4": (8364, 500),
    "wg_64x64x64_w64x64_s4": (4280, 576), "wg_128x64x64_w64x64_s4": (8608, 1128),
    "wg_64x256x64_w64x256_s4": (15508, 1072), "wg_64x512x64_w64x256_s3": (31200, 2056),
    "ws_128x256x64_s4": (9047, 494), "ws_128x128x64_s6": (4944, 386), "ws_128x192x64_s5": (6609, 443),
    "ws_64x256x64_s5": (4675, 241), "ws_64x128x64_s8": (2607, 209),
    # 8-bit (k-tiles of 128 elements, measured at K = 256 and 768; the default epilogue storing the s32 sums)
    "ws8_128x256x128_s4": (8030, 480), "ws8_128x128x128_s6": (4461, 384), "ws8_128x192x128_s5": (5850, 431),
    "ws8_64x256x128_s5": (4158, 235), "ws8_64x128x128_s8": (2364, 207), "ws8_64x192x128_s6": (3074, 208),
    # ... transposing a [K, N] B in shared memory (B_TRANS 0)
    "ws8t_128x256x128_s4": (8081, 3370), "ws8t_128x128x128_s6": (4421, 1872), "ws8t_64x256x128_s5": (4188, 3037),
    "ws8t_64x128x128_s8": (2368, 1603),
}


def issues(cfg: GemmConfig, ktiles: int) -> float:
    """Modelled warp instructions of one work unit (a tile of `ktiles` k-tiles) of an sm_90a config (ISSUES)."""
    base = cfg.name[:-3] if is_ws(cfg) and ws_cluster(cfg) > 1 else cfg.name
    a, b = ISSUES[base]
    return a + b * ktiles


def defines(cfg: GemmConfig, *, b_trans: int = 0, aligned: int = 0, splitk: int = 1,
            splitk_cluster: int = 1) -> dict[str, int]:
    """The `#define`s of a variant (the sm80 menu's, restricted to PLUS_MATH 2)."""
    if cfg.math != MATH_F16:
        raise ValueError(f"{cfg.name}: the sm_90a wgmma template only does PLUS_MATH 2 (f16/bf16)")
    return _defines(cfg, b_trans=b_trans, aligned=aligned, splitk=splitk, splitk_cluster=splitk_cluster)


__all__ = ["BK", "BY_NAME", "CLUSTER_CONFIGS", "CLUSTER_MAX", "CLUSTER_WIDTHS", "CONFIGS", "GemmConfig", "ISSUES", "MATH_F16",
           "SMALL_CONFIGS", "WARPGROUP", "WS8T_CONFIGS", "WS8_CONFIGS", "WS_BY_NAME", "WS_CONFIGS",
           "cluster_bn", "cluster_menu", "defines", "gemm_smem_bytes", "gemm_threads", "grid", "is_ws", "issues",
           "reduce_grid", "transposes_b",
           "ws_cluster", "ws_defines", "ws_smem_bytes", "ws_threads"]
