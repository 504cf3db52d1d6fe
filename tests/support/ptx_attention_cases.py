"""Attention template (attention.cuh: SIMT fp32 and f16/bf16 mma.sync) executed by the PTX interpreter
against a float64 numpy reference: every config x dtype, head dims 64/80/96/128, causal (bottom-right),
GQA, strided loads, the BSHD hooks with a key-padding mask and a fully masked row. Tolerance: output
rounding plus the P rounding of the mma path (P is rounded to the element type before P.V) and fp32
accumulation; 0 checker findings."""
from __future__ import annotations

import zlib

import numpy as np
import pytest

from plus_ep.kernels import attention_configs as ac
from tests.support import ptx_harness as H
from tests.support.ptx_sources import _attn_hooks

DTYPES = {2: ("half", "__nv_bfloat16"), 0: ("float",)}


def reference(q, k, v, causal, mask=None, scale=1.0):
    B, Hh, Sq, D = q.shape
    Hkv, Skv = k.shape[1], k.shape[2]
    k = np.repeat(k, Hh // Hkv, axis=1)
    v = np.repeat(v, Hh // Hkv, axis=1)
    s = np.einsum("bhid,bhjd->bhij", q, k) * scale
    if mask is not None:
        s = s + mask
    if causal:
        i = np.arange(Sq)[:, None]
        j = np.arange(Skv)[None, :]
        s = np.where(j > i + (Skv - Sq), -np.inf, s)
    mx = s.max(-1, keepdims=True)
    dead = np.isneginf(mx)
    p = np.exp(s - np.where(dead, 0, mx))
    den = p.sum(-1, keepdims=True)
    out = np.einsum("bhij,bhjd->bhid", p / np.where(den == 0, 1, den), v)
    return np.where(dead, 0.0, out), np.einsum("bhij,bhjd->bhid", p / np.where(den == 0, 1, den), np.abs(v))


def _bound(ref, mag, dtype, D):
    u = H.UNIT[dtype]
    if dtype == "float":
        return 1e-5 * (mag + np.abs(ref)) + 1e-6
    # P (in [0,1]) and the output are rounded to the element type: relative u each, on the magnitude
    return 2.5 * u * mag + u * np.abs(ref) + 1e-4


def _cases():
    out = []
    for i, cfg in enumerate(ac.all_configs()):
        for j, dtype in enumerate(DTYPES[cfg.math]):
            causal = (i + j) % 2
            strided = (i // 2 + j) % 2 if cfg.math == 2 else 0
            gqa = (i + j) % 3 == 0
            out.append((cfg.name, dtype, causal, strided, gqa))
    return out


CASES = _cases()


def run_attention(cfg, dtype, causal, strided, gqa, arch="sm_80", Sq=None, Skv=None, mutate=None, seed=0):
    B, Hh, Hkv = (1, 2, 1) if gqa else (1, 2, 2)
    Sq = Sq or cfg.bq - 3
    Skv = Skv or cfg.bkv + 7
    D = cfg.head_dim
    rng = np.random.default_rng(zlib.crc32(f"{cfg.name}{dtype}{causal}{seed}".encode()))
    q = rng.standard_normal((B, Hh, Sq, D)).astype(np.float32) * D ** -0.5
    k = rng.standard_normal((B, Hkv, Skv, D)).astype(np.float32)
    v = rng.standard_normal((B, Hkv, Skv, D)).astype(np.float32)
    dev = H.Device()
    (qd, qv), (kd, kv), (vd, vv) = (H.encode(x, dtype) for x in (q, k, v))
    ptrs = [dev.upload(x, n) for x, n in ((qd, "Q"), (kd, "K"), (vd, "V"))]
    out_like = np.zeros((B, Hh, Sq, D), qd.dtype)
    pout = dev.alloc(out_like.nbytes, "O", fill=0xFF)
    src = ac.source(cfg, dtype, causal=causal, strided=strided)
    mod = H.module(src, arch, cfg.name) if mutate is None else mutate(src, arch)
    params = H.plus_args(ins=ptrs, outs=(pout,), v=(B, Hh, Hkv, Sq, Skv))
    r = mod.kernel("plus_attention").launch(cfg.grid(B, Hh, Sq), (cfg.threads, 1, 1), cfg.smem_bytes, params,
                                            dev.mem, checks=True)
    got = H.decode(dev.download(pout, out_like), dtype)
    ref, mag = reference(qv, kv, vv, causal)
    return got, ref, _bound(ref, mag, dtype, D), r


@pytest.mark.parametrize("case", CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_attention_on_interpreter(case):
    name, dtype, causal, strided, gqa = case
    got, ref, bound, r = run_attention(ac.by_name(name), dtype, causal, strided, gqa)
    assert not r.findings, "\n".join(map(str, r.findings))
    err = np.abs(got - ref)
    assert (err <= bound).all(), f"max err {err.max()} (bound there {bound.flat[np.argmax(err - bound)]})"


@pytest.mark.parametrize("math,dtype", [(2, "half"), (2, "__nv_bfloat16"), (0, "float")])
def test_attention_bshd_hooks_mask_on_interpreter(math, dtype):
    """[B, S, H, D] strided operands, Q hook (x0.5), scaled additive key-padding mask with a fully
    masked row (-> 0), output hook, GQA (H=4, Hkv=2) — the GPU test's hooks, on sm_90 PTX."""
    hooks, defs = _attn_hooks()
    D, B, Hh, Hkv, Sq, Skv = 64, 1, 4, 2, 19, 45
    scale = 0.125
    cfg = ac.configs_for(math, D)[-1]
    rng = np.random.default_rng(7)
    q = rng.standard_normal((B, Sq, Hh, D)).astype(np.float32)
    k = rng.standard_normal((B, Skv, Hkv, D)).astype(np.float32)
    v = rng.standard_normal((B, Skv, Hkv, D)).astype(np.float32)
    mask = np.where(rng.random((B, 1, Sq, Skv)) < 0.2, -np.inf, 0.0).astype(np.float32)
    mask[..., Skv - 9:] = -np.inf                       # key padding
    mask = (mask + rng.standard_normal((B, 1, Sq, Skv)).astype(np.float32) * 0.1).astype(np.float32)
    mask[:, :, 3, :] = -np.inf
    dev = H.Device()
    (qd, qv), (kd, kv), (vd, vv) = (H.encode(x, dtype) for x in (q, k, v))
    ptrs = [dev.upload(x, n) for x, n in ((qd, "Q"), (kd, "K"), (vd, "V"), (mask, "mask"))]
    out_like = np.zeros((B, Sq, Hh, D), qd.dtype)
    pout = dev.alloc(out_like.nbytes, "O", fill=0xFF)
    scale_bits = int(np.array([scale], np.float32).view(np.int32)[0])
    src = ac.source(cfg, dtype, causal=0, strided=0, hooks=hooks, extra_defines=defs)
    mod = H.module(src, "sm_90", "attn_hooks")
    params = H.plus_args(ins=ptrs, outs=(pout,), v=(B, Hh, Hkv, Sq, Skv, scale_bits))
    r = mod.kernel("plus_attention").launch(cfg.grid(B, Hh, Sq), (cfg.threads, 1, 1), cfg.smem_bytes, params,
                                            dev.mem, checks=True)
    assert not r.findings, "\n".join(map(str, r.findings))
    got = H.decode(dev.download(pout, out_like), dtype).transpose(0, 2, 1, 3)
    t = lambda x: x.transpose(0, 2, 1, 3)
    ref, mag = reference(t(qv) * 0.5, t(kv), t(vv), False, mask=mask.astype(np.float64), scale=scale)
    assert (np.abs(got - ref) <= _bound(ref, mag, dtype, D)).all(), np.abs(got - ref).max()
    assert (got[:, :, 3, :] == 0).all()
