// attention.cuh: fused scaled-dot-product attention in the FlashAttention-2 style (kernels/CONTRACT.md §2.2).
//
//   O[b,h,i,:] = sum_j softmax_j( plus_score(b,h,i,j, q_i . k_j) ) * v_j
//
// One block computes one (query tile of PLUS_BQ rows, head h, batch b) and walks the key/value sequence in
// tiles of PLUS_BKV rows. Each query row keeps a running maximum m and a running sum l of exp(s - m); when a
// new key tile raises the maximum, the partial output and l are rescaled by exp(m_old - m_new) ("online
// softmax"). The score matrix is never stored beyond one tile.
//
// Three math paths, chosen by PLUS_MATH:
//   0  exact fp32 SIMT. Operands are staged in shared memory as fp32; every lane owns a few query rows and
//      a strided set of key columns (for S = Q K^T) and of output columns (for O += P V).
//   1  TF32 tensor cores for fp32 operands (plus_qkv_t is float): mma.sync m16n8k8 .tf32 with fp32
//      accumulators; Q, K, V and P are rounded to tf32 by cvt.rna.tf32.f32 as their fragments are loaded;
//      the softmax and the output stay fp32. Same schedule as 2.
//   2  f16/bf16 tensor cores (plus_qkv_t is half or __nv_bfloat16): mma.sync m16n8k16 with fp32
//      accumulators, operands fed by ldmatrix. Each warp owns 16 query rows; S stays in registers and is
//      turned in place into the A operand of the P V product (P rounded to f16/bf16).
//   On the tensor-core paths the warp's Q fragments stay in registers for the whole key loop when they take
//   at most 32 registers (f16/bf16 D <= 128, tf32 D <= 64); otherwise (D = 256, tf32 D > 64) they are
//   reloaded from the shared Q tile at every k-step, which keeps D = 256 within 255 registers without spills.
//
// Generated source layout: plus_common.cuh, the PLUS_* defines, `typedef ... plus_qkv_t;`, optional hooks,
// then this file. Parameters:
//   PLUS_HEAD_DIM   D, a multiple of 16 (32, 64, 80, 96, 128, 256 are the menu's)
//   PLUS_BQ         query rows per block; MATH 1/2: PLUS_BQ == 16 * PLUS_WARPS; MATH 0: multiple of 2*PLUS_WARPS
//   PLUS_BKV        key/value rows per tile, a multiple of 16
//   PLUS_WARPS      warps per block
//   PLUS_MATH       0, 1 or 2 (above)
//   PLUS_ATTN_Q_REGS  MATH 1/2: 1 keeps the Q fragments in registers, 0 reloads them per k-step (default above)
//   PLUS_QKV_STRIDED / PLUS_Q_STRIDED / PLUS_K_STRIDED / PLUS_V_STRIDED
//                   1: the MATH 1/2 paths read that operand straight from memory through the pointer hooks
//                   (plus_q_ptr / plus_q_ld, ...) with cp.async instead of calling the element hook.
//                   Requirements the codegen must guarantee: the operand is a plain (possibly transposed)
//                   read of a plus_qkv_t tensor, element d of a row is at offset d (unit stride), and every
//                   row start is 16-byte aligned (pointer aligned, ld a multiple of 16 bytes).
//                   PLUS_QKV_STRIDED sets the default of the three others. Ignored by MATH 0.
//   PLUS_ATTN_OUT_T element type the default output hook stores (default plus_qkv_t)
//   PLUS_ATTN_KV_CACHE  1: K and V are a decoder's KV cache, Concat(past, new) along the keys, and the
//                   kernel also writes that concatenation (`present`): every K/V row it loads into shared
//                   memory is stored once, by one CTA per (batch, KV head, key tile) (the last query tile,
//                   first head of the group), through plus_k_present / plus_v_present. plus_k / plus_v are
//                   indexed by the KV head (not the query head) and give every row, past and new.
//   PLUS_K_PAST_STRIDED / PLUS_V_PAST_STRIDED (MATH 1/2, with PLUS_ATTN_KV_CACHE)
//                   1: rows j < plus_attn_past(args) are copied with 16-byte cp.async from the past tensor
//                   through plus_k_ptr / plus_k_ld (plain [.., past, D] rows, 16-byte aligned); the new rows
//                   j >= past come from the element hook.
//   PLUS_ATTN_GQA_PACK G > 1: grouped-query packing. A block serves KV head blockIdx.y and the G query heads
//                   that share it: its rows are the pairs (query i, head h = hkv * G + g), row p = i * G + g,
//                   so K and V are read once for the group (decode: G * Sq rows fill one 16-row mma tile).
//                   Needs H == G * Hkv; the query is read through plus_q (no PLUS_Q_STRIDED).
//   PLUS_ATTN_SPLIT 1: split-KV (flash-decoding). blockIdx.x = query tile + query tiles * split; each of the
//                   plus_attn_splits(args) splits walks its share of the key tiles. With one split the block
//                   stores as usual; with more it writes its unnormalised fp32 output row, the row's maximum
//                   logit m and sum l to scratch[0], and plus_attention_combine (grid cdiv(B*H*Sq*D, 256),
//                   block 256) merges them: O = sum_s e^(m_s - M) O_s / sum_s e^(m_s - M) l_s, M = max_s m_s,
//                   with the exponential of the path (exp2f in base 2 on tensor cores, expf on SIMT), in fp32.
//                   scratch[0] holds splits * B*H*Sq * (D + 2) floats.
//
// Hooks (each has a default below; the codegen #defines PLUS_HAS_<NAME> before defining its own):
//   PLUS_HAS_KV_PRESENT  (PLUS_ATTN_KV_CACHE; no default) long long plus_attn_past(args) (rows of the past),
//                        void plus_k_present(args, b, hkv, j, d, x) and plus_v_present(...) (store present)
//   PLUS_HAS_ATTN_SPLITS int plus_attn_splits(args); default v[5]
//   PLUS_HAS_ATTN_SHAPE  PlusAttnShape plus_attn_shape(args)            default {v[0], v[1], v[2], v[3], v[4]}
//   PLUS_HAS_QKV_PTR     const plus_qkv_t* plus_q_ptr(args, b, h) and long long plus_q_ld(args) (row
//                        stride in elements), same for k and v with the kv head; default: contiguous
//                        [B, H, Sq, D] in[0], [B, Hkv, Skv, D] in[1] and in[2]
//   PLUS_HAS_Q / _K / _V float plus_q(args, b, h, i, d) / plus_k(args, b, hkv, j, d) / plus_v(...);
//                        default: read through the pointer hooks
//   PLUS_HAS_SCORE       float plus_score(args, b, h, i, j, s); default s. -CUDART_INF_F masks the pair.
//   PLUS_HAS_KEY_BIAS    float plus_key_bias(args, b, h, j): a term of the logit that depends on the key only
//                        (a padding mask); the logit is plus_score(...) + plus_key_bias(...). The block loads
//                        it once per key tile into shared memory, consecutive threads taking consecutive keys
//                        (coalesced), instead of once per (query row, key) pair. One head per block only
//                        (PLUS_ATTN_GQA_PACK 1). Default: none.
//   PLUS_HAS_ATTN_CAUSAL long long plus_attn_causal(args) = c: the score hook gives -inf for every pair with
//                        j > i + c (a causal mask, c = past keys). The block then stops its key loop at the tile
//                        of its last query row's last visible key (tiles wholly above the diagonal are skipped;
//                        the hook still masks inside the diagonal tile). Not with PLUS_ATTN_KV_CACHE (its
//                        writer block stores every key tile it loads). Default: none (every key tile).
//   PLUS_HAS_ATTN_SIDE   void plus_attn_side(args, long long first, long long stride): tensors the subgraph
//                        outputs beside O that do not depend on it (the extended mask a later layer reads);
//                        every thread of the grid computes elements first, first + stride, ... (first = its
//                        global thread index, stride = threads in the grid), before the attention work, so
//                        no extra launch computes them. Default: none.
//   PLUS_HAS_ATTN_OUT    void plus_attn_out(args, b, h, i, d, o); default stores [B, H, Sq, D] to out[0]
//   PLUS_HAS_PROB        float plus_prob(args, b, h, i, j, p): what the PV product reads of the normalised
//                        probability p = softmax_j(...) (a quantization of it, ORT's QDQ attention); no default.
//                        The block then walks the keys twice: the first pass only finds each row's final
//                        maximum and sum, the second computes p = e^(s - m) / l exactly, applies the hook and
//                        accumulates O unscaled. A fully masked row gives p = NaN, as the graph's softmax does.
//                        Not with PLUS_ATTN_SPLIT or PLUS_ATTN_KV_CACHE.
// PlusAttnShape comes from plus_common.cuh (hooks precede this file).
//
// Entry: plus_attention, grid (cdiv(Sq * G, PLUS_BQ) * splits, H (packed: Hkv), B), block PLUS_WARPS*32, dynamic shared memory
// PLUS_ATTN_SMEM_BYTES (kernels/attention/configs.py mirrors the formula). A query row whose keys are all
// masked produces 0, or NaN with PLUS_MASKED_ROW_NAN 1 (the graph's softmax over all -inf without the
// Where(IsNaN(p), 0, p) guard).
#pragma once

// ------------------------------------------------------------------------------------------ parameters

#ifndef PLUS_HEAD_DIM
#error "attention.cuh: define PLUS_HEAD_DIM (a multiple of 16, at most 256)"
#endif
#ifndef PLUS_MATH
#define PLUS_MATH 0
#endif
#ifndef PLUS_WARPS
#define PLUS_WARPS 4
#endif
#ifndef PLUS_BQ
#define PLUS_BQ (PLUS_MATH != 0 ? 16 * PLUS_WARPS : 64)
#endif
#ifndef PLUS_BKV
#define PLUS_BKV 64
#endif
#ifndef PLUS_K_KEY_MAJOR
#define PLUS_K_KEY_MAJOR 0  // MATH 1/2, element hooks: plus_k reads a tensor with the key index contiguous
#endif
#ifndef PLUS_MASKED_ROW_NAN
#define PLUS_MASKED_ROW_NAN 0
#endif
#define PLUS_MASKED_ROW_SCALE (PLUS_MASKED_ROW_NAN ? CUDART_NAN_F : 0.0f)
#ifndef PLUS_QKV_STRIDED
#define PLUS_QKV_STRIDED 0
#endif
#ifndef PLUS_Q_STRIDED
#define PLUS_Q_STRIDED PLUS_QKV_STRIDED
#endif
#ifndef PLUS_K_STRIDED
#define PLUS_K_STRIDED PLUS_QKV_STRIDED
#endif
#ifndef PLUS_V_STRIDED
#define PLUS_V_STRIDED PLUS_QKV_STRIDED
#endif
#ifndef PLUS_ATTN_OUT_T
#define PLUS_ATTN_OUT_T plus_qkv_t
#endif
#ifndef PLUS_ATTN_KV_CACHE
#define PLUS_ATTN_KV_CACHE 0
#endif
#ifndef PLUS_K_PAST_STRIDED
#define PLUS_K_PAST_STRIDED 0
#endif
#ifndef PLUS_V_PAST_STRIDED
#define PLUS_V_PAST_STRIDED 0
#endif
#ifndef PLUS_ATTN_GQA_PACK
#define PLUS_ATTN_GQA_PACK 1
#endif
#ifndef PLUS_ATTN_SPLIT
#define PLUS_ATTN_SPLIT 0
#endif
#ifndef PLUS_ATTN_WGMMA
#define PLUS_ATTN_WGMMA 0   // 1: the sm_90a body (attention_sm90a.cuh): wgmma, TMA, producer/consumer warpgroups
#endif
#ifndef PLUS_ATTN_STAGES
#define PLUS_ATTN_STAGES 2  // PLUS_ATTN_WGMMA: K/V stages in the TMA ring
#endif
#if PLUS_ATTN_KV_CACHE && !defined(PLUS_HAS_KV_PRESENT)
#error "attention.cuh: PLUS_ATTN_KV_CACHE needs plus_attn_past, plus_k_present and plus_v_present (PLUS_HAS_KV_PRESENT)"
#endif
#if (PLUS_K_PAST_STRIDED || PLUS_V_PAST_STRIDED) && !PLUS_ATTN_KV_CACHE
#error "attention.cuh: PLUS_K/V_PAST_STRIDED read a KV cache's past: they need PLUS_ATTN_KV_CACHE"
#endif
#if (PLUS_K_PAST_STRIDED && PLUS_K_STRIDED) || (PLUS_V_PAST_STRIDED && PLUS_V_STRIDED)
#error "attention.cuh: an operand is either strided (PLUS_K/V_STRIDED) or a cache with a strided past, not both"
#endif
#if PLUS_ATTN_GQA_PACK > 1 && PLUS_Q_STRIDED
#error "attention.cuh: PLUS_ATTN_GQA_PACK reads the query through plus_q (no PLUS_Q_STRIDED)"
#endif

#if defined(PLUS_HAS_PROB) && (PLUS_ATTN_SPLIT || PLUS_ATTN_KV_CACHE)
#error "attention.cuh: PLUS_HAS_PROB needs whole rows in one block (no PLUS_ATTN_SPLIT or PLUS_ATTN_KV_CACHE)"
#endif
#if PLUS_MATH != 0 && PLUS_MATH != 1 && PLUS_MATH != 2
#error "attention.cuh: PLUS_MATH must be 0 (fp32 SIMT), 1 (TF32 tensor cores) or 2 (f16/bf16 tensor cores)"
#endif

// Shared-memory row paddings (elements), chosen so that the access patterns below are bank-conflict free:
//   MATH 1/2: +16 bytes per row (8 halves, 4 floats) makes consecutive rows start 16 bytes apart modulo
//           128, so the 8 row addresses of one ldmatrix phase hit 8 distinct 16-byte bank groups (holds for
//           every D that is a multiple of 16). MATH 1 reads V by 32-bit loads of rows 2q, 2q + 1 and column
//           g of a lane (see tc()); with a row stride of 4 or 20 floats mod 32 those 32 words are in 32 banks.
//   MATH 0: K rows get +4 floats (8 lanes reading float4 from 8 different rows cover all 32 banks once);
//           P rows are padded to 16 mod 32 floats so the two half-warps, which write neighbouring rows,
//           use disjoint banks.
#define PLUS_ATTN_TC_PAD_BYTES 16
#define PLUS_ATTN_SIMT_KPAD 4
#define PLUS_ATTN_SIMT_PSTR (PLUS_BKV + ((PLUS_BKV % 32) == 0 ? 16 : 0))

#if PLUS_ATTN_WGMMA
// Q [BQ][D], STAGES x (K [BKV][D], V [BKV][D]) of 16-bit elements, the mbarriers (q, full and empty per
// stage), each consumer's key-bias terms (BKV floats per 64 query rows), 1 KiB to realign to 1024 bytes.
#define PLUS_ATTN_SMEM_BYTES                                                                             \
  ((2 * PLUS_BQ + 4 * PLUS_ATTN_STAGES * PLUS_BKV) * PLUS_HEAD_DIM + 8 * (1 + 2 * PLUS_ATTN_STAGES) +    \
   (PLUS_BQ / 64) * PLUS_BKV * 4 + 1024)
#elif PLUS_MATH != 0
// Q tile, K tile, V tile; each [rows][D * element bytes + 16 bytes] of plus_qkv_t (2 bytes, tf32: 4).
#define PLUS_ATTN_ELEM_BYTES (PLUS_MATH == 1 ? 4 : 2)
#define PLUS_ATTN_SMEM_BYTES \
  ((PLUS_BQ + 2 * PLUS_BKV) * (PLUS_HEAD_DIM * PLUS_ATTN_ELEM_BYTES + PLUS_ATTN_TC_PAD_BYTES))
#else
// fp32: Q [BQ][D], K [BKV][D + 4], V [BKV][D], P [BQ][PSTR].
#define PLUS_ATTN_SMEM_BYTES                                                                        \
  (4 * (PLUS_BQ * PLUS_HEAD_DIM + PLUS_BKV * (PLUS_HEAD_DIM + PLUS_ATTN_SIMT_KPAD) +              \
        PLUS_BKV * PLUS_HEAD_DIM + PLUS_BQ * PLUS_ATTN_SIMT_PSTR))
#endif

static_assert(PLUS_HEAD_DIM % 16 == 0 && PLUS_HEAD_DIM >= 16 && PLUS_HEAD_DIM <= 256,
              "PLUS_HEAD_DIM must be a multiple of 16 (at most 256)");
static_assert(PLUS_BKV % 16 == 0 && PLUS_BKV >= 16, "PLUS_BKV must be a multiple of 16");
static_assert(PLUS_WARPS >= 1 && PLUS_WARPS <= 16, "PLUS_WARPS must be 1..16");
#if PLUS_ATTN_WGMMA
// attention_sm90a.cuh checks its own tiles
#elif PLUS_MATH != 0
static_assert(PLUS_BQ == 16 * PLUS_WARPS, "MATH 1/2: each warp owns 16 query rows, PLUS_BQ == 16 * PLUS_WARPS");
#else
static_assert(PLUS_BQ % (2 * PLUS_WARPS) == 0, "MATH 0: PLUS_BQ must be a multiple of 2 * PLUS_WARPS");
#endif

// ------------------------------------------------------------------------------------ default hooks


#ifndef PLUS_HAS_ATTN_SHAPE
PLUS_DEV PlusAttnShape plus_attn_shape(const PlusArgs& a) {
  PlusAttnShape s;
  s.B = a.v[0]; s.H = a.v[1]; s.Hkv = a.v[2]; s.Sq = a.v[3]; s.Skv = a.v[4];
  return s;
}
#endif

#ifndef PLUS_HAS_QKV_PTR
// Contiguous [B, H, Sq, D] query and [B, Hkv, Skv, D] key / value tensors.
PLUS_DEV const plus_qkv_t* plus_q_ptr(const PlusArgs& a, long long b, long long h) {
  const auto s = plus_attn_shape(a);
  return (const plus_qkv_t*)a.in[0] + (b * s.H + h) * s.Sq * PLUS_HEAD_DIM;
}
PLUS_DEV const plus_qkv_t* plus_k_ptr(const PlusArgs& a, long long b, long long hkv) {
  const auto s = plus_attn_shape(a);
  return (const plus_qkv_t*)a.in[1] + (b * s.Hkv + hkv) * s.Skv * PLUS_HEAD_DIM;
}
PLUS_DEV const plus_qkv_t* plus_v_ptr(const PlusArgs& a, long long b, long long hkv) {
  const auto s = plus_attn_shape(a);
  return (const plus_qkv_t*)a.in[2] + (b * s.Hkv + hkv) * s.Skv * PLUS_HEAD_DIM;
}
PLUS_DEV long long plus_q_ld(const PlusArgs&) { return PLUS_HEAD_DIM; }
PLUS_DEV long long plus_k_ld(const PlusArgs&) { return PLUS_HEAD_DIM; }
PLUS_DEV long long plus_v_ld(const PlusArgs&) { return PLUS_HEAD_DIM; }
#endif

#ifndef PLUS_HAS_Q
PLUS_DEV float plus_q(const PlusArgs& a, long long b, long long h, long long i, int d) {
  return plus_f(plus_q_ptr(a, b, h)[i * plus_q_ld(a) + d]);
}
#endif
#ifndef PLUS_HAS_K
PLUS_DEV float plus_k(const PlusArgs& a, long long b, long long hkv, long long j, int d) {
  return plus_f(plus_k_ptr(a, b, hkv)[j * plus_k_ld(a) + d]);
}
#endif
#ifndef PLUS_HAS_V
PLUS_DEV float plus_v(const PlusArgs& a, long long b, long long hkv, long long j, int d) {
  return plus_f(plus_v_ptr(a, b, hkv)[j * plus_v_ld(a) + d]);
}
#endif

#if PLUS_ATTN_SPLIT && !defined(PLUS_HAS_ATTN_SPLITS)
PLUS_DEV int plus_attn_splits(const PlusArgs& a) { return (int)a.v[5]; }
#endif

#if defined(PLUS_HAS_ATTN_CAUSAL) && PLUS_ATTN_KV_CACHE
#error "PLUS_HAS_ATTN_CAUSAL: no KV cache (the writer block stores every key tile it loads)"
#endif

#ifndef PLUS_HAS_SCORE
PLUS_DEV float plus_score(const PlusArgs&, long long, long long, long long, long long, float s) { return s; }
#endif

#ifndef PLUS_HAS_ATTN_OUT
PLUS_DEV void plus_attn_out(const PlusArgs& a, long long b, long long h, long long i, int d, float o) {
  const auto s = plus_attn_shape(a);
  plus_store<PLUS_ATTN_OUT_T>(a.out[0], ((b * s.H + h) * s.Sq + i) * PLUS_HEAD_DIM + d,
                              plus_cvt<PLUS_ATTN_OUT_T>(o));
}
#endif

// ---------------------------------------------------------------------------------- shared helpers

#include "plus_ptx.cuh"

namespace plus_attn {

constexpr int D = PLUS_HEAD_DIM;
constexpr int BQ = PLUS_BQ;
constexpr int BKV = PLUS_BKV;
constexpr int WARPS = PLUS_WARPS;
constexpr int NT = PLUS_WARPS * 32;  // threads per block
constexpr float LOG2E = 1.4426950408889634f;
constexpr int G = PLUS_ATTN_GQA_PACK;  // query heads per block row group (1: one head per block)

// What the block needs to know about its problem, computed once. Rows of the block are "tile rows" p:
// the query index i = p / G of head h + p % G (G = 1: p is the query index, h the block's head).
struct Tile {
  long long b, h, hkv;  // h: the block's (first) query head
  long long B, H;       // batch and query heads (split partials are indexed by them)
  int q0;         // first tile row of the block
  int Sq, Skv;
  int rows;       // tile rows of the problem: Sq * G
  int n_tiles;    // key/value tiles the block's query tile sees
  int kt0, kt1;   // the key tiles this block visits (its split's share of [0, n_tiles))
  int split, nsplit;
  bool writer;    // PLUS_ATTN_KV_CACHE: this block stores the K/V rows it loads into present
};

PLUS_DEV int row_i(int p) { return p / G; }
PLUS_DEV long long row_h(const Tile& t, int p) { return G > 1 ? t.h + p % G : t.h; }

// Logit of one (tile row p, key j) pair: -inf outside the problem, otherwise the score hook (which applies
// the model's masks, causal ones included). The hook is only called for real pairs, so it may index inputs by
// i and j without guards.
// `kb` is the key's term plus_key_bias (PLUS_HAS_KEY_BIAS), read from the block's key-tile copy; else 0.
PLUS_DEV float logit(const PlusArgs& args, const Tile& t, int p, int j, float s, float kb = 0.0f) {
  const bool ok = p < t.rows && j < t.Skv;
#ifdef PLUS_HAS_KEY_BIAS
  return ok ? plus_score(args, t.b, row_h(t, p), row_i(p), j, s) + kb : -CUDART_INF_F;
#else
  (void)kb;
  return ok ? plus_score(args, t.b, row_h(t, p), row_i(p), j, s) : -CUDART_INF_F;
#endif
}

#ifdef PLUS_HAS_PROB
constexpr int NPASS = 2;  // pass 0: each row's final maximum and sum; pass 1: the exact probabilities
#else
constexpr int NPASS = 1;
#endif

// What the PV product reads of the normalised probability p of (tile row p, key j): plus_prob's value, 0 for a
// key past the problem (PLUS_HAS_PROB only).
PLUS_DEV float prob(const PlusArgs& args, const Tile& t, int r, int j, float p) {
#ifdef PLUS_HAS_PROB
  return r < t.rows && j < t.Skv ? plus_prob(args, t.b, row_h(t, r), row_i(r), j, p) : 0.0f;
#else
  (void)args; (void)t; (void)r; (void)j;
  return p;
#endif
}

// The key terms of the key tile starting at kv0 into kb[0 .. BKV): one coalesced pass of the block's threads
// (or of the `step` threads numbered from `first`: a warpgroup's), keys past Skv get 0 (their logits are -inf
// anyway). Callers publish it with a barrier over those threads.
PLUS_DEV void load_key_bias(const PlusArgs& args, const Tile& t, float* kb, int kv0, int first = -1, int step = NT) {
#ifdef PLUS_HAS_KEY_BIAS
  static_assert(G == 1, "PLUS_HAS_KEY_BIAS: one head per block (the key tile's terms are the block head's)");
  for (int j = first < 0 ? (int)threadIdx.x : first; j < BKV; j += step)
    kb[j] = kv0 + j < t.Skv ? plus_key_bias(args, t.b, t.h, kv0 + j) : 0.0f;
#else
  (void)args; (void)t; (void)kb; (void)kv0; (void)first; (void)step;
#endif
}

// Does a key tile starting at kv0 need per-element masking for query rows [r0, r0 + rows)? Without a score
// hook, interior tiles skip the logit() bookkeeping entirely.
PLUS_DEV bool tile_needs_mask(const Tile& t, int kv0, int r0, int rows) {
#if defined(PLUS_HAS_SCORE) || defined(PLUS_HAS_KEY_BIAS)
  (void)t; (void)kv0; (void)r0; (void)rows;
  return true;
#else
  (void)r0; (void)rows;
  return kv0 + BKV > t.Skv;
#endif
}

// Max / sum over the NXOR neighbouring lanes that share a row (lane xor 1, 2, ... < NXOR): 4 for an mma
// quad, 16 for a SIMT half warp.
template <int NXOR>
PLUS_DEV float row_max(float x) {
#pragma unroll
  for (int o = 1; o < NXOR; o <<= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
template <int NXOR>
PLUS_DEV float row_sum(float x) {
#pragma unroll
  for (int o = 1; o < NXOR; o <<= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// One key tile of the tensor-core paths' online softmax, on a thread's accumulator fragments (n8 tile n, element
// e: rows g (e < 2) and g + 8 of its warp's 16, shared by the 4 threads of a quad): per row half rh, the tile's
// maximum raises the running m, O and l are rescaled by exp(m_old - m_new), and the logits s become
// p = exp(s - m) (unnormalised; l sums them). exp2f in base 2, (s - m) first: an additive mask of the float's
// lowest value (transformers' padding) puts every logit of a row, or of a split's share of it, near -3.4e38,
// where m * LOG2E would overflow to -inf.
template <int NS, int NO>
PLUS_DEV void online_softmax(float (&s)[NS][4], float (&o)[NO][4], float (&m)[2], float (&l)[2]) {
#pragma unroll
  for (int rh = 0; rh < 2; ++rh) {
    float mx = -CUDART_INF_F;
#pragma unroll
    for (int n = 0; n < NS; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * rh], s[n][2 * rh + 1]));
    mx = row_max<4>(mx);
    const float m_new = fmaxf(m[rh], mx);
    const float m_use = m_new == -CUDART_INF_F ? 0.0f : m_new;  // nothing visible yet: exp -> 0, no NaN
    const float alpha = exp2f((m[rh] - m_use) * LOG2E);
    m[rh] = m_new;
    l[rh] *= alpha;
#pragma unroll
    for (int n = 0; n < NO; ++n) {
      o[n][2 * rh] *= alpha;
      o[n][2 * rh + 1] *= alpha;
    }
#pragma unroll
    for (int n = 0; n < NS; ++n) {
#pragma unroll
      for (int e = 2 * rh; e < 2 * rh + 2; ++e) {
        const float p = exp2f((s[n][e] - m_use) * LOG2E);
        l[rh] += p;
        s[n][e] = p;
      }
    }
  }
}

// Run-time tile setup shared by both paths. (Statements in the order of the plain form: ptxas's register
// allocation of the big tensor-core configs follows it closely.)
PLUS_DEV Tile make_tile(const PlusArgs& args) {
  const PlusAttnShape s = plus_attn_shape(args);
  Tile t;
  t.b = blockIdx.z;
#if PLUS_ATTN_GQA_PACK > 1
  t.hkv = blockIdx.y;
  t.h = t.hkv * G;
  const long long group = G;
#else
  t.h = blockIdx.y;
  const long long group = s.H / s.Hkv;  // query heads per kv head (GQA / MQA)
  t.hkv = t.h / group;
#endif
#if PLUS_ATTN_SPLIT || PLUS_ATTN_KV_CACHE
  const int qtiles = ((int)s.Sq * G + BQ - 1) / BQ;
#endif
#if PLUS_ATTN_SPLIT
  t.B = s.B;
  t.H = s.H;
  t.nsplit = max(plus_attn_splits(args), 1);
  const int qt = (int)blockIdx.x % qtiles;
  t.split = (int)blockIdx.x / qtiles;
#else
  const int qt = (int)blockIdx.x;
  t.split = 0;
  t.nsplit = 1;
#endif
  t.q0 = qt * BQ;
  t.Sq = (int)s.Sq;
  t.Skv = (int)s.Skv;
  t.rows = t.Sq * G;
  t.n_tiles = (t.Skv + BKV - 1) / BKV;
#ifdef PLUS_HAS_ATTN_CAUSAL
  {  // the last visible key of the block's last row bounds the key tiles (none when it is before key 0)
    const long long jmax = (long long)row_i(min(t.q0 + BQ, t.rows) - 1) + plus_attn_causal(args);
    t.n_tiles = jmax < 0 ? 0 : (int)min((long long)t.n_tiles, jmax / BKV + 1);
  }
#endif
#if PLUS_ATTN_SPLIT
  const int per = (t.n_tiles + t.nsplit - 1) / t.nsplit;
  t.kt0 = min(t.split * per, t.n_tiles);
  t.kt1 = min(t.kt0 + per, t.n_tiles);
#else
  t.kt0 = 0;
  t.kt1 = t.n_tiles;
#endif
#if PLUS_ATTN_KV_CACHE
  // one query tile (the last) and one head per group store the rows every block reads
  t.writer = qt == qtiles - 1 && (G > 1 || t.h % group == 0);
#else
  t.writer = false;
#endif
  (void)group;
  return t;
}

#if PLUS_ATTN_KV_CACHE
// The rows [kv0, kv0 + BKV) of a K or V tile just loaded (a [BKV][STRIDE] shared tile), stored to present
// through `f(j, d, x)`; only the block's writer calls this.
template <int STRIDE, typename T, typename F>
PLUS_DEV void store_present(const T* tile, int kv0, int Skv, F f) {
#pragma unroll 1
  for (int e = threadIdx.x; e < BKV * D; e += NT) {
    const int r = e / D, d = e % D, j = kv0 + r;
    if (j < Skv) f(j, d, plus_f(tile[r * STRIDE + d]));
  }
}
#endif

#if PLUS_ATTN_SPLIT
// One split's result for tile row p: the unnormalised output o (element d), the row's max logit m (-inf: no
// key seen) and sum l, into scratch[0] for plus_attention_combine.
PLUS_DEV float* split_row(const PlusArgs& args, const Tile& t, int p) {
  const long long rows = t.B * t.H * t.Sq;
  const long long row = (t.b * t.H + row_h(t, p)) * t.Sq + row_i(p);
  return (float*)args.scratch[0] + ((long long)t.split * rows + row) * D;
}
PLUS_DEV float* split_ml(const PlusArgs& args, const Tile& t, int p) {
  const long long rows = t.B * t.H * t.Sq;
  const long long row = (t.b * t.H + row_h(t, p)) * t.Sq + row_i(p);
  return (float*)args.scratch[0] + (long long)t.nsplit * rows * D + ((long long)t.split * rows + row) * 2;
}
#endif

// Fill a [ROWS][STRIDE] shared tile element by element from a loader f(row, d) -> value (which guards its
// own edges). Loads are issued in groups of CH before the stores so several global loads are in flight per
// thread even though the loader is an opaque hook.
template <int ROWS, int STRIDE, typename T, typename F>
PLUS_DEV void fill_tile(T* dst, F f) {
  constexpr int N = ROWS * D;
  constexpr int PER = (N + NT - 1) / NT;  // elements per thread
  constexpr int CH = PER < 8 ? PER : 8;
  const int tid = threadIdx.x;
#pragma unroll 1
  for (int c0 = 0; c0 < PER; c0 += CH) {
    float r[CH];
#pragma unroll
    for (int k = 0; k < CH; ++k) {
      const int e = tid + (c0 + k) * NT;
      r[k] = (c0 + k < PER && e < N) ? f(e / D, e % D) : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < CH; ++k) {
      const int e = tid + (c0 + k) * NT;
      if (c0 + k < PER && e < N) dst[(e / D) * STRIDE + e % D] = plus_cvt<T>(r[k]);
    }
  }
}

}  // namespace plus_attn

#if PLUS_ATTN_WGMMA
#include "attention_sm90a.cuh"   // the sm_90a body and its plus_attention entry
#else
// ===================================================================================== MATH 0: SIMT fp32
#if PLUS_MATH == 0

namespace plus_attn {

// Lane layout inside a warp: lane = half * 16 + hl. The warp owns RW consecutive query rows of the block;
// local row r of a lane is warp row 2 * r + half, so each lane owns RL = RW / 2 rows, and the two half
// warps interleave rows. Columns: key j = hl + 16 * c (c < NJ) for the scores, output d = hl + 16 * c
// (c < ND) for O. A row's scores are spread over the 16 lanes of one half warp (reductions: xor 1..8).
constexpr int RW = BQ / WARPS;
constexpr int RL = RW / 2;
constexpr int NJ = BKV / 16;
constexpr int ND = D / 16;
constexpr int KSTR = D + PLUS_ATTN_SIMT_KPAD;
constexpr int PSTR = PLUS_ATTN_SIMT_PSTR;

PLUS_DEV void simt(const PlusArgs& args, float* smem) {
  const Tile t = make_tile(args);
  float* sQ = smem;               // [BQ][D]
  float* sK = sQ + BQ * D;        // [BKV][KSTR]
  float* sV = sK + BKV * KSTR;    // [BKV][D]
  float* sP = sV + BKV * D;       // [BQ][PSTR], each warp uses its own RW rows

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int half = lane >> 4, hl = lane & 15;
  const int wrow0 = warp * RW;    // first block row of this warp

#ifdef PLUS_HAS_KEY_BIAS
  __shared__ float sKB[BKV];      // the key tile's plus_key_bias terms
#else
  float* sKB = nullptr;
#endif
  // Query tile (rows past the problem are zero; they are computed but never stored).
  fill_tile<BQ, D>(sQ, [&](int r, int d) -> float {
    const int p = t.q0 + r;
    return p < t.rows ? plus_q(args, t.b, row_h(t, p), row_i(p), d) : 0.0f;
  });

  float o[RL][ND];
  float m[RL], l[RL];
#pragma unroll
  for (int r = 0; r < RL; ++r) {
    m[r] = -CUDART_INF_F;
    l[r] = 0.0f;
#pragma unroll
    for (int c = 0; c < ND; ++c) o[r][c] = 0.0f;
  }

  float inv_l[RL];  // PLUS_HAS_PROB: 1 / (each row's final sum), NaN for a row that sees no key
#pragma unroll
  for (int r = 0; r < RL; ++r) inv_l[r] = 1.0f;
  for (int pass = 0; pass < NPASS; ++pass) {
  const bool stats = NPASS == 2 && pass == 0;   // this pass only finds the rows' maximum and sum
  const bool exact = NPASS == 2 && pass == 1;   // this pass applies plus_prob to exact probabilities
  for (int kt = t.kt0; kt < t.kt1; ++kt) {
    const int kv0 = kt * BKV;
    __syncthreads();  // everyone is done with the previous K / V tiles (and the Q tile is stored)
    fill_tile<BKV, KSTR>(sK, [&](int r, int d) -> float {
      const int j = kv0 + r;
      return j < t.Skv ? plus_k(args, t.b, t.hkv, j, d) : 0.0f;
    });
    if (!stats)
      fill_tile<BKV, D>(sV, [&](int r, int d) -> float {
        const int j = kv0 + r;
        return j < t.Skv ? plus_v(args, t.b, t.hkv, j, d) : 0.0f;
      });
    load_key_bias(args, t, sKB, kv0);
    __syncthreads();
#if PLUS_ATTN_KV_CACHE
    if (t.writer) {
      store_present<KSTR>(sK, kv0, t.Skv, [&](int j, int d, float x) { plus_k_present(args, t.b, t.hkv, j, d, x); });
      store_present<D>(sV, kv0, t.Skv, [&](int j, int d, float x) { plus_v_present(args, t.b, t.hkv, j, d, x); });
    }
#endif

    // S = Q K^T for the lane's RL rows x NJ columns, 4 head dims at a time.
    float s[RL][NJ];
#pragma unroll
    for (int r = 0; r < RL; ++r)
#pragma unroll
      for (int c = 0; c < NJ; ++c) s[r][c] = 0.0f;
#pragma unroll 2
    for (int d = 0; d < D; d += 4) {
      float4 kf[NJ];
#pragma unroll
      for (int c = 0; c < NJ; ++c) kf[c] = *(const float4*)&sK[(hl + 16 * c) * KSTR + d];
#pragma unroll
      for (int r = 0; r < RL; ++r) {
        const float4 qf = *(const float4*)&sQ[(wrow0 + 2 * r + half) * D + d];
#pragma unroll
        for (int c = 0; c < NJ; ++c) {
          float acc = s[r][c];
          acc = fmaf(qf.x, kf[c].x, acc);
          acc = fmaf(qf.y, kf[c].y, acc);
          acc = fmaf(qf.z, kf[c].z, acc);
          acc = fmaf(qf.w, kf[c].w, acc);
          s[r][c] = acc;
        }
      }
    }

    // Logits, online softmax, P to shared memory.
    const bool masked = tile_needs_mask(t, kv0, t.q0 + wrow0, RW);
#pragma unroll
    for (int r = 0; r < RL; ++r) {
      const int row = wrow0 + 2 * r + half;
      const int i = t.q0 + row;
      float mx = -CUDART_INF_F;
#pragma unroll
      for (int c = 0; c < NJ; ++c) {
#ifdef PLUS_HAS_KEY_BIAS
        if (masked) s[r][c] = logit(args, t, i, kv0 + hl + 16 * c, s[r][c], sKB[hl + 16 * c]);
#else
        if (masked) s[r][c] = logit(args, t, i, kv0 + hl + 16 * c, s[r][c]);
#endif
        mx = fmaxf(mx, s[r][c]);
      }
      if (exact) {  // m is the row's final maximum: p = e^(s - m) / l, then the hook; O accumulates unscaled
        const float m_use = m[r] == -CUDART_INF_F ? 0.0f : m[r];
#pragma unroll
        for (int c = 0; c < NJ; ++c)
          sP[row * PSTR + hl + 16 * c] = prob(args, t, i, kv0 + hl + 16 * c, expf(s[r][c] - m_use) * inv_l[r]);
        continue;
      }
      mx = row_max<16>(mx);
      const float m_new = fmaxf(m[r], mx);
      // A row with nothing visible yet keeps m = -inf; subtract 0 then so that exp gives 0, not NaN.
      const float m_use = m_new == -CUDART_INF_F ? 0.0f : m_new;
      const float alpha = expf(m[r] - m_use);
      m[r] = m_new;
      l[r] *= alpha;
#pragma unroll
      for (int c = 0; c < ND; ++c) o[r][c] *= alpha;
#pragma unroll
      for (int c = 0; c < NJ; ++c) {
        const float p = expf(s[r][c] - m_use);
        l[r] += p;  // this lane's share of the row sum; the half warp adds its shares at the end
        sP[row * PSTR + hl + 16 * c] = p;
      }
    }
    __syncwarp();  // P rows are private to the warp
    if (stats) continue;

    // O += P V: 4 keys at a time, P broadcast from shared memory, V read by column.
#pragma unroll 2
    for (int j = 0; j < BKV; j += 4) {
      float4 pf[RL];
#pragma unroll
      for (int r = 0; r < RL; ++r) pf[r] = *(const float4*)&sP[(wrow0 + 2 * r + half) * PSTR + j];
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
#pragma unroll
        for (int c = 0; c < ND; ++c) {
          const float v = sV[(j + jj) * D + hl + 16 * c];
#pragma unroll
          for (int r = 0; r < RL; ++r) {
            const float p = jj == 0 ? pf[r].x : jj == 1 ? pf[r].y : jj == 2 ? pf[r].z : pf[r].w;
            o[r][c] = fmaf(p, v, o[r][c]);
          }
        }
      }
    }
    // The next write of sP comes after the __syncthreads at the top of the loop.
  }
  if (stats) {
#pragma unroll
    for (int r = 0; r < RL; ++r) {
      const float lsum = row_sum<16>(l[r]);
      inv_l[r] = lsum > 0.0f ? 1.0f / lsum : CUDART_NAN_F;
    }
  }
  }

#if PLUS_ATTN_SPLIT
  if (t.nsplit > 1) {  // this split's unnormalised rows, their max and sum (plus_attention_combine merges)
#pragma unroll
    for (int r = 0; r < RL; ++r) {
      const float lsum = row_sum<16>(l[r]);
      const int p = t.q0 + wrow0 + 2 * r + half;
      if (p < t.rows) {
        float* out = split_row(args, t, p);
#pragma unroll
        for (int c = 0; c < ND; ++c) out[hl + 16 * c] = o[r][c];
        if (hl == 0) {
          float* ml = split_ml(args, t, p);
          ml[0] = m[r];
          ml[1] = lsum;
        }
      }
    }
    return;
  }
#endif
  // Normalise and store. l == 0 means every key of the row was masked: the output is 0 (or NaN).
#pragma unroll
  for (int r = 0; r < RL; ++r) {
    const float lsum = row_sum<16>(l[r]);
    const float inv = NPASS == 2 ? 1.0f  // the second pass summed normalised probabilities
                      : lsum > 0.0f ? 1.0f / lsum : PLUS_MASKED_ROW_SCALE;
    const int p = t.q0 + wrow0 + 2 * r + half;
    if (p < t.rows) {
#pragma unroll
      for (int c = 0; c < ND; ++c) plus_attn_out(args, t.b, row_h(t, p), row_i(p), hl + 16 * c, o[r][c] * inv);
    }
  }
}

}  // namespace plus_attn

// ======================================================================= MATH 1 / 2: tensor cores
#else

namespace plus_attn {

template <typename T> struct is_16bit { static constexpr bool value = false; };
template <> struct is_16bit<__half> { static constexpr bool value = true; };
template <> struct is_16bit<__nv_bfloat16> { static constexpr bool value = true; };
template <typename T> struct is_f32 { static constexpr bool value = false; };
template <> struct is_f32<float> { static constexpr bool value = true; };

typedef plus_qkv_t T;
#if PLUS_MATH == 1
static_assert(is_f32<plus_qkv_t>::value, "MATH 1 (TF32) needs plus_qkv_t = float");
// m16n8k8 .tf32: operands are fp32 bits rounded by cvt.rna.tf32.f32 (plus_ptx.cuh).
constexpr int KS = 8;  // k extent of one mma
PLUS_DEV void mma(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) { plus_mma_m16n8k8_tf32(d, a, b0, b1); }
PLUS_DEV unsigned operand(unsigned x) { return plus_to_tf32(x); }
#else
static_assert(is_16bit<plus_qkv_t>::value, "MATH 2 needs plus_qkv_t = half or __nv_bfloat16");
constexpr int KS = 16;
PLUS_DEV void mma(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) { PlusMma16<T>::run(d, a, b0, b1); }
PLUS_DEV unsigned operand(unsigned x) { return x; }
#endif

constexpr int CH = 16 / (int)sizeof(T);        // elements per 16-byte chunk (8 halves, 4 floats)
constexpr int TSTR = D + CH;                   // shared row stride in elements (a 16-byte multiple + 16)
constexpr int NKT = BKV / 8;                   // n8 tiles of S per warp
constexpr int NDT = D / 8;                     // n8 tiles of O per warp
constexpr int KD = D / KS;                     // k-steps of Q K^T
constexpr int KKV = BKV / KS;                  // k-steps of P V
constexpr int OSTR = D + 8;                    // fp32 row stride of the staged output tile
// The output is staged through shared memory when the fp32 [BQ][OSTR] tile fits in the Q/K/V tiles.
constexpr bool O_STAGED = BQ * OSTR * 4 <= (BQ + 2 * BKV) * TSTR * (int)sizeof(T);
// Q fragments held in registers across the key loop (4 per k-step) when they take at most 32 registers.
#ifdef PLUS_ATTN_Q_REGS
constexpr bool Q_REGS = PLUS_ATTN_Q_REGS;
#else
constexpr bool Q_REGS = KD * 4 <= 32;
#endif

// ---- PTX wrappers: plus_ptx.cuh (shared by every template) ----

template <typename E> using Mma = PlusMma16<E>;  // pack(x, y) of the 16-bit types
PLUS_DEV void cp_async16(void* dst, const void* src, int src_bytes) { plus_cp_async16(plus_smem_u32(dst), src, src_bytes); }

// ---- tile loads: either cp.async from a strided tensor or element hooks ----

// ROWS rows of D elements starting at row `row0` of the [S][ld] matrix at `src`; rows >= S become zeros.
// `nrows` < ROWS leaves the tile's rows from nrows on untouched (another loader fills them).
template <int ROWS>
PLUS_DEV void load_async(T* dst, const T* src, long long ld, int row0, int S, int nrows = ROWS) {
  constexpr int CPR = D / CH;  // 16-byte chunks per row
  const int N = nrows * CPR;
  // Not unrolled on purpose: fully unrolled, the compiler keeps one 64-bit pointer per chunk alive across
  // the whole key loop (strength reduction), which costs dozens of registers; recomputing is cheap.
  src += row0 * ld;
  const int rows = S - row0;  // rows of the tile that exist
#pragma unroll 1
  for (int c = threadIdx.x; c < N; c += NT) {
    const int r = c / CPR, col = (c % CPR) * CH;
    const bool ok = r < rows;
    cp_async16(dst + r * TSTR + col, ok ? src + r * ld + col : src, ok ? 16 : 0);
  }
}

PLUS_DEV void load_q(const PlusArgs& args, const Tile& t, T* sQ) {
#if PLUS_Q_STRIDED
  load_async<BQ>(sQ, plus_q_ptr(args, t.b, t.h), plus_q_ld(args), t.q0, t.Sq);
#else
  fill_tile<BQ, TSTR>(sQ, [&](int r, int d) -> float {
    const int p = t.q0 + r;
    return p < t.rows ? plus_q(args, t.b, row_h(t, p), row_i(p), d) : 0.0f;
  });
#endif
}

#if PLUS_K_PAST_STRIDED || PLUS_V_PAST_STRIDED
// A KV cache tile: rows j < past by cp.async from the past tensor at `past_src` (row stride ld), the rows
// from past on (the new keys, then the zero padding past Skv) from the element hook f(j, d).
template <typename F>
PLUS_DEV void load_cache_tile(T* dst, const T* past_src, long long ld, const Tile& t, int kv0, int past, F f) {
  const int from_past = max(0, min(BKV, min(past, t.Skv) - kv0));
  if (from_past > 0) load_async<BKV>(dst, past_src, ld, kv0, past, from_past);
#pragma unroll 1
  for (int e = threadIdx.x + from_past * D; e < BKV * D; e += NT) {
    const int r = e / D, d = e % D, j = kv0 + r;
    dst[r * TSTR + d] = plus_cvt<T>(j < t.Skv ? f(j, d) : 0.0f);
  }
}
#endif
PLUS_DEV void load_k(const PlusArgs& args, const Tile& t, T* sK, int kv0) {
#if PLUS_K_PAST_STRIDED
  load_cache_tile(sK, plus_k_ptr(args, t.b, t.hkv), plus_k_ld(args), t, kv0, (int)plus_attn_past(args),
                  [&](int j, int d) -> float { return plus_k(args, t.b, t.hkv, j, d); });
#elif PLUS_K_STRIDED
  load_async<BKV>(sK, plus_k_ptr(args, t.b, t.hkv), plus_k_ld(args), kv0, t.Skv);
#elif PLUS_K_KEY_MAJOR
  // The hook reads a tensor whose key index j is contiguous (a materialised K^T): lanes take consecutive
  // keys, each gathers CH d values (CH coalesced hook loads) and writes one 16-byte shared chunk; the 8
  // rows of a 16-byte store phase are TSTR apart, i.e. in 8 distinct 16-byte bank groups.
  constexpr int CPR = D / CH, N = BKV * CPR;
#pragma unroll 1
  for (int c = threadIdx.x; c < N; c += NT) {
    const int r = c % BKV, d0 = (c / BKV) * CH, j = kv0 + r;
    plus_u32 w[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
#if PLUS_MATH == 1
      w[e] = __float_as_uint(j < t.Skv ? plus_k(args, t.b, t.hkv, j, d0 + e) : 0.0f);
#else
      const float x0 = j < t.Skv ? plus_k(args, t.b, t.hkv, j, d0 + 2 * e) : 0.0f;
      const float x1 = j < t.Skv ? plus_k(args, t.b, t.hkv, j, d0 + 2 * e + 1) : 0.0f;
      w[e] = Mma<T>::pack(x0, x1);
#endif
    }
    plus_st_shared16(plus_smem_u32(sK + r * TSTR + d0), w[0], w[1], w[2], w[3]);
  }
#else
  fill_tile<BKV, TSTR>(sK, [&](int r, int d) -> float {
    const int j = kv0 + r;
    return j < t.Skv ? plus_k(args, t.b, t.hkv, j, d) : 0.0f;
  });
#endif
}
PLUS_DEV void load_v(const PlusArgs& args, const Tile& t, T* sV, int kv0) {
#if PLUS_V_PAST_STRIDED
  load_cache_tile(sV, plus_v_ptr(args, t.b, t.hkv), plus_v_ld(args), t, kv0, (int)plus_attn_past(args),
                  [&](int j, int d) -> float { return plus_v(args, t.b, t.hkv, j, d); });
#elif PLUS_V_STRIDED
  load_async<BKV>(sV, plus_v_ptr(args, t.b, t.hkv), plus_v_ld(args), kv0, t.Skv);
#else
  fill_tile<BKV, TSTR>(sV, [&](int r, int d) -> float {
    const int j = kv0 + r;
    return j < t.Skv ? plus_v(args, t.b, t.hkv, j, d) : 0.0f;
  });
#endif
}

// ---- the kernel body ----
//
// Fragment layout of m16n8k16 (g = lane / 4, q = lane % 4): an accumulator n8 tile holds
// c[0], c[1] = C[g][2q], C[g][2q + 1] and c[2], c[3] = C[g + 8][2q], C[g + 8][2q + 1]. So each thread owns
// query rows g and g + 8 of its warp's 16 rows; a row is shared by the 4 threads of a quad (xor 1, 2).
// The A fragment of a 16x16 tile is {A[g][2q..], A[g+8][2q..], A[g][2q+8..], A[g+8][2q+8..]}: the
// accumulators of two neighbouring n8 tiles of S, packed to b16 pairs, are exactly the A fragment of the
// corresponding k16 slice of P.
// m16n8k8 .tf32 (MATH 1) has the same accumulator layout; its A fragment is {A[g][q], A[g+8][q], A[g][q+4],
// A[g+8][q+4]} and its B fragment {B[q][g], B[q+4][g]}. An 8x8 b16 ldmatrix of 32-bit data hands lane l the
// word (row l / 4, column l % 4) of an 8x4 block, so Q and K fragments load exactly as for 16-bit types with
// 16-byte chunks of 4 floats. For P V the accumulators of one n8 tile of S (keys 2q, 2q+1 of rows g, g + 8)
// become the A fragment with k index q standing for key 2q and q + 4 for key 2q + 1; the B fragment is read
// with the same key order (rows 2q and 2q + 1 of the V tile), which leaves the sum over keys unchanged.
//
// Schedule per key tile n (one K and one V buffer, as FlashAttention-2):
//   wait K(n); sync | issue V(n) | S = Q K(n)^T; softmax | wait V(n); sync | issue K(n+1) | O += P V(n)
// so the V load overlaps the score math and the next K load overlaps the P V product. With element hooks
// the "issue" steps are synchronous loads and the waits are plain barriers.

PLUS_DEV void tc(const PlusArgs& args, T* smem) {
  const Tile t = make_tile(args);
  T* sQ = smem;               // [BQ][TSTR]
  T* sK = sQ + BQ * TSTR;     // [BKV][TSTR]
  T* sV = sK + BKV * TSTR;    // [BKV][TSTR]

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, q = lane & 3;
  const int wrow0 = warp * 16;  // the warp's first row within the block
  const int i0 = t.q0 + wrow0 + g, i1 = i0 + 8;  // this thread's tile rows

  float o[NDT][4];
#pragma unroll
  for (int n = 0; n < NDT; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m[2] = {-CUDART_INF_F, -CUDART_INF_F};
  float l[2] = {0.0f, 0.0f};
  unsigned qf[Q_REGS ? KD : 1][4];  // the warp's Q rows as A fragments, loaded once (Q_REGS)
  // Row (lane % 8) + 8 * ((lane / 8) % 2), column CH * (lane / 16) of each 16 x KS block: matrices
  // (rows 0-7, k low half), (rows 8-15, k low), (rows 0-7, k high), (rows 8-15, k high) = a0..a3.
  const T* qbase = sQ + (wrow0 + (lane & 7) + ((lane >> 3) & 1) * 8) * TSTR + (lane >> 4) * CH;
  auto q_frag = [&](unsigned (&a)[4], int kk) {
    plus_ldmatrix_x4(a, qbase + kk * KS);
#pragma unroll
    for (int e = 0; e < 4; ++e) a[e] = operand(a[e]);
  };

#ifdef PLUS_HAS_KEY_BIAS
  __shared__ float sKB[BKV];   // the key tile's plus_key_bias terms (written after the barrier that ends its
                               // previous tile's logits, published by the barrier that starts its own)
#else
  float* sKB = nullptr;
#endif
  if (t.kt1 > t.kt0) {
    load_q(args, t, sQ);
    load_k(args, t, sK, t.kt0 * BKV);
    plus_cp_async_commit();
    load_key_bias(args, t, sKB, t.kt0 * BKV);
  }

  float inv_l[2] = {1.0f, 1.0f};  // PLUS_HAS_PROB: 1 / (each row's final sum), NaN for a row that sees no key
  for (int pass = 0; pass < NPASS; ++pass) {
  const bool stats = NPASS == 2 && pass == 0;   // this pass only finds the rows' maximum and sum
  const bool exact = NPASS == 2 && pass == 1;   // this pass applies plus_prob to exact probabilities
  for (int kt = t.kt0; kt < t.kt1; ++kt) {
    const int kv0 = kt * BKV;
    plus_cp_async_wait<0>();
    __syncthreads();  // K(kt) (and Q) visible to all; every warp is done reading V(kt - 1)
#if PLUS_ATTN_KV_CACHE
    if (t.writer)
      store_present<TSTR>(sK, kv0, t.Skv, [&](int j, int d, float x) { plus_k_present(args, t.b, t.hkv, j, d, x); });
#endif
    if (Q_REGS && kt == t.kt0) {
#pragma unroll
      for (int kk = 0; kk < KD; ++kk) q_frag(qf[Q_REGS ? kk : 0], kk);
    }
    if (!stats) load_v(args, t, sV, kv0);
    plus_cp_async_commit();

    // ---- S = Q K^T: per k-step, one ldmatrix.x4 gives the B fragments of two n8 tiles ----
    float s[NKT][4];
#pragma unroll
    for (int n = 0; n < NKT; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
    {
      // K is stored [key][d] = B^T, i.e. B column-major: no transpose. Matrices (keys 0-7, k low half),
      // (keys 0-7, k high), (keys 8-15, k low), (keys 8-15, k high) = b0, b1 of tile 0, b0, b1 of tile 1.
      const T* base = sK + ((lane & 7) + (lane >> 4) * 8) * TSTR + ((lane >> 3) & 1) * CH;
#pragma unroll
      for (int kk = 0; kk < KD; ++kk) {
        unsigned a[4];
        if (Q_REGS) {
#pragma unroll
          for (int e = 0; e < 4; ++e) a[e] = qf[Q_REGS ? kk : 0][e];
        } else {
          q_frag(a, kk);
        }
#pragma unroll
        for (int np = 0; np < NKT / 2; ++np) {
          unsigned bf[4];
          plus_ldmatrix_x4(bf, base + np * 16 * TSTR + kk * KS);
          mma(s[2 * np], a, operand(bf[0]), operand(bf[1]));
          mma(s[2 * np + 1], a, operand(bf[2]), operand(bf[3]));
        }
      }
    }

    // ---- logits and online softmax (rows i0 and i1 of this thread) ----
    if (tile_needs_mask(t, kv0, t.q0 + wrow0, 16)) {
#pragma unroll
      for (int n = 0; n < NKT; ++n) {
        const int j = kv0 + n * 8 + 2 * q;
#ifdef PLUS_HAS_KEY_BIAS
        const float kb0 = sKB[n * 8 + 2 * q], kb1 = sKB[n * 8 + 2 * q + 1];
#else
        const float kb0 = 0.0f, kb1 = 0.0f;
#endif
        s[n][0] = logit(args, t, i0, j, s[n][0], kb0);
        s[n][1] = logit(args, t, i0, j + 1, s[n][1], kb1);
        s[n][2] = logit(args, t, i1, j, s[n][2], kb0);
        s[n][3] = logit(args, t, i1, j + 1, s[n][3], kb1);
      }
    }
    if (exact) {  // m is the row's final maximum: p = e^(s - m) / l, then the hook; O accumulates unscaled
#pragma unroll
      for (int rh = 0; rh < 2; ++rh) {
        const float m_use = m[rh] == -CUDART_INF_F ? 0.0f : m[rh];
#pragma unroll
        for (int n = 0; n < NKT; ++n) {
#pragma unroll
          for (int e = 2 * rh; e < 2 * rh + 2; ++e)
            s[n][e] = prob(args, t, rh ? i1 : i0, kv0 + n * 8 + 2 * q + (e & 1),
                           exp2f((s[n][e] - m_use) * LOG2E) * inv_l[rh]);
        }
      }
    } else {
      online_softmax(s, o, m, l);
    }

    plus_cp_async_wait<0>();
    __syncthreads();  // V(kt) visible; every warp is done reading K(kt)
#if PLUS_ATTN_KV_CACHE
    if (t.writer)
      store_present<TSTR>(sV, kv0, t.Skv, [&](int j, int d, float x) { plus_v_present(args, t.b, t.hkv, j, d, x); });
#endif
    // the next key tile: this pass's, or the first one again for the second pass
    const int kt_next = kt + 1 < t.kt1 ? kt + 1 : stats ? t.kt0 : -1;
    if (kt_next >= 0) {
      load_k(args, t, sK, kt_next * BKV);
      plus_cp_async_commit();
      load_key_bias(args, t, sKB, kt_next * BKV);
    }
    if (stats) continue;

    // ---- O += P V: P from registers, V by ldmatrix.trans (tf32: 32-bit shared loads) ----
#if PLUS_MATH == 1
    {
      // k-step kk is the n8 tile kk of S; its keys 2q, 2q + 1 are rows 2q, 2q + 1 of that 8-key slice of V.
      const float* vrow = sV + (2 * q) * TSTR + g;
#pragma unroll
      for (int kk = 0; kk < KKV; ++kk) {
        unsigned a[4];
        a[0] = operand(__float_as_uint(s[kk][0]));
        a[1] = operand(__float_as_uint(s[kk][2]));
        a[2] = operand(__float_as_uint(s[kk][1]));
        a[3] = operand(__float_as_uint(s[kk][3]));
        const float* vk = vrow + kk * 8 * TSTR;
#pragma unroll
        for (int n = 0; n < NDT; ++n)
          mma(o[n], a, operand(__float_as_uint(vk[n * 8])), operand(__float_as_uint(vk[TSTR + n * 8])));
      }
    }
#else
    {
      // V is stored [key][d] = B row-major: transpose while loading. Matrices (keys 0-7, d 0-7),
      // (keys 8-15, d 0-7), (keys 0-7, d 8-15), (keys 8-15, d 8-15) = b0, b1 of d tile 0, b0, b1 of d tile 1.
      const T* base = sV + ((lane & 7) + ((lane >> 3) & 1) * 8) * TSTR + (lane >> 4) * 8;
#pragma unroll
      for (int kk = 0; kk < KKV; ++kk) {
        unsigned a[4];
        a[0] = Mma<T>::pack(s[2 * kk][0], s[2 * kk][1]);
        a[1] = Mma<T>::pack(s[2 * kk][2], s[2 * kk][3]);
        a[2] = Mma<T>::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        a[3] = Mma<T>::pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
        for (int dp = 0; dp < NDT / 2; ++dp) {
          unsigned bf[4];
          plus_ldmatrix_x4_trans(bf, base + kk * 16 * TSTR + dp * 16);
          mma(o[2 * dp], a, bf[0], bf[1]);
          mma(o[2 * dp + 1], a, bf[2], bf[3]);
        }
      }
    }
#endif
  }
  if (stats) {
#pragma unroll
    for (int rh = 0; rh < 2; ++rh) {
      const float lsum = row_sum<4>(l[rh]);
      inv_l[rh] = lsum > 0.0f ? 1.0f / lsum : CUDART_NAN_F;
    }
  }
  }

#if PLUS_ATTN_SPLIT
  if (t.nsplit > 1) {  // this split's unnormalised rows, their max and sum (plus_attention_combine merges)
#pragma unroll
    for (int rh = 0; rh < 2; ++rh) {
      const float lsum = row_sum<4>(l[rh]);
      const int p = rh ? i1 : i0;
      if (p < t.rows) {
        float* out = split_row(args, t, p);
#pragma unroll
        for (int n = 0; n < NDT; ++n) {
          out[n * 8 + 2 * q] = o[n][2 * rh];
          out[n * 8 + 2 * q + 1] = o[n][2 * rh + 1];
        }
        if (q == 0) {
          float* ml = split_ml(args, t, p);
          ml[0] = m[rh];
          ml[1] = lsum;
        }
      }
    }
    return;
  }
#endif
  // ---- normalise and store; l == 0: the row saw no key (all masked), its output is 0 (or NaN) ----
  float inv[2];
#pragma unroll
  for (int rh = 0; rh < 2; ++rh) {
    const float lsum = row_sum<4>(l[rh]);
    inv[rh] = lsum > 0.0f ? 1.0f / lsum : PLUS_MASKED_ROW_SCALE;
    if (NPASS == 2) inv[rh] = 1.0f;  // the second pass summed normalised probabilities
  }
  if constexpr (O_STAGED) {
    // Through shared memory (fp32 [BQ][OSTR], reusing the Q/K/V tiles), so that each warp then hands 32
    // consecutive d of one row to the output hook: whole sectors whatever the hook stores per element.
    // OSTR = D + 8 floats puts the 4 rows of one 16-lane float2 phase in distinct 32-byte bank groups.
    float* so = reinterpret_cast<float*>(smem);
    __syncthreads();  // every warp is done reading K and V
#pragma unroll
    for (int rh = 0; rh < 2; ++rh) {
      const int r = wrow0 + g + 8 * rh;
#pragma unroll
      for (int n = 0; n < NDT; ++n)
        *reinterpret_cast<float2*>(so + r * OSTR + n * 8 + 2 * q) =
            make_float2(o[n][2 * rh] * inv[rh], o[n][2 * rh + 1] * inv[rh]);
    }
    __syncthreads();
#pragma unroll 2
    for (int e = threadIdx.x; e < BQ * D; e += NT) {
      const int r = e / D, d = e % D, p = t.q0 + r;
      if (p < t.rows) plus_attn_out(args, t.b, row_h(t, p), row_i(p), d, so[r * OSTR + d]);
    }
  } else {
#pragma unroll
    for (int rh = 0; rh < 2; ++rh) {
      const int p = rh ? i1 : i0;
      if (p < t.rows) {
#pragma unroll
        for (int n = 0; n < NDT; ++n) {
          const int d = n * 8 + 2 * q;
          plus_attn_out(args, t.b, row_h(t, p), row_i(p), d, o[n][2 * rh] * inv[rh]);
          plus_attn_out(args, t.b, row_h(t, p), row_i(p), d + 1, o[n][2 * rh + 1] * inv[rh]);
        }
      }
    }
  }
}

}  // namespace plus_attn

#endif  // PLUS_MATH

// ------------------------------------------------------------------------------------------ entry

// PLUS_ATTN_MIN_BLOCKS (optional, a config's): the minimum resident blocks per SM given to ptxas. Without
// it ptxas picks its own register target, which for a few configs is low enough to spill a few bytes.
#if defined(PLUS_ATTN_MIN_BLOCKS) && PLUS_ATTN_MIN_BLOCKS > 0
#define PLUS_ATTN_BOUNDS __launch_bounds__(PLUS_WARPS * 32, PLUS_ATTN_MIN_BLOCKS)
#else
#define PLUS_ATTN_BOUNDS __launch_bounds__(PLUS_WARPS * 32)
#endif
extern "C" __global__ void PLUS_ATTN_BOUNDS plus_attention(const PlusArgs args) {
  extern __shared__ __align__(16) unsigned char plus_attn_smem[];
#ifdef PLUS_HAS_ATTN_SIDE
  {
    const long long cta = ((long long)blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    plus_attn_side(args, cta * blockDim.x + threadIdx.x, (long long)gridDim.x * gridDim.y * gridDim.z * blockDim.x);
  }
#endif
#if PLUS_MATH != 0
  plus_attn::tc(args, reinterpret_cast<plus_qkv_t*>(plus_attn_smem));
#else
  plus_attn::simt(args, reinterpret_cast<float*>(plus_attn_smem));
#endif
}

#if PLUS_ATTN_SPLIT
// Split-KV combine: one thread per output element (b, h, i, d) merges the splits' partials in split order,
// rescaling each by e^(m_s - M) with the exponential of the path that made them, all in fp32. A row no split
// saw a key of gives 0 (or NaN), as one block would.
extern "C" __global__ void __launch_bounds__(256) plus_attention_combine(const PlusArgs args) {
  const PlusAttnShape s = plus_attn_shape(args);
  const int ns = max(plus_attn_splits(args), 1);
  const long long rows = s.B * s.H * s.Sq;
  const long long e = (long long)blockIdx.x * 256 + threadIdx.x;
  if (e >= rows * PLUS_HEAD_DIM) return;
  const long long row = e / PLUS_HEAD_DIM;
  const int d = (int)(e % PLUS_HEAD_DIM);
  const float* part = (const float*)args.scratch[0];
  const float* ml = part + (long long)ns * rows * PLUS_HEAD_DIM;
  float mx = -CUDART_INF_F;
  for (int k = 0; k < ns; ++k) mx = fmaxf(mx, ml[(k * rows + row) * 2]);
  float lsum = 0.0f, acc = 0.0f;
  if (mx != -CUDART_INF_F) {
    for (int k = 0; k < ns; ++k) {
      const float mk = ml[(k * rows + row) * 2];
      if (mk == -CUDART_INF_F) continue;  // that split saw no key of the row: nothing to add
#if PLUS_MATH != 0
      const float w = exp2f((mk - mx) * plus_attn::LOG2E);
#else
      const float w = expf(mk - mx);
#endif
      lsum = fmaf(w, ml[(k * rows + row) * 2 + 1], lsum);
      acc = fmaf(w, part[(k * rows + row) * PLUS_HEAD_DIM + d], acc);
    }
  }
  const float inv = lsum > 0.0f ? 1.0f / lsum : PLUS_MASKED_ROW_SCALE;
  const long long b = row / (s.H * s.Sq), h = (row / s.Sq) % s.H, i = row % s.Sq;
  plus_attn_out(args, b, h, i, d, acc * inv);
}
#endif
#endif  // PLUS_ATTN_WGMMA
