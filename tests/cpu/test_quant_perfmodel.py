"""8-bit GEMMs in the time model: the published INT8/FP8 tensor peaks of each reference part
(kernels/perfmodel.py PARTS, SOURCES["int8"]), the route model charging an 8-bit tile's FLOPs to the mma.sync
int8 class (kernels/families/gemm/routes.py `_tensor`), and the interpreter's counters naming 8-bit mma FLOPs
by their precision. The expected figures are the datasheets' numbers written out here, not read from the model.
Every time is MODELLED."""
from __future__ import annotations

import pytest

from plus_ep.kernels import perfmodel
from plus_ep.kernels.families.gemm import configs as gc
from plus_ep.kernels.families.gemm import routes
from plus_ep.kernels.ptx import Module
from tests.support.ptx_8bit import mma_text

H100_FP16 = 989.4e12            # H100 SXM5 datasheet, FP16 tensor dense
H100_8BIT = 3958e12 / 2         # INT8 and FP8 3,958 with sparsity
A100_INT8 = 624e12
F = 2.0 * 4096 ** 3             # one compute-bound GEMM, 4096^3


def test_8bit_peaks_are_the_published_figures():
    h, a = perfmodel.part("sm_90a"), perfmodel.part("sm_80")
    assert h.unit_peak("wgmma.int8") == pytest.approx(H100_8BIT, rel=1e-3)
    assert h.unit_peak("wgmma.fp8") == pytest.approx(H100_8BIT, rel=1e-3)
    assert h.unit_peak("mma.int8") == pytest.approx(0.63 * H100_8BIT, rel=1e-3)   # mma.sync's 63 %, as fp16's
    assert h.peak("int8") == h.unit_peak("wgmma.int8") and h.peak("fp8") == h.unit_peak("wgmma.fp8")
    assert a.unit_peak("mma.int8") == A100_INT8 == 2 * a.unit_peak("mma.fp16")
    with pytest.raises(KeyError, match="no mma.fp8"):
        a.unit_peak("mma.fp8")                          # Ampere has no float8 tensor instructions
    assert perfmodel.PARTS["A40"].unit_peak("mma.int8") == 299.3e12
    ada = perfmodel.PARTS["GeForce RTX 4090"]
    assert ada.unit_peak("mma.int8") == 660.6e12 and ada.unit_peak("mma.fp8") == 330.3e12
    src = perfmodel.SOURCES["int8"]
    assert all(s in src for s in ("624", "299.3", "660.6", "330.3", "3,958", "ASSUMED"))


@pytest.mark.parametrize("arch,peak", [("sm_80", A100_INT8), ("sm_90", 0.63 * H100_8BIT)])
def test_8bit_gemm_routes_are_charged_at_the_int8_peak(arch, peak):
    """Every 8-bit tile is charged as mma.sync int8 FLOPs: a compute-bound 4096^3 GEMM is never modelled faster
    than 2 M N K at that peak, and (twice fp16's rate) is modelled faster than the same FLOPs at fp16's peak."""
    menu = gc.configs(gc.MATH_INT8)
    assert {next(iter(routes._tensor(c, 1.0))) for c in menu} == {"mma.int8"}
    fp16_peak = perfmodel.part(arch).unit_peak("mma.fp16")
    times = [routes.gemm_time(c, 4096, 4096, 4096, 1, arch) for c in menu]
    assert min(times) >= F / peak * 1e6
    assert min(times) < F / fp16_peak * 1e6
    f16 = min(routes.gemm_time(c, 4096, 4096, 4096, 1, arch) for c in gc.configs(gc.MATH_F16))
    assert min(times) < 0.75 * f16


def test_8bit_gemm_output_is_charged_at_four_bytes():
    """A store-bound 8-bit GEMM (M = N = 8192, K = 64) moves its 1-byte operands and a 4-byte C (the s32 sum or
    the float its epilogue makes): modelled no faster than those bytes at DRAM bandwidth, and slower than a
    1-byte C would be."""
    cfg = gc.BY_NAME["i8_128x128x64_w64x64_s3"]
    m, n, k = 8192, 8192, 64
    p = perfmodel.part("sm_80")
    t = routes.gemm_time(cfg, m, n, k, 1, "sm_80")
    assert t >= (m * k + k * n + 4 * m * n) / p.dram_bytes_per_s * 1e6
    assert t > routes.gemm_time(cfg, m, n, k, 1, "sm_80", out_bytes=1)


@pytest.mark.parametrize("form,acc,prec", [("mma.sync.aligned.m16n8k32.row.col.s32.s8.u8.s32", "s32", "int8"),
                                           ("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e5m2.f32", "f32", "fp8")])
def test_counters_name_8bit_mma_flops_by_precision(form, acc, prec):
    """The interpreter's decoded mma carries its FLOPs and precision, which counters.py keys as mma.<precision>."""
    k = Module.parse(mma_text(form, acc), name="p").kernel("k")
    mmas = [op.meta for op in k.ops if op.cls == "mma"]
    assert mmas == [{"flops": 2 * 16 * 8 * 32, "precision": prec}]
