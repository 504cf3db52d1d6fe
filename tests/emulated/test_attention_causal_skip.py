"""Causal key-tile skipping (PLUS_HAS_ATTN_CAUSAL, attention.cuh `make_tile`) on the PTX interpreter: a block whose
score hook masks every pair j > i + c stops at the key tile of its last row's last visible key. Checked on the
mma.sync (f16, GQA, TF32-free), SIMT and sm_90a bodies at odd lengths over several query tiles, with past keys
(c = Skv - Sq > 0), with c < 0 (leading rows see no key) and with a key-padding term: the output is the float64
reference's within the path's bound, bit-identical to the same kernel visiting every key tile (a skipped tile is
all -inf, an exact no-op of the online softmax), and the tensor-core instructions are exactly those of the key
tiles the bound allows (so a bound one tile too far, invisible in the output, fails too)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from plus_ep.kernels.families.flash_attention import configs as ac
from tests.support import ptx_attention_cases as P
from tests.support import wg_attention_cases as W


def visited_tiles(cfg, B, H, Sq, Skv, skip):
    """Key tiles the blocks visit (every tile, or per query tile up to its last row's last visible key), counted
    per block, or for the sm_90a body per consumer warpgroup that has a row below Sq (the others issue no wgmma)."""
    n = math.ceil(Skv / cfg.bkv)
    total = 0
    for qt in range(math.ceil(Sq / cfg.bq)):
        jmax = min((qt + 1) * cfg.bq, Sq) - 1 + (Skv - Sq)
        units = sum(qt * cfg.bq + 64 * w < Sq for w in range(cfg.bq // 64)) if cfg.wgmma else 1
        total += units * ((0 if jmax < 0 else min(n, jmax // cfg.bkv + 1)) if skip else n)
    return total * B * H


MMA_CASES = [("tc_d64_q64_kv64_w4", "half", False, 129, 129), ("tc_d64_q64_kv64_w4", "half", False, 70, 129),
             ("tc_d64_q64_kv64_w4", "__nv_bfloat16", False, 129, 70), ("tc_d128_q32_kv64_w2", "half", True, 40, 130),
             ("simt_d64_q32_kv32_w4", "float", False, 40, 70)]


@pytest.mark.parametrize("name,dtype,gqa,sq,skv", MMA_CASES, ids=["-".join(map(str, c)) for c in MMA_CASES])
def test_mma_sync_and_simt_skip_matches_full_loop(name, dtype, gqa, sq, skv):
    cfg = ac.by_name(name)
    runs = {}
    for skip in (False, True):
        got, ref, bound, r = P.run_attention(cfg, dtype, True, False, gqa, Sq=sq, Skv=skv, skip_tiles=skip)
        assert not r.findings, "\n".join(map(str, r.findings))
        err = np.abs(got - ref)
        assert (err <= bound).all(), f"skip={skip}: max err {err.max()}"
        runs[skip] = got, r.counters
    assert np.array_equal(runs[True][0], runs[False][0], equal_nan=True)
    full, part = visited_tiles(cfg, 1, 2, sq, skv, False), visited_tiles(cfg, 1, 2, sq, skv, True)
    assert part < full
    if cfg.math:    # tensor-core instructions per key tile are the same in every block
        t_full, t_part = (runs[s][1]["tensor_core_instructions"] for s in (False, True))
        assert t_part * full == t_full * part, (t_part, t_full, part, full)
    else:
        assert runs[True][1]["warp_instructions"] < runs[False][1]["warp_instructions"]


# whole key tiles (the body issues fewer P·V wgmmas on a ragged last tile, so only then are the instructions
# proportional to the tiles); ragged query tiles (a consumer past Sq issues none)
WG_CASES = [(64, dict(B=1, H=1, Sq=256, Skv=256)), (128, dict(B=1, H=1, Sq=300, Skv=384, key_bias=True)),
            (64, dict(B=1, H=1, Sq=300, Skv=256))]


@pytest.mark.parametrize("d,kw", WG_CASES, ids=["d64-256", "d128-past-keybias", "d64-sq-gt-skv"])
def test_sm90a_skip_matches_full_loop(d, kw):
    cfg = ac.WGMMA_CONFIGS[d][0]
    runs = {}
    for skip in (False, True):
        got, ref, findings, r = W.run(cfg, causal=True, skip_tiles=skip, **kw)
        assert findings == [], [str(f) for f in findings]
        tol = 4 * P.H.UNIT["half"] * np.maximum(1.0, np.abs(ref))
        assert (np.abs(got - ref) <= tol).all(), f"skip={skip}: max err {np.abs(got - ref).max()}"
        runs[skip] = got, r.counters
    assert np.array_equal(runs[True][0], runs[False][0], equal_nan=True)
    B, H, Sq, Skv = kw["B"], kw["H"], kw["Sq"], kw["Skv"]
    full, part = visited_tiles(cfg, B, H, Sq, Skv, False), visited_tiles(cfg, B, H, Sq, Skv, True)
    t_full, t_part = (runs[s][1]["tensor_core_instructions"] for s in (False, True))
    assert part < full and t_part * full == t_full * part, (t_part, t_full, part, full)
