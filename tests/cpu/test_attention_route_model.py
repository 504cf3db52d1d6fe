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


@pytest.mark.parametrize("name", ["tc_d64_q64_kv64_w4", "tc_d128_q16_kv32_w1", "wg_d64_q128_kv128_s2"])
@pytest.mark.parametrize("sq,skv,c", [(256, 256, 0), (70, 129, 59), (129, 70, -59), (300, 300, 5), (1, 4096, 4095)])
def test_key_tiles_counts_the_tiles_holding_a_visible_key(name, sq, skv, c):
    """Brute force: a query tile visits key tile t when some row i of it sees a key of t (j <= i + c), up to
    the last such tile (the kernel's loop is a prefix)."""
    cfg = ac.by_name(name)
    want = 0
    for q0 in range(0, sq, cfg.bq):
        last = max((t for t in range(-(-skv // cfg.bkv)) for i in range(q0, min(q0 + cfg.bq, sq))
                    if t * cfg.bkv <= i + c), default=-1)
        want += last + 1
    assert ar.key_tiles(cfg, sq, skv, c) == want
    assert ar.key_tiles(cfg, sq, skv) == -(-sq // cfg.bq) * -(-skv // cfg.bkv)


@pytest.mark.parametrize("d", [64, 128])
def test_causal_skip_halves_the_modelled_long_prefill(d):
    """b1 x 32 x 4096 on the sm_90a body: skipping the tiles above the diagonal models at 50-60 % of the full loop
    (the diagonal tiles and the per-CTA work stay), and the causal route still takes the fastest."""
    body = ac.WGMMA_CONFIGS[d][0]
    full = ar.attention_time(body, 1, 32, 4096, 4096, "sm_90a")
    skip = ar.attention_time(body, 1, 32, 4096, 4096, "sm_90a", causal=0)
    assert 0.5 * full < skip < 0.6 * full, (full, skip)
    cfg = ar.attention_routes(1, 32, 4096, 4096, d, Target("sm_90a"), symdim.Symbols(), math_=ac.MATH_F16,
                              wgmma=True, causal=0)[0][1]
    menu = list(ac.configs_for(ac.MATH_F16, d)) + [body]
    assert ar.attention_time(cfg, 1, 32, 4096, 4096, "sm_90a", 0) == min(
        ar.attention_time(c, 1, 32, 4096, 4096, "sm_90a", 0) for c in menu)
