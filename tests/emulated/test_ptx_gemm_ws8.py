"""The 8-bit TMA GEMM (gemm_sm90a_ws.cuh with PLUS_MATH 3: wgmma m64nNk32 .s32 on s8/u8 operands, B stored [N, K])
on the PTX interpreter against exact integer numpy: every 8-bit config with several work units per CTA and ragged
edges (odd M, N past a tile, K a multiple of 16 but not of the 128-element k-tile), every signedness pair over the
types' whole ranges, the fold's requantizing epilogue (scales per column, zero-point correction, bias, ReLU,
int8 output) and the m-fastest epilogue; and the planted bugs: a fragment column
swap, the s32 sums truncated to 16 bits, a B signedness ignored."""
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


@pytest.mark.parametrize("cfg", [c.name for c in gc.WS8_CONFIGS])
def test_every_8bit_config_several_units_per_cta(cfg):
    c = gc.WS_BY_NAME[cfg]
    cl = gc.ws_cluster(c)
    # 4 units on 3 CTAs (clusters): one takes two; M odd, N past a tile, K = 1.5 k-tiles (TMA fills the rest)
    M, N = cl * c.bm + 37, c.bn + 40
    _exact(*run(Case(cfg), 1, M, N, 208, grid=3)[:3])


@pytest.mark.parametrize("at,bt", [("s8", "s8"), ("u8", "s8"), ("s8", "u8"), ("u8", "u8")])
def test_signedness_pairs_full_range(at, bt):
    """Every type pair over its whole range (the extremes -128 and 255 included), two batches, three k-tiles."""
    _exact(*run(Case("ws8_64x128x128_s8", at, bt), 2, 77, 136, 384, grid=2)[:3])


@pytest.mark.parametrize("case,shape", [
    (Case("ws8_128x128x128_s6", "u8", "s8", hooks="requant"), (1, 131, 200, 272)),
    (Case("ws8_128x192x128_s5_c2", "s8", "s8", hooks="requant"), (2, 300, 200, 144)),
    (Case("ws8_64x128x128_s8", "s8", "s8", m_fastest=1), (1, 100, 72, 128)),
], ids=["u8s8-requant", "multicast-requant", "m-fastest"])
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


@pytest.mark.parametrize("mutate,case,shape", [
    (COLUMN_SWAP, Case("ws8_64x128x128_s8"), (1, 70, 136, 128)),
    (COLUMN_SWAP, Case("ws8_128x128x128_s6", "u8", "s8", hooks="requant"), (1, 131, 72, 144)),
    (TRUNCATED, Case("ws8_64x128x128_s8"), (1, 70, 136, 128)),
    (TRUNCATED, Case("ws8_64x128x128_s8", "u8", "u8"), (1, 64, 64, 256)),
    (SIGNEDNESS, Case("ws8_64x128x128_s8", "u8", "s8"), (1, 70, 136, 128)),
    (SIGNEDNESS, Case("ws8_128x192x128_s5_c2", "s8", "u8"), (1, 131, 72, 144)),
], ids=["swap-default", "swap-requant", "trunc-s8", "trunc-u8", "sign-u8s8", "sign-s8u8-multicast"])
def test_planted_bugs_are_caught(mutate, case, shape):
    got, ref, findings, _ = run(case, *shape, grid=2, mutate=mutate, full_range=case.hooks == "default")
    assert findings or (got != ref).any(), "the planted bug went unnoticed"
