"""Tile configurations of the GEMM template (`gemm.cuh`), a small menu per math path.

The route chooser picks one of these per GEMM with an analytic model (alignment, padding waste, wave
quantisation); `defines(cfg, ...)` gives the `#define`s the generated source writes before
`#include "gemm.cuh"`. `threads` and `smem_bytes` mirror the template's PLUS_THREADS and PLUS_SMEM_BYTES
macros (same formulas; tests/cpu/test_template_gemm_compile.py checks them against the compiled kernels' limits).

Math paths: 0 = exact fp32 SIMT (the default for fp32 models), 1 = TF32 tensor cores (fp32 in memory),
2 = f16/bf16 tensor cores, 3 = 8-bit integer tensor cores (ONNX MatMulInteger: exact s32 sums).
"""

from __future__ import annotations

from dataclasses import dataclass

MATH_SIMT = 0
MATH_TF32 = 1
MATH_F16 = 2  # half or bfloat16 (plus_ab_t)
MATH_INT8 = 3  # signed or unsigned char (plus_ab_t / plus_b_t), mma.sync m16n8k32 with s32 accumulators


def gemm_threads(bm: int, bn: int, wm: int, wn: int) -> int:
    """PLUS_THREADS: one warp per warp tile."""
    return (bm // wm) * (bn // wn) * 32


def gemm_smem_bytes(math: int, bm: int, bn: int, bk: int, stages: int) -> int:
    """PLUS_SMEM_BYTES: dynamic shared memory of one block (independent of PLUS_B_TRANS: the B stage is
    sized for the larger of its two layouts)."""
    if math == MATH_SIMT:  # float, A [BK][BM+4] (transposed), B [BK][BN+4], always double buffered
        return 2 * (bk * (bm + 4) + bk * (bn + 4)) * 4
    elem = {MATH_F16: 2, MATH_INT8: 1}.get(math, 4)
    # padding of a k-contiguous row: one 16-byte chunk, none for 64-byte rows (swizzled instead)
    ce = 0 if bk * elem == 64 else 16 // elem
    a_stage = bm * (bk + ce)
    b_stage = max(bn * (bk + ce), bk * (bn + (16 if math == MATH_INT8 else 8)))
    return stages * (a_stage + b_stage) * elem


@dataclass(frozen=True)
class GemmConfig:
    name: str
    math: int
    bm: int
    bn: int
    bk: int
    wm: int
    wn: int
    stages: int
    threads: int
    smem_bytes: int

    @property
    def warps(self) -> int:
        return self.threads // 32


def _cfg(name: str, math: int, bm: int, bn: int, bk: int, wm: int, wn: int, stages: int) -> GemmConfig:
    return GemmConfig(name, math, bm, bn, bk, wm, wn, stages, gemm_threads(bm, bn, wm, wn),
                      gemm_smem_bytes(math, bm, bn, bk, stages))


# f16 / bf16 tensor cores (mma m16n8k16). Four warps each; 61-82 KB of shared memory for the big tiles.
F16_CONFIGS = (
    _cfg("f16_128x128x32_w64x64_s3", MATH_F16, 128, 128, 32, 64, 64, 3),
    _cfg("f16_128x64x32_w64x32_s3", MATH_F16, 128, 64, 32, 64, 32, 3),
    _cfg("f16_64x128x32_w32x64_s3", MATH_F16, 64, 128, 32, 32, 64, 3),
    _cfg("f16_64x64x32_w32x32_s4", MATH_F16, 64, 64, 32, 32, 32, 4),
    _cfg("f16_32x64x64_w16x32_s4", MATH_F16, 32, 64, 64, 16, 32, 4),   # small M (decode, short rows)
    _cfg("f16_16x128x64_w16x32_s4", MATH_F16, 16, 128, 64, 16, 32, 4),  # M <= 16: one m16 tile, 4 warps along N
)

# TF32 tensor cores (mma m16n8k8), fp32 operands in memory.
TF32_CONFIGS = (
    _cfg("tf32_128x128x16_w64x64_s3", MATH_TF32, 128, 128, 16, 64, 64, 3),
    _cfg("tf32_128x64x16_w64x32_s4", MATH_TF32, 128, 64, 16, 64, 32, 4),
    _cfg("tf32_64x64x32_w32x32_s3", MATH_TF32, 64, 64, 32, 32, 32, 3),
    _cfg("tf32_32x64x32_w16x32_s4", MATH_TF32, 32, 64, 32, 16, 32, 4),
)

# 8-bit integer tensor cores (mma m16n8k32): BK in bytes (64: the swizzled 64-byte rows of the f16 tiles).
INT8_CONFIGS = (
    _cfg("i8_128x128x64_w64x64_s3", MATH_INT8, 128, 128, 64, 64, 64, 3),
    _cfg("i8_128x64x64_w64x32_s3", MATH_INT8, 128, 64, 64, 64, 32, 3),
    _cfg("i8_64x64x64_w32x32_s4", MATH_INT8, 64, 64, 64, 32, 32, 4),
    _cfg("i8_32x64x128_w16x32_s4", MATH_INT8, 32, 64, 128, 16, 32, 4),   # small M
)

# Exact fp32 SIMT: warp = 4x8 lanes, thread tile (wm/4) x (wn/8).
SIMT_CONFIGS = (
    _cfg("simt_128x128x8_w32x64", MATH_SIMT, 128, 128, 8, 32, 64, 2),  # 8 warps, 8x8 per thread
    _cfg("simt_128x64x8_w32x32", MATH_SIMT, 128, 64, 8, 32, 32, 2),    # 8 warps, 8x4 per thread
    _cfg("simt_64x64x8_w32x32", MATH_SIMT, 64, 64, 8, 32, 32, 2),      # 4 warps, 8x4 per thread
    _cfg("simt_32x64x16_w16x32", MATH_SIMT, 32, 64, 16, 16, 32, 2),    # small M: 4 warps, 4x4 per thread
)

CONFIGS = {MATH_SIMT: SIMT_CONFIGS, MATH_TF32: TF32_CONFIGS, MATH_F16: F16_CONFIGS, MATH_INT8: INT8_CONFIGS}
BY_NAME = {c.name: c for cs in CONFIGS.values() for c in cs}


def configs(math: int) -> tuple[GemmConfig, ...]:
    """The menu for one math path."""
    return CONFIGS[math]


def defines(cfg: GemmConfig, *, b_trans: int = 0, aligned: int = 0, splitk: int = 1,
            splitk_cluster: int = 1) -> dict[str, int]:
    """The `#define`s of a variant (tile parameters from `cfg`, plus the per-problem switches).
    `splitk_cluster` > 1 (sm_90a template only): split-K reduced through distributed shared memory."""
    if splitk < 1 or splitk_cluster < 1:
        raise ValueError(f"split-K factor must be >= 1, got {splitk} / {splitk_cluster}")
    extra = {"PLUS_SPLITK_CLUSTER": int(splitk_cluster)} if splitk_cluster > 1 else {}
    return {
        "PLUS_MATH": cfg.math,
        "PLUS_BM": cfg.bm,
        "PLUS_BN": cfg.bn,
        "PLUS_BK": cfg.bk,
        "PLUS_WM": cfg.wm,
        "PLUS_WN": cfg.wn,
        "PLUS_STAGES": cfg.stages,
        "PLUS_SPLITK": int(splitk),
        "PLUS_B_TRANS": int(bool(b_trans)),
        "PLUS_ALIGNED": int(bool(aligned)),
        **extra,
    }


def grid(cfg: GemmConfig, batch: int, m: int, n: int, splitk: int = 1) -> tuple[int, int, int]:
    """Grid of `plus_gemm` (contract 2.1); `splitk` either way (through scratch, or in the cluster)."""
    return (-(-n // cfg.bn), -(-m // cfg.bm), batch * splitk)


def reduce_grid(batch: int, m: int, n: int) -> tuple[int, int, int]:
    """Grid of `plus_splitk_reduce` (block 256)."""
    return (-(-(batch * m * n) // 256), 1, 1)
