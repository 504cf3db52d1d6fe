"""The wave-aware launch-time model (kernels/perfmodel.py) and the GEMM route model that uses it
(kernels/gemm/routes.py): occupancy, waves, cluster placement, the SM-scaled roofline floor, and the routes it
gives BERT-base's GEMMs at small and large M. Every number is MODELLED."""
from __future__ import annotations

import pytest
from onnx import TensorProto

from plus_ep.kernels import arch as arch_table
from plus_ep.kernels import perfmodel
from plus_ep.kernels.codegen import symdim
from plus_ep.kernels.gemm import routes
from plus_ep.kernels.gemm import sm90a_configs as sm90a
from plus_ep.kernels.routes import ALWAYS, LAUNCH_PREFERENCE, SAMPLES
from plus_ep.kernels.target import Target

H100 = perfmodel.part("sm_90a")
SMS = arch_table.get("sm_90a").sms


def test_occupancy_follows_threads_shared_memory_and_registers():
    assert perfmodel.occupancy("sm_90a", 128, 99328) == 2                  # 2 x (97 + 1) KB <= 228 KB
    assert perfmodel.occupancy("sm_90a", 256, 197632) == 1
    assert perfmodel.occupancy("sm_90a", 32, 0) == 32                      # the resident-block limit
    assert perfmodel.occupancy("sm_90a", 1024, 0) == 2                     # 2048 threads per SM
    assert perfmodel.occupancy("sm_90a", 256, 0, registers=255) == 1       # 256 x 256 registers of 65536


def test_clusters_are_placed_whole_per_gpc():
    assert perfmodel.slots("sm_90a", 1) == SMS
    # 8 GPCs of floor(132 / 8) = 16 SMs: two 6-CTA clusters fit a GPC, so 16 clusters of 6 run at once
    assert perfmodel.slots("sm_90a", 1, cluster=6) == 8 * 2 * 6
    assert perfmodel.slots("sm_90a", 2, cluster=8) == 8 * 4 * 8


def test_waves_and_the_sm_scaled_floor():
    mb = 4.72e6           # BERT-base FFN2 weights (fp16), streamed once
    one = perfmodel.launch_time("sm_90a", ctas=12, threads=256, smem=164864, flops=1e8, dram_bytes=mb,
                                l2_bytes=mb, math_="fp16")
    full = perfmodel.launch_time("sm_90a", ctas=132, threads=256, smem=164864, flops=1e8, dram_bytes=mb,
                                 l2_bytes=mb, math_="fp16")
    assert one.waves == full.waves == 1 and one.sms_used == 12 and full.sms_used == SMS
    # 12 CTAs draw at most twice their fair share each: the floor is 132 / 24 times the full-machine one
    assert one.floor_us == pytest.approx(mb / H100.dram_bytes_per_s * 1e6 * SMS / (2 * 12), rel=1e-6)
    assert full.floor_us == pytest.approx(mb / H100.dram_bytes_per_s * 1e6, rel=1e-6)
    assert one.modelled_us >= one.floor_us and full.modelled_us >= full.floor_us
    assert one.modelled_us > 4 * full.modelled_us
    two = perfmodel.launch_time("sm_90a", ctas=133, threads=256, smem=164864, flops=1e8, dram_bytes=mb,
                                l2_bytes=mb, math_="fp16")
    assert two.waves == 2 and two.modelled_us > full.modelled_us      # the lone CTA of the second wave


def test_gaps_are_separate_and_graphs_are_cheaper():
    assert perfmodel.gap_us(10, graphs=True) < perfmodel.gap_us(10, graphs=False)
    assert perfmodel.gap_us(0, graphs=False) == 0


def _route(M, N, K, batch=1):
    rts = routes.gemm_routes(M, N, K, batch, TensorProto.FLOAT16, Target("sm_90a"), symdim.Symbols())
    assert len(rts) == 1
    return rts[0][1]


def test_small_m_splits_k_inside_a_cluster_and_large_m_does_not():
    """BERT-base FFN1 (N 3072, K 768) at batch 1 x 128 tokens: 24 tiles of 128 x 128 would use 24 SMs; the
    model splits K over a cluster instead (one launch, partials summed through distributed shared memory)."""
    small = _route(128, 3072, 768)
    assert small.csplit > 1 and small.split == 1
    ctas = -(-128 // small.cfg.bm) * -(-3072 // small.cfg.bn) * small.csplit
    assert ctas >= SMS // 2
    big = _route(16384, 3072, 768)
    assert big.csplit == 1 and big.split == 1


def test_split_k_never_exceeds_a_portable_cluster_and_reduces_whole_row_groups():
    for M in (1, 64, 128, 512):
        c = _route(M, 768, 3072)
        assert c.csplit in (1, 2, 4, 8) and c.cfg.bm % (8 * c.csplit) == 0


def test_gemm_norm_routes_weigh_one_kernel_against_two():
    """GEMM + LayerNorm at N 768: the route model compares the row tile over a cluster (with split-K in the
    cluster) and the two-kernel plan by modelled time, per M; at large M the one kernel wins."""
    menus = [(-(-768 // bn), sm90a.cluster_menu(bn)) for bn in sm90a.CLUSTER_WIDTHS if -(-768 // bn) <= 8]
    rts = routes.gemm_norm_routes("M", 768, 768, TensorProto.FLOAT16, Target("sm_90a"), symdim.Symbols(),
                                  tile_menus=menus)
    kinds = [kind for _, kind, _ in rts]
    assert kinds[-1] == "tile" and set(kinds) <= {"tile", "two"}
    for _, kind, c in rts:
        if kind == "tile":
            assert c.cx * c.csplit <= routes.MAX_CLUSTER and c.cx == -(-768 // c.cfg.bn)
    only_two = routes.gemm_norm_routes(128, 768, 768, TensorProto.FLOAT16, Target("sm_90a"), symdim.Symbols())
    assert [k for _, k, _ in only_two] == ["two"]


def test_neighbouring_samples_keep_a_choice_within_tolerance():
    rts = routes.gemm_routes("M", 768, 768, 1, TensorProto.FLOAT16, Target("sm_90a"), symdim.Symbols())
    keys = [c.key() for _, c in rts]
    assert len(keys) == len(set(keys)) or len(keys) <= len(SAMPLES)
    assert rts[-1][0] == ALWAYS


def test_two_launches_must_win_by_the_launch_preference():
    """BERT-base at batch 8 x 128 tokens: FFN2 + LayerNorm's one-kernel row tile and the two-kernel plan are
    modelled within 10 % of each other, so the one launch wins; at batch 1 the two-kernel plan is twice as
    fast (the row tile's cluster caps FFN2 at 16 CTAs) and wins."""
    menus = [(-(-768 // bn), sm90a.cluster_menu(bn)) for bn in sm90a.CLUSTER_WIDTHS if -(-768 // bn) <= 8]
    kinds = {}
    for m in (128, 1024):
        (rt,) = routes.gemm_norm_routes(m, 768, 3072, TensorProto.FLOAT16, Target("sm_90a"), symdim.Symbols(),
                                        tile_menus=menus)
        kinds[m] = rt[1]
        if rt[1] == "two":
            assert rt[2].cost == pytest.approx(rt[2].us * (1 + LAUNCH_PREFERENCE))
    assert kinds == {128: "two", 1024: "tile"}


def test_row_finish_takes_batch_one_in_one_launch():
    """BERT-base FFN2 + LayerNorm at batch 1 x 128 tokens: with the one-launch plan offered (the last CTA of each
    row group finishes its rows), it beats both the two-kernel plan (same GEMM, no second launch, a shorter
    tail) and the cluster row tile (16 CTAs); its modelled time is the GEMM's plus the finish tail. At
    batch 8 the cluster row tile keeps the route."""
    menus = [(-(-768 // bn), sm90a.cluster_menu(bn)) for bn in sm90a.CLUSTER_WIDTHS if -(-768 // bn) <= 8]
    t = Target("sm_90a")
    (rt,) = routes.gemm_norm_routes(128, 768, 3072, TensorProto.FLOAT16, t, symdim.Symbols(), tile_menus=menus,
                                    finish=True)
    _, kind, c = rt
    assert kind == "one" and c.finish and c.label.endswith("-finish") and c.cost == c.us
    gemm = routes.gemm_time(c.cfg, 128, 768, 3072, 1, "sm_90a", csplit=c.csplit, out_bytes=4)
    tail = routes.row_finish_time(128, 768, "sm_90a", c.cfg, c.csplit)
    assert tail > 0 and c.us == pytest.approx(gemm + tail)
    assert c.us < routes.row_kernel_time(128, 768, "sm_90a") + gemm       # the two-kernel plan's time
    (big,) = routes.gemm_norm_routes(1024, 768, 3072, TensorProto.FLOAT16, t, symdim.Symbols(), tile_menus=menus,
                                     finish=True)
    assert big[1] == "tile"


def test_profile_adds_the_finish_tail():
    """plus-ep profile: a launch whose CTAs read through ld.global.cg (the row finish) gets a tail of those
    bytes over gridDim.y x gridDim.z CTAs added to its modelled time; without such reads nothing changes."""
    from plus_ep.verification.profile import kernel_profile
    c = {"grid": [6, 2, 8], "block": [128, 1, 1], "ctas_run": 96, "flops": 2 * 128 * 768 * 3072,
         "unique_dram_bytes": 5_900_000, "global_ld": {"requests": 1000, "sectors": 400_000},
         "global_st": {"requests": 100, "sectors": 12_000},
         "resources": {"smem_dynamic": 99328, "registers": 128, "cluster": [1, 1, 8]}}
    plain = kernel_profile(c, "sm_90a", "fp16")
    assert "finish_us" not in plain
    done = kernel_profile({**c, "global_ld_cg": {"requests": 100, "sectors": 36_864}}, "sm_90a", "fp16")
    assert done["finish_us"] > 0
    assert done["modelled_us"] == pytest.approx(plain["modelled_us"] + done["finish_us"], abs=2e-3)
