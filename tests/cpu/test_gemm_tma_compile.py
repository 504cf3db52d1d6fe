"""The TMA tiles BERT-base's QKV group takes at b16 (M = 2048: 128 x 192 over four CTAs sharing B, and the pair) compile
with NVRTC without spills. The group's epilogue stores V m-fastest and picks its tensor map per member; under
setmaxnreg 40 its producer warpgroup spilled, the kernel build excluded the tiles and the route fell back to
128 x 128 (kernels/compile/stage.py)."""
from __future__ import annotations

import functools

import pytest

from bench.harness.bert_fp16 import bert_base_fp16
from plus_ep.kernels.compile import nvrtc
from plus_ep.rewrite import rewrite_detailed


@functools.lru_cache(maxsize=1)
def _qkv_variants() -> dict:
    r = rewrite_detailed(bert_base_fp16(1), archs=["sm_90a"], compile_kernels=False)
    rd = next(rd for rd in r.kernels.rendered.values() if any("PLUS_HAS_TMA_MAPS" in v.source for v in rd.variants)
              and "gemm_group" in rd.variants[0].source.split("\n", 3)[2])
    return {v.name.split("/")[0]: (v.source, route) for v, route in zip(rd.variants, rd.plan.routes)}


@pytest.mark.parametrize("tile", ["ws_128x192x64_s5_c4", "ws_128x192x64_s5_c2"])
def test_bert_qkv_group_tma_tiles_compile_without_spills(tile):
    source, route = _qkv_variants()[tile]
    assert '#include "gemm_sm90a_ws.cuh"' in source and "#define PLUS_EPI_M_FASTEST 2" in source
    res = nvrtc.compile_cubin(source, "sm_90a", name="qkv.cu")
    assert nvrtc.check_resources(res, dynamic_smem=int(route.launches[0].smem), arch="sm_90a") == [], tile
