"""The 8-bit integer path of gemm.cuh (PLUS_MATH 3: mma.sync m16n8k32, exact s32 sums) on the PTX interpreter
against numpy int64: every int8 config, both B layouts ([N][K] through ldmatrix, [K][N] gathered byte by byte),
both alignments, s8/u8 operands in every combination, odd M / N / K that leave partial tiles, the extreme byte
values; 0 checker findings, every output element written."""
from __future__ import annotations

import numpy as np
import pytest

from plus_ep.kernels.families.gemm import configs as gc
from tests.support import ptx_harness as H

SIGNED = {"signed char": True, "unsigned char": False}


def int8_source(cfg, a_t, b_t, b_trans, aligned):
    lines = ['#include "plus_common.cuh"']
    lines += [f"#define {k} {v}" for k, v in gc.defines(cfg, b_trans=b_trans, aligned=aligned).items()]
    lines += [f"typedef {a_t} plus_ab_t;", "#define PLUS_HAS_B_T 1", f"typedef {b_t} plus_b_t;",
              "#define PLUS_HAS_C_T 1", "typedef int plus_c_t;", '#include "gemm.cuh"',
              f'static_assert(PLUS_THREADS == {cfg.threads}, "configs.threads mirrors PLUS_THREADS");',
              f'static_assert(PLUS_SMEM_BYTES == {cfg.smem_bytes}, "configs.smem_bytes mirrors PLUS_SMEM_BYTES");']
    return "\n".join(lines) + "\n"


def _range(t):
    return (-128, 128) if SIGNED[t] else (0, 256)


def run_int8(cfg, a_t, b_t, b_trans, aligned, M, N, K, batch=1, seed=0, mutate=None):
    src = int8_source(cfg, a_t, b_t, b_trans, aligned)
    mod = H.module(src, "sm_80", f"i8-{cfg.name}-{a_t[0]}{b_t[0]}-{b_trans}{aligned}") if mutate is None \
        else mutate(src)
    rng = np.random.default_rng(seed)
    A = rng.integers(*_range(a_t), (batch, M, K))
    B = rng.integers(*_range(b_t), (batch, K, N))
    A[:, 0, :] = _range(a_t)[0]                            # an extreme row and column: the largest |sums|
    B[:, :, 0] = _range(b_t)[1] - 1
    b_dev = np.transpose(B, (0, 2, 1)) if b_trans else B
    dev = H.Device()
    pa = dev.upload(A.astype(np.int8 if SIGNED[a_t] else np.uint8), "A")
    pb = dev.upload(np.ascontiguousarray(b_dev).astype(np.int8 if SIGNED[b_t] else np.uint8), "B")
    out_like = np.zeros((batch, M, N), np.int32)
    pout = dev.output(out_like, "C")
    params = H.plus_args(ins=(pa, pb), outs=(pout,), v=[batch, M, N, K])
    _, findings = H.launch_gemm(mod, cfg, gc.grid(cfg, batch, M, N), params, dev.mem, 1, (batch, M, N))
    got = dev.download(pout, out_like)
    return got, A @ B, findings


CASES = [(cfg, a_t, b_t, bt, al)
         for i, cfg in enumerate(gc.INT8_CONFIGS)
         for j, (a_t, b_t) in enumerate((("signed char", "signed char"), ("unsigned char", "signed char"),
                                         ("signed char", "unsigned char"), ("unsigned char", "unsigned char")))
         for bt, al in (((i + j) % 2, (i + j) // 2 % 2),)]


@pytest.mark.parametrize("cfg,a_t,b_t,b_trans,aligned", CASES,
                         ids=[f"{c[0].name}-{c[1][0]}{c[2][0]}-bt{c[3]}-al{c[4]}" for c in CASES])
def test_int8_gemm_exact(cfg, a_t, b_t, b_trans, aligned):
    K = 2 * cfg.bk + (32 if aligned else 37)
    M, N = cfg.bm - 3, cfg.bn - (16 if aligned else 5)
    got, want, findings = run_int8(cfg, a_t, b_t, b_trans, aligned, M, N, K, seed=len(cfg.name))
    assert not findings, "\n".join(map(str, findings))
    np.testing.assert_array_equal(got, want)


def test_int8_gemm_batched_multi_tile():
    cfg = gc.BY_NAME["i8_64x64x64_w32x32_s4"]
    got, want, findings = run_int8(cfg, "signed char", "signed char", 1, 1, 130, 140, 192, batch=2, seed=3)
    assert not findings
    np.testing.assert_array_equal(got, want)
