"""The attention template's sm_90a body (kernels/families/flash_attention/attention_sm90a.cuh) on the PTX
interpreter, without the launcher: a source per case (configs.source with the body's defines, optional hooks),
its three tensor maps encoded as the renderer's `tmap` records say (kernels/ptx/tensormap.py, the emulated
driver's encoding), one launch over the grid (cdiv(Sq, BQ), H, B), and the float64 reference
softmax(Q·Kᵀ·scale + mask)·V. `mutate` edits the body's text (a planted bug) before it is compiled: the source
then inlines the edited body. `attention_graph` builds the ONNX attentions the route tests render (plain and the
forms the body refuses)."""
from __future__ import annotations

import pathlib

import numpy as np

from onnx import TensorProto

from plus_ep.kernels.compile.nvrtc import FAMILIES_DIR
from plus_ep.kernels.families.flash_attention import configs as ac
from plus_ep.kernels.ptx import tensormap as TM
from tests.support import ptx_harness as PH
from tests.support.graphs import Graph

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
           mutate=None, mask: bool = False, key_major: bool = False, skip_tiles: bool = False) -> str:
    hooks = (SCORE_MASK if mask else SCORE) % {"scale": scale} + (KEY_BIAS if key_bias else "")
    text = ac.source(cfg, dtype, causal=causal, hooks=hooks, skip_tiles=skip_tiles,
                     extra_defines={"PLUS_K_KEY_MAJOR": 1} if key_major else None)
    if mutate is not None:
        body = BODY.read_text()
        edited = mutate(body)
        assert edited != body, "the mutation changed nothing"
        outer = (BODY.parent / "attention.cuh").read_text().replace('#include "attention_sm90a.cuh"', edited)
        text = text.replace('#include "attention.cuh"\n', outer)
    return text + f'static_assert(PLUS_ATTN_SMEM_BYTES == {cfg.smem_bytes}, "PLUS_ATTN_SMEM_BYTES");\n'


def tensor_maps(cfg, dt: int, pq: int, pk: int, pv: int, B: int, H: int, Sq: int, Skv: int,
                key_major: bool = False) -> bytes:
    """The three maps (Q, K, V) as the renderer's tmap records describe them (render.py `_wgmma_tmaps`);
    `key_major`: K is a materialised Kᵀ [B, H, D, Skv]."""
    D, es = cfg.head_dim, 2
    k_map = (TM.encode_tiled(dt, pk, (Skv, D, B * H), (Skv * es, D * Skv * es), (64, D, 1), swizzle=TM.SWIZZLE_128B)
             if key_major else
             TM.encode_tiled(dt, pk, (D, Skv, B * H), (D * es, Skv * D * es), (64, cfg.bkv, 1), swizzle=TM.SWIZZLE_128B))
    return b"".join([
        TM.encode_tiled(dt, pq, (D, Sq, B * H), (D * es, Sq * D * es), (64, 64, 1), swizzle=TM.SWIZZLE_128B),
        k_map,
        TM.encode_tiled(dt, pv, (D, Skv, B * H), (D * es, Skv * D * es), (64, cfg.bkv, 1), swizzle=TM.SWIZZLE_128B)])


def run(cfg, B: int, H: int, Sq: int, Skv: int, dtype: str = "half", causal: bool = False, mask: bool = False,
        key_bias: bool = False, masked_rows: bool = False, mutate=None, seed: int = 0, checks: bool = True,
        key_major: bool = False, skip_tiles: bool = False):
    """Launch one case on random operands; returns (output float64 [B, H, Sq, D], float64 reference, findings,
    the launch result). `mask`: an additive mask with -inf entries; `key_bias`: a padding term (-1e4 on the last
    keys of batch 0, -inf on every key of batch 1's last key tile); `masked_rows`: query rows whose keys are all
    masked (their output is 0: the template's default PLUS_MASKED_ROW_NAN 0); `key_major`: K stored as a
    materialised Kᵀ [B, H, D, Skv] (PLUS_K_KEY_MAJOR); `skip_tiles` (with `causal`): the blocks stop at their last
    visible key tile (PLUS_HAS_ATTN_CAUSAL)."""
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
    pq, pk, pv = dev.upload(q, "Q"), dev.upload(k.swapaxes(2, 3) if key_major else k, "K"), dev.upload(v, "V")
    pm, pkb = dev.upload(m, "mask"), dev.upload(kb, "key_bias")
    out = np.zeros((B, H, Sq, D), q.dtype)
    po = dev.output(out, "O")
    args = PH.plus_args([pq, pk, pv, pm, pkb], [po], [], [B, H, H, Sq, Skv])
    masked = mask or masked_rows
    mod = PH.module(source(cfg, dtype, scale, causal, key_bias, mutate, masked, key_major, skip_tiles), "sm_90a",
                    f"wg_attn_{cfg.name}_{dtype}_{int(causal)}_{int(key_bias)}_{int(masked)}_{int(key_major)}"
                    + ("_skip" if skip_tiles else "") + ("_mut" if mutate else ""))
    kern = mod.kernel("plus_attention")
    blob = tensor_maps(cfg, TM.F16 if dtype == "half" else TM.BF16, pq, pk, pv, B, H, Sq, Skv, key_major)
    r = kern.launch((-(-Sq // cfg.bq), H, B), (cfg.threads, 1, 1), cfg.smem_bytes, PH.with_tmaps(kern, args, blob),
                    dev.mem, checks=checks)
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


def attention_graph(D=64, dtype=TensorProto.FLOAT16, S="seq", B="batch", H=4, form="plain"):
    """softmax(Q·Kᵀ·D^-0.5 + key padding mask)·V; `form`: plain | key_major (Kᵀ an input) | rope (K scaled by a
    tensor inside the subgraph) | gqa (K, V with H/2 heads, repeated) | batched ([B*H, S, D] products) | causal
    (a decoder's block: a bool causal mask input [1, 1, S, S] through Where(mask, 0, -inf) added before the
    padding mask, and the NaN guard Where(IsNaN(p), 0, p) after the Softmax)."""
    g = Graph("attn", opset=18, ir_version=10)
    npdt = np.float16 if dtype == TensorProto.FLOAT16 else np.float32
    hk = H // 2 if form == "gqa" else H
    lead = [B, H] if form != "batched" else [f"{B}*{H}" if isinstance(B, str) else B * H]
    g.input("q", lead + [S, D], dtype)
    g.input("k", ([B, hk, D, S] if form == "key_major" else [B, hk, S, D]) if form != "batched" else lead + [S, D], dtype)
    g.input("v", [B, hk, S, D] if form != "batched" else lead + [S, D], dtype)
    scale = g.init("scale", np.array(D ** -0.5, npdt)) if dtype != TensorProto.BFLOAT16 else \
        g.op("Cast", g.init("scale32", np.array(D ** -0.5, np.float32)), to=TensorProto.BFLOAT16)
    k, v = "k", "v"
    if form == "rope":
        g.input("cos", [S, D], dtype)
        k = g.op("Mul", k, "cos")
    if form == "gqa":
        shape = g.init("rep", np.array([1, 1, 2, 1, 1], np.int64))
        full = g.init("full", np.array([0, H, -1, D], np.int64))
        k = g.op("Reshape", g.op("Expand", g.op("Unsqueeze", k, g.init("ax", np.array([2], np.int64))), shape), full)
        v = g.op("Reshape", g.op("Expand", g.op("Unsqueeze", v, "ax"), shape), full)
    kt = k if form == "key_major" else g.op("Transpose", k, perm=[0, 2, 1] if form == "batched" else [0, 1, 3, 2])
    s = g.op("Mul", g.op("MatMul", "q", kt), scale)
    if form == "causal":
        g.input("causal", [1, 1, S, S], TensorProto.BOOL)
        zero, ninf = g.init("zero", np.array(0, npdt)), g.init("ninf", np.array(-np.inf, npdt))
        s = g.op("Add", s, g.op("Where", "causal", zero, ninf))
    if form != "batched":
        g.input("mask", [B, 1, 1, S], dtype)
        s = g.op("Add", s, "mask")
    p = g.op("Softmax", s, axis=-1)
    if form == "causal":
        p = g.op("Where", g.op("IsNaN", p), zero, p)
    g.op("MatMul", p, v, out="o")
    g.output("o", lead + [S, D], dtype)
    return g.model()
