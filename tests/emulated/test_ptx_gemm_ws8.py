"""The 8-bit TMA GEMM (gemm_sm90a_ws.cuh with PLUS_MATH 3: wgmma m64nNk32 .s32 on s8/u8 operands) on the PTX
interpreter against exact integer numpy, B stored [N, K] (WS8_CONFIGS) and [K, N] (WS8T_CONFIGS: transposed in
shared memory): every config with several work units per CTA and ragged edges (odd M, N past a tile, K a multiple
of 16 but not of the 128-element k-tile), every signedness pair over the types' whole ranges, the fold's
requantizing epilogue (scales per column, zero-point correction, bias, ReLU, int8 output) and the m-fastest
epilogue; and the planted bugs: a fragment column swap, the s32 sums truncated to 16 bits, a B signedness ignored,
a transposed block written to its own place, the transposition's barrier dropped."""
from __future__ import annotations

import numpy as np
import pytest

from plus_ep.kernels.families.gemm import sm90a_configs as gc
from tests.support.ws8_gemm_cases import Case, run


def _exact(got, ref, findings):
    assert findings == [], [str(f) for f in findings]
    bad = got != ref
    assert not bad.any(), f"{int(bad.sum())} of {bad.size} wrong, first at {np.argwhere(bad)[0]}: " \
                          f"{got[tuple(np.argwhere(bad)[0])]} vs {ref[tuple(np.argwhere(bad)[0])]}"


@pytest.mark.parametrize("cfg", [c.name for c in gc.WS8_CONFIGS + gc.WS8T_CONFIGS])
def test_every_8bit_config_several_units_per_cta(cfg):
    c = gc.WS_BY_NAME[cfg]
    cl = gc.ws_cluster(c)
    # 4 units on 3 CTAs (clusters): one takes two; M odd, N past a tile (16-byte rows: a [K, N] B's map needs
    # them), K = 1.5 k-tiles (TMA fills the rest)
    M, N = cl * c.bm + 37, c.bn + 48
    _exact(*run(Case(cfg, b_trans=int(not gc.transposes_b(c))), 1, M, N, 208, grid=3)[:3])


@pytest.mark.parametrize("at,bt", [("s8", "s8"), ("u8", "s8"), ("s8", "u8"), ("u8", "u8")])
@pytest.mark.parametrize("cfg", ["ws8_64x128x128_s8", "ws8t_64x128x128_s8"])
def test_signedness_pairs_full_range(at, bt, cfg):
    """Every type pair over its whole range (the extremes -128 and 255 included), two batches, three k-tiles."""
    _exact(*run(Case(cfg, at, bt, b_trans=int(cfg.startswith("ws8_"))), 2, 77, 144, 384, grid=2)[:3])


@pytest.mark.parametrize("case,shape", [
    (Case("ws8_128x128x128_s6", "u8", "s8", hooks="requant"), (1, 131, 200, 272)),
    (Case("ws8_128x192x128_s5_c2", "s8", "s8", hooks="requant"), (2, 300, 200, 144)),
    (Case("ws8_64x128x128_s8", "s8", "s8", m_fastest=1), (1, 100, 72, 128)),
    (Case("ws8t_128x128x128_s6_c2", "u8", "s8", hooks="requant", b_trans=0), (2, 300, 272, 400)),
    (Case("ws8t_128x256x128_s4", "s8", "s8", m_fastest=1, b_trans=0), (1, 130, 256, 144)),
], ids=["u8s8-requant", "multicast-requant", "m-fastest", "kn-multicast-requant", "kn-m-fastest"])
def test_epilogues(case, shape):
    _exact(*run(case, *shape, grid=2, full_range=case.hooks == "default")[:3])


# ---------------------------------------------------------------------------------------------- planted bugs

def _mutated(old, new):
    def mutate(text):
        assert text.count(old) >= 1, old
        return text.replace(old, new)
    return mutate


# each planted bug with the cases that must catch it (bench/quality/mutants.py lists the same edits)
COLUMN_SWAP = _mutated("st_f2(stg + (plus_u32)(r * SLD + sc) * 4u, acc[ai], acc[ai + 1]);",
                       "st_f2(stg + (plus_u32)(r * SLD + sc) * 4u, acc[ai + 1], acc[ai]);")
TRUNCATED = _mutated("PLUS_DEV void ld_acc(plus_u32 src, int& x) { x = ld_i(src); }",
                     "PLUS_DEV void ld_acc(plus_u32 src, int& x) { x = (short)ld_i(src); }")
SIGNEDNESS = _mutated("((plus_b_t)-1 < 0), BN>", "((plus_ab_t)-1 < 0), BN>")
BLOCK_IN_PLACE = _mutated("st_w(at_t ^ (i * 0x90u), p[i]);", "st_w(at_p ^ (i * 0x90u), p[i]);")
NO_TRANSPOSE_BARRIER = _mutated("plus_named_sync(TRANSPOSED_BAR, 128 * CONSUMERS);", "")


@pytest.mark.parametrize("mutate,case,shape", [
    (COLUMN_SWAP, Case("ws8_64x128x128_s8"), (1, 70, 136, 128)),
    (COLUMN_SWAP, Case("ws8_128x128x128_s6", "u8", "s8", hooks="requant"), (1, 131, 72, 144)),
    (TRUNCATED, Case("ws8_64x128x128_s8"), (1, 70, 136, 128)),
    (TRUNCATED, Case("ws8_64x128x128_s8", "u8", "u8"), (1, 64, 64, 256)),
    (SIGNEDNESS, Case("ws8_64x128x128_s8", "u8", "s8"), (1, 70, 136, 128)),
    (SIGNEDNESS, Case("ws8_128x192x128_s5_c2", "s8", "u8"), (1, 131, 72, 144)),
    (BLOCK_IN_PLACE, Case("ws8t_64x128x128_s8", b_trans=0), (1, 70, 144, 128)),
    (BLOCK_IN_PLACE, Case("ws8t_128x256x128_s4_c2", "u8", "s8", hooks="requant", b_trans=0), (1, 300, 256, 144)),
    (NO_TRANSPOSE_BARRIER, Case("ws8t_64x128x128_s8", b_trans=0), (1, 70, 144, 256)),
    (NO_TRANSPOSE_BARRIER, Case("ws8t_128x128x128_s6", "u8", "u8", b_trans=0), (1, 200, 144, 256)),
], ids=["swap-default", "swap-requant", "trunc-s8", "trunc-u8", "sign-u8s8", "sign-s8u8-multicast",
        "inplace-default", "inplace-requant", "nobar-s8", "nobar-u8"])
def test_planted_bugs_are_caught(mutate, case, shape):
    got, ref, findings, _ = run(case, *shape, grid=2, mutate=mutate, full_range=case.hooks == "default")
    assert findings or (got != ref).any(), "the planted bug went unnoticed"
