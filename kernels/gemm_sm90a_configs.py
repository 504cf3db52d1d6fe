"""Tile configurations of the Hopper wgmma GEMM template (`templates/gemm_sm90a.cuh`, sm_90a only).

f16/bf16 operands (PLUS_MATH 2), fp32 accumulation. A config is a CTA tile BM x BN x BK (BK is always 64:
one 128-byte swizzled row of 16-bit elements), split over (BM/WM) x (BN/WN) consumer warpgroups of 128
threads, each owning a WM x WN accumulator tile (WM 64 or 128 rows, WN 64..256 columns), and a ring of
`stages` shared-memory stages filled by cp.async (STAGES-2 k-tiles in flight ahead of the tensor cores).

`threads` and `smem_bytes` mirror the template's PLUS_THREADS and PLUS_SMEM_BYTES macros (same formulas;
tests/test_template_gemm_sm90a.py checks them with static_asserts in the compiled source). Every config
needs more than 48 KB of dynamic shared memory, so the launcher must raise
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES before launching.

`GemmConfig` has the same fields as the one in kernels/gemm_configs.py (the sm80 menu); it is defined
here too until the two menus are merged.
"""

from __future__ import annotations

from dataclasses import dataclass

MATH_F16 = 2  # the only math path of the wgmma template: half or bfloat16 (plus_ab_t)
WARPGROUP = 128
BK = 64


@dataclass(frozen=True)
class GemmConfig:
    name: str
    math: int
    bm: int
    bn: int
    bk: int
    wm: int  # rows of one warpgroup's tile (64 or 128)
    wn: int  # columns of one warpgroup's tile (the N of wgmma.m64nNk16: 64, 128, 192 or 256)
    stages: int
    threads: int
    smem_bytes: int

    @property
    def warpgroups(self) -> int:
        return self.threads // WARPGROUP


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

BY_NAME = {c.name: c for c in CONFIGS}


def defines(cfg: GemmConfig, *, b_trans: int = 0, aligned: int = 0, splitk: int = 1) -> dict[str, int]:
    """The `#define`s of a variant (tile parameters from `cfg`, plus the per-problem switches)."""
    if cfg.math != MATH_F16:
        raise ValueError(f"{cfg.name}: the sm_90a wgmma template only does PLUS_MATH 2 (f16/bf16)")
    if splitk < 1:
        raise ValueError(f"split-K factor must be >= 1, got {splitk}")
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
    }


def grid(cfg: GemmConfig, batch: int, m: int, n: int, splitk: int = 1) -> tuple[int, int, int]:
    """Grid of `plus_gemm` (contract 2.1)."""
    return (-(-n // cfg.bn), -(-m // cfg.bm), batch * splitk)


def reduce_grid(batch: int, m: int, n: int) -> tuple[int, int, int]:
    """Grid of `plus_splitk_reduce` (block 256)."""
    return (-(-(batch * m * n) // 256), 1, 1)
