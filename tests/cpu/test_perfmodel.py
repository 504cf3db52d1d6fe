"""The wave-aware launch-time model (kernels/perfmodel.py) and the GEMM route model that uses it
(kernels/families/gemm/routes.py): occupancy, waves, cluster placement, the SM-scaled roofline floor, and the routes it
gives BERT-base's GEMMs at small and large M. Every number is MODELLED."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from plus_ep.kernels import arch as arch_table
from plus_ep.kernels import perfmodel
from plus_ep.kernels.codegen import symdim
from plus_ep.kernels.families.gemm import routes
from plus_ep.kernels.families.gemm import sm90a_configs as sm90a
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
                                l2_bytes=mb, tensor={"wgmma.fp16": 1e8})
    full = perfmodel.launch_time("sm_90a", ctas=132, threads=256, smem=164864, flops=1e8, dram_bytes=mb,
                                 l2_bytes=mb, tensor={"wgmma.fp16": 1e8})
    assert one.waves == full.waves == 1 and one.sms_used == 12 and full.sms_used == SMS
    # 12 CTAs draw at most twice their fair share each: the floor is 132 / 24 times the full-machine one
    assert one.floor_us == pytest.approx(mb / H100.dram_bytes_per_s * 1e6 * SMS / (2 * 12), rel=1e-6)
    assert full.floor_us == pytest.approx(mb / H100.dram_bytes_per_s * 1e6, rel=1e-6)
    assert one.modelled_us >= one.floor_us and full.modelled_us >= full.floor_us
    assert one.modelled_us > 4 * full.modelled_us
    two = perfmodel.launch_time("sm_90a", ctas=133, threads=256, smem=164864, flops=1e8, dram_bytes=mb,
                                l2_bytes=mb, tensor={"wgmma.fp16": 1e8})
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
    plain = kernel_profile(c, "sm_90a")
    assert "finish_us" not in plain
    done = kernel_profile({**c, "global_ld_cg": {"requests": 100, "sectors": 36_864}}, "sm_90a")
    assert done["finish_us"] > 0
    assert done["modelled_us"] == pytest.approx(plain["modelled_us"] + done["finish_us"], abs=2e-3)


# ---- per-instruction-class peaks and the issue term, against the published figures computed by hand ----
# H100 SXM5 (datasheet, whitepaper): dense FP16 tensor = 132 SMs x 4,096 FLOP per clock x 1,830 MHz = 989.4 TFLOP/s;
# TF32 half of it. mma.sync tops out around 63 % of that peak ("GPUs Go Brrr", Hazy Research, 2024). A100 SXM4
# (datasheet): 312 FP16, 156 TF32, 19.5 FP32 TFLOP/s. MUFU: 16 per clock per SM (CUDA C++ Programming Guide).
H100_CLOCK = 1.83e9
H100_WGMMA = 989.4e12
H100_MMA = 0.63 * 989.4e12
A100_MMA = 312e12


def test_each_published_figure_names_its_source():
    for p in perfmodel.PARTS.values():
        assert p.peaks and {"simt"} < set(p.peaks)
        for key, peak in p.peaks.items():
            assert peak.flops > 0 and peak.source in perfmodel.SOURCES, (p.name, key)
            assert len(perfmodel.SOURCES[peak.source]) > 40, (p.name, key)
        for key in p.source.split(","):
            assert key.strip() in perfmodel.SOURCES, (p.name, key)
    assert "16 results per clock per SM" in perfmodel.SOURCES["mufu"]
    assert "63 %" in perfmodel.SOURCES["H100-mma"] and "hazyresearch" in perfmodel.SOURCES["H100-mma"]
    assert "four partitions" in perfmodel.SOURCES["sm"]


def test_peaks_are_the_published_figures():
    h, a = perfmodel.part("sm_90a"), perfmodel.part("sm_80")
    assert h.unit_peak("wgmma.fp16") == pytest.approx(H100_WGMMA, rel=1e-4)
    assert h.unit_peak("wgmma.bf16") == h.unit_peak("wgmma.fp16")
    assert h.unit_peak("wgmma.tf32") == pytest.approx(H100_WGMMA / 2, rel=1e-4)
    assert h.unit_peak("mma.fp16") == pytest.approx(H100_MMA, rel=1e-4)
    assert h.unit_peak("simt") == pytest.approx(66.9e12)
    assert h.clock_hz == H100_CLOCK and h.peak("fp16") == pytest.approx(H100_WGMMA, rel=1e-4)
    assert a.unit_peak("mma.fp16") == 312e12 and a.unit_peak("mma.tf32") == 156e12 and a.peak("exact") == 19.5e12
    with pytest.raises(KeyError, match="no wgmma.fp16"):
        a.unit_peak("wgmma.fp16")                      # an A100 has no wgmma


def _lat_us(arch):
    return perfmodel.LATENCY_WAVES * perfmodel.part(arch).dram_latency_s * 1e6


def test_mma_sync_on_sm90_is_charged_at_the_mma_sync_peak_not_wgmmas():
    """One full wave of 132 CTAs, 2^30 tensor FLOPs each, no memory: tensor-bound at the instruction's peak."""
    f = SMS * 2.0 ** 30
    kw = dict(ctas=SMS, threads=256, smem=0, dram_bytes=0, l2_bytes=0, flops=f)
    mma = perfmodel.launch_time("sm_90", tensor={"mma.fp16": f}, **kw)
    wg = perfmodel.launch_time("sm_90a", tensor={"wgmma.fp16": f}, **kw)
    assert mma.bound == wg.bound == "tensor"
    assert mma.terms_us["tensor"] == pytest.approx(f / H100_MMA * 1e6, rel=1e-4)
    assert wg.terms_us["tensor"] == pytest.approx(f / H100_WGMMA * 1e6, rel=1e-4)
    assert mma.modelled_us == pytest.approx(f / H100_MMA * 1e6 + _lat_us("sm_90"), rel=1e-4)
    assert mma.modelled_us / wg.modelled_us == pytest.approx(1 / 0.63, rel=0.01)
    fa = f / SMS * 108
    a100 = perfmodel.launch_time("sm_80", tensor={"mma.fp16": fa}, **dict(kw, ctas=108, flops=fa))
    assert a100.terms_us["tensor"] == pytest.approx(fa / A100_MMA * 1e6, rel=1e-4)
    # the same counts through the profile (the interpreter's tensor_flops): the mma.sync class, its peak
    from plus_ep.verification.profile import kernel_profile
    c = {"grid": [SMS, 1, 1], "block": [256, 1, 1], "ctas_run": SMS, "flops": f, "tensor_flops": {"mma.fp16": f},
         "unique_dram_bytes": 0, "resources": {"smem_dynamic": 0, "registers": 64, "cluster": [1, 1, 1]}}
    k = kernel_profile(c, "sm_90")
    assert k["terms_us"]["tensor"] == pytest.approx(f / H100_MMA * 1e6, rel=1e-3) and k["bound"] == "tensor"
    # FLOPs not named as tensor FLOPs are not credited to tensor cores: SIMT at 66.9 TFLOP/s
    simt = perfmodel.launch_time("sm_90a", **kw)
    assert simt.bound == "simt" and simt.terms_us["simt"] == pytest.approx(f / 66.9e12 * 1e6, rel=1e-4)
    with pytest.raises(ValueError, match="exceed"):
        perfmodel.launch_time("sm_90a", tensor={"wgmma.fp16": 2 * f}, **kw)


def test_issue_bound_kernel_is_modelled_by_its_issue_time():
    """Many instructions, little tensor or memory work: 4 schedulers per SM, one warp instruction per clock each."""
    w = 8 * 100_000                                     # 8 warps x 100k warp instructions per CTA
    est = perfmodel.launch_time("sm_90a", ctas=SMS, threads=256, smem=0, flops=1e6, tensor={"wgmma.fp16": 1e6},
                                warp_instructions=SMS * w, dram_bytes=1e6, l2_bytes=1e6)
    assert est.bound == "issue"
    assert est.terms_us["issue"] == pytest.approx(w / (4 * H100_CLOCK) * 1e6, rel=1e-6)      # 109.3 us
    assert est.modelled_us == pytest.approx(w / (4 * H100_CLOCK) * 1e6 + _lat_us("sm_90a"), rel=1e-6)
    # one warp per CTA and one CTA per SM: only one of the four schedulers issues
    one = perfmodel.launch_time("sm_90a", ctas=SMS, threads=32, smem=0, warp_instructions=SMS * 100_000,
                                dram_bytes=0, l2_bytes=0)
    assert one.terms_us["issue"] == pytest.approx(100_000 / H100_CLOCK * 1e6, rel=1e-6)       # 54.6 us
    # exponentials: 16 MUFU results per clock per SM
    ex = perfmodel.launch_time("sm_90a", ctas=SMS, threads=256, smem=0, mufu=SMS * 1e7, dram_bytes=0, l2_bytes=0)
    assert ex.bound == "mufu" and ex.terms_us["mufu"] == pytest.approx(1e7 / (16 * H100_CLOCK) * 1e6, rel=1e-6)


def test_time_is_never_below_the_roofline_floor():
    rng = np.random.default_rng(3)
    for _ in range(400):
        arch = str(rng.choice(["sm_80", "sm_86", "sm_89", "sm_90", "sm_90a"]))
        p = perfmodel.part(arch)
        unit = str(rng.choice([k for k in p.peaks if k != "simt"]))
        flops = float(10 ** rng.uniform(3, 13))
        share = float(rng.uniform(0, 1))
        dram = float(10 ** rng.uniform(2, 10))
        est = perfmodel.launch_time(arch, ctas=int(10 ** rng.uniform(0, 5)), threads=int(rng.choice([32, 128, 256, 512])),
                                    smem=int(rng.integers(0, 100_000)), flops=flops, tensor={unit: share * flops},
                                    warp_instructions=float(10 ** rng.uniform(0, 9)), mufu=float(10 ** rng.uniform(0, 9)),
                                    dram_bytes=dram, l2_bytes=dram * float(rng.uniform(1, 8)),
                                    registers=int(rng.choice([0, 64, 128, 255])), cluster=int(rng.choice([1, 2, 4])))
        assert est.modelled_us >= est.floor_us * (1 - 1e-12)
        # the hardware roofline: every FLOP at the part's best dense peak, every byte at full DRAM bandwidth
        roof = max(share * flops / p.peak(unit.split(".")[1]), (1 - share) * flops / p.peak("exact"),
                   dram / p.dram_bytes_per_s) * 1e6
        assert est.modelled_us >= roof * (1 - 1e-12)
        assert est.modelled_us >= perfmodel.roofline_s(arch, share * flops, dram, unit.split(".")[1]) * 1e6 * (1 - 1e-12)


def test_gemm_route_model_charges_mma_sync_tiles_at_the_mma_sync_peak():
    """The route model feeds the same model: a compute-bound GEMM (4096^3) on an mma.sync tile is never modelled
    faster than 2 M N K at mma.sync's peak on an H100 (sm_90: no wgmma), nor at the A100's peak on sm_80."""
    from plus_ep.kernels.families.gemm import configs as gc
    cfg = gc.BY_NAME["f16_128x128x32_w64x64_s3"]
    f = 2.0 * 4096 ** 3
    assert routes.gemm_time(cfg, 4096, 4096, 4096, 1, "sm_90") >= f / H100_MMA * 1e6
    assert routes.gemm_time(cfg, 4096, 4096, 4096, 1, "sm_80") >= f / A100_MMA * 1e6
    wg = sm90a.BY_NAME["wg_128x256x64_w64x256_s4"]
    t = routes.gemm_time(wg, 4096, 4096, 4096, 1, "sm_90a")
    assert f / H100_WGMMA * 1e6 <= t < f / H100_MMA * 1e6


def test_counters_split_tensor_flops_by_instruction_class_and_precision():
    """The interpreter's summary (kernels/ptx/counters.py): mma.sync per warp issue, wgmma once per warpgroup
    (its 4 warps each issue it), tf32 mma apart from f16/bf16."""
    from types import SimpleNamespace as NS

    from plus_ep.kernels.ptx.counters import Counters
    ops = [NS(cls="mma", form="mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
              meta={"flops": 4096, "precision": "fp16"}),
           NS(cls="mma", form="mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32",
              meta={"flops": 2048, "precision": "tf32"}),
           NS(cls="wgmma", form="wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16",
              meta={"flops": 2 * 64 * 128 * 16, "precision": "fp16"}),
           NS(cls="fp32", form="fma.rn.f32", meta=None)]
    c = Counters(NS(ops=ops), 256)
    c.warp_counts[:] = [10, 3, 8, 5]
    c.thread_counts[:] = [320, 96, 256, 160]
    s = c.summary((1, 1, 1), (256, 1, 1), 1)
    assert s["tensor_flops"] == {"mma.fp16": 40960, "mma.tf32": 6144, "wgmma.fp16": 2 * 2 * 64 * 128 * 16}
    assert s["tensor_core_flops"] == sum(s["tensor_flops"].values())
    assert s["flops"] == s["tensor_core_flops"] + 2 * 160 and s["tensor_core_instructions"] == 10 + 3 + 2


def test_sm90_gemm_routes_charge_mma_sync_at_its_peak():
    """On plain sm_90 (no wgmma) every route of a compute-bound GEMM is an mma.sync tile: none is modelled
    faster than 2 M N K at mma.sync's H100 peak; on sm_90a the wgmma tiles are modelled faster than that."""
    f = 2.0 * 4096 ** 3
    cands = routes.gemm_candidates(4096, 4096, 4096, 1, routes.gemm_menu(routes.gemm_configs.MATH_F16, "sm_90"),
                                   Target("sm_90"))
    assert all(not c.cfg.name.startswith("wg_") for c in cands)
    assert min(c.us for c in cands) >= f / H100_MMA * 1e6
    # what the route model feeds perfmodel for them: mma.sync FLOPs (wgmma for the sm_90a tiles)
    assert {next(iter(routes._tensor(c.cfg, 1.0))) for c in cands if c.cfg.math == 2} == {"mma.fp16"}
    assert routes._tensor(sm90a.BY_NAME["wg_128x256x64_w64x256_s4"], 1.0) == {"wgmma.fp16": 1.0}
    best90a = _route(4096, 4096, 4096)
    assert best90a.cfg.name.startswith("wg_") and best90a.us < f / H100_MMA * 1e6


def _launch(ctas, **per_cta):
    """launch_time of `ctas` CTAs that each carry the same work (per_cta: each total divided by the CTAs)."""
    work = {k: ({c: f * ctas for c, f in v.items()} if isinstance(v, dict) else v * ctas) for k, v in per_cta.items()}
    return perfmodel.launch_time("sm_90a", ctas=ctas, threads=256, smem=48 << 10, **work)


def test_full_waves_add_up_and_any_size_is_modelled_at_once():
    per = dict(flops=2e6, tensor={"wgmma.fp16": 1.5e6}, warp_instructions=4e3, mufu=1e3, l2_bytes=6e4,
               dram_bytes=3e4)
    one = _launch(1, **per)
    n_slots = one.slots
    full, tail = _launch(n_slots, **per), _launch(5, **per)
    big = _launch(3 * n_slots + 5, **per)
    assert big.waves == 4
    for k in perfmodel.TERMS:       # three full waves and one of 5 CTAs, term by term
        assert big.terms_us[k] == pytest.approx(3 * full.terms_us[k] + tail.terms_us[k], rel=1e-12)
    import time
    t0 = time.perf_counter()
    huge = _launch(2 ** 40, **per)          # ~2**33 waves: closed form, not a loop over the waves
    assert time.perf_counter() - t0 < 0.5
    assert huge.waves == -(-2 ** 40 // n_slots)
    assert huge.modelled_us == pytest.approx(full.modelled_us * (2 ** 40 // n_slots), rel=1e-3)
