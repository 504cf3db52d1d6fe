"""The TMA tiles win BERT-base's b16 GEMMs by the time model, and only by it: the route model ranks them with
perfmodel (tensor, memory and the issue term of sm90a_configs.ISSUES), so charging them more issues than the
interpreter counts hands the routes back to the cp.async tiles."""
from __future__ import annotations

from onnx import TensorProto

from plus_ep.kernels.families.gemm import routes as R, sm90a_configs as gc
from plus_ep.kernels.target import Target

SM90A = Target("sm_90a", "exact", frozenset())
M = 16 * 128                                      # BERT-base, batch 16 x seq 128
SHAPES = [(768, 768, 3, 1), (3072, 768, 1, None)]  # the QKV group (3 x N 768, one A), FFN1


def _route(n, k, b, ab, tma=True):
    (_, choice), = R.gemm_routes(M, n, k, b, TensorProto.FLOAT16, SM90A, None, a_batch=ab, tma=tma)
    return choice


def test_tma_tiles_win_bert_b16_by_the_model():
    for n, k, b, ab in SHAPES:
        ws, cp = _route(n, k, b, ab), _route(n, k, b, ab, tma=False)
        assert gc.is_ws(ws.cfg) and not gc.is_ws(cp.cfg), (ws.cfg.name, cp.cfg.name)
        assert ws.us < 0.9 * cp.us, (n, k, ws.us, cp.us)


def test_the_choice_follows_the_issue_term(monkeypatch):
    """Ten times the counted issues of every TMA tile (per tile and per k-tile): the cp.async tiles are faster
    again."""
    table = {name: (10 * a, 10 * b) if name.startswith("ws_") else (a, b) for name, (a, b) in gc.ISSUES.items()}
    monkeypatch.setattr(gc, "ISSUES", table)
    for n, k, b, ab in SHAPES:
        assert not gc.is_ws(_route(n, k, b, ab).cfg), (n, k)


def test_a_one_tile_launch_takes_its_counted_issues():
    """One 64 x 128 tile over one k-tile issues ISSUES' a + b warp instructions (counted by the interpreter,
    tests/emulated/test_gemm_issue_table.py); its four warp schedulers issue one a cycle each, so the launch takes
    at least that long plus the wave's latency (perfmodel: a wave takes its largest term plus the latency), above
    its tensor time (1 MFLOP on one SM) and its memory time (40 KB at twice one SM's share of the L2)."""
    from plus_ep.kernels import perfmodel
    cfg = gc.WS_BY_NAME["ws_64x128x64_s8"]
    a, b = gc.ISSUES[cfg.name]
    p = perfmodel.part("sm_90a")
    issue_us, latency_us = (a + b) / (4 * p.clock_hz) * 1e6, perfmodel.LATENCY_WAVES * p.dram_latency_s * 1e6
    tensor_us = 2 * 64 * 128 * 64 / (p.unit_peak("wgmma.fp16") / 132) * 1e6
    l2_us = (64 + 128) * 64 * 2 / (perfmodel.SHARE * p.l2_bytes_per_s / 132) * 1e6
    assert issue_us > max(tensor_us, l2_us), (issue_us, tensor_us, l2_us)
    assert R.gemm_time(cfg, 64, 128, 64, 1, "sm_90a", persistent=False) >= issue_us + latency_us - 1e-9


def test_192_wide_tiles_balance_the_persistent_grid_at_bert_b16():
    """FFN1 (2048 x 3072) is 192 tiles of 128 x 256, 96 multicast pairs on 66 clusters: a third of the CTAs idle
    for the second round. 128 x 192 makes 256 tiles, two full rounds of 32 clusters of four, whose CTAs share B
    (L2 reads it once per four m tiles): the model picks it there and for the QKV group, faster by more than a
    tenth."""
    wide, narrow = gc.WS_BY_NAME["ws_128x256x64_s4_c2"], gc.WS_BY_NAME["ws_128x192x64_s5_c4"]
    for n, k, b, ab in SHAPES:
        choice = _route(n, k, b, ab)
        assert choice.cfg is narrow, (n, choice.cfg.name)
        assert choice.us < 0.9 * R.gemm_time(wide, M, n, k, b, "sm_90a", a_batch=ab), n
