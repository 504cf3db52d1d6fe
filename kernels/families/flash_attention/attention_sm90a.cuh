// attention_sm90a.cuh: the attention template's Hopper (sm_90a) body, FlashAttention-3 style: Q·Kᵀ and P·V on
// wgmma.mma_async, Q, K and V loaded by TMA into mbarrier-guarded shared memory, a producer warpgroup and
// consumer warpgroups (kernels/CONTRACT.md §2.2). attention.cuh includes it for PLUS_ATTN_WGMMA 1, after its
// parameters, default hooks and shared helpers (Tile, make_tile, logit, load_key_bias, row_max / row_sum).
//
// Roles (threads = 128 x (1 + BQ / 64)):
// * warpgroup 0, the producer: one thread issues the TMA copies. First the block's Q tile (one [64 d][64 rows]
//   box per consumer and 64 head dims, on the `q` mbarrier), then per key tile, into the ring of
//   PLUS_ATTN_STAGES stages: wait for the stage to be empty (its `empty` mbarrier, one arrival per consumer),
//   announce its bytes (arrive.expect_tx on `full`) and copy the K and V tiles as [64 d][BKV keys] boxes
//   under the 128-byte swizzle: K is then the K-major B operand of Q·Kᵀ, V the MN-major B operand of P·V.
//   Past Sq / Skv TMA fills zeros. The other 127 threads have nothing to do; the warpgroup gives its
//   registers to the consumers (setmaxnreg).
// * warpgroups 1 .. BQ/64, the consumers: warpgroup w owns query rows [64 (w - 1), + 64) of the block. Per
//   key tile: wait for the full stage; S = Q Kᵀ as D/16 wgmma m64nBKVk16 (A = Q, B = K, both from shared
//   memory); the logits (score and key-bias hooks, -inf past the problem) and the online softmax on the S
//   fragments in registers, exactly as the mma.sync path does (exp2f, (s - m) first); P rounded to 16 bits
//   in registers is the A operand of O += P V, BKV/16 wgmma m64nDk16 with A from registers (the S
//   accumulators of two neighbouring n8 columns are one k16 A fragment); then one thread of the warpgroup
//   releases the stage. So the producer runs up to STAGES key tiles ahead of the slowest consumer.
// * The key-bias terms (PLUS_HAS_KEY_BIAS) of a key tile go through the consumer warpgroup's own BKV floats
//   of shared memory (named barrier 1 + w over its 128 threads before and after).
// * Epilogue: O / l staged through the consumer's own Q tile (fp32, 16 columns at a time), then each half warp
//   hands 16 consecutive d of one row to plus_attn_out (whole sectors), rows past Sq skipped; a row that saw no
//   key gives 0 (or NaN: PLUS_MASKED_ROW_NAN).
//
// Tensor maps (the kernel's second parameter, from the plan's `tmap` records): maps.m[0] Q over (D, Sq,
// B * H), m[1] K and m[2] V over (D, Skv, B * H); boxes [64][64] (Q) and [64][BKV] (K, V), 128-byte swizzle.
// PLUS_K_KEY_MAJOR 1: K is a materialised Kᵀ, m[1] over (Skv, D, B * H) in [64 keys][D] boxes (MN-major B).
// Not served here (the routes keep the mma.sync body for them): KV caches, grouped-query packing, split-KV,
// head dims other than 64 and 128, operands that are not plain [B, H, S, D] tensors.
#pragma once

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "attention_sm90a.cuh needs wgmma and TMA: compile it with --gpu-architecture=sm_90a"
#endif
#if PLUS_ATTN_KV_CACHE || PLUS_ATTN_SPLIT || PLUS_ATTN_GQA_PACK != 1
#error "attention_sm90a.cuh: no KV cache, split-KV or grouped-query packing (the mma.sync body serves them)"
#endif
#ifdef PLUS_HAS_PROB
#error "attention_sm90a.cuh: no probability hook (PLUS_HAS_PROB's second pass is attention.cuh's mma.sync body)"
#endif
#if PLUS_MATH != 2
#error "attention_sm90a.cuh: f16/bf16 operands only (PLUS_MATH 2)"
#endif
static_assert(PLUS_HEAD_DIM == 64 || PLUS_HEAD_DIM == 128, "attention_sm90a: head dim 64 or 128");
static_assert(PLUS_BQ % 64 == 0 && PLUS_BQ >= 64 && PLUS_BQ <= 192, "attention_sm90a: 1 to 3 consumers of 64 rows");
static_assert(PLUS_BKV == 64 || PLUS_BKV == 128, "attention_sm90a: key tiles of 64 or 128");
static_assert(PLUS_WARPS == 4 * (1 + PLUS_BQ / 64), "attention_sm90a: one producer and BQ/64 consumer warpgroups");
static_assert(PLUS_ATTN_STAGES >= 1 && PLUS_ATTN_STAGES <= 4, "attention_sm90a: 1 to 4 stages");
static_assert(PLUS_ATTN_SMEM_BYTES <= 232448, "attention_sm90a: the tiles exceed 227 KiB of shared memory");

#ifndef PLUS_TMAPS
#define PLUS_TMAPS 3   // Q, K, V
#endif
static_assert(PLUS_TMAPS == 3, "attention_sm90a: three tensor maps (Q, K, V)");
#include "plus_tma.cuh"

namespace plus_attn {

typedef plus_qkv_t T;
constexpr int CONSUMERS = BQ / 64;
constexpr int STAGES = PLUS_ATTN_STAGES;
constexpr int DBOX = D / 64;                       // [64 d] boxes per row
constexpr int Q_BOX_BYTES = 64 * 128;              // [64 rows][64 d] of one consumer
constexpr int KV_BOX_BYTES = BKV * 128;            // [BKV keys][64 d]
constexpr int Q_BYTES = CONSUMERS * DBOX * Q_BOX_BYTES;
constexpr int KV_BYTES = DBOX * KV_BOX_BYTES;      // one K (or V) tile
constexpr int STAGE_BYTES = 2 * KV_BYTES;          // K then V
// K from a materialised Kᵀ (PLUS_K_KEY_MAJOR: keys contiguous): BKV/64 boxes [D d][64 keys], the MN-major B of
// Q·Kᵀ (64 keys a swizzled 128-byte row, d rows 128 bytes apart, 8-row groups 1024); else DBOX boxes
// [BKV keys][64 d], the K-major B
constexpr bool KT = PLUS_K_KEY_MAJOR;
constexpr int KT_BOX_BYTES = D * 128;
static_assert(!KT || BKV % 64 == 0, "attention_sm90a: a materialised Kᵀ takes key tiles of whole 64-key boxes");
constexpr int EW = 16, ESTR = EW + 4;              // epilogue: columns per chunk, fp32 row stride of its staging
static_assert(64 * ESTR * 4 <= DBOX * Q_BOX_BYTES, "attention_sm90a: the output chunk fits the consumer's Q tile");
// Registers: with two or more consumers the producer warpgroup gives its own to them (65536 per SM).
constexpr bool SETMAXNREG = CONSUMERS >= 2;
constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = CONSUMERS == 2 ? 232 : 160;

// The logits of a thread's S fragments (rows r0, r0 + 8; keys kv0 + 8n + 2q, + 1): logit() with its bounds
// checks (CHECKED) or, for a warp whose rows and keys all lie inside the problem, the hooks alone.
template <bool CHECKED>
PLUS_DEV void logits(const PlusArgs& args, const Tile& t, float (&s)[BKV / 8][4], const float* kb, int r0, int kv0,
                     int q) {
#pragma unroll
  for (int n = 0; n < BKV / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int p = r0 + 8 * (e >> 1), j = kv0 + n * 8 + 2 * q + (e & 1);
#ifdef PLUS_HAS_KEY_BIAS
      const float kbe = kb[n * 8 + 2 * q + (e & 1)];
      s[n][e] = CHECKED ? logit(args, t, p, j, s[n][e], kbe) : plus_score(args, t.b, t.h, p, j, s[n][e]) + kbe;
#else
      (void)kb;
      s[n][e] = CHECKED ? logit(args, t, p, j, s[n][e]) : plus_score(args, t.b, t.h, p, j, s[n][e]);
#endif
    }
  }
}

// One consumer warpgroup: every key tile of the block (S = Q K^T, logits, online softmax, O += P V), then
// its 64 rows of O (module comment).
PLUS_DEV void wg_attention(const PlusArgs& args, const Tile& t, plus_u32 smem, plus_u32 full, plus_u32 empty,
                           plus_u32 qbar, float* kb, float* so) {
  const int w = (int)threadIdx.x / 128 - 1;           // consumer index
  const int wt = (int)threadIdx.x % 128, warp = wt / 32, lane = wt % 32;
  const int g = lane >> 2, q = lane & 3;
  const int r0 = t.q0 + 64 * w + 16 * warp + g;       // this thread's rows r0 and r0 + 8
  const plus_u32 sq = smem + (plus_u32)(w * DBOX * Q_BOX_BYTES), skv = smem + Q_BYTES;
  const plus_u64 desc_q = plus_wgmma_desc_sw128(sq, 16, 1024);
  const plus_u64 desc_k = plus_wgmma_desc_sw128(skv, KT ? KT_BOX_BYTES : 16, 1024);
  const plus_u64 desc_v = plus_wgmma_desc_sw128(skv + KV_BYTES, KV_BOX_BYTES, 1024);   // MN-major: LBO = d boxes

  // accumulators as n8 tiles [n][e] (the mma.sync layout: wgmma's register 4n + e); the wgmma wrappers take
  // them flat
  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float (&of)[D / 2] = reinterpret_cast<float (&)[D / 2]>(o);
  float m[2] = {-CUDART_INF_F, -CUDART_INF_F};
  float l[2] = {0.0f, 0.0f};
  int stage = 0;
  plus_u32 phase = 0;
  if (t.q0 + 64 * w >= t.rows) {
    // no row of this warpgroup lies in the problem (Sq <= 64 in the last query tile): it only releases each
    // stage, after its copy landed (so its arrival counts in the phase the producer waits on next)
#pragma unroll 1
    for (int kt = t.kt0; kt < t.kt1; ++kt) {
      const plus_u32 landed = full + 8 * stage;
      plus_mbar_wait(landed, phase);
      if (wt == 0) plus_mbar_arrive(empty + 8 * stage);
      if (++stage == STAGES) {
        stage = 0;
        phase ^= 1u;
      }
    }
    return;
  }
  plus_mbar_wait(qbar, 0);

#pragma unroll 1
  for (int kt = t.kt0; kt < t.kt1; ++kt) {
    const int kv0 = kt * BKV;
#ifdef PLUS_HAS_KEY_BIAS
    plus_named_sync(1 + w, 128);                      // the previous tile's terms are read
    load_key_bias(args, t, kb, kv0, wt, 128);
    plus_named_sync(1 + w, 128);
#endif
    plus_mbar_wait(full + 8 * stage, phase);
    const plus_u64 step = (plus_u64)((plus_u32)stage * (STAGE_BYTES >> 4));

    // ---- S = Q K^T: D/16 k-steps; a step moves 32 bytes along a swizzled 128-byte row, 4 steps a d box ----
    float s[BKV / 8][4];                              // the first k-step overwrites (scale-d 0)
    float (&sf)[BKV / 2] = reinterpret_cast<float (&)[BKV / 2]>(s);
    plus_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const plus_u64 dq = desc_q + (plus_u64)(((kk / 4) * Q_BOX_BYTES + (kk % 4) * 32) >> 4);
      const plus_u64 dk = desc_k + step + (plus_u64)((KT ? kk * 16 * 128 : (kk / 4) * KV_BOX_BYTES + (kk % 4) * 32) >> 4);
      plus_wgmma_m64k16<T, BKV, KT ? 1 : 0>(sf, dq, dk, kk > 0);
    }
    plus_wgmma_commit();
    plus_wgmma_wait<0>();
    plus_wgmma_fence_regs(sf);

    // ---- logits and online softmax (attention.cuh online_softmax) on rows r0, r0 + 8
    if (tile_needs_mask(t, kv0, t.q0 + 64 * w + 16 * warp, 16)) {
      // the warp's 16 rows and the tile's keys all inside the problem: the hooks without the bounds checks
      if (kv0 + BKV <= t.Skv && t.q0 + 64 * w + 16 * warp + 16 <= t.rows)
        logits<false>(args, t, s, kb, r0, kv0, q);
      else
        logits<true>(args, t, s, kb, r0, kv0, q);
    }
    online_softmax(s, o, m, l);

    // ---- O += P V: P's k16 slice kk is {S tile 2kk rows g / g+8, S tile 2kk+1 rows g / g+8} as 16-bit pairs;
    // V's 16 keys of step kk are 16 swizzled 128-byte rows further (2048 bytes) ----
    plus_wgmma_fence_regs(of);
    plus_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BKV / 16; ++kk) {
      plus_u32 a[4];
      a[0] = PlusMma16<T>::pack(s[2 * kk][0], s[2 * kk][1]);
      a[1] = PlusMma16<T>::pack(s[2 * kk][2], s[2 * kk][3]);
      a[2] = PlusMma16<T>::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      a[3] = PlusMma16<T>::pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
      const plus_u64 dv = desc_v + step + (plus_u64)((kk * 16 * 128) >> 4);
      plus_wgmma_m64k16_rs<T, D, 1>(of, a, dv);
    }
    plus_wgmma_commit();
    plus_wgmma_wait<0>();
    plus_wgmma_fence_regs(of);
    if (wt == 0) plus_mbar_arrive(empty + 8 * stage);    // this consumer is done with the stage
    if (++stage == STAGES) {
      stage = 0;
      phase ^= 1u;
    }
  }

  // ---- normalise and store; l == 0: the row saw no key (all masked), its output is 0 (or NaN). Through the
  // warpgroup's Q tile (its wgmma reads are retired), EW columns at a time as fp32 [64][ESTR], so that each
  // half warp hands EW consecutive d of one row to the output hook: whole sectors whatever it stores ----
  float inv[2];
#pragma unroll
  for (int rh = 0; rh < 2; ++rh) {
    const float lsum = row_sum<4>(l[rh]);
    inv[rh] = lsum > 0.0f ? 1.0f / lsum : PLUS_MASKED_ROW_SCALE;
  }
#pragma unroll
  for (int c0 = 0; c0 < D; c0 += EW) {
    plus_named_sync(1 + w, 128);                      // the previous chunk is read (first: Q's last reader retired)
#pragma unroll
    for (int rh = 0; rh < 2; ++rh) {
      const int r = 16 * warp + g + 8 * rh;
#pragma unroll
      for (int n = c0 / 8; n < (c0 + EW) / 8; ++n)
        *reinterpret_cast<float2*>(so + r * ESTR + n * 8 - c0 + 2 * q) =
            make_float2(o[n][2 * rh] * inv[rh], o[n][2 * rh + 1] * inv[rh]);
    }
    plus_named_sync(1 + w, 128);
#pragma unroll
    for (int i = 0; i < 64 * EW / 128; ++i) {
      const int r = wt / EW + (128 / EW) * i, p = t.q0 + 64 * w + r;
      if (p < t.rows) plus_attn_out(args, t.b, t.h, p, c0 + wt % EW, so[r * ESTR + wt % EW]);
    }
  }
}

PLUS_DEV void producer(const PlusArgs& args, const Tile& t, const PlusTmaps& maps, plus_u32 smem, plus_u32 full,
                       plus_u32 empty, plus_u32 qbar) {
  const PlusAttnShape sh = plus_attn_shape(args);
  const int bh = (int)(t.b * sh.H + t.h);
  plus_mbar_arrive_expect_tx(qbar, Q_BYTES);
#pragma unroll
  for (int w = 0; w < CONSUMERS; ++w)
#pragma unroll
    for (int c = 0; c < DBOX; ++c)
      // a consumer whose rows all lie past Sq would load only fill: it loads Sq's last rows (never stored)
      plus_tma_load_3d(smem + (plus_u32)((w * DBOX + c) * Q_BOX_BYTES), &maps.m[0], 64 * c,
                       min(t.q0 + 64 * w, t.Sq - 1), bh, qbar);
  const int bkv = (int)(t.b * sh.Hkv + t.hkv);
  int stage = 0;
  plus_u32 phase = 0;
#pragma unroll 1
  for (int kt = t.kt0; kt < t.kt1; ++kt) {
    plus_mbar_wait(empty + 8 * stage, phase ^ 1u);    // every consumer released it (a fresh stage passes)
    const plus_u32 bar = full + 8 * stage;
    plus_mbar_arrive_expect_tx(bar, STAGE_BYTES);
    const plus_u32 sk = smem + Q_BYTES + (plus_u32)(stage * STAGE_BYTES), sv = sk + KV_BYTES;
#pragma unroll
    for (int c = 0; c < DBOX; ++c) {
      if (!KT) plus_tma_load_3d(sk + (plus_u32)(c * KV_BOX_BYTES), &maps.m[1], 64 * c, kt * BKV, bkv, bar);
      plus_tma_load_3d(sv + (plus_u32)(c * KV_BOX_BYTES), &maps.m[2], 64 * c, kt * BKV, bkv, bar);
    }
    // Kᵀ: a 64-key box wholly past Skv would bring only fill: it loads Skv's last keys (their logits are -inf)
#pragma unroll
    for (int c = 0; c < (KT ? BKV / 64 : 0); ++c)
      plus_tma_load_3d(sk + (plus_u32)(c * KT_BOX_BYTES), &maps.m[1], min(kt * BKV + 64 * c, t.Skv - 1), 0, bkv, bar);
    if (++stage == STAGES) {
      stage = 0;
      phase ^= 1u;
    }
  }
}

}  // namespace plus_attn

extern "C" __global__ void __launch_bounds__(PLUS_WARPS * 32, 1)
    plus_attention(const PlusArgs args, const __grid_constant__ PlusTmaps maps) {
  using namespace plus_attn;
  extern __shared__ __align__(1024) unsigned char plus_attn_smem[];
#ifdef PLUS_HAS_ATTN_SIDE
  {
    const long long cta = ((long long)blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    plus_attn_side(args, cta * blockDim.x + threadIdx.x, (long long)gridDim.x * gridDim.y * gridDim.z * blockDim.x);
  }
#endif
  const plus_u32 smem_raw = (plus_u32)__cvta_generic_to_shared(plus_attn_smem);
  const plus_u32 smem = (smem_raw + 1023u) & ~1023u;   // the 128-byte swizzle's 1024-byte atoms
  const plus_u32 qbar = smem + Q_BYTES + STAGES * STAGE_BYTES;
  const plus_u32 full = qbar + 8, empty = full + 8 * STAGES;
  float* kb = reinterpret_cast<float*>(plus_attn_smem + (empty + 8 * STAGES - smem_raw));
  const Tile t = make_tile(args);
  if (threadIdx.x == 0) {
    plus_mbar_init(qbar, 1);
    for (int s = 0; s < STAGES; ++s) {
      plus_mbar_init(full + 8 * s, 1);              // the producer's arrive.expect_tx, then the copies' bytes
      plus_mbar_init(empty + 8 * s, CONSUMERS);     // one release per consumer warpgroup
    }
    plus_mbar_init_fence();
  }
  __syncthreads();
  if (threadIdx.x < 128) {
    if (SETMAXNREG) plus_setmaxnreg_dec<PRODUCER_REGS>();
    if (threadIdx.x == 0) producer(args, t, maps, smem, full, empty, qbar);
  } else {
    if (SETMAXNREG) plus_setmaxnreg_inc<CONSUMER_REGS>();
    const int w = (int)threadIdx.x / 128 - 1;
    float* so = reinterpret_cast<float*>(plus_attn_smem + (smem - smem_raw) + w * DBOX * Q_BOX_BYTES);
    wg_attention(args, t, smem, full, empty, qbar, kb + w * BKV, so);
  }
}
