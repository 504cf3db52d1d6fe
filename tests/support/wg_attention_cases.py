"""The attention template's sm_90a body (kernels/families/flash_attention/attention_sm90a.cuh) on the PTX
interpreter, without the launcher: a source per case (configs.source with the body's defines, optional hooks),
its three tensor maps encoded as the renderer's `tmap` records say (kernels/ptx/tensormap.py, the emulated
driver's encoding), one launch over the grid (cdiv(Sq, BQ), H, B), and the float64 reference
softmax(Q·Kᵀ·scale + mask)·V. `mutate` edits the body's text (a planted bug) before it is compiled: the source
then inlines the edited body."""
from __future__ import annotations

import pathlib

import numpy as np

from plus_ep.kernels.compile.nvrtc import FAMILIES_DIR
from plus_ep.kernels.families.flash_attention import configs as ac
from plus_ep.kernels.ptx import tensormap as TM
from tests.support import ptx_harness as PH

BODY = pathlib.Path(FAMILIES_DIR) / "flash_attention" / "attention_sm90a.cuh"

# scale the product (as the exporters' Mul), plus an additive [B, Sq, Skv] float mask in[3] (`mask`); a key-padding
# term in[4] [B, Skv] (`key_bias`)
SCORE = r"""#define PLUS_HAS_SCORE 1
PLUS_DEV float plus_score(const PlusArgs& a, long long b, long long h, long long i, long long j, float s) {
  return s * %(scale)r;
}
"""
SCORE_MASK = r"""#define PLUS_HAS_SCORE 1
PLUS_DEV float plus_score(const PlusArgs& a, long long b, long long h, long long i, long long j, float s) {
  return s * %(scale)r + plus_load<float>(a.in[3], (b * a.v[3] + i) * a.v[4] + j);
}
"""
KEY_BIAS = r"""#define PLUS_HAS_KEY_BIAS 1
PLUS_DEV float plus_key_bias(const PlusArgs& a, long long b, long long h, long long j) {
  return plus_load<float>(a.in[4], b * a.v[4] + j);
}
"""


def source(cfg, dtype: str = "half", scale: float = 0.125, causal: bool = False, key_bias: bool = False,
           mutate=None, mask: bool = False) -> str:
    hooks = (SCORE_MASK if mask else SCORE) % {"scale": scale} + (KEY_BIAS if key_bias else "")
    text = ac.source(cfg, dtype, causal=causal, hooks=hooks)
    if mutate is not None:
        body = BODY.read_text()
        edited = mutate(body)
        assert edited != body, "the mutation changed nothing"
        outer = (BODY.parent / "attention.cuh").read_text().replace('#include "attention_sm90a.cuh"', edited)
        text = text.replace('#include "attention.cuh"\n', outer)
    return text + f'static_assert(PLUS_ATTN_SMEM_BYTES == {cfg.smem_bytes}, "PLUS_ATTN_SMEM_BYTES");\n'


def tensor_maps(cfg, dt: int, pq: int, pk: int, pv: int, B: int, H: int, Sq: int, Skv: int) -> bytes:
    """The three maps (Q, K, V) as the renderer's tmap records describe them (render.py `_wgmma_tmaps`)."""
    D, es = cfg.head_dim, 2
    return b"".join([
        TM.encode_tiled(dt, pq, (D, Sq, B * H), (D * es, Sq * D * es), (64, 64, 1), swizzle=TM.SWIZZLE_128B),
        TM.encode_tiled(dt, pk, (D, Skv, B * H), (D * es, Skv * D * es), (64, cfg.bkv, 1), swizzle=TM.SWIZZLE_128B),
        TM.encode_tiled(dt, pv, (D, Skv, B * H), (D * es, Skv * D * es), (64, cfg.bkv, 1), swizzle=TM.SWIZZLE_128B)])


def run(cfg, B: int, H: int, Sq: int, Skv: int, dtype: str = "half", causal: bool = False, mask: bool = False,
        key_bias: bool = False, masked_rows: bool = False, mutate=None, seed: int = 0, checks: bool = True):
    """Launch one case on random operands; returns (output float64 [B, H, Sq, D], float64 reference, findings,
    the launch result). `mask`: an additive mask with -inf entries; `key_bias`: a padding term (-1e4 on the last
    keys of batch 0, -inf on every key of batch 1's last key tile); `masked_rows`: query rows whose keys are all
    masked (their output is 0: the template's default PLUS_MASKED_ROW_NAN 0)."""
    rng = np.random.default_rng(seed)
    D = cfg.head_dim
    scale = D ** -0.5
    q, qv = PH.encode(rng.standard_normal((B, H, Sq, D)).astype(np.float32), dtype)
    k, kv = PH.encode(rng.standard_normal((B, H, Skv, D)).astype(np.float32), dtype)
    v, vv = PH.encode(rng.standard_normal((B, H, Skv, D)).astype(np.float32), dtype)
    m = np.zeros((B, Sq, Skv), np.float32)
    if mask:
        m = np.where(rng.random((B, Sq, Skv)) < 0.2, -np.inf, rng.standard_normal((B, Sq, Skv))).astype(np.float32)
    if masked_rows:
        m[:, Sq // 3, :] = -np.inf
    kb = np.zeros((B, Skv), np.float32)
    if key_bias:
        kb[0, Skv - 5:] = -1e4
        if B > 1:
            kb[1, max(0, Skv - 3):] = -np.inf
    dev = PH.Device()
    pq, pk, pv = dev.upload(q, "Q"), dev.upload(k, "K"), dev.upload(v, "V")
    pm, pkb = dev.upload(m, "mask"), dev.upload(kb, "key_bias")
    out = np.zeros((B, H, Sq, D), q.dtype)
    po = dev.output(out, "O")
    args = PH.plus_args([pq, pk, pv, pm, pkb], [po], [], [B, H, H, Sq, Skv])
    masked = mask or masked_rows
    mod = PH.module(source(cfg, dtype, scale, causal, key_bias, mutate, masked), "sm_90a",
                    f"wg_attn_{cfg.name}_{dtype}_{int(causal)}_{int(key_bias)}_{int(masked)}" + ("_mut" if mutate else ""))
    kern = mod.kernel("plus_attention")
    params = bytearray(kern.param_bytes)
    params[:len(args)] = args
    off = kern._param_offsets[kern.params[1][0]]
    blob = tensor_maps(cfg, TM.F16 if dtype == "half" else TM.BF16, pq, pk, pv, B, H, Sq, Skv)
    params[off:off + len(blob)] = blob
    r = kern.launch((-(-Sq // cfg.bq), H, B), (cfg.threads, 1, 1), cfg.smem_bytes, bytes(params), dev.mem,
                    checks=checks)
    got = dev.download_written(po, out, "O")
    got = got.astype(np.float64) if dtype == "half" else PH.decode(got, dtype)
    return got, reference(qv, kv, vv, scale, m[:, None] + kb[:, None, None], causal), list(r.findings), r


def reference(q, k, v, scale, bias, causal):
    """softmax(q kᵀ scale + bias [, bottom-right causal]) v in float64; rows with no visible key give 0."""
    s = np.einsum("bhid,bhjd->bhij", q.astype(np.float64), k.astype(np.float64)) * scale + bias
    if causal:
        Sq, Skv = s.shape[-2:]
        s = np.where(np.arange(Skv)[None, :] <= np.arange(Sq)[:, None] + (Skv - Sq), s, -np.inf)
    mx = np.max(s, -1, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(mx), mx, 0))
    den = e.sum(-1, keepdims=True)
    p = np.where(den > 0, e / np.where(den > 0, den, 1), 0)
    return np.einsum("bhij,bhjd->bhid", p, v.astype(np.float64))
