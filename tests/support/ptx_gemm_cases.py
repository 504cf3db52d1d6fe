"""GEMM templates (gemm.cuh: SIMT fp32, TF32 and f16/bf16 mma.sync; gemm_sm90a.cuh: wgmma) executed by the
PTX interpreter against float64 numpy references: every config x dtype, odd M/N/K, both B layouts, both
alignments, split-K, strided and fused hooks. Tolerances: output rounding (unit roundoff of the output
type times |ref|) plus fp32 accumulation ((K + 4) * 2^-24 * sum_k |a_k b_k|); 0 checker findings."""
from __future__ import annotations

import zlib

import numpy as np
import pytest

from plus_ep.kernels.families.gemm import configs as gc
from plus_ep.kernels.families.gemm import sm90a_configs as gc90
from tests.support import ptx_harness as H
from tests.support.ptx_sources import GEMM_EXTRAS, WGMMA_EXTRAS, gemm_combo, gemm_source, wgmma_combos, wgmma_source
from tests.support.gemm_variants import Variant, round_up

DTYPES = {gc.MATH_F16: ("half", "__nv_bfloat16"), gc.MATH_TF32: ("float",), gc.MATH_SIMT: ("float",),
          gc.MATH_INT8: ()}     # the 8-bit path: tests/emulated/test_gemm_int8.py (exact integers)


def _cases():
    out = []
    i = 0
    for math, cfgs in gc.CONFIGS.items():
        for cfg in cfgs:
            for dtype in DTYPES[math]:
                bt, al = gemm_combo(i)            # the census's sm_80 choice: its compile is reused
                # odd sizes that leave partial tiles in M, N and K
                out.append(("sm_80", Variant(cfg.name, dtype, bt, al), 1, cfg.bm - 3, cfg.bn - 5, 2 * cfg.bk + 3))
                i += 1
    out += [("sm_90", Variant("f16_64x64x32_w32x32_s4", "__nv_bfloat16", 1, 1), 2, 37, 45, 70)]
    shapes = {(2, 0): (1, 77, 60, 100), (0, 0): (2, 33, 40, 29), (2, 1): (2, 50, 60, 72), (0, 1): (1, 5, 61, 45),
              (1, 1): (1, 40, 50, 150), (2, 2): (2, 13, 100, 70)}
    for v in GEMM_EXTRAS:        # split-K / fused / strided; (math, hooks) -> shape
        math = gc.BY_NAME[v.cfg].math
        out.append(("sm_80", v) + shapes[(math, ("", "fused", "strided").index(v.hooks))])
    for j, cfg in enumerate(gc90.BY_NAME.values()):
        for d, dtype in enumerate(("half", "__nv_bfloat16")):
            bt, al = wgmma_combos(j, d, cfg.bm)[0]
            out.append(("sm_90a", Variant(cfg.name, dtype, bt, al), 1, cfg.bm - 7, cfg.bn - 9, 2 * cfg.bk + 5))
    out += [("sm_90a", WGMMA_EXTRAS[0], 2, 40, 70, 200), ("sm_90a", WGMMA_EXTRAS[1], 2, 30, 50, 330),
            ("sm_90a", WGMMA_EXTRAS[2], 2, 150, 70, 300), ("sm_90a", WGMMA_EXTRAS[3], 1, 50, 130, 1000)]
    return out


CASES = _cases()


def run_gemm(arch, v, batch, M, N, K, mutate=None, checks=True, seed=None):
    """Run one GEMM variant on the interpreter; returns (got, ref, bound, findings)."""
    wg = v.cfg.startswith("wg_")
    configs = gc90 if wg else gc
    cfg = configs.BY_NAME[v.cfg]
    src = wgmma_source(v) if wg else gemm_source(v)
    mod = H.module(src, arch, v.id) if mutate is None else mutate(src, arch)
    rng = np.random.default_rng(zlib.crc32(f"{v.id}{M}{N}{K}".encode()) if seed is None else seed)
    elem = 2 if v.dtype != "float" else 4
    align = 16 // elem
    strided = v.hooks in ("strided", "fused")
    b_rows, b_cols = (N, K) if v.b_trans else (K, N)
    lda = round_up(K, align) + align if strided else K
    ldb = round_up(b_cols, align) + align if strided else b_cols
    b_batch = 1 if strided else batch
    a_full = rng.uniform(-1, 1, size=(batch, M, lda)).astype(np.float32)
    b_full = rng.uniform(-1, 1, size=(b_batch, b_rows, ldb)).astype(np.float32)
    a_dev, a_val = H.encode(a_full, v.dtype)
    b_dev, b_val = H.encode(b_full, v.dtype)
    a_val, b_val = a_val[:, :, :K], b_val[:, :, :b_cols]
    if v.hooks == "fused":
        a_val = (a_val.astype(np.float32) * np.float32(0.5) + np.float32(0.25)).astype(np.float64)
        if v.dtype != "float":
            a_val = H.encode(a_val.astype(np.float32), v.dtype)[1]
    if cfg.math == gc.MATH_TF32:
        a_val = H.tf32(a_val.astype(np.float32)).astype(np.float64)
        b_val = H.tf32(b_val.astype(np.float32)).astype(np.float64)
    b_kn = np.transpose(b_val, (0, 2, 1)) if v.b_trans else b_val
    b_kn = np.broadcast_to(b_kn, (batch, K, N))
    ref = a_val @ b_kn
    mag = np.abs(a_val) @ np.abs(b_kn)
    bias = rng.uniform(-1, 1, size=N).astype(np.float32)
    dev = H.Device()
    if v.hooks == "fused":
        y = ref + bias
        ref = np.where(y > 0, y, 0.1 * y)
        out_like, out_t = np.zeros((batch, M, N), np.float32), "float"
    else:
        out_t = v.dtype
        out_like = np.zeros((batch, M, N), {"half": np.float16, "__nv_bfloat16": np.uint16, "float": np.float32}[v.dtype])
    pa, pb = dev.upload(a_dev, "A"), dev.upload(b_dev, "B")
    pbias = dev.upload(bias, "bias")
    pout = dev.alloc(out_like.nbytes, "C", fill=0xFF)
    pscr = dev.alloc(v.splitk * batch * M * N * 4, "scratch", fill=0xFF) if v.splitk > 1 else 0
    vals = [batch, M, N, K, lda, M * lda, ldb, 0 if strided else b_rows * ldb]
    params = H.plus_args(ins=(pa, pb, pbias), outs=(pout,), scratch=(pscr,), v=vals)
    r, findings = H.launch_gemm(mod, cfg, configs.grid(cfg, batch, M, N, v.splitk * v.csplit), params, dev.mem,
                                v.splitk, (batch, M, N), checks=checks)
    got = H.decode(dev.download(pout, out_like), out_t if out_t != "float" else "float")
    bound = H.UNIT[out_t] * np.abs(ref) * 1.01 + (K + 4) * 2.0 ** -24 * mag * (1.2 if v.hooks == "fused" else 1.0) \
        + 1e-30
    if out_t == "half":
        bound = bound + 2.0 ** -25
    return got, ref, bound, findings, r


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1].id}-{c[2]}x{c[3]}x{c[4]}x{c[5]}" for c in CASES])
def test_gemm_on_interpreter(case):
    arch, v, batch, M, N, K = case
    got, ref, bound, findings, _ = run_gemm(arch, v, batch, M, N, K)
    assert not findings, "\n".join(map(str, findings))
    err = np.abs(got - ref)
    bad = ~(err <= bound)
    assert not bad.any(), (f"{int(bad.sum())} elements outside the bound; worst at {np.unravel_index(np.argmax(err - bound), err.shape)}: "
                           f"got {got[bad][:4]}, want {ref[bad][:4]}, bound {bound[bad][:4]}")
