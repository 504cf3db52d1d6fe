"""The route model's issue table (kernels/families/gemm/sm90a_configs.py ISSUES: warp instructions per tile and per k-tile
of each sm_90a GEMM tile) against the PTX interpreter's counts today: one cp.async tile and one TMA tile, each
launched as one CTA over one tile at K = 128 and 384, the counts fitted as a + b x k-tiles, within 5 %."""
from __future__ import annotations

import numpy as np
import pytest

from plus_ep.kernels.families.gemm import sm90a_configs as gc
from tests.support import gemm_variants as GV
from tests.support import ptx_harness as H
from tests.support.ws_gemm_cases import Case, run


def _cp_async(name: str, k: int) -> float:
    cfg = gc.BY_NAME[name]
    mod = H.module(GV.source(GV.Variant(name, "half", 0, 1), gc, "gemm_sm90a.cuh"), "sm_90a", f"issues_{name}")
    dev = H.Device()
    a, b = dev.upload(np.zeros((cfg.bm, k), np.float16)), dev.upload(np.zeros((k, cfg.bn), np.float16))
    c = dev.upload(np.zeros((cfg.bm, cfg.bn), np.float16))
    args = H.plus_args([a, b], [c], [], [1, cfg.bm, cfg.bn, k])
    r = mod.kernel("plus_gemm").launch((1, 1, 1), (cfg.threads, 1, 1), cfg.smem_bytes, args, dev.mem, checks=False)
    return r.counters["warp_instructions"]


def _tma(name: str, k: int) -> float:
    cfg = gc.WS_BY_NAME[name]
    return run(Case(name), 1, cfg.bm, cfg.bn, k, grid=1, checks=False)[3].counters["warp_instructions"]


@pytest.mark.parametrize("name,count", [("wg_64x128x64_w64x128_s4", _cp_async), ("ws_64x128x64_s8", _tma),
                                        ("ws_128x192x64_s5", _tma)])
def test_issue_table_matches_the_interpreter(name, count):
    lo, hi = count(name, 128), count(name, 384)
    per_ktile = (hi - lo) / 4
    per_tile = lo - 2 * per_ktile
    a, b = gc.ISSUES[name]
    assert abs(per_ktile - b) <= 0.05 * b and abs(per_tile - a) <= 0.05 * a, (per_tile, per_ktile)


def test_every_sm90a_tile_has_an_entry():
    """Every tile the sm_90a menus offer is charged; a multicast tile as its base tile."""
    for cfg in gc.CONFIGS + gc.CLUSTER_CONFIGS + gc.WS_CONFIGS:
        assert gc.issues(cfg, 3) > 0, cfg.name
    c2, base = gc.WS_BY_NAME["ws_128x256x64_s4_c2"], gc.WS_BY_NAME["ws_128x256x64_s4"]
    assert gc.issues(c2, 5) == gc.issues(base, 5) == gc.ISSUES[base.name][0] + 5 * gc.ISSUES[base.name][1]
