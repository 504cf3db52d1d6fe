"""The 8-bit TMA GEMM (kernels/families/gemm/gemm_sm90a_ws.cuh, PLUS_MATH 3) on the PTX interpreter, without the
launcher: one variant's source (int8/uint8 A and B, B stored [N, K] (b_trans 1) or [K, N] (0: transposed in shared
memory by the kernel); the default epilogue storing the s32 sum, or a
hooked one that dequantizes, corrects A's zero point, adds a bias, applies ReLU and requantizes to int8 as the
fold's epilogue does), its tensor maps as the launcher's `tmap` records encode them, one persistent launch.
The reference is exact integer numpy (int64 sums wrapped to s32, then the epilogue in float64 on values whose
float32 arithmetic is exact: power-of-two scales, small integers). `mutate` edits the template (a planted bug)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from plus_ep.kernels.families.gemm import sm90a_configs as gc
from plus_ep.kernels.ptx import tensormap as TM
from tests.support import ptx_harness as H
from tests.support.ws_gemm_cases import template_and_check

# in[2]: per-column float scale, in[3]: per-column float correction (-scale za colsum), in[4]: float bias;
# out[0]: int8 = saturate(round_half_even(relu(acc scale + corr + bias) / s_out) + z_out), s_out = 0.5, z_out = -3
REQUANT = r"""
#define PLUS_HAS_EPILOGUE
PLUS_DEV void plus_epilogue(const PlusArgs& a, long long b, long long m, long long n, int acc) {
  float y = (float)acc * plus_load<float>(a.in[2], n) + plus_load<float>(a.in[3], n) + plus_load<float>(a.in[4], n);
  y = y > 0.f ? y : 0.f;
  const float q = rintf(y * 2.0f) - 3.0f;
  plus_store<signed char>(a.out[0], (b * a.v[1] + m) * a.v[2] + n, (signed char)fminf(fmaxf(q, -128.f), 127.f));
}
"""
CTYPE = {"s8": "signed char", "u8": "unsigned char"}
NPTYPE = {"s8": np.int8, "u8": np.uint8}


@dataclass(frozen=True)
class Case:
    cfg: str = "ws8_64x128x128_s8"
    at: str = "s8"
    bt: str = "s8"
    hooks: str = "default"      # default (C = the s32 sum, int32) | requant (the fold's epilogue, int8 output)
    m_fastest: int = 0
    b_trans: int = 1

    @property
    def config(self):
        return gc.WS_BY_NAME[self.cfg]


def source(c: Case, mutate=None) -> str:
    defines = gc.ws_defines(c.config, b_trans=c.b_trans)
    if c.m_fastest:
        defines["PLUS_EPI_M_FASTEST"] = c.m_fastest
    head = "".join(f"#define {k} {v}\n" for k, v in defines.items())
    head += f"typedef {CTYPE[c.at]} plus_ab_t;\n"
    if c.bt != c.at:
        head += f"#define PLUS_HAS_B_T 1\ntypedef {CTYPE[c.bt]} plus_b_t;\n"
    head += "#define PLUS_HAS_C_T 1\ntypedef int plus_c_t;\n" if c.hooks == "default" else REQUANT
    text, check = template_and_check(c.config, mutate)
    return f'#include "plus_common.cuh"\n{head}{text}{check}'


def operands(c: Case, batch, M, N, K, rng, full_range=True):
    """Random A [batch, M, K] and B [batch, N, K] (as the product reads it) of the case's types over their whole
    range (or small values)."""
    def draw(t, shape):
        info = np.iinfo(NPTYPE[t])
        lo, hi = (info.min, info.max) if full_range else (-3 if t == "s8" else 0, 3)
        return rng.integers(lo, hi + 1, shape).astype(NPTYPE[t])
    return draw(c.at, (batch, M, K)), draw(c.bt, (batch, N, K))


def reference(c: Case, a, b, scale=None, corr=None, bias=None):
    """Exact s32 sums (wrapped as the hardware wraps), then the case's epilogue in float64."""
    acc = np.matmul(a.astype(np.int64), b.astype(np.int64).transpose(0, 2, 1))
    acc = acc.astype(np.uint64).astype(np.uint32).view(np.int32).astype(np.int64)
    if c.hooks == "default":
        return acc
    y = np.maximum(acc * scale + corr + bias, 0.0)
    return np.clip(np.rint(y * 2.0) - 3.0, -128, 127).astype(np.int64)


def run(c: Case, batch: int, M: int, N: int, K: int, grid: int | None = None, mutate=None, seed: int = 0,
        checks: bool = True, full_range: bool = True):
    """Launch the case on random operands; returns (output as int64, reference, findings, launch result)."""
    rng = np.random.default_rng(seed)
    cfg = c.config
    a, b = operands(c, batch, M, N, K, rng, full_range)
    scale = rng.choice([2.0 ** -12, 2.0 ** -11, 2.0 ** -10], N).astype(np.float32)
    corr = rng.integers(-8, 9, N).astype(np.float32)
    bias = rng.integers(-8, 9, N).astype(np.float32) / 4
    dev = H.Device()
    pa, pb = dev.upload(a, "A"), dev.upload(b if c.b_trans else b.transpose(0, 2, 1), "B")
    ps, pc_, pbias = dev.upload(scale, "scale"), dev.upload(corr, "corr"), dev.upload(bias, "bias")
    out = np.zeros((batch, M, N), np.int32 if c.hooks == "default" else np.int8)
    pc = dev.output(out, "C")
    cl = gc.ws_cluster(cfg)
    maps = [TM.encode_tiled(TM.U8, pa, (K, M, batch), (K, M * K), (cfg.bk, cfg.bm, 1), swizzle=TM.SWIZZLE_128B)]
    if c.b_trans:
        maps.append(TM.encode_tiled(TM.U8, pb, (K, N, batch), (K, N * K), (cfg.bk, cfg.bn // cl, 1),
                                    swizzle=TM.SWIZZLE_128B))
    else:                                   # [K, N]: boxes [128 k][128 n]
        maps.append(TM.encode_tiled(TM.U8, pb, (N, K, batch), (N, K * N), (128, cfg.bk, 1), swizzle=TM.SWIZZLE_128B))
    args = H.plus_args([pa, pb, ps, pc_, pbias], [pc], [], [batch, M, N, K])
    mod = H.module(source(c, mutate), "sm_90a", f"ws8_{c.cfg}_{c.at}{c.bt}_{c.hooks}_{c.m_fastest}_{c.b_trans}"
                   + ("_mut" if mutate else ""))
    k = mod.kernel("plus_gemm")
    params = H.with_tmaps(k, args, b"".join(maps))
    units = -(-N // cfg.bn) * -(-M // (cfg.bm * cl)) * batch
    g = grid * cl if grid else min(units, 132 // cl) * cl
    r = k.launch((g, 1, 1), (cfg.threads, 1, 1), cfg.smem_bytes, params, dev.mem, checks=checks)
    got = dev.download(pc, out).astype(np.int64)
    return got, reference(c, a, b, scale.astype(np.float64), corr.astype(np.float64), bias.astype(np.float64)), \
        list(r.findings), r
