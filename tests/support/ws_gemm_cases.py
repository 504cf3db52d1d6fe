"""The TMA GEMM template (kernels/families/gemm/gemm_sm90a_ws.cuh) on the PTX interpreter, without the launcher:
sources of one variant (default or hooked epilogue, gated, split-K), its tensor maps encoded as the launcher's
`tmap` records would (kernels/ptx/tensormap.py, the emulated driver's encoding) and one launch as the plan's
kernel lines make it (persistent grid, plus_splitk_reduce after a K split). `mutate` edits the template's text
(a planted bug) before it is compiled: the test sources then inline the edited template."""
from __future__ import annotations

import pathlib
from dataclasses import dataclass

import numpy as np

from plus_ep.kernels.compile.nvrtc import FAMILIES_DIR
from plus_ep.kernels.families.gemm import sm90a_configs as gc
from plus_ep.kernels.ptx import tensormap as TM
from tests.support import ptx_harness as H

# bias in[2] (float), leaky ReLU, float output out[0] [batch, M, N]
EPILOGUE = r"""
#define PLUS_HAS_EPILOGUE
PLUS_DEV void plus_epilogue(const PlusArgs& a, long long b, long long m, long long n, float acc) {
  const float y = acc + plus_load<float>(a.in[2], n);
  plus_store<float>(a.out[0], (b * a.v[1] + m) * a.v[2] + n, y > 0.f ? y : 0.1f * y);
}
"""
# gated: B0 = in[1], B1 = in[3] (maps m[1], m[2]); out[0] = silu(acc0 + bias[n]) * acc1 (float)
GATED = r"""
#define PLUS_GATED 1
#define PLUS_HAS_EPILOGUE_GATED
PLUS_DEV void plus_epilogue_gated(const PlusArgs& a, long long b, long long m, long long n, float acc0, float acc1) {
  const float g = acc0 + plus_load<float>(a.in[2], n);
  plus_store<float>(a.out[0], (b * a.v[1] + m) * a.v[2] + n, g / (1.0f + expf(-g)) * acc1);
}
"""


@dataclass(frozen=True)
class Case:
    cfg: str = "ws_64x128x64_s8"
    dtype: str = "half"
    b_trans: int = 0
    splitk: int = 1
    hooks: str = "default"      # default | epilogue | gated
    m_fastest: int = 0

    @property
    def config(self):
        return gc.WS_BY_NAME[self.cfg]


def source(c: Case, mutate=None) -> str:
    defines = gc.ws_defines(c.config, b_trans=c.b_trans, splitk=c.splitk)
    if c.m_fastest:
        defines["PLUS_EPI_M_FASTEST"] = c.m_fastest
    head = "".join(f"#define {k} {v}\n" for k, v in defines.items())
    hooks = {"default": "", "epilogue": EPILOGUE, "gated": GATED}[c.hooks]
    text, check = template_and_check(c.config, mutate)
    return f'#include "plus_common.cuh"\n{head}typedef {c.dtype} plus_ab_t;\n{hooks}{text}{check}'


def template_and_check(config, mutate=None) -> tuple[str, str]:
    """The template's text (its #include, or the whole file edited by `mutate`, which must change it) and the
    static_asserts that PLUS_THREADS and PLUS_SMEM_BYTES equal the Python mirrors of `config`
    (kernels/families/gemm/sm90a_configs.py)."""
    text = '#include "gemm_sm90a_ws.cuh"\n'
    if mutate is not None:
        tpl = (pathlib.Path(FAMILIES_DIR) / "gemm" / "gemm_sm90a_ws.cuh").read_text()
        edited = mutate(tpl)
        assert edited != tpl, "the mutation changed nothing"
        text = edited
    check = (f"static_assert(PLUS_THREADS == {config.threads}, \"PLUS_THREADS\");\n"
             f"static_assert(PLUS_SMEM_BYTES == {config.smem_bytes}, \"PLUS_SMEM_BYTES\");\n")
    return text, check


def run(c: Case, batch: int, M: int, N: int, K: int, grid: int | None = None, mutate=None, seed: int = 0,
        checks: bool = True):
    """Launch the case on random exact operands; returns (output as float64, float64 reference, findings)."""
    rng = np.random.default_rng(seed)
    cfg = c.config
    a, av = H.encode(rng.integers(-4, 5, (batch, M, K)).astype(np.float32) / 4, c.dtype)
    gated = c.hooks == "gated"
    bshape = (batch, N, K) if c.b_trans else (batch, K, N)
    b, bv = H.encode(rng.integers(-4, 5, bshape).astype(np.float32) / 4, c.dtype)
    b1, b1v = H.encode(rng.integers(-4, 5, bshape).astype(np.float32) / 4, c.dtype)
    bias = rng.standard_normal(N).astype(np.float32)
    dev = H.Device()
    pa, pb, pbias, pb1 = dev.upload(a, "A"), dev.upload(b, "B"), dev.upload(bias, "bias"), dev.upload(b1, "B1")
    out_dt = np.float32 if c.hooks != "default" else a.dtype
    out = np.zeros((batch, M, N), out_dt)
    pc = dev.output(out, "C")
    scratch = [dev.alloc(c.splitk * (2 if gated else 1) * batch * M * N * 4, "scratch")] if c.splitk > 1 else []
    es = 2
    maps = [TM.encode_tiled(TM.F16 if c.dtype == "half" else TM.BF16, pa, (K, M, batch), (K * es, M * K * es),
                            (64, cfg.bm, 1), swizzle=TM.SWIZZLE_128B)]
    bn = cfg.bn // 2 if gated else cfg.bn
    cl = gc.ws_cluster(cfg)                    # CTAs multicasting one n tile's B: each loads 1/cl of its rows
    for p in (pb, pb1) if gated else (pb,):
        if c.b_trans:
            maps.append(TM.encode_tiled(TM.F16 if c.dtype == "half" else TM.BF16, p, (K, N, batch),
                                        (K * es, N * K * es), (64, bn // cl, 1), swizzle=TM.SWIZZLE_128B))
        else:
            maps.append(TM.encode_tiled(TM.F16 if c.dtype == "half" else TM.BF16, p, (N, K, batch),
                                        (N * es, K * N * es), (64, 64, 1), swizzle=TM.SWIZZLE_128B))
    args = H.plus_args([pa, pb, pbias, pb1], [pc], scratch, [batch, M, N, K])
    mod = H.module(source(c, mutate), "sm_90a", f"ws_{c.cfg}_{c.dtype}_{c.b_trans}_{c.splitk}_{c.hooks}"
                   + ("_mut" if mutate else ""))
    k = mod.kernel("plus_gemm")
    params = bytearray(k.param_bytes)
    params[:len(args)] = args
    off = k._param_offsets[k.params[1][0]]
    blob = b"".join(maps)
    params[off:off + len(blob)] = blob
    units = -(-N // bn) * -(-M // (cfg.bm * cl)) * batch * c.splitk     # pairs of m tiles with multicast
    g = grid * cl if grid else min(units, 132 // cl) * cl
    r = k.launch((g, 1, 1), (cfg.threads, 1, 1), cfg.smem_bytes, bytes(params), dev.mem, checks=checks)
    findings = list(r.findings)
    if c.splitk > 1:
        red = mod.kernel("plus_splitk_reduce")
        findings += red.launch((-(-batch * M * N // 256), 1, 1), (256, 1, 1), 0, args + bytes(red.param_bytes - len(args)),
                               dev.mem, checks=checks).findings
    got = dev.download(pc, out).astype(np.float64) if c.dtype == "half" or c.hooks != "default" else \
        H.decode(dev.download(pc, out), c.dtype)
    bm_ = bv.transpose(0, 2, 1) if c.b_trans else bv
    ref = np.matmul(av, bm_)
    if c.hooks == "epilogue":
        y = ref + bias
        ref = np.where(y > 0, y, 0.1 * y)
    elif gated:
        b1m = b1v.transpose(0, 2, 1) if c.b_trans else b1v
        gg = ref + bias
        ref = gg / (1 + np.exp(-gg)) * np.matmul(av, b1m)
    return got, ref, findings, r
