"""Which GEMM + LayerNorm/RMSNorm subgraphs get the one-kernel sm_90a route (kernels/families/gemm_rownorm/tile.py)
and which keep the two-kernel plan, and that every cluster tile compiles with NVRTC without spills."""
from __future__ import annotations

import re

import pytest
from onnx import TensorProto

from plus_ep.kernels.families.gemm import sm90a_configs as sm90a
from plus_ep.kernels.compile import nvrtc
from tests.support.gemm_norm_cases import norm_model, render_subgraph


@pytest.mark.parametrize("n,bn,c", [(48, 64, 1), (200, 64, 4), (512, 64, 8), (768, 128, 6), (1024, 128, 8),
                                    (1536, 256, 6), (2048, 256, 8), (2049, 512, 5), (4096, 512, 8),
                                    (4097, None, None)])
def test_tile_width_follows_n(n, bn, c):
    assert sm90a.cluster_bn(n) == bn
    if bn:
        assert -(-n // bn) == c <= sm90a.CLUSTER_MAX


def _entries(rd):
    return [[launch.entry for launch in r.launches] for r in rd.plan.routes]


def test_one_launch_per_route_on_sm90a():
    rd, _, _ = render_subgraph(norm_model(256, 768, 64, TensorProto.FLOAT16, sum_out=True)[0])
    assert _entries(rd) == [["plus_gemm"]] * len(rd.plan.routes) and not rd.plan.scratch
    for v, r in zip(rd.variants, rd.plan.routes):
        assert v.name.endswith("/cluster6") and r.launches[0].grid[0] == "6"
        assert "#define PLUS_HAS_ROW_TILE 1" in v.source and "#define PLUS_CLUSTER_X 6" in v.source


@pytest.mark.parametrize("n,dt,arch", [(4097, TensorProto.FLOAT16, "sm_90a"),     # more than 8 x 512 columns
                                       (768, TensorProto.FLOAT16, "sm_80"),       # no clusters/wgmma there
                                       (768, TensorProto.FLOAT16, "sm_90"),
                                       (768, TensorProto.FLOAT, "sm_90a")])       # fp32: no wgmma template
def test_two_kernel_plan_elsewhere(n, dt, arch):
    rd, _, _ = render_subgraph(norm_model(64, n, 64, dt)[0], arch=arch)
    assert all(e == ["plus_gemm", "plus_row"] for e in _entries(rd)) and rd.plan.scratch
    assert not any("PLUS_HAS_ROW_TILE" in v.source for v in rd.variants)


def test_cluster_tiles_compile_without_spills():
    """The routes' configs of each tile width 64..512 (plain and cluster-only; M symbolic), LayerNorm with the sum
    stored: 0 spills, shared memory within the limit."""
    seen = set()
    for n in (512, 768, 2048, 4096):
        rd, _, _ = render_subgraph(norm_model("M", n, 64, TensorProto.FLOAT16, sum_out=True)[0])
        for v, r in zip(rd.variants, rd.plan.routes):
            if v.name in seen:
                continue
            seen.add(v.name)
            res = nvrtc.compile_cubin(v.source, "sm_90a", name="gemm_norm.cu")
            assert nvrtc.check_resources(res, dynamic_smem=int(r.launches[0].smem), arch="sm_90a") == [], v.name
    # every cluster-only tile, forced (the others excluded), compiles too
    everything = {c.name for c in sm90a.CONFIGS + sm90a.CLUSTER_CONFIGS + sm90a.WS_CONFIGS}
    for c in sm90a.CLUSTER_CONFIGS:
        if c.name in {name.split("/")[0] for name in seen}:
            continue
        rd, _, _ = render_subgraph(norm_model("M", 2 * c.bn, 64, TensorProto.FLOAT16, sum_out=True)[0],
                                   excluded=everything - {c.name})
        v, r = rd.variants[0], rd.plan.routes[0]
        assert v.name.startswith(c.name) and "PLUS_HAS_ROW_TILE" in v.source
        res = nvrtc.compile_cubin(v.source, "sm_90a", name="gemm_norm.cu")
        assert nvrtc.check_resources(res, dynamic_smem=int(r.launches[0].smem), arch="sm_90a") == [], v.name


def test_ptx_declares_the_cluster():
    from plus_ep.kernels.compile.ptx import compile_ptx
    rd, _, _ = render_subgraph(norm_model(64, 768, 64, TensorProto.FLOAT16)[0])
    ptx = compile_ptx(rd.variants[0].source, "sm_90a", name="gemm_norm.cu")
    assert ".explicitcluster" in ptx and re.search(r"\.reqnctapercluster 6, 1, 1", ptx)
    assert "mapa.shared::cluster" in ptx and "ld.shared::cluster.f32" in ptx


def test_failed_tiles_fall_back_to_a_wider_cluster_tile():
    """Tiles the kernel build excluded (they spilled or did not fit when compiled) are skipped: the wider
    tile widths with usable configs serve (768 = 3 x 256 or 2 x 512), beside the one-launch finish and two-kernel
    plans (which the model may still prefer at the smallest M, where a few CTAs' epilogues are issue-bound)."""
    excluded = {c.name for c in sm90a.cluster_menu(128)}
    rd, _, _ = render_subgraph(norm_model("M", 768, 64, TensorProto.FLOAT16)[0], excluded=excluded)
    row = [v for v in rd.variants if "PLUS_HAS_ROW_TILE" in v.source]
    assert row and all(v.name.split("/")[1].split("-")[0] in ("cluster3", "cluster2") for v in row)
    assert not {v.name.split("/")[0] for v in rd.variants} & excluded
    assert _entries(rd)[-1] == ["plus_gemm"]
