"""The GEMM route model (kernels/families/gemm/routes.py) chooses by shape: a symbolic M (batch x seq) gets several routes,
small M a smaller tile than large M (a 128-row tile on 8 rows computes 94 % padding; on sm_90a, where every
wgmma tile is one wave at small M, the tie goes to the larger tile) and large M the menu's largest tile (most
data reuse per loaded element). A model that ignored the shape (one config for every M) would
still give right results, only slow ones; this is what keeps it honest, for every menu: f16 mma.sync and
wgmma, TF32 and SIMT fp32."""
from __future__ import annotations

import pytest
from onnx import TensorProto

from plus_ep.kernels.codegen import symdim
from plus_ep.kernels.families.gemm import routes
from plus_ep.kernels.routes import ALWAYS
from plus_ep.kernels.target import Target

MENUS = [("sm_80", TensorProto.FLOAT16, "exact"), ("sm_80", TensorProto.FLOAT, "tf32"),
         ("sm_80", TensorProto.FLOAT, "exact"), ("sm_90a", TensorProto.FLOAT16, "exact")]


@pytest.mark.parametrize("arch,dtype,fp32_math", MENUS)
def test_routes_follow_the_rows(arch, dtype, fp32_math):
    menu = routes.gemm_menu(routes.gemm_math(dtype, fp32_math), arch)
    rts = routes.gemm_routes("M", 3072, 768, 1, dtype, Target(arch, fp32_math), symdim.Symbols())
    assert len(rts) >= 2, [(c, ch.cfg.name) for c, ch in rts]
    assert rts[-1][0] == ALWAYS and all(c != ALWAYS for c, _ in rts[:-1])
    small, large = rts[0][1].cfg, rts[-1][1].cfg
    assert small.bm * small.bn < large.bm * large.bn, (small.name, large.name)
    assert large.bm * large.bn == max(c.bm * c.bn for c in menu), large.name


@pytest.mark.parametrize("arch,dtype,fp32_math", MENUS)
def test_small_and_large_static_problems(arch, dtype, fp32_math):
    menu = routes.gemm_menu(routes.gemm_math(dtype, fp32_math), arch)
    math_ = routes.gemm_math(dtype, fp32_math)
    target = Target(arch, fp32_math)
    tiny = routes.best_gemm(8, 3072, 768, 1, routes.gemm_menu(math_, arch), target).cfg
    big = routes.best_gemm(8192, 3072, 768, 1, routes.gemm_menu(math_, arch), target).cfg
    assert tiny.bm < big.bm or tiny.bm * tiny.bn < big.bm * big.bn, (tiny.name, big.name)
    assert big.bm * big.bn == max(c.bm * c.bn for c in menu), big.name
