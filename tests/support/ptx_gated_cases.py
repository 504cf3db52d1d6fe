"""Gated GEMMs (PLUS_GATED 1: two products sharing the A tiles, kernels/CONTRACT.md §2.1) and ragged groups
(PLUS_HAS_GROUP_N: members of different N in one launch) executed by the PTX interpreter against float64 numpy
references: every math path of gemm.cuh (SIMT fp32, TF32, f16, bf16) and the wgmma template, both B layouts, two
weights with a SwiGLU epilogue ("gated") and one combined weight with the default hooks storing both products
("gated_default"), odd and aligned sizes, split-K. 0 checker findings."""
from __future__ import annotations

import zlib

import numpy as np

from plus_ep.kernels.families.gemm import configs as gc
from plus_ep.kernels.families.gemm import sm90a_configs as gc90
from tests.support import ptx_harness as H
from tests.support.ptx_sources import GATED_EXTRAS, GATED_WGMMA, RAGGED, RAGGED_WGMMA, gemm_source, wgmma_source

# (batch, M, N, K) per variant of the census lists (N: the width of one product; odd sizes leave partial
# tiles and unaligned rows, the A1 variants have aligned rows so the 16-byte copies run through the interleave)
_SIZES = [(2, 61, 37, 19), (1, 29, 45, 70), (2, 50, 40, 64), (1, 33, 45, 37), (1, 70, 48, 64), (1, 90, 50, 96),
          (2, 13, 70, 45)]
_SIZES_WG = [(1, 60, 72, 128), (2, 40, 45, 100), (1, 100, 100, 70), (1, 70, 136, 64)]
CASES = [("sm_80", v, *s) for v, s in zip(GATED_EXTRAS, _SIZES)] + \
    [("sm_90", GATED_EXTRAS[4], 2, 37, 24, 48)] + [("sm_90a", v, *s) for v, s in zip(GATED_WGMMA, _SIZES_WG)]


def logical_grid(cfg, batch, M, N, splitk):
    """Grid of a gated plus_gemm: x covers the logical width 16 * cdiv(N, 8) (both products interleaved)."""
    return (-(-(16 * -(-N // 8)) // cfg.bn), -(-M // cfg.bm), batch * splitk)


def run_gated(arch, v, batch, M, N, K, checks=True):
    """(list of (got, ref, bound) per output, findings)."""
    wg = v.cfg.startswith("wg_")
    configs = gc90 if wg else gc
    cfg = configs.BY_NAME[v.cfg]
    mod = H.module(wgmma_source(v) if wg else gemm_source(v), arch, v.id)
    rng = np.random.default_rng(zlib.crc32(f"gated{v.id}{M}{N}{K}".encode()))
    combined = v.hooks == "gated_default"
    # B0 and B1 as [batch, K, N] values; in memory [K, N] / [N, K] per product, or one [K, 2N] / [2N, K]
    a_dev, a_val = H.encode(rng.uniform(-1, 1, size=(batch, M, K)).astype(np.float32), v.dtype)
    w = rng.uniform(-1, 1, size=(2, batch, N, K) if v.b_trans else (2, batch, K, N)).astype(np.float32)
    if combined:
        full = np.concatenate([w[0], w[1]], axis=1 if v.b_trans else 2)
        b_dev, b_val = H.encode(full, v.dtype)
        parts = (b_val[:, :N], b_val[:, N:]) if v.b_trans else (b_val[:, :, :N], b_val[:, :, N:])
    else:
        (b0_dev, b0_val), (b1_dev, b1_val) = H.encode(w[0], v.dtype), H.encode(w[1], v.dtype)
        parts = (b0_val, b1_val)
    if cfg.math == gc.MATH_TF32:
        a_val = H.tf32(a_val.astype(np.float32)).astype(np.float64)
        parts = tuple(H.tf32(p.astype(np.float32)).astype(np.float64) for p in parts)
    kn = [np.transpose(p, (0, 2, 1)) if v.b_trans else p for p in parts]
    acc = [a_val @ b for b in kn]
    mag = [np.abs(a_val) @ np.abs(b) for b in kn]
    err = [(K + 4) * 2.0 ** -24 * m for m in mag]
    dev = H.Device()
    pa = dev.upload(a_dev, "A")
    bias = rng.uniform(-1, 1, size=N).astype(np.float32)
    pbias = dev.upload(bias, "bias")
    if combined:
        pb, pb1 = dev.upload(b_dev, "B"), 0
        outs = [np.zeros((batch, M, N), {"half": np.float16, "__nv_bfloat16": np.uint16, "float": np.float32}[v.dtype])
                for _ in range(2)]
        out_t = v.dtype
    else:
        pb, pb1 = dev.upload(b0_dev, "B0"), dev.upload(b1_dev, "B1")
        outs, out_t = [np.zeros((batch, M, N), np.float32)], "float"
    pouts = [dev.alloc(o.nbytes, f"C{k}", fill=0xFF) for k, o in enumerate(outs)]
    pscr = dev.alloc(v.splitk * 2 * batch * M * N * 4, "scratch", fill=0xFF) if v.splitk > 1 else 0
    ldb = K if v.b_trans else N
    vals = [batch, M, N, K, 0, 0, ldb, (N * K)]
    params = H.plus_args(ins=(pa, pb, pbias, pb1), outs=pouts, scratch=(pscr,), v=vals)
    _, findings = H.launch_gemm(mod, cfg, logical_grid(cfg, batch, M, N, v.splitk), params, dev.mem, v.splitk,
                                (batch, M, N), checks=checks)
    got = [H.decode(dev.download(p, o), out_t) for p, o in zip(pouts, outs)]
    if combined:
        results = [(g, a, H.UNIT[out_t] * np.abs(a) * 1.01 + e + 1e-30 + (2.0 ** -25 if out_t == "half" else 0))
                   for g, a, e in zip(got, acc, err)]
    else:
        g = acc[0] + bias.astype(np.float64)
        sig = 1.0 / (1.0 + np.exp(-g))
        silu = g * sig
        ref = silu * acc[1]
        dsilu = np.abs(sig * (1 + g * (1 - sig)))
        bound = 1.2 * (dsilu * err[0] * np.abs(acc[1]) + np.abs(silu) * err[1]) \
            + 2.0 ** -19 * (np.abs(ref) + np.abs(g * acc[1])) + 1e-30
        results = [(got[0], ref, bound)]
    return results, findings


# ragged groups: (variant, M, member widths, K); widths odd and below the widest, so whole CTAs lie past a member
RAGGED_CASES = [("sm_80", RAGGED[0], 37, (64, 32, 24), 40), ("sm_80", RAGGED[1], 50, (96, 40, 40), 64),
                ("sm_80", RAGGED[2], 29, (64, 17, 33), 36),
                ("sm_90a", RAGGED_WGMMA[0], 70, (192, 64, 45), 100), ("sm_90a", RAGGED_WGMMA[1], 40, (128, 64, 64), 64)]


def run_ragged(arch, v, M, widths, K, checks=True):
    """(got, ref, bound) over the members' own columns of out[0] [G, M, max N], and the findings."""
    wg = v.cfg.startswith("wg_")
    configs = gc90 if wg else gc
    cfg = configs.BY_NAME[v.cfg]
    mod = H.module(wgmma_source(v) if wg else gemm_source(v), arch, v.id)
    rng = np.random.default_rng(zlib.crc32(f"ragged{v.id}{M}{widths}{K}".encode()))
    G, NM = len(widths), max(widths)
    a_dev, a_val = H.encode(rng.uniform(-1, 1, size=(G, M, K)).astype(np.float32), v.dtype)
    bs, offs, off = [], [], 0
    for n in widths:
        w = rng.uniform(-1, 1, size=(n, K) if v.b_trans else (K, n)).astype(np.float32)
        bs.append(w)
        offs.append(off)
        off += w.size
    b_dev, b_val = H.encode(np.concatenate([w.reshape(-1) for w in bs]), v.dtype)
    out_np = {"half": np.float16, "__nv_bfloat16": np.uint16, "float": np.float32}[v.dtype]
    dev = H.Device()
    pa, pb = dev.upload(a_dev, "A"), dev.upload(b_dev, "B")
    pout = dev.alloc(G * M * NM * np.dtype(out_np).itemsize, "C", fill=0xFF)
    pscr = dev.alloc(v.splitk * G * M * NM * 4, "scratch", fill=0xFF) if v.splitk > 1 else 0
    vals = [G, M, NM, K, 0, 0, 0, 0] + list(widths) + [0] * (3 - G) + offs + [0] * (3 - G)
    params = H.plus_args(ins=(pa, pb), outs=(pout,), scratch=(pscr,), v=vals)
    _, findings = H.launch_gemm(mod, cfg, configs.grid(cfg, G, M, NM, v.splitk), params, dev.mem, v.splitk,
                                (G, M, NM), checks=checks)
    got_all = H.decode(dev.download(pout, np.zeros((G, M, NM), out_np)), v.dtype)
    results = []
    for g, (n, w) in enumerate(zip(widths, bs)):
        bv = b_val[offs[g]:offs[g] + w.size].reshape(w.shape)
        av = a_val[g]
        if cfg.math == gc.MATH_TF32:
            av, bv = (H.tf32(x.astype(np.float32)).astype(np.float64) for x in (av, bv))
        kn = bv.T if v.b_trans else bv
        ref, mag = av @ kn, np.abs(av) @ np.abs(kn)
        bound = H.UNIT[v.dtype] * np.abs(ref) * 1.01 + (K + 4) * 2.0 ** -24 * mag + 1e-30 \
            + (2.0 ** -25 if v.dtype == "half" else 0)
        results.append((got_all[g, :, :n], ref, bound))
        assert np.all(dev.download(pout, np.zeros((G, M, NM), out_np))[g, :, n:].view(np.uint8) == 0xFF), \
            f"member {g}: columns past its N were written"
    return results, findings


def check_ragged(case):
    arch, v, M, widths, K = case
    results, findings = run_ragged(arch, v, M, widths, K)
    assert not findings, "\n".join(map(str, findings))
    for g, (got, ref, bound) in enumerate(results):
        err = np.abs(got - ref)
        bad = ~(err <= bound)
        assert not bad.any(), f"member {g}: {int(bad.sum())} elements outside the bound"


def check_gated(case):
    arch, v, batch, M, N, K = case
    results, findings = run_gated(arch, v, batch, M, N, K)
    assert not findings, "\n".join(map(str, findings))
    for k, (got, ref, bound) in enumerate(results):
        err = np.abs(got - ref)
        bad = ~(err <= bound)
        assert not bad.any(), (f"out[{k}]: {int(bad.sum())} elements outside the bound; worst at "
                               f"{np.unravel_index(np.argmax(err - bound), err.shape)}: got {got[bad][:4]}, "
                               f"want {ref[bad][:4]}, bound {bound[bad][:4]}")
