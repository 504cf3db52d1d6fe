"""The attention route follows kernels/perfmodel.py where it can time every tile of the menu (f16/bf16, head dims
64 and 128): at long prefill it takes the modelled fastest tile (the old waves-of-padded-rows rule took the
one-warp 16-row tile there, modelled 2.7-5.4x slower than the 128-row tile), within MODEL_TIE of the fastest; a
decode-like query count keeps a small tile where the model calls the tiles even."""
from __future__ import annotations

import pytest

from plus_ep.kernels.codegen import symdim
from plus_ep.kernels.families.flash_attention import configs as ac
from plus_ep.kernels.families.flash_attention import routes as ar
from plus_ep.kernels.target import Target


def pick(b, h, sq, skv, d, arch, wgmma=False):
    return ar.attention_routes(b, h, sq, skv, d, Target(arch), symdim.Symbols(), math_=ac.MATH_F16, wgmma=wgmma)[0][1]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("b,h,s", [(1, 32, 2048), (1, 32, 4096), (4, 32, 1024), (1, 16, 3000)])
def test_long_prefill_takes_the_modelled_fastest_tile(arch, d, b, h, s):
    times = {c.name: ar.attention_time(c, b, h, s, s, arch) for c in ac.configs_for(ac.MATH_F16, d)}
    best = min(times.values())
    cfg = pick(b, h, s, s, d, arch)
    assert times[cfg.name] <= best * (1 + ar.MODEL_TIE), (cfg.name, times)
    assert cfg.bq >= 64, (cfg.name, times)        # the one-warp q16 tile models >= 2.7x slower here


@pytest.mark.parametrize("d", [64, 128])
def test_with_the_sm90a_body_the_fastest_of_both_menus(d):
    menu = list(ac.configs_for(ac.MATH_F16, d)) + list(ac.WGMMA_CONFIGS[d])
    times = {c.name: ar.attention_time(c, 1, 32, 4096, 4096, "sm_90a") for c in menu}
    cfg = pick(1, 32, 4096, 4096, d, "sm_90a", wgmma=True)
    assert cfg.wgmma and times[cfg.name] == min(times.values()), (cfg.name, times)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_decode_like_queries_keep_the_least_padded_tile_on_a_tie(arch):
    """8 x 32 heads, one query over 2048 keys: the tiles model within MODEL_TIE of each other (memory-bound), so
    the 16-row tile, padding 15 rows instead of 63 or 127, stays."""
    assert pick(8, 32, 1, 2048, 64, arch).bq == 16


def test_unmodelled_menus_keep_the_waves_rule():
    """No counts for head dim 80 (or tf32, SIMT): the waves-of-padded-rows rule still chooses there."""
    assert ar.attention_time(ac.configs_for(ac.MATH_F16, 80)[0], 1, 1, 64, 64, "sm_80") is None
    assert pick(1, 32, 4096, 4096, 80, "sm_80").name == "tc_d80_q16_kv32_w1"
