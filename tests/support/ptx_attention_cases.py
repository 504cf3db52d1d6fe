"""Attention template (attention.cuh: SIMT fp32, TF32 mma.sync and f16/bf16 mma.sync) executed by the PTX
interpreter against a float64 numpy reference: every config x dtype of head dims 64/80/96/128 (SIMT and
f16/bf16), and every config of the newer menu entries (EXTRA_CASES: head dims 32 and 256 in SIMT and
f16/bf16, TF32 at every head dim) with ragged Sq/Skv; causal (bottom-right), GQA, strided loads, the
BSHD hooks with a key-padding mask and a fully masked row. Tolerance by math mode (`_bound`): output
rounding, the P rounding of the mma paths (P is rounded to the element type, tf32 for MATH 1, before P.V),
for TF32 also the rounding of Q and K in the scores, and fp32 accumulation; 0 checker findings."""
from __future__ import annotations

import zlib

import numpy as np
import pytest

from plus_ep.kernels.families.flash_attention import configs as ac
from plus_ep.verification.bounds import U_TF32
from tests.support import ptx_harness as H
from tests.support.ptx_sources import KEY_BIAS_HOOKS, _attn_hooks

DTYPES = {2: ("half", "__nv_bfloat16"), 1: ("float",), 0: ("float",)}
LOGIT_STD = 2.5            # scores q.k of standard deviation 2.5: a peaky softmax, as in trained models
TF32_UNIT = U_TF32         # cvt.rna.tf32.f32: 10 stored mantissa bits, round to nearest


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


def score_error(q, k, scale=1.0):
    """Per query row, the largest error TF32 operands can put in a score: |round(q).round(k) - q.k| <=
    (2u + u^2) sum_d |q_d||k_d| (times the score scale), over the row's keys."""
    hh, hkv = q.shape[1], k.shape[1]
    sabs = np.einsum("bhid,bhjd->bhij", np.abs(q), np.repeat(np.abs(k), hh // hkv, axis=1)) * abs(scale)
    return (2 * TF32_UNIT + TF32_UNIT ** 2) * sabs.max(-1, keepdims=True)


def _bound(ref, mag, dtype, D, math=None, serr=None):
    u = H.UNIT[dtype]
    exact = 1e-5 * (mag + np.abs(ref)) + 1e-6
    if math == 1:
        # scores off by at most serr: each softmax weight by a factor within exp(+-2 serr); P and V are
        # rounded to tf32 (u each, on the magnitude sum p|v|); plus the exact path's fp32 slack
        return mag * (np.expm1(2 * serr) + 2.5 * TF32_UNIT) + exact
    if dtype == "float":
        return exact
    # P (in [0,1]) and the output are rounded to the element type: relative u each, on the magnitude
    return 2.5 * u * mag + u * np.abs(ref) + 1e-4


def _cases():
    out = []
    tuned = [c for c in ac.all_configs() if c.math in (0, 2) and c.head_dim in (64, 80, 96, 128)]
    for i, cfg in enumerate(tuned):
        for j, dtype in enumerate(DTYPES[cfg.math]):
            causal = (i + j) % 2
            strided = (i // 2 + j) % 2 if cfg.math == 2 else 0
            gqa = (i + j) % 3 == 0
            out.append((cfg.name, dtype, causal, strided, gqa))
    return out


CASES = _cases()

# (config, dtype, causal, strided, gqa, Sq, Skv): the menu entries beyond the tuned head dims, small
# problems with ragged Sq / Skv (not multiples of the tiles; Sq > Skv once, so that causal rows see nothing).
EXTRA_CASES = [
    ("tc_d32_q64_kv32_w4", "half", 1, 1, True, 37, 75),
    ("tc_d32_q16_kv32_w1", "__nv_bfloat16", 0, 0, False, 5, 41),
    ("tc_d256_q16_kv16_w1", "half", 1, 0, True, 13, 23),
    ("tc_d256_q32_kv16_w2", "__nv_bfloat16", 0, 1, False, 19, 37),
    ("tf32_d64_q64_kv64_w4", "float", 1, 1, True, 45, 70),
    ("tf32_d64_q16_kv32_w1_b12", "float", 0, 0, False, 7, 33),
    ("tf32_d128_q32_kv64_w2", "float", 1, 0, True, 29, 21),
    ("tf32_d128_q16_kv32_w1", "float", 0, 1, False, 11, 45),
    ("simt_d32_q32_kv32_w2", "float", 1, 0, True, 23, 40),
    ("simt_d256_q16_kv32_w4", "float", 0, 0, False, 9, 35),
]


def _rest_of_new_menus():
    """Every other config of the menus added after the tuned head dims (TF32 at every head dim; SIMT and
    f16/bf16 at D = 32 and 256), once each: one query tile plus a ragged one, a key tile plus 7, causal,
    strided and GQA rotating, so that no config of the menu goes unexecuted."""
    named = {c[0] for c in EXTRA_CASES}
    rest = [c for c in ac.all_configs() if c.name not in named and (c.math == 1 or c.head_dim in (32, 256))]
    out = []
    for i, cfg in enumerate(rest):
        dtype = DTYPES[cfg.math][i % len(DTYPES[cfg.math])]
        strided = i % 2 if cfg.math else 0
        out.append((cfg.name, dtype, (i // 2) % 2, strided, i % 3 == 0, cfg.bq + 5, cfg.bkv + 7))
    return out


EXTRA_CASES += _rest_of_new_menus()


def run_attention(cfg, dtype, causal, strided, gqa, arch="sm_80", Sq=None, Skv=None, mutate=None, seed=0,
                  skip_tiles=False):
    """Launch `cfg` on the interpreter with random Q/K/V ([B, H, S, D]); (got, ref, bound, launch result).
    `skip_tiles` (with `causal`): the blocks stop at their last visible key tile (PLUS_HAS_ATTN_CAUSAL)."""
    B, Hh, Hkv = (1, 2, 1) if gqa else (1, 2, 2)
    Sq = Sq or cfg.bq - 3
    Skv = Skv or cfg.bkv + 7
    D = cfg.head_dim
    rng = np.random.default_rng(zlib.crc32(f"{cfg.name}{dtype}{causal}{seed}".encode()))
    q = rng.standard_normal((B, Hh, Sq, D)).astype(np.float32) * (LOGIT_STD * D ** -0.5)
    k = rng.standard_normal((B, Hkv, Skv, D)).astype(np.float32)
    v = rng.standard_normal((B, Hkv, Skv, D)).astype(np.float32)
    dev = H.Device()
    (qd, qv), (kd, kv), (vd, vv) = (H.encode(x, dtype) for x in (q, k, v))
    ptrs = [dev.upload(x, n) for x, n in ((qd, "Q"), (kd, "K"), (vd, "V"))]
    out_like = np.zeros((B, Hh, Sq, D), qd.dtype)
    pout = dev.alloc(out_like.nbytes, "O", fill=0xFF)
    src = ac.source(cfg, dtype, causal=causal, strided=strided, skip_tiles=skip_tiles)
    mod = H.module(src, arch, cfg.name) if mutate is None else mutate(src, arch)
    params = H.plus_args(ins=ptrs, outs=(pout,), v=(B, Hh, Hkv, Sq, Skv))
    r = mod.kernel("plus_attention").launch(cfg.grid(B, Hh, Sq), (cfg.threads, 1, 1), cfg.smem_bytes, params,
                                            dev.mem, checks=True)
    got = H.decode(dev.download(pout, out_like), dtype)
    ref, mag = reference(qv, kv, vv, causal)
    return got, ref, _bound(ref, mag, dtype, D, cfg.math, score_error(qv, kv)), r


@pytest.mark.parametrize("case", CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_attention_on_interpreter(case):
    name, dtype, causal, strided, gqa = case
    got, ref, bound, r = run_attention(ac.by_name(name), dtype, causal, strided, gqa)
    assert not r.findings, "\n".join(map(str, r.findings))
    err = np.abs(got - ref)
    assert (err <= bound).all(), f"max err {err.max()} (bound there {bound.flat[np.argmax(err - bound)]})"


@pytest.mark.parametrize("case", EXTRA_CASES, ids=["-".join(map(str, c)) for c in EXTRA_CASES])
def test_attention_menu_extra_on_interpreter(case):
    name, dtype, causal, strided, gqa, sq, skv = case
    got, ref, bound, r = run_attention(ac.by_name(name), dtype, causal, strided, gqa, Sq=sq, Skv=skv)
    assert not r.findings, "\n".join(map(str, r.findings))
    err = np.abs(got - ref)
    assert (err <= bound).all(), f"max err {err.max()} (bound there {bound.flat[np.argmax(err - bound)]})"
    if ac.by_name(name).math == 1:
        # TF32: about 1e-3 of the output's scale (exact fp32 would be ~1e-6, f16 ~1e-3, bf16 ~1e-2)
        assert err.max() <= 2e-3 * np.abs(ref).max(), err.max() / np.abs(ref).max()


@pytest.mark.parametrize("math,dtype", [(2, "half"), (2, "__nv_bfloat16"), (1, "float"), (0, "float")])
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
    bound = _bound(ref, mag, dtype, D, math, score_error(t(qv) * 0.5, t(kv), scale))
    assert (np.abs(got - ref) <= bound).all(), np.abs(got - ref).max()
    assert (got[:, :, 3, :] == 0).all()


@pytest.mark.parametrize("name,dtype", [("tc_d64_q16_kv32_w1", "half"), ("tc_d64_q64_kv64_w4", "__nv_bfloat16"),
                                        ("tf32_d64_q32_kv64_w2", "float"), ("simt_d64_q32_kv32_w4", "float")])
def test_attention_key_bias_and_side_outputs_on_interpreter(name, dtype):
    """PLUS_HAS_KEY_BIAS (a padded batch row: keys past its length masked, several key tiles so the shared
    copy is reloaded between tiles under the race checker) and PLUS_HAS_ATTN_SIDE (the extended mask stored by
    the same launch): O against float64, the side output exactly."""
    cfg = ac.by_name(name)
    B, Hh, Sq, Skv, D = 2, 2, cfg.bq + 5, 2 * cfg.bkv + 9, cfg.head_dim
    rng = np.random.default_rng(11)
    q = rng.standard_normal((B, Hh, Sq, D)).astype(np.float32) * D ** -0.5
    k = rng.standard_normal((B, Hh, Skv, D)).astype(np.float32)
    v = rng.standard_normal((B, Hh, Skv, D)).astype(np.float32)
    am = np.ones((B, Skv), np.int64)
    am[1, Skv - cfg.bkv - 3:] = 0                       # batch row 1 padded over more than a key tile
    dev = H.Device()
    (qd, qv), (kd, kv), (vd, vv) = (H.encode(x, dtype) for x in (q, k, v))
    ptrs = [dev.upload(x, n) for x, n in ((qd, "Q"), (kd, "K"), (vd, "V"), (am, "mask"))]
    out_like = np.zeros((B, Hh, Sq, D), qd.dtype)
    pout = dev.alloc(out_like.nbytes, "O", fill=0xFF)
    pside = dev.alloc(B * Skv * 4, "side", fill=0xFF)
    src = ac.source(cfg, dtype, hooks=KEY_BIAS_HOOKS)
    mod = H.module(src, "sm_80", f"attn_kb_{name}")
    params = H.plus_args(ins=ptrs, outs=(pout, pside), v=(B, Hh, Hh, Sq, Skv))
    r = mod.kernel("plus_attention").launch(cfg.grid(B, Hh, Sq), (cfg.threads, 1, 1), cfg.smem_bytes, params,
                                            dev.mem, checks=True)
    assert not r.findings, "\n".join(map(str, r.findings))
    bias = ((1.0 - am.astype(np.float32)) * np.float32(-10000.0)).astype(np.float32)
    assert (dev.download(pside, np.zeros((B, Skv), np.float32)) == bias).all()
    got = H.decode(dev.download(pout, out_like), dtype)
    ref, mag = reference(qv, kv, vv, False, mask=bias[:, None, None, :].astype(np.float64))
    bound = _bound(ref, mag, dtype, D, cfg.math, score_error(qv, kv))
    err = np.abs(got - ref)
    assert (err <= bound).all(), f"max err {err.max()} (bound there {bound.flat[np.argmax(err - bound)]})"
