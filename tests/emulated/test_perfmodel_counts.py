"""The interpreter's counts the time model (kernels/perfmodel.py) charges, end to end on executed PTX: tensor
FLOPs by instruction class (mma.sync on sm_90 charged at mma.sync's peak, wgmma on sm_90a at wgmma's) and warp
instruction issues (a loop kernel with no memory or tensor work is issue-bound). Expected FLOP counts are
M N K arithmetic; peaks are the published figures (tests/cpu/test_perfmodel.py)."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from plus_ep.verification.profile import kernel_profile
from tests.support import ptx_harness as H
from tests.support.gemm_variants import Variant
from tests.support.ptx_gemm_cases import run_gemm

H100_CLOCK = 1.83e9
H100_WGMMA = 989.4e12
H100_MMA = 0.63 * 989.4e12


def _profiled(counters, entry, threads, smem, arch):
    c = dict(counters, entry=entry, resources={"smem_dynamic": smem, "registers": 64, "cluster": [1, 1, 1]})
    c["block"] = [threads, 1, 1]
    return kernel_profile(c, arch)


@pytest.mark.parametrize("arch,cfg,unit,peak", [
    ("sm_90", "f16_64x64x32_w32x32_s4", "mma.fp16", H100_MMA),
    ("sm_90a", "wg_64x128x64_w64x128_s4", "wgmma.fp16", H100_WGMMA)])
def test_tensor_flops_are_counted_by_instruction_class_and_charged_at_its_peak(arch, cfg, unit, peak):
    from plus_ep.kernels.families.gemm import configs as gc, sm90a_configs as gc90
    g = (gc90 if cfg.startswith("wg_") else gc).BY_NAME[cfg]
    m, n, k = g.bm, g.bn, 64                  # one CTA, one tile: exactly M N K multiply-adds
    got, ref, bound, findings, r = run_gemm(arch, Variant(cfg, "half", 0, 1), 1, m, n, k)
    assert not findings and (np.abs(got - ref) <= bound).all()
    c = r.counters
    f = 2 * m * n * k
    assert c["tensor_flops"] == {unit: f} and c["tensor_core_flops"] == f
    p = kernel_profile(dict(c, entry="plus_gemm", resources={"smem_dynamic": g.smem_bytes, "registers": 128,
                                                             "cluster": [1, 1, 1]}), arch)
    # one CTA on one SM: its FLOPs at 1/132 of the class's peak
    assert p["terms_us"]["tensor"] == pytest.approx(f / (peak / 132) * 1e6, rel=1e-3)
    assert p["model_inputs"]["tensor"] == {unit: f}


SPIN = r"""
extern "C" __global__ void spin(unsigned* out, int n) {
  unsigned x = threadIdx.x;
  for (int i = 0; i < n; ++i) x = x * 1664525u + 1013904223u;
  out[blockIdx.x * blockDim.x + threadIdx.x] = x;
}
"""


def _spin(n, threads):
    mod = H.module(SPIN, "sm_90", "spin")
    dev = H.Device()
    out = dev.alloc(threads * 4, "out", fill=0)
    r = mod.kernel("spin").launch((1, 1, 1), (threads, 1, 1), 0, struct.pack("<Qi", out, n), dev.mem)
    x = np.arange(threads, dtype=np.uint64)
    for _ in range(n):
        x = (x * 1664525 + 1013904223) % 2 ** 32
    assert (dev.download(out, np.zeros(threads, np.uint32)) == x).all()
    return r.counters


def test_a_loop_kernel_is_modelled_by_its_issue_time():
    n, threads = 3000, 64
    c = _spin(n, threads)
    w = c["warp_instructions"]
    assert _spin(2 * n, threads)["warp_instructions"] > 1.8 * w      # the issues follow the loop's trip count
    k = _profiled(c, "spin", threads, 0, "sm_90")
    assert k["bound"] == "issue" and c["flops"] == 0 and c.get("tensor_flops") == {}
    assert k["terms_us"]["issue"] == pytest.approx(w / (2 * H100_CLOCK) * 1e6, abs=1e-3)   # 2 warps: 2 schedulers


EXP = r"""
extern "C" __global__ void exps(float* out, int n) {
  float x = threadIdx.x * 1e-3f;
  for (int i = 0; i < n; ++i) x = __expf(-x);
  out[blockIdx.x * blockDim.x + threadIdx.x] = x;
}
"""


def test_a_loop_of_exponentials_is_modelled_by_the_mufu_throughput():
    """Each iteration issues one ex2 (MUFU) per thread and a few other instructions per warp: 16 MUFU results
    per clock per SM is slower than 2 warps' issue, so the launch is MUFU-bound at the thread-level count."""
    n, threads = 2000, 64
    mod = H.module(EXP, "sm_90", "exps")
    dev = H.Device()
    out = dev.alloc(threads * 4, "out", fill=0)
    r = mod.kernel("exps").launch((1, 1, 1), (threads, 1, 1), 0, struct.pack("<Qi", out, n), dev.mem)
    x = np.arange(threads, dtype=np.float32) * np.float32(1e-3)
    for _ in range(n):
        x = np.exp(-x)
    np.testing.assert_allclose(dev.download(out, np.zeros(threads, np.float32)), x, rtol=1e-5)
    c = r.counters
    mufu = c["thread_instructions_by_class"]["mufu"]
    assert mufu >= threads * n                          # one exponential per thread per iteration at least
    k = _profiled(c, "exps", threads, 0, "sm_90")
    assert k["bound"] == "mufu"
    assert k["terms_us"]["mufu"] == pytest.approx(mufu / (16 * H100_CLOCK) * 1e6, abs=1e-3)
