"""The 8-bit TMA tiles (kernels/families/gemm/sm90a_configs.py WS8_CONFIGS for B stored [N, K], WS8T_CONFIGS for B
[K, N], transposed in shared memory; gemm_sm90a_ws.cuh with PLUS_MATH 3) in the route model and the tensor maps:
offered on sm_90a where the operands have maps of 16-byte rows, with 128-element boxes; chosen where the model
says they are faster."""
from __future__ import annotations

import pytest
from onnx import TensorProto

from plus_ep.kernels.families.gemm import configs as gemm_configs
from plus_ep.kernels.families.gemm import routes, sm90a_configs as gc, tma
from plus_ep.kernels.target import Target

I8, U8, F16 = TensorProto.INT8, TensorProto.UINT8, TensorProto.FLOAT16
BERT = {"qkv": (768, 2304), "attention_out": (768, 768), "ffn_in": (768, 3072), "ffn_out": (3072, 768)}


def _maps(dt, K, trans_b, N=768):
    bshape = [N, K] if trans_b else [K, N]
    return tma.operands(dt, 2048, K, 1, trans_b, [], [(0, [2048, K])], [(1, bshape, N, K if trans_b else N)])


@pytest.mark.parametrize("dt", [I8, U8])
def test_8bit_maps_need_rows_of_whole_chunks(dt):
    assert _maps(dt, 768, True) is not None and _maps(dt, 768, False) is not None
    assert _maps(dt, 776, True) is None           # rows of 776 bytes: not whole 16-byte chunks
    assert _maps(dt, 784, True) is not None
    assert _maps(dt, 768, False, N=776) is None   # B [K, N] rows of N bytes
    assert _maps(F16, 776, False) is not None     # 16-bit rows: 8 elements are a chunk


def test_8bit_records_take_128_element_boxes():
    from plus_ep.kernels.codegen.symdim import Symbols
    t = _maps(I8, 768, True)
    cfg = gc.WS_BY_NAME["ws8_128x192x128_s5_c2"]
    a, b = t.records(cfg, Symbols(), cluster=2)
    assert a[0] == I8 and a[6] == (128, 128, 1) and a[7] == 128
    assert b[6] == (128, 96, 1)                    # a multicast pair: each CTA loads half of B's 192 rows
    kn = _maps(I8, 768, False).records(gc.WS_BY_NAME["ws8t_128x128x128_s6"], Symbols())
    assert kn[1][4][:2] == ("768", "768") and kn[1][6] == (128, 128, 1)      # (N, K) in [128 k][128 n] boxes
    f16 = _maps(F16, 768, True).records(gc.WS_BY_NAME["ws_128x192x64_s5"], Symbols())
    assert f16[0][6] == (64, 128, 1)
    assert _maps(F16, 768, False).records(gc.WS_BY_NAME["ws_128x192x64_s5"], Symbols())[1][6] == (64, 64, 1)


def test_menus():
    i8 = gemm_configs.MATH_INT8
    names = lambda menu: {c.name for c in menu}            # noqa: E731
    kn = names(routes.gemm_menu(i8, "sm_90a", tma=True))
    nk = names(routes.gemm_menu(i8, "sm_90a", tma=True, b_kmajor=True))
    assert kn == names(gemm_configs.configs(i8)) | {c.name for c in gc.WS8T_CONFIGS}
    assert nk == names(gemm_configs.configs(i8)) | {c.name for c in gc.WS8_CONFIGS}
    assert all(c.bn % 128 == 0 and gc.transposes_b(c) for c in gc.WS8T_CONFIGS)   # B boxes of 128 columns
    assert names(routes.gemm_menu(i8, "sm_90a")) == names(gemm_configs.configs(i8))
    assert names(routes.gemm_menu(i8, "sm_80", tma=True)) == names(gemm_configs.configs(i8))
    assert names(routes.gemm_menu(i8, "sm_90a", tma=True, gated=True)) == names(gemm_configs.configs(i8))
    assert not names(routes.gemm_menu(gemm_configs.MATH_F16, "sm_90a", tma=True)) & {
        c.name for c in gc.WS8_CONFIGS + gc.WS8T_CONFIGS}


def test_8bit_configs_mirror_the_template():
    for c in gc.WS8_CONFIGS + gc.WS8T_CONFIGS:
        d = gc.ws_defines(c, b_trans=int(not gc.transposes_b(c)))
        assert d["PLUS_MATH"] == 3 and d["PLUS_BK"] == 128
        # a stage holds as many bytes as the 16-bit tile of the same BM x BN (one 128-byte row per k-tile)
        assert c.smem_bytes == gc.ws_smem_bytes(c.bm, c.bn, c.stages) <= 232448
        assert gc.issues(c, 3) > 0 and gc.is_ws(c) and routes.gemm_header(c) == "gemm_sm90a_ws.cuh"
    assert gc.ws_defines(gc.WS_BY_NAME["ws_128x192x64_s5"])["PLUS_MATH"] == 2


def _best(menu, k, n, target, out_bytes=None):
    return routes.gemm_candidates(2048, n, k, 1, menu, target, allow_splitk=False, out_bytes=out_bytes)[0]


@pytest.mark.parametrize("b_kmajor,most", [(False, 0.85), (True, 0.82)])
def test_bert_base_b16_routes_take_the_8bit_tma_tiles(b_kmajor, most):
    """At M = 2048 the BERT-base projections model faster on the 8-bit TMA tiles than on mma.sync (QKV with a
    [K, N] B models slower there and keeps mma.sync), the four together at most `most` x the mma.sync menu's time
    (2026-11-29: 0.827x with B [K, N], 0.805x with B [N, K])."""
    t = Target("sm_90a", "tf32")
    menu = routes.gemm_menu(gemm_configs.MATH_INT8, "sm_90a", tma=True, b_kmajor=b_kmajor)
    old = gemm_configs.configs(gemm_configs.MATH_INT8)
    new_us = old_us = 0.0
    for name, (k, n) in BERT.items():
        best = _best(menu, k, n, t)
        assert (name == "qkv" and not b_kmajor) or gc.is_ws(best.cfg), (name, best.label)
        assert not gc.is_ws(best.cfg) or gc.transposes_b(best.cfg) != b_kmajor, best.label
        new_us += best.us
        old_us += _best(old, k, n, t).us
    assert new_us <= most * old_us, (new_us, old_us)


def test_small_gemm_keeps_mma_sync_where_it_models_faster():
    """The routes pick by the model, not by the tile's kind: a GEMM of 64 rows goes to whichever models faster,
    and that is the candidate list's head."""
    t = Target("sm_90a", "tf32")
    menu = routes.gemm_menu(gemm_configs.MATH_INT8, "sm_90a", tma=True)
    cands = routes.gemm_candidates(64, 64, 128, 1, menu, t, allow_splitk=False)
    assert cands[0].us == min(c.us for c in cands)
    assert not gc.is_ws(cands[0].cfg), cands[0].label     # one small tile: the persistent ring does not pay


@pytest.mark.parametrize("tile", ["ws8t_128x256x128_s4_c2", "ws8_128x192x128_s5_c2"])
def test_8bit_tiles_compile_to_sass_without_spills(tile):
    """The widest 8-bit tiles (two consumers of 128 s32 accumulators; the transposing one with its block registers)
    assemble for sm_90a within the registers setmaxnreg gives the consumers, no spills, their shared memory."""
    from plus_ep.kernels.compile import nvrtc
    from tests.support.ws8_gemm_cases import Case, source
    cfg = gc.WS_BY_NAME[tile]
    src = source(Case(tile, "u8", "s8", hooks="requant", b_trans=int(not gc.transposes_b(cfg))))
    res = nvrtc.compile_cubin(src, "sm_90a", name=f"{tile}.cu")
    assert nvrtc.check_resources(res, dynamic_smem=cfg.smem_bytes, arch="sm_90a") == [], tile
