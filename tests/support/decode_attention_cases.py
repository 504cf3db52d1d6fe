"""The attention template's KV-cache paths (attention.cuh: PLUS_ATTN_KV_CACHE, PLUS_K/V_PAST_STRIDED,
PLUS_ATTN_GQA_PACK, PLUS_ATTN_SPLIT + plus_attention_combine) with hand-written hooks: past and new K/V in
separate tensors, present written by the kernel, an additive key-padding mask, bottom-right causal.
Shared by the interpreter test (tests/emulated/test_ptx_decode_attention.py) and the PTX census
(tests/support/ptx_sources.py)."""
from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from plus_ep.kernels.families.flash_attention import configs as ac
from tests.support import ptx_harness as H
from tests.support.ptx_attention_cases import _bound, reference, score_error

# in: 0 Q [B,H,Sq,D], 1 past K [B,Hkv,P,D], 2 new K [B,Hkv,Sq,D], 3 past V, 4 new V, 5 mask [B,Skv] (fp32,
# additive); out: 0 O [B,H,Sq,D], 1 present K [B,Hkv,Skv,D], 2 present V; v: B, H, Hkv, Sq, Skv, splits, P.
HOOKS = r"""
#define PLUS_HAS_QKV_PTR 1
PLUS_DEV const plus_qkv_t* plus_q_ptr(const PlusArgs& a, long long b, long long h) {
  return (const plus_qkv_t*)a.in[0] + (b * a.v[1] + h) * a.v[3] * PLUS_HEAD_DIM;
}
PLUS_DEV const plus_qkv_t* plus_k_ptr(const PlusArgs& a, long long b, long long hkv) {
  return (const plus_qkv_t*)a.in[1] + (b * a.v[2] + hkv) * a.v[6] * PLUS_HEAD_DIM;
}
PLUS_DEV const plus_qkv_t* plus_v_ptr(const PlusArgs& a, long long b, long long hkv) {
  return (const plus_qkv_t*)a.in[3] + (b * a.v[2] + hkv) * a.v[6] * PLUS_HEAD_DIM;
}
PLUS_DEV long long plus_q_ld(const PlusArgs&) { return PLUS_HEAD_DIM; }
PLUS_DEV long long plus_k_ld(const PlusArgs&) { return PLUS_HEAD_DIM; }
PLUS_DEV long long plus_v_ld(const PlusArgs&) { return PLUS_HEAD_DIM; }
PLUS_DEV float cache_row(const PlusArgs& a, int past_in, long long b, long long hkv, long long j, int d) {
  const long long P = a.v[6], S = a.v[3];
  if (j < P) return plus_f(((const plus_qkv_t*)a.in[past_in])[((b * a.v[2] + hkv) * P + j) * PLUS_HEAD_DIM + d]);
  return plus_f(((const plus_qkv_t*)a.in[past_in + 1])[((b * a.v[2] + hkv) * S + j - P) * PLUS_HEAD_DIM + d]);
}
#define PLUS_HAS_K 1
PLUS_DEV float plus_k(const PlusArgs& a, long long b, long long hkv, long long j, int d) { return cache_row(a, 1, b, hkv, j, d); }
#define PLUS_HAS_V 1
PLUS_DEV float plus_v(const PlusArgs& a, long long b, long long hkv, long long j, int d) { return cache_row(a, 3, b, hkv, j, d); }
#define PLUS_HAS_KV_PRESENT 1
PLUS_DEV long long plus_attn_past(const PlusArgs& a) { return a.v[6]; }
PLUS_DEV void plus_k_present(const PlusArgs& a, long long b, long long hkv, long long j, int d, float x) {
  plus_store<plus_qkv_t>(a.out[1], ((b * a.v[2] + hkv) * a.v[4] + j) * PLUS_HEAD_DIM + d, plus_cvt<plus_qkv_t>(x));
}
PLUS_DEV void plus_v_present(const PlusArgs& a, long long b, long long hkv, long long j, int d, float x) {
  plus_store<plus_qkv_t>(a.out[2], ((b * a.v[2] + hkv) * a.v[4] + j) * PLUS_HEAD_DIM + d, plus_cvt<plus_qkv_t>(x));
}
#define PLUS_HAS_SCORE 1
PLUS_DEV float plus_score(const PlusArgs& a, long long b, long long, long long, long long j, float s) {
  return s * 0.125f + plus_load<float>(a.in[5], b * a.v[4] + j);
}
"""


@dataclass(frozen=True)
class Case:
    config: str
    dtype: str
    B: int
    H: int
    Hkv: int
    Sq: int
    P: int
    pack: int          # PLUS_ATTN_GQA_PACK
    splits: int        # plus_attn_splits (PLUS_ATTN_SPLIT is on in every case)
    causal: int
    past_strided: int  # PLUS_K/V_PAST_STRIDED (tensor-core paths)
    dead_row: int = 0  # batch row 1's keys all masked (its output is 0)

    @property
    def id(self) -> str:
        return (f"{self.config}-{self.dtype}-b{self.B}h{self.H}kv{self.Hkv}-s{self.Sq}p{self.P}-g{self.pack}"
                f"-x{self.splits}-c{self.causal}-ps{self.past_strided}{'-dead' if self.dead_row else ''}")


CASES = [
    # decode: one query per sequence, the group's heads packed into one 16-row tile, keys split 3 ways
    Case("tc_d64_q16_kv32_w1", "half", 2, 4, 2, 1, 37, 2, 3, 1, 1),
    # a few queries (speculative / chunked decode), 4 heads per KV head, one split (the direct store)
    Case("tc_d64_q16_kv32_w1", "__nv_bfloat16", 1, 8, 2, 3, 20, 4, 1, 1, 1),
    # TF32 (fp32 model), multi-query attention, 4 splits, a padded batch row with no visible key
    Case("tf32_d64_q16_kv32_w1_b12", "float", 2, 4, 1, 1, 50, 4, 4, 1, 1, 1),
    # exact SIMT, packed, split, element hooks only
    Case("simt_d64_q16_kv32_w4", "float", 2, 4, 2, 2, 41, 2, 3, 1, 0),
    # prefill (past 0) on the general tile, no packing: the first head of each group writes present
    Case("tc_d64_q64_kv64_w4", "half", 1, 4, 2, 21, 0, 1, 1, 1, 1),
    # a chunk of 40 queries after 10 past keys: 3 query tiles (the first sees only the first key tile: the
    # last one writes present), 2 splits each (the causal split of short tiles)
    Case("simt_d64_q16_kv32_w4", "float", 1, 2, 1, 40, 10, 1, 2, 1, 0),
]


def source(case: Case) -> str:
    cfg = ac.by_name(case.config)
    defs = {"PLUS_ATTN_KV_CACHE": 1, "PLUS_ATTN_GQA_PACK": case.pack, "PLUS_ATTN_SPLIT": 1,
            "PLUS_K_PAST_STRIDED": case.past_strided, "PLUS_V_PAST_STRIDED": case.past_strided}
    return ac.source(cfg, case.dtype, causal=case.causal, hooks=HOOKS, extra_defines=defs)


def run(case: Case, arch: str = "sm_80"):
    """(output, reference, bound, present K, expected, present V, expected, launch results)."""
    cfg = ac.by_name(case.config)
    B, Hh, Hkv, Sq, P, D = case.B, case.H, case.Hkv, case.Sq, case.P, cfg.head_dim
    Skv = P + Sq
    rng = np.random.default_rng(zlib.crc32(case.id.encode()))
    q = rng.standard_normal((B, Hh, Sq, D)).astype(np.float32)
    pk, nk = (rng.standard_normal((B, Hkv, n, D)).astype(np.float32) for n in (P, Sq))
    pv, nv = (rng.standard_normal((B, Hkv, n, D)).astype(np.float32) for n in (P, Sq))
    lowest = np.finfo(np.float32).min              # transformers' padding: the lowest float, not -inf
    mask = np.where(rng.random((B, Skv)) < 0.15, lowest, rng.standard_normal((B, Skv)) * 0.1).astype(np.float32)
    mask[:, -1] = 0.0                              # every query sees its own key ...
    if case.dead_row:
        mask[1, :] = -np.inf                       # ... but batch row 1, all padding (-inf: its output is 0)
    if B > 1 and P > 32 and not case.dead_row:
        mask[-1, :32] = lowest                     # a split whose keys are all padding (its m near -3.4e38)
    dev = H.Device()
    enc = [H.encode(x, case.dtype) for x in (q, pk, nk, pv, nv)]
    ptrs = [dev.upload(d, nm) for (d, _), nm in zip(enc, ("Q", "pastK", "newK", "pastV", "newV"))]
    ptrs.append(dev.upload(mask, "mask"))
    qv, pkv, nkv, pvv, nvv = (v for _, v in enc)
    elem = enc[0][0].dtype
    o_like = np.zeros((B, Hh, Sq, D), elem)
    kv_like = np.zeros((B, Hkv, Skv, D), elem)
    outs = [dev.alloc(o_like.nbytes, "O", fill=0xFF), dev.alloc(kv_like.nbytes, "presentK", fill=0xFF),
            dev.alloc(kv_like.nbytes, "presentV", fill=0xFF)]
    scratch = dev.alloc(case.splits * B * Hh * Sq * (D + 2) * 4, "partials", fill=0xFF)
    params = H.plus_args(ins=ptrs, outs=outs, scratch=(scratch,), v=(B, Hh, Hkv, Sq, Skv, case.splits, P))
    mod = H.module(source(case), arch, f"decode-{case.id}")
    qtiles = -(-(Sq * case.pack) // cfg.bq)
    grid = (qtiles * case.splits, Hkv if case.pack > 1 else Hh, B)
    results = [mod.kernel("plus_attention").launch(grid, (cfg.threads, 1, 1), cfg.smem_bytes, params, dev.mem,
                                                   checks=True)]
    if case.splits > 1:
        n = B * Hh * Sq * D
        results.append(mod.kernel("plus_attention_combine").launch((-(-n // 256), 1, 1), (256, 1, 1), 0, params,
                                                                   dev.mem, checks=True))
    got = H.decode(dev.download(outs[0], o_like), case.dtype)
    k = np.concatenate([pkv, nkv], axis=2)
    v = np.concatenate([pvv, nvv], axis=2)
    ref, mag = reference(qv, k, v, bool(case.causal), mask=mask[:, None, None, :].astype(np.float64), scale=0.125)
    bound = _bound(ref, mag, case.dtype, D, cfg.math, score_error(qv, k, 0.125))
    pres_k = H.decode(dev.download(outs[1], kv_like), case.dtype)
    pres_v = H.decode(dev.download(outs[2], kv_like), case.dtype)
    return got, ref, bound, pres_k, k, pres_v, v, results


__all__ = ["CASES", "Case", "HOOKS", "run", "source"]
