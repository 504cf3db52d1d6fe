// gemm.cuh: batched GEMM template for sm_80 .. sm_90 (kernels/CONTRACT.md section 2.1).
//
//   C[b, m, n] = sum_k A[b, m, k] * B[b, k, n]      (fp32 accumulation)
//
// The generated source includes plus_common.cuh, #defines the variant parameters below, typedefs
// plus_ab_t, defines any hooks, then includes this file. Three math paths:
//
//   PLUS_MATH 2  f16/bf16 tensor cores: mma.sync m16n8k16, ldmatrix (.trans for a [K,N] B), a
//                cp.async pipeline of PLUS_STAGES (2..4) tiles in dynamic shared memory.
//   PLUS_MATH 1  TF32 tensor cores (plus_ab_t float): mma.sync m16n8k8 with operands rounded by
//                cvt.rna.tf32.f32; same pipeline.
//   PLUS_MATH 3  8-bit integer tensor cores: mma.sync m16n8k32 with exact s32 accumulation (wrapping modulo 2^32,
//                as ONNX MatMulInteger); plus_ab_t signed or unsigned char for A, plus_b_t for B (default plus_ab_t);
//                the accumulator reaches the epilogue as an int (plus_acc_t); no split-K, no A prologue.
//                B [N][K] (PLUS_B_TRANS 1) goes through ldmatrix; B [K][N] is read byte by byte from its tile.
//   PLUS_MATH 0  exact fp32 SIMT: every thread owns a (WM/4) x (WN/8) block of C and accumulates
//                outer products with fmaf in k order; shared memory double buffering with the next
//                tile staged through registers.
//
// Variant parameters (all compile-time):
//   PLUS_BM, PLUS_BN, PLUS_BK   block tile; PLUS_WM, PLUS_WN   warp tile (PLUS_THREADS = 32 * warps)
//   PLUS_STAGES                 pipeline depth for MATH 1/2 (2..4); MATH 0 always double buffers
//   PLUS_SPLITK                 split-K factor (default 1)
//   PLUS_B_TRANS                0: B[k*ldb + n] (default); 1: B[n*ldb + k]
//   PLUS_ALIGNED                1: every A/B row start is 16-byte aligned (lda/ldb multiples of 16 bytes):
//                               16-byte vector / cp.async loads; 0 (default): guarded scalar loads
//   PLUS_GATED                  1: two products C0 = A·B0, C1 = A·B1 sharing the A tiles (a gated MLP's gate and
//                               up projections); the epilogue gets both sums of an element (default 0)
//
// Hooks (define PLUS_HAS_<NAME> before defining one; indices are long long, values float):
//   PlusGemmShape plus_gemm_shape(const PlusArgs&)                       default: {v[0], v[1], v[2], v[3]}
//                                                                          = {batch, M, N, K}
//   const plus_ab_t* plus_a_ptr(const PlusArgs&, long long b)            default: in[0] + b*M*K
//   long long plus_lda(const PlusArgs&)                                  default: K
//   const plus_ab_t* plus_b_ptr(const PlusArgs&, long long b)            default: in[1] + b*K*N
//   long long plus_ldb(const PlusArgs&)                                  default: N (B_TRANS 0) / K (B_TRANS 1)
//   float plus_prologue_a(const PlusArgs&, long long b, long long m, long long k, float x)
//        optional (PLUS_HAS_PROLOGUE_A): applied once to every in-range A element of a tile after it
//        has landed in shared memory and before the MMA reads it (out-of-range zero fill is untouched)
//   plus_ab_t plus_a_quant(const PlusArgs&, long long b, long long m, long long k)
//        with PLUS_A_QUANT 1 (PLUS_MATH 3 only): A is not read through plus_a_ptr; the hook returns the 8-bit
//        element A[b][m][k] (a float activation quantized by the generated QuantizeLinear), called for every
//        in-range element of an A tile on its way into the A stage (synchronous loads); the rest are 0
//   template <int W> void plus_b_chunk(const PlusArgs&, long long b, long long n, long long k, int avail,
//                                      float (&v)[W])
//        with PLUS_B_NBITS 1 (and PLUS_B_TRANS 1): B is not read through plus_b_ptr but decoded by the hook,
//        W consecutive elements B[n][k..k+W) at a time (k a multiple of W; v[j] for j >= avail must be
//        0): a weight-only quantised B (MatMulNBits) is dequantised in the mainloop, on its way into the
//        B stage (MATH 1/2) or the staging registers (MATH 0), with synchronous loads; gated (PLUS_GATED 1),
//        B1 is decoded by plus_b1_chunk (same signature: two MatMulNBits weights with their own packed fields,
//        scales and zero points) and plus_b_ptr / plus_b1_ptr are not read
//   void plus_epilogue(const PlusArgs&, long long b, long long m, long long n, float acc)
//        default: out[0][(b*M + m)*N + n] = plus_cvt<plus_c_t>(acc); plus_c_t defaults to plus_ab_t
//        (typedef it and #define PLUS_HAS_C_T for another output type)
//   Ragged groups (PLUS_HAS_GROUP_N): plus_group_n(args, b), plus_group_ldb(args, b) give batch index b's own N
//   and ldb (gemm_hooks.cuh); plus_gemm_shape's N is the largest.
//   Gated (PLUS_GATED 1): plus_b1_ptr(args, b) is B1 (default: the second half of a combined weight, B0 + N
//   columns, or + N rows with B_TRANS 1; same ldb), N is the width of one product, and instead of
//   plus_epilogue the template calls
//   void plus_epilogue_gated(const PlusArgs&, long long b, long long m, long long n, float acc0, float acc1)
//        default: out[0] = acc0, out[1] = acc1 (both [batch, M, N] of plus_c_t)
//   The block tile's BN columns interleave the two products by 8 (gemm_hooks.cuh, plus_gated_*): logical
//   column c is product (c / 8) % 2, column (c / 16) * 8 + c % 8, so matching columns of both products
//   sit in one warp's accumulators (8 columns apart; the SIMT path pairs lanes 2 apart) and the epilogue
//   combines them without leaving the block. Grid x covers the logical width 16 * cdiv(N, 8); split-K
//   partials are [SPLITK][2][batch][M][N].
// Hooks are inlined into the kernel: keep 64-bit integer division out of them where possible (it is
// a subroutine call whose register saves ptxas reports as spills; 32-bit division is inline).
// i.e. the defaults compute one contiguous row-major problem (batch of contiguous [M,K] x [K,N] or
// [N,K] matrices in in[0], in[1]) into a contiguous [batch, M, N] out[0].
//
// Entry points: plus_gemm, grid (cdiv(N,BN), cdiv(M,BM), batch*SPLITK), block PLUS_THREADS, dynamic
// shared memory PLUS_SMEM_BYTES. With PLUS_SPLITK > 1, blockIdx.z = split*batch + b; split s covers
// the K range [s*KS, min(K, (s+1)*KS)) with KS = cdiv(cdiv(K, SPLITK), BK)*BK, writes fp32 partial sums
// to scratch[0] as [SPLITK][batch][M][N] (every element, zeros for an empty range), and
// plus_splitk_reduce (grid cdiv(batch*M*N, 256), block 256) sums them and calls plus_epilogue.
//
// Shared memory layouts (padding keeps ldmatrix / SIMT accesses free of bank conflicts):
//   MATH 2/1  A stage [BM][BK + 16B]; B stage [BN][BK + 16B] (B_TRANS 1) or [BK][BN + 8] (B_TRANS 0).
//             k rows of exactly 64 bytes (f16 BK 32, tf32 BK 16) are not padded but XOR-swizzled by
//             16-byte chunk (chunk_pos): padding cannot serve both the 2-rows-per-phase cp.async writes
//             and the 8-row ldmatrix reads of such rows. The B stage is sized for the larger of the two
//             layouts so PLUS_SMEM_BYTES ignores B_TRANS.
//   MATH 0    A stage [BK][BM + 4] (transposed), B stage [BK][BN + 4], always 2 stages, float.
// kernels/gemm/configs.py mirrors PLUS_THREADS and PLUS_SMEM_BYTES; keep the two in step.
#pragma once

// ------------------------------------------------------------------------------------ parameters

#if !defined(PLUS_BM) || !defined(PLUS_BN) || !defined(PLUS_BK) || !defined(PLUS_WM) || !defined(PLUS_WN)
#error "gemm.cuh: define PLUS_BM, PLUS_BN, PLUS_BK, PLUS_WM and PLUS_WN before including it"
#endif
#ifndef PLUS_MATH
#error "gemm.cuh: define PLUS_MATH (0 SIMT fp32, 1 TF32, 2 f16/bf16)"
#endif
#ifndef PLUS_STAGES
#define PLUS_STAGES 2
#endif
#ifndef PLUS_SPLITK
#define PLUS_SPLITK 1
#endif
#ifndef PLUS_B_TRANS
#define PLUS_B_TRANS 0
#endif
#ifndef PLUS_B_NBITS
#define PLUS_B_NBITS 0
#endif
#ifndef PLUS_A_QUANT
#define PLUS_A_QUANT 0
#endif
#if PLUS_A_QUANT && PLUS_MATH != 3
#error "gemm.cuh: PLUS_A_QUANT quantizes A for the 8-bit GEMM (PLUS_MATH 3)"
#endif
#if PLUS_B_NBITS && !PLUS_B_TRANS
#error "gemm.cuh: PLUS_B_NBITS decodes a [N][K] B (PLUS_B_TRANS 1)"
#endif
#ifndef PLUS_ALIGNED
#define PLUS_ALIGNED 0
#endif
#ifndef PLUS_GATED
#define PLUS_GATED 0
#endif

#define PLUS_WARPS_M (PLUS_BM / PLUS_WM)
#define PLUS_WARPS_N (PLUS_BN / PLUS_WN)
#define PLUS_THREADS (PLUS_WARPS_M * PLUS_WARPS_N * 32)

#define PLUS_GEMM_MAX(a, b) ((a) > (b) ? (a) : (b))

#if PLUS_MATH == 0
// SIMT: float tiles, A transposed to [k][m], 2 stages.
#define PLUS_GEMM_ELEM 4
#define PLUS_GEMM_NSTAGE 2
#define PLUS_GEMM_LDA_S (PLUS_BM + 4)
#define PLUS_GEMM_LDB_S (PLUS_BN + 4)
#define PLUS_GEMM_A_STAGE (PLUS_BK * PLUS_GEMM_LDA_S)
#define PLUS_GEMM_B_STAGE (PLUS_BK * PLUS_GEMM_LDB_S)
#elif PLUS_MATH == 1 || PLUS_MATH == 2 || PLUS_MATH == 3
#define PLUS_GEMM_ELEM (PLUS_MATH == 3 ? 1 : PLUS_MATH == 2 ? 2 : 4)
#define PLUS_GEMM_CE (16 / PLUS_GEMM_ELEM)          /* elements per 16-byte chunk */
#define PLUS_GEMM_NSTAGE PLUS_STAGES
/* k-contiguous rows of 64 bytes (f16 BK 32, tf32 BK 16) are XOR-swizzled instead of padded: no padding
   makes both the cp.async writes (2 rows per 8-lane phase) and ldmatrix (8 rows) conflict-free there */
#define PLUS_GEMM_KSWZ (PLUS_BK * PLUS_GEMM_ELEM == 64)
#define PLUS_GEMM_LDK_S (PLUS_GEMM_KSWZ ? PLUS_BK : PLUS_BK + PLUS_GEMM_CE)
#define PLUS_GEMM_LDA_S PLUS_GEMM_LDK_S              /* A [BM][BK (+ 16 bytes)] */
#if PLUS_B_TRANS
#define PLUS_GEMM_LDB_S PLUS_GEMM_LDK_S              /* B [BN][BK (+ 16 bytes)] */
#else
#define PLUS_GEMM_LDB_S (PLUS_BN + PLUS_GEMM_NPAD)     /* B [BK][BN + 8 (16 bytes for 8-bit)] */
#endif
#define PLUS_GEMM_NPAD (PLUS_MATH == 3 ? 16 : 8)
#define PLUS_GEMM_A_STAGE (PLUS_BM * PLUS_GEMM_LDA_S)
#define PLUS_GEMM_B_STAGE PLUS_GEMM_MAX(PLUS_BN * PLUS_GEMM_LDK_S, PLUS_BK * (PLUS_BN + PLUS_GEMM_NPAD))
#else
#error "gemm.cuh: PLUS_MATH must be 0, 1, 2 or 3"
#endif
#if PLUS_MATH == 3
typedef int plus_acc_t;
static_assert(PLUS_SPLITK == 1 && !PLUS_GATED && !PLUS_B_NBITS, "gemm.cuh: 8-bit GEMMs are not split, gated or decoded");
#else
typedef float plus_acc_t;
#endif

#define PLUS_SMEM_BYTES (PLUS_GEMM_NSTAGE * (PLUS_GEMM_A_STAGE + PLUS_GEMM_B_STAGE) * PLUS_GEMM_ELEM)

static_assert(PLUS_BM % PLUS_WM == 0 && PLUS_BN % PLUS_WN == 0, "the warp tile must divide the block tile");
static_assert(PLUS_THREADS >= 32 && PLUS_THREADS <= 1024, "1..32 warps per block");
static_assert(PLUS_SPLITK >= 1, "PLUS_SPLITK >= 1");
static_assert(!PLUS_GATED || (PLUS_BN % 32 == 0 && PLUS_WN % 16 == 0),
              "gated: whole 16-column pairs of 8-blocks in every warp tile");
#if PLUS_MATH == 0
static_assert(PLUS_WM % 16 == 0 && PLUS_WN % 32 == 0,
              "SIMT warp tile: WM a multiple of 16 (4 lanes x 4 rows), WN a multiple of 32 (8 lanes x 4 columns)");
static_assert(PLUS_BK % 4 == 0, "SIMT: BK a multiple of 4");
#else
static_assert(PLUS_STAGES >= 2 && PLUS_STAGES <= 4, "PLUS_STAGES in 2..4");
static_assert(PLUS_WM % 16 == 0 && PLUS_WN % 16 == 0, "mma warp tile: WM and WN multiples of 16");
static_assert(PLUS_BK % (PLUS_MATH == 3 ? 32 : 16) == 0, "mma: BK a multiple of one mma's k");
static_assert(PLUS_BN % 32 == 0, "mma: BN a multiple of 32 (conflict-free [BK][BN+8] B tile)");
#endif

// -------------------------------------------------------------------------------- hook defaults

#include "gemm_hooks.cuh"
#include "plus_ptx.cuh"

// ------------------------------------------------------------------------------------ internals

namespace plusg {

// Problem coordinates of one block, shared by the math paths and the store.
struct Block {
  long long b, batch;
  int split;
  int M, N;
  int NP;            // row stride of the split-K partials: plus_gemm_shape's N (a ragged group's member N <= it)
  int m0, n0;        // first row / column of the block tile
  int kbeg, kend;    // K range of this block (split-K)
};

// One finished sum: to the epilogue, or to the split-K partial buffer.
PLUS_DEV void store(const PlusArgs& args, const Block& blk, int m, int n, plus_acc_t v) {
  if (m >= blk.M || n >= blk.N) return;
#if PLUS_SPLITK > 1
  float* part = (float*)args.scratch[0];
  part[(((long long)blk.split * blk.batch + blk.b) * blk.M + m) * blk.NP + n] = v;
#else
  plus_epilogue(args, blk.b, m, n, v);
#endif
}

#if PLUS_GATED
// Both sums of one output element (gated): to the epilogue, or to the split-K partial planes.
PLUS_DEV void store2(const PlusArgs& args, const Block& blk, int m, int n, float v0, float v1) {
  if (m >= blk.M || n >= blk.N) return;
#if PLUS_SPLITK > 1
  float* part = (float*)args.scratch[0];
  const long long plane = (long long)blk.batch * blk.M * blk.N, at = ((long long)blk.b * blk.M + m) * blk.N + n;
  part[(2LL * blk.split) * plane + at] = v0;
  part[(2LL * blk.split + 1) * plane + at] = v1;
#else
  plus_epilogue_gated(args, blk.b, m, n, v0, v1);
#endif
}
#endif

// Whether an operand allows 16-byte loads: base 16-byte aligned and leading dimension a multiple of
// 16 bytes. With PLUS_ALIGNED=1 the codegen promises it; otherwise it is checked once per block, so
// PLUS_ALIGNED=0 costs only a uniform branch when the data happens to be aligned.
PLUS_DEV bool vec_ok(const plus_ab_t* p, long long ld) {
#if PLUS_ALIGNED
  return true;
#else
  return ((reinterpret_cast<unsigned long long>(p) | (unsigned long long)ld * sizeof(plus_ab_t)) & 15ull) == 0;
#endif
}

// B1 of a gated GEMM (PLUS_GATED), else nullptr.
PLUS_DEV const plus_ab_t* b1_ptr(const PlusArgs& args, long long b) {
#if PLUS_GATED
  return plus_b1_ptr(args, b);
#else
  (void)args; (void)b;
  return nullptr;
#endif
}

#if PLUS_B_NBITS
// W decoded elements B[n][k..k+W) of a quantised B (k a multiple of W): plus_b_chunk's values, those at or past
// k_lim or in a row n >= n_lim 0. Gated: n is a logical row of the interleaved products (as chunk_src's GMAP 2),
// row plus_gated_col(n) of B0 (plus_b_chunk) or of B1 (plus_b1_chunk: the up projection's own packed weights,
// scales and zero points).
template <int W>
PLUS_DEV void b_chunk(const PlusArgs& args, long long b, int n, int n_lim, int k, int k_lim, float (&v)[W]) {
#pragma unroll
  for (int j = 0; j < W; ++j) v[j] = 0.f;
#if PLUS_GATED
  const int part = plus_gated_part(n);
  n = (int)plus_gated_col(n);
#endif
  int avail = n < n_lim ? k_lim - k : 0;
  avail = avail < 0 ? 0 : (avail > W ? W : avail);
  if (avail == 0) return;
#if PLUS_GATED
  if (part) {
    plus_b1_chunk<W>(args, b, n, k, avail, v);
    return;
  }
#endif
  plus_b_chunk<W>(args, b, n, k, avail, v);
}
#endif

#if PLUS_MATH == 0
// ============================================================================ SIMT fp32 (exact)
//
// Warp = 4 (m) x 8 (n) lanes. Lane (lm, ln) owns rows wm0 + c*16 + lm*4 + {0..3} (c < TM/4) and
// columns wn0 + c*32 + ln*4 + {0..3} (c < TN/4): every smem read is a float4, the 4 (8) distinct float4
// a warp reads per k are adjacent (no bank conflicts, the rest broadcast).

constexpr int TM = PLUS_WM / 4;
constexpr int TN = PLUS_WN / 8;
constexpr int KC = PLUS_BK / 4;                              // 4-element chunks along k per row
constexpr int A_CHUNKS = PLUS_BM * KC;                       // chunks in an A tile
#if PLUS_B_TRANS
constexpr int B_CHUNKS = PLUS_BN * KC;
#else
constexpr int B_CHUNKS = PLUS_BK * (PLUS_BN / 4);
#endif
constexpr int A_PER = (A_CHUNKS + PLUS_THREADS - 1) / PLUS_THREADS;
constexpr int B_PER = (B_CHUNKS + PLUS_THREADS - 1) / PLUS_THREADS;

// Four consecutive elements p[0..3] of which `avail` are in range (the rest read as 0); one 16-byte
// load when the operand allows it (`vec`, see vec_ok) and all four are in range.
PLUS_DEV float4 load4(const plus_ab_t* p, int avail, bool vec) {
  if (sizeof(plus_ab_t) == 4 && vec && avail >= 4) return __ldg((const float4*)p);
  float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
  if (avail > 0) v.x = plus_f(p[0]);
  if (avail > 1) v.y = plus_f(p[1]);
  if (avail > 2) v.z = plus_f(p[2]);
  if (avail > 3) v.w = plus_f(p[3]);
  return v;
}

struct Stage {
  float4 a[A_PER];
  float4 b[B_PER];
};

// Global -> registers for the tile starting at k0 (prologue applied here: same result as in smem).
PLUS_DEV void fetch(const PlusArgs& args, const Block& blk, Stage& st, const plus_ab_t* A, long long lda,
                    bool vec_a, const plus_ab_t* B, long long ldb, bool vec_b, int k0, const plus_ab_t* B1) {
  const int tid = threadIdx.x;
#pragma unroll
  for (int i = 0; i < A_PER; ++i) {
    const int c = tid + i * PLUS_THREADS;
    st.a[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (A_CHUNKS % PLUS_THREADS == 0 || c < A_CHUNKS) {
      const int r = c / KC, k = k0 + (c % KC) * 4, m = blk.m0 + r;
      const int avail = m < blk.M ? min(4, blk.kend - k) : 0;
      if (avail > 0) st.a[i] = load4(A + (long long)m * lda + k, avail, vec_a);
#ifdef PLUS_HAS_PROLOGUE_A
      float* e = &st.a[i].x;
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (j < avail) e[j] = plus_prologue_a(args, blk.b, m, k + j, e[j]);
#endif
    }
  }
#pragma unroll
  for (int i = 0; i < B_PER; ++i) {
    const int c = tid + i * PLUS_THREADS;
    st.b[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (B_CHUNKS % PLUS_THREADS == 0 || c < B_CHUNKS) {
#if PLUS_B_NBITS
      const int r = c / KC, k = k0 + (c % KC) * 4;
      float v[4];
      b_chunk<4>(args, blk.b, blk.n0 + r, blk.N, k, blk.kend, v);
      st.b[i] = make_float4(v[0], v[1], v[2], v[3]);
      (void)B; (void)ldb; (void)vec_b; (void)B1;
#elif PLUS_B_TRANS
      const int r = c / KC, k = k0 + (c % KC) * 4;
#if PLUS_GATED   // logical row blk.n0 + r: row plus_gated_col of B0 or B1
      const int n = (int)plus_gated_col(blk.n0 + r);
      const plus_ab_t* Bp = plus_gated_part(blk.n0 + r) ? B1 : B;
#else
      const int n = blk.n0 + r;
      const plus_ab_t* Bp = B;
      (void)B1;
#endif
      const int avail = n < blk.N ? min(4, blk.kend - k) : 0;
      if (avail > 0) st.b[i] = load4(Bp + (long long)n * ldb + k, avail, vec_b);
#else
      const int r = c / (PLUS_BN / 4), k = k0 + r;
#if PLUS_GATED   // 4 logical columns inside one 8-block: columns plus_gated_col.. of B0 or B1
      const int n = (int)plus_gated_col(blk.n0 + (c % (PLUS_BN / 4)) * 4);
      const plus_ab_t* Bp = plus_gated_part(blk.n0 + (c % (PLUS_BN / 4)) * 4) ? B1 : B;
#else
      const int n = blk.n0 + (c % (PLUS_BN / 4)) * 4;
      const plus_ab_t* Bp = B;
      (void)B1;
#endif
      const int avail = k < blk.kend ? min(4, blk.N - n) : 0;
      if (avail > 0) st.b[i] = load4(Bp + (long long)k * ldb + n, avail, vec_b);
#endif
    }
  }
}

// Registers -> shared stage: As[k][m] (transposed), Bs[k][n].
PLUS_DEV void deposit(const Stage& st, float* As, float* Bs) {
  const int tid = threadIdx.x;
#pragma unroll
  for (int i = 0; i < A_PER; ++i) {
    const int c = tid + i * PLUS_THREADS;
    if (A_CHUNKS % PLUS_THREADS == 0 || c < A_CHUNKS) {
      const int r = c / KC, kk = (c % KC) * 4;
      As[(kk + 0) * PLUS_GEMM_LDA_S + r] = st.a[i].x;
      As[(kk + 1) * PLUS_GEMM_LDA_S + r] = st.a[i].y;
      As[(kk + 2) * PLUS_GEMM_LDA_S + r] = st.a[i].z;
      As[(kk + 3) * PLUS_GEMM_LDA_S + r] = st.a[i].w;
    }
  }
#pragma unroll
  for (int i = 0; i < B_PER; ++i) {
    const int c = tid + i * PLUS_THREADS;
    if (B_CHUNKS % PLUS_THREADS == 0 || c < B_CHUNKS) {
#if PLUS_B_TRANS
      const int r = c / KC, kk = (c % KC) * 4;
      Bs[(kk + 0) * PLUS_GEMM_LDB_S + r] = st.b[i].x;
      Bs[(kk + 1) * PLUS_GEMM_LDB_S + r] = st.b[i].y;
      Bs[(kk + 2) * PLUS_GEMM_LDB_S + r] = st.b[i].z;
      Bs[(kk + 3) * PLUS_GEMM_LDB_S + r] = st.b[i].w;
#else
      const int r = c / (PLUS_BN / 4), nn = (c % (PLUS_BN / 4)) * 4;
      *(float4*)&Bs[r * PLUS_GEMM_LDB_S + nn] = st.b[i];
#endif
    }
  }
}

PLUS_DEV void gemm_block(const PlusArgs& args, const Block& blk, unsigned char* smem) {
  float* As0 = (float*)smem;
  float* Bs0 = As0 + 2 * PLUS_GEMM_A_STAGE;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wm0 = (warp % PLUS_WARPS_M) * PLUS_WM, wn0 = (warp / PLUS_WARPS_M) * PLUS_WN;
  const int lm = lane >> 3, ln = lane & 7;

  const plus_ab_t* A = plus_a_ptr(args, blk.b);
  const plus_ab_t* B = plus_b_ptr(args, blk.b);
  const long long lda = plus_lda(args), ldb = plus_ldb_of(args, blk.b);
  const plus_ab_t* B1 = b1_ptr(args, blk.b);
  const bool vec_a = vec_ok(A, lda), vec_b = vec_ok(B, ldb) && (!PLUS_GATED || vec_ok(B1, ldb));

  float acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;

  const int ktiles = (blk.kend - blk.kbeg + PLUS_BK - 1) / PLUS_BK;
  Stage st;
  if (ktiles > 0) {
    fetch(args, blk, st, A, lda, vec_a, B, ldb, vec_b, blk.kbeg, B1);
    deposit(st, As0, Bs0);
  }
  __syncthreads();
  for (int kt = 0; kt < ktiles; ++kt) {
    const int cur = kt & 1;
    const bool more = kt + 1 < ktiles;
    if (more) fetch(args, blk, st, A, lda, vec_a, B, ldb, vec_b, blk.kbeg + (kt + 1) * PLUS_BK, B1);  // in flight during the math
    const float* As = As0 + cur * PLUS_GEMM_A_STAGE;
    const float* Bs = Bs0 + cur * PLUS_GEMM_B_STAGE;
#pragma unroll
    for (int kk = 0; kk < PLUS_BK; ++kk) {
      float a[TM], bv[TN];
#pragma unroll
      for (int c = 0; c < TM / 4; ++c) {
        const float4 v = *(const float4*)&As[kk * PLUS_GEMM_LDA_S + wm0 + c * 16 + lm * 4];
        a[c * 4 + 0] = v.x; a[c * 4 + 1] = v.y; a[c * 4 + 2] = v.z; a[c * 4 + 3] = v.w;
      }
#pragma unroll
      for (int c = 0; c < TN / 4; ++c) {
        const float4 v = *(const float4*)&Bs[kk * PLUS_GEMM_LDB_S + wn0 + c * 32 + ln * 4];
        bv[c * 4 + 0] = v.x; bv[c * 4 + 1] = v.y; bv[c * 4 + 2] = v.z; bv[c * 4 + 3] = v.w;
      }
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], bv[j], acc[i][j]);
    }
    // The other stage was last read in iteration kt-1, which the barrier below (of kt-1) closed.
    if (more) deposit(st, As0 + (cur ^ 1) * PLUS_GEMM_A_STAGE, Bs0 + (cur ^ 1) * PLUS_GEMM_B_STAGE);
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int m = blk.m0 + wm0 + (i / 4) * 16 + lm * 4 + (i % 4);
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      const int n = blk.n0 + wn0 + (j / 4) * 32 + ln * 4 + (j % 4);
#if PLUS_GATED
      // lanes ln and ln ^ 2 hold the same columns of the two products (8-blocks 2t and 2t + 1): the
      // first product's holder stores (every lane shuffles, then half of them store)
      const float other = __shfl_xor_sync(0xffffffffu, acc[i][j], 2);
      if (!(ln & 2)) store2(args, blk, m, (int)plus_gated_col(n), acc[i][j], other);
#else
      store(args, blk, m, n, acc[i][j]);
#endif
    }
  }
}

#else
// ============================================================================ tensor cores (TF32, f16/bf16)

constexpr int CE = PLUS_GEMM_CE;              // elements per 16-byte chunk
constexpr int KSTEP = PLUS_MATH == 3 ? 32 : PLUS_MATH == 2 ? 16 : 8; // k of one mma
constexpr int MI = PLUS_WM / 16;              // m16 tiles per warp
constexpr int NI = PLUS_WN / 8;               // n8 tiles per warp
constexpr bool KSWZ = PLUS_GEMM_KSWZ;          // 64-byte k rows: swizzled 16-byte chunks
constexpr int C_LD = PLUS_WN + 8;               // fp32 row stride of a warp's staged C slice (epilogue)
static_assert(PLUS_THREADS / 32 * 16 * C_LD * 4 <= PLUS_SMEM_BYTES, "the staged C slices must fit in the stage ring");

// Position of 16-byte chunk `ch` of row `r` in a k-contiguous tile. Swizzled (64-byte rows, 4 chunks):
// chunk ch ^ ((r / 2) % 4), so the 8 rows one ldmatrix matrix reads and the 2 rows one 8-lane cp.async
// phase writes cover all eight 16-byte bank groups of a 128-byte wavefront.
template <bool SWZ> PLUS_DEV int chunk_pos(int r, int ch) { return SWZ ? (ch ^ ((r >> 1) & 3)) : ch; }

template <typename T, typename U> struct same { static constexpr bool value = false; };
template <typename T> struct same<T, T> { static constexpr bool value = true; };
#if PLUS_MATH == 3
#ifndef PLUS_HAS_B_T
typedef plus_ab_t plus_b_t;
#endif
static_assert(sizeof(plus_ab_t) == 1 && sizeof(plus_b_t) == 1, "PLUS_MATH 3 needs 8-bit plus_ab_t and plus_b_t");
#elif PLUS_MATH == 2
static_assert(same<plus_ab_t, __half>::value || same<plus_ab_t, __nv_bfloat16>::value,
              "PLUS_MATH 2 needs plus_ab_t half or __nv_bfloat16");
#else
static_assert(same<plus_ab_t, float>::value, "PLUS_MATH 1 (TF32) needs plus_ab_t float");
#endif

// --- PTX wrappers: plus_ptx.cuh (shared by every template) ---------------------------------------

PLUS_DEV void cp_async16(void* dst, const void* src, int src_bytes) { plus_cp_async16(plus_smem_u32(dst), src, src_bytes); }
#if PLUS_MATH == 3
PLUS_DEV void mma(int (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  plus_mma_m16n8k32_i8<(plus_ab_t)-1 < 0, (plus_b_t)-1 < 0>(d, a, b[0], b[1]);
}
#elif PLUS_MATH == 2
PLUS_DEV void mma(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  plus_mma_m16n8k16<plus_ab_t>(d, a, b[0], b[1]);
}
#else
PLUS_DEV void mma(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) { plus_mma_m16n8k8_tf32(d, a, b[0], b[1]); }
#endif

// --- global -> shared -----------------------------------------------------------------------------

// Where one 16-byte chunk of a tile comes from: row gr, columns gc.. of g (stride ld), `avail` of its CE
// elements inside [0, row_lim) x [0, col_lim). GMAP 1 (2): the gated interleave on the columns (rows), gc
// (gr) is a logical column of the two products B0 = g, B1 = g1 (a chunk never straddles an 8-block).
template <int GMAP>
PLUS_DEV const plus_ab_t* chunk_src(const plus_ab_t* g, const plus_ab_t* g1, long long ld, int gr, int gc,
                                    int row_lim, int col_lim, int& avail) {
#if PLUS_GATED
  if (GMAP == 1) { g = plus_gated_part(gc) ? g1 : g; gc = (int)plus_gated_col(gc); }
  if (GMAP == 2) { g = plus_gated_part(gr) ? g1 : g; gr = (int)plus_gated_col(gr); }
#else
  (void)g1;
#endif
  const int a = gr < row_lim ? col_lim - gc : 0;
  avail = a < 0 ? 0 : (a > CE ? CE : a);
  return g + (long long)gr * ld + gc;
}

// One R x C tile (C contiguous in both global and shared memory, shared row stride LDS) whose element
// (r, c) is g[(row0 + r)*ld + col0 + c], valid when row0 + r < row_lim and col0 + c < col_lim; invalid
// elements become 0. 16-byte chunks, chunk index = threadIdx.x + i*THREADS, row-major. `vec`: the
// operand allows 16-byte loads (always true with PLUS_ALIGNED=1, else checked at run time). GMAP: see
// chunk_src (B of a gated GEMM, B1 = g1).
template <int R, int C, int LDS, bool SWZ, int GMAP = 0>
PLUS_DEV void load_tile(plus_ab_t* s, const plus_ab_t* g, long long ld, int row0, int row_lim, int col0,
                        int col_lim, bool vec, const plus_ab_t* g1 = nullptr) {
  constexpr int CPR = C / CE;
  constexpr int TOTAL = R * CPR;
  constexpr int ITERS = (TOTAL + PLUS_THREADS - 1) / PLUS_THREADS;
  static_assert(C % CE == 0, "tile width must be whole 16-byte chunks");
  if (vec) {
    // Asynchronous: cp.async zero-fills what lies past the row or the matrix (src-size < 16).
#pragma unroll
    for (int i = 0; i < ITERS; ++i) {
      const int c = threadIdx.x + i * PLUS_THREADS;
      if (TOTAL % PLUS_THREADS == 0 || c < TOTAL) {
        const int r = c / CPR, cc = (c % CPR) * CE;
        int avail;
        const plus_ab_t* at = chunk_src<GMAP>(g, g1, ld, row0 + r, col0 + cc, row_lim, col_lim, avail);
        // src must be a valid address even when nothing is read: fall back to the matrix base.
        const plus_ab_t* src = avail > 0 ? at : g;
        cp_async16(s + r * LDS + chunk_pos<SWZ>(r, cc / CE) * CE, src, avail * (int)sizeof(plus_ab_t));
      }
    }
  } else {
#if !PLUS_ALIGNED
    // Synchronous guarded scalar loads, one chunk at a time (keeps the register budget for the MMA).
#pragma unroll 1
    for (int i = 0; i < ITERS; ++i) {
      const int c = threadIdx.x + i * PLUS_THREADS;
      if (TOTAL % PLUS_THREADS == 0 || c < TOTAL) {
        const int r = c / CPR, cc = (c % CPR) * CE;
        int avail;
        const plus_ab_t* src = chunk_src<GMAP>(g, g1, ld, row0 + r, col0 + cc, row_lim, col_lim, avail);
        union {
          uint4 v;
          plus_ab_t e[CE];
        } u;
        u.v = make_uint4(0u, 0u, 0u, 0u);  // all-zero bits are +0 in half, bf16 and float
#pragma unroll
        for (int j = 0; j < CE; ++j)
          if (j < avail) u.e[j] = src[j];
        *(uint4*)(s + r * LDS + chunk_pos<SWZ>(r, cc / CE) * CE) = u.v;  // one 16-byte shared store
      }
    }
#endif
  }
}

#if PLUS_B_NBITS || PLUS_A_QUANT
// One R x C tile written 16-byte chunk by chunk (CE consecutive columns of one row) at the chunk's (swizzled)
// place, as load_tile's guarded path; `fill(r, c, e)` makes the chunk's elements e[0..CE) at row r, column c.
template <int R, int C, int LDS, bool SWZ, typename Fill>
PLUS_DEV void fill_tile(plus_ab_t* s, Fill fill) {
  constexpr int CPR = C / CE;
  constexpr int TOTAL = R * CPR;
  constexpr int ITERS = (TOTAL + PLUS_THREADS - 1) / PLUS_THREADS;
#pragma unroll 1
  for (int i = 0; i < ITERS; ++i) {
    const int c = threadIdx.x + i * PLUS_THREADS;
    if (TOTAL % PLUS_THREADS == 0 || c < TOTAL) {
      const int r = c / CPR, cc = (c % CPR) * CE;
      union {
        uint4 u;
        plus_ab_t e[CE];
      } w;
      fill(r, cc, w.e);
      *(uint4*)(s + r * LDS + chunk_pos<SWZ>(r, cc / CE) * CE) = w.u;
    }
  }
}
#endif

#if PLUS_B_NBITS
// The B tile [BN][BK] of a quantised B: each 16-byte chunk (CE consecutive k of one n) decoded by plus_b_chunk.
template <int R, int C, int LDS, bool SWZ>
PLUS_DEV void load_tile_nbits(const PlusArgs& args, long long b, plus_ab_t* s, int n0, int n_lim, int k0, int k_lim) {
  fill_tile<R, C, LDS, SWZ>(s, [&](int r, int cc, plus_ab_t (&e)[CE]) {
    float v[CE];
    b_chunk<CE>(args, b, n0 + r, n_lim, k0 + cc, k_lim, v);
#pragma unroll
    for (int j = 0; j < CE; ++j) e[j] = plus_cvt<plus_ab_t>(v[j]);
  });
}
#endif

#if PLUS_A_QUANT
// The A tile [BM][BK] of a quantized float A: each element from plus_a_quant, 0 past the matrix.
template <int R, int C, int LDS, bool SWZ>
PLUS_DEV void load_tile_aquant(const PlusArgs& args, long long b, plus_ab_t* s, int m0, int m_lim, int k0, int k_lim) {
  fill_tile<R, C, LDS, SWZ>(s, [&](int r, int cc, plus_ab_t (&e)[CE]) {
#pragma unroll 1
    for (int j = 0; j < CE; ++j)
      e[j] = m0 + r < m_lim && k0 + cc + j < k_lim ? plus_a_quant(args, b, m0 + r, k0 + cc + j) : (plus_ab_t)0;
  });
}
#endif

PLUS_DEV void gemm_block(const PlusArgs& args, const Block& blk, unsigned char* smem) {
  plus_ab_t* As0 = (plus_ab_t*)smem;
  plus_ab_t* Bs0 = As0 + PLUS_STAGES * PLUS_GEMM_A_STAGE;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wm0 = (warp % PLUS_WARPS_M) * PLUS_WM, wn0 = (warp / PLUS_WARPS_M) * PLUS_WN;

  const plus_ab_t* A = plus_a_ptr(args, blk.b);
  const plus_ab_t* B = plus_b_ptr(args, blk.b);
  const long long lda = plus_lda(args), ldb = plus_ldb_of(args, blk.b);
  const plus_ab_t* B1 = b1_ptr(args, blk.b);
  const bool vec_a = vec_ok(A, lda), vec_b = vec_ok(B, ldb) && (!PLUS_GATED || vec_ok(B1, ldb));

  plus_acc_t acc[MI][NI][4];
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NI; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[i][j][q] = 0;

  const int ktiles = (blk.kend - blk.kbeg + PLUS_BK - 1) / PLUS_BK;

  // Issue the loads of k tile `kt` into pipeline stage `stage` (one commit group per call site).
  auto issue = [&](int kt, int stage) {
    const int k0 = blk.kbeg + kt * PLUS_BK;
#if PLUS_A_QUANT
    load_tile_aquant<PLUS_BM, PLUS_BK, PLUS_GEMM_LDA_S, KSWZ>(args, blk.b, As0 + stage * PLUS_GEMM_A_STAGE, blk.m0,
                                                        blk.M, k0, blk.kend);
    (void)A; (void)lda; (void)vec_a;
#else
    load_tile<PLUS_BM, PLUS_BK, PLUS_GEMM_LDA_S, KSWZ>(As0 + stage * PLUS_GEMM_A_STAGE, A, lda, blk.m0, blk.M, k0,
                                                 blk.kend, vec_a);
#endif
#if PLUS_B_NBITS
    load_tile_nbits<PLUS_BN, PLUS_BK, PLUS_GEMM_LDB_S, KSWZ>(args, blk.b, Bs0 + stage * PLUS_GEMM_B_STAGE, blk.n0,
                                                       blk.N, k0, blk.kend);
    (void)B; (void)ldb; (void)vec_b; (void)B1;
#elif PLUS_B_TRANS
    load_tile<PLUS_BN, PLUS_BK, PLUS_GEMM_LDB_S, KSWZ, PLUS_GATED ? 2 : 0>(Bs0 + stage * PLUS_GEMM_B_STAGE, B, ldb, blk.n0,
                                                 blk.N, k0, blk.kend, vec_b, B1);
#else
    load_tile<PLUS_BK, PLUS_BN, PLUS_GEMM_LDB_S, false, PLUS_GATED ? 1 : 0>(Bs0 + stage * PLUS_GEMM_B_STAGE, B, ldb, k0,
                                                 blk.kend, blk.n0, blk.N, vec_b, B1);
#endif
  };

  // Fill the first STAGES-1 stages.
#pragma unroll
  for (int s = 0; s < PLUS_STAGES - 1; ++s) {
    if (s < ktiles) issue(s, s);
    plus_cp_async_commit();
  }

  int stage = 0;  // stage holding tile kt
  for (int kt = 0; kt < ktiles; ++kt) {
    // Groups committed so far: STAGES-1+kt; allowing STAGES-2 pending means tile kt has landed.
    plus_cp_async_wait<PLUS_STAGES - 2>();
    __syncthreads();  // everyone's copies visible; everyone done with tile kt-1's stage
    const plus_ab_t* As = As0 + stage * PLUS_GEMM_A_STAGE;
    const plus_ab_t* Bs = Bs0 + stage * PLUS_GEMM_B_STAGE;

#ifdef PLUS_HAS_PROLOGUE_A
    {  // Apply the A prologue in place to the in-range part of the landed tile.
      plus_ab_t* Aw = As0 + stage * PLUS_GEMM_A_STAGE;
      const int k0 = blk.kbeg + kt * PLUS_BK;
      for (int e = threadIdx.x; e < PLUS_BM * PLUS_BK; e += PLUS_THREADS) {
        const int r = e / PLUS_BK, c = e % PLUS_BK;
        const int m = blk.m0 + r, k = k0 + c;
        if (m < blk.M && k < blk.kend) {
          plus_ab_t* p = Aw + r * PLUS_GEMM_LDA_S + chunk_pos<KSWZ>(r, c / CE) * CE + c % CE;
          *p = plus_cvt<plus_ab_t>(plus_prologue_a(args, blk.b, m, k, plus_f(*p)));
        }
      }
      __syncthreads();
    }
#endif

    // Refill the stage read in iteration kt-1 with tile kt+STAGES-1.
    {
      const int nk = kt + PLUS_STAGES - 1;
      int ns = stage + PLUS_STAGES - 1;
      if (ns >= PLUS_STAGES) ns -= PLUS_STAGES;
      if (nk < ktiles) issue(nk, ns);
      plus_cp_async_commit();
    }

#pragma unroll
    for (int kk = 0; kk < PLUS_BK; kk += KSTEP) {
      unsigned af[MI][4], bf[NI][2];
      // A fragments: x4 = rows 0-7 / 8-15 at k+0, rows 0-7 / 8-15 at k+16 bytes.
#pragma unroll
      for (int i = 0; i < MI; ++i) {
        const int r = wm0 + i * 16 + (lane & 15);
        plus_ldmatrix_x4(af[i], As + r * PLUS_GEMM_LDA_S + chunk_pos<KSWZ>(r, kk / CE + (lane >> 4)) * CE);
      }
      // B fragments, two n8 tiles per x4: (n 0-7, k lo), (n 0-7, k hi), (n 8-15, k lo), (n 8-15, k hi).
#if PLUS_B_TRANS
#pragma unroll
      for (int j = 0; j < NI / 2; ++j) {
        unsigned r[4];
        const int n = wn0 + j * 16 + (lane >> 4) * 8 + (lane & 7);
        plus_ldmatrix_x4(r, Bs + n * PLUS_GEMM_LDB_S + chunk_pos<KSWZ>(n, kk / CE + ((lane >> 3) & 1)) * CE);
        bf[2 * j][0] = r[0]; bf[2 * j][1] = r[1]; bf[2 * j + 1][0] = r[2]; bf[2 * j + 1][1] = r[3];
      }
#elif PLUS_MATH == 3
      // 8-bit [k][n] tile: ldmatrix.trans moves 16-bit elements, so each register of the fragment (b_i at
      // k = 4t + i + 16 r, n = g) is gathered byte by byte from the tile
      {
        const int g = lane >> 2, t = lane & 3;
        const unsigned char* bs = (const unsigned char*)Bs;
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const unsigned char* p = bs + (kk + 4 * t + 16 * r) * PLUS_GEMM_LDB_S + wn0 + j * 8 + g;
            bf[j][r] = (unsigned)p[0] | ((unsigned)p[PLUS_GEMM_LDB_S] << 8) | ((unsigned)p[2 * PLUS_GEMM_LDB_S] << 16) |
                       ((unsigned)p[3 * PLUS_GEMM_LDB_S] << 24);
          }
      }
#elif PLUS_MATH == 2
#pragma unroll
      for (int j = 0; j < NI / 2; ++j) {  // [k][n] tile: .trans turns k-rows into the col-major fragment
        unsigned r[4];
        plus_ldmatrix_x4_trans(r, Bs + (kk + ((lane >> 3) & 1) * 8 + (lane & 7)) * PLUS_GEMM_LDB_S + wn0 + j * 16 +
                                 (lane >> 4) * 8);
        bf[2 * j][0] = r[0]; bf[2 * j][1] = r[1]; bf[2 * j + 1][0] = r[2]; bf[2 * j + 1][1] = r[3];
      }
#else
      // TF32 with a [k][n] tile: 32-bit elements cannot go through ldmatrix.trans; read them directly
      // (b0 = B[k=t][n=g], b1 = B[k=t+4][n=g]; row stride = 8 mod 32 words keeps the warp conflict-free).
      {
        const int g = lane >> 2, t = lane & 3;
#pragma unroll
        for (int j = 0; j < NI; ++j) {
          const plus_ab_t* p = Bs + (kk + t) * PLUS_GEMM_LDB_S + wn0 + j * 8 + g;
          bf[j][0] = __float_as_uint(p[0]);
          bf[j][1] = __float_as_uint(p[4 * PLUS_GEMM_LDB_S]);
        }
      }
#endif
#if PLUS_MATH == 1
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int q = 0; q < 4; ++q) af[i][q] = plus_to_tf32(af[i][q]);
#pragma unroll
      for (int j = 0; j < NI; ++j) {
        bf[j][0] = plus_to_tf32(bf[j][0]);
        bf[j][1] = plus_to_tf32(bf[j][1]);
      }
#endif
#pragma unroll
      for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j) mma(acc[i][j], af[i], bf[j]);
    }
    if (++stage == PLUS_STAGES) stage = 0;
  }
  plus_cp_async_wait<0>();  // nothing may be in flight into shared memory when the block exits
  __syncthreads();          // every warp is done with the stage ring: it holds the staged C slices now

  // Epilogue, staged per warp through shared memory one m16 slice at a time. Accumulator fragment: d0, d1
  // at (row g, cols 2t, 2t+1), d2, d3 at (row g+8, same cols). The warp writes its 16 x WN fp32 slice
  // ([16][WN + 8]: the 4 rows of a 16-lane float2 phase fall in distinct 32-byte bank groups), then stores
  // it row by row with lanes along n: each store request covers 32 consecutive columns (whole sectors),
  // whatever the epilogue hook does per element.
  plus_acc_t* sc = reinterpret_cast<plus_acc_t*>(smem) + warp * 16 * C_LD;
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int i = 0; i < MI; ++i) {
#pragma unroll
    for (int j = 0; j < NI; ++j) {
#if PLUS_MATH == 3
      *reinterpret_cast<int2*>(sc + g * C_LD + j * 8 + 2 * t) = make_int2(acc[i][j][0], acc[i][j][1]);
      *reinterpret_cast<int2*>(sc + (g + 8) * C_LD + j * 8 + 2 * t) = make_int2(acc[i][j][2], acc[i][j][3]);
#else
      *reinterpret_cast<float2*>(sc + g * C_LD + j * 8 + 2 * t) = make_float2(acc[i][j][0], acc[i][j][1]);
      *reinterpret_cast<float2*>(sc + (g + 8) * C_LD + j * 8 + 2 * t) = make_float2(acc[i][j][2], acc[i][j][3]);
#endif
    }
    __syncwarp();
    const int m0 = blk.m0 + wm0 + i * 16;
#if PLUS_GATED
    // gated: the warp's WN logical columns hold WN/2 elements of both products, 8 columns apart
#pragma unroll 1
    for (int r = 0; r < 16; ++r)
#pragma unroll
      for (int c = lane; c < PLUS_WN / 2; c += 32) {
        const int c0 = ((c >> 3) << 4) | (c & 7);
        store2(args, blk, m0 + r, (blk.n0 + wn0) / 2 + c, sc[r * C_LD + c0], sc[r * C_LD + c0 + 8]);
      }
#else
#pragma unroll 1
    for (int r = 0; r < 16; ++r)
#pragma unroll
      for (int c = lane; c < PLUS_WN; c += 32) store(args, blk, m0 + r, blk.n0 + wn0 + c, sc[r * C_LD + c]);
#endif
    __syncwarp();
  }
}
#endif  // PLUS_MATH

}  // namespace plusg

// ----------------------------------------------------------------------------------- entry points

extern "C" __global__ void __launch_bounds__(PLUS_THREADS) plus_gemm(const PlusArgs args) {
  extern __shared__ __align__(16) unsigned char plus_gemm_smem[];
  const PlusGemmShape sh = plus_gemm_shape(args);
  plusg::Block blk;
  const int batch = (int)sh.batch;  // batch * SPLITK = gridDim.z <= 65535: 32-bit math (no 64-bit division call)
  blk.batch = batch;
  blk.b = (int)blockIdx.z % batch;
  blk.split = (int)blockIdx.z / batch;
  blk.M = (int)sh.M;
  blk.N = blk.NP = (int)sh.N;
  blk.m0 = blockIdx.y * PLUS_BM;
  blk.n0 = blockIdx.x * PLUS_BN;
#ifdef PLUS_HAS_GROUP_N
  static_assert(!PLUS_GATED, "gemm.cuh: a gated GEMM is not a ragged group");
  blk.N = (int)plus_n_of(args, blk.b, sh.N);   // this member's N (a ragged group): the whole CTA may be past it
  if (blk.n0 >= blk.N) return;
#endif
  const int K = (int)sh.K;
#if PLUS_SPLITK > 1
  const int per = (int)plus_cdiv(plus_cdiv(K, PLUS_SPLITK), PLUS_BK) * PLUS_BK;
  blk.kbeg = min(K, blk.split * per);
  blk.kend = min(K, blk.kbeg + per);
#else
  blk.kbeg = 0;
  blk.kend = K;
#endif
  plusg::gemm_block(args, blk, plus_gemm_smem);
#ifdef PLUS_HAS_ROW_FINISH
  static_assert(PLUS_SPLITK == 1 && !PLUS_GATED, "gemm.cuh: the row finish needs whole sums of one product");
  // one launch of GEMM + row program: the last of the gridDim.x column tiles of rows [m0, m0 + BM) finishes
  // them (gemm_hooks.cuh)
  plus_finish_rows(args, blockIdx.y, gridDim.x, blk.m0, min((long long)blk.M, (long long)blk.m0 + PLUS_BM));
#endif
}

#if PLUS_SPLITK > 1
namespace plusg {
// q = x / d and r = x % d for x >= 0, d > 0 without a 64-bit integer division (a subroutine call whose
// register saves ptxas reports as spills): a double-precision estimate, corrected exactly.
PLUS_DEV long long divmod(long long x, long long d, double inv_d, long long& r) {
  long long q = (long long)((double)x * inv_d);
  r = x - q * d;
  while (r < 0) { --q; r += d; }
  while (r >= d) { ++q; r -= d; }
  return q;
}
}  // namespace plusg

// Sums the SPLITK fp32 partials of every (b, m, n) and hands the total to the epilogue (gated: both
// products' totals, partial planes [SPLITK][2][batch][M][N]).
extern "C" __global__ void __launch_bounds__(256) plus_splitk_reduce(const PlusArgs args) {
  const PlusGemmShape sh = plus_gemm_shape(args);
  const long long total = sh.batch * sh.M * sh.N;
  const double inv_n = __drcp_rn((double)sh.N), inv_m = __drcp_rn((double)sh.M);
  const float* part = (const float*)args.scratch[0];
  for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < total; i += (long long)gridDim.x * 256) {
#if PLUS_GATED
    float s = 0.f, s1 = 0.f;
#pragma unroll
    for (int p = 0; p < PLUS_SPLITK; ++p) {
      s += part[(2 * p) * total + i];
      s1 += part[(2 * p + 1) * total + i];
    }
#else
    float s = 0.f;
#pragma unroll
    for (int p = 0; p < PLUS_SPLITK; ++p) s += part[p * total + i];
#endif
    long long n, m;
    const long long bm = plusg::divmod(i, sh.N, inv_n, n);
    const long long b = plusg::divmod(bm, sh.M, inv_m, m);
#ifdef PLUS_HAS_GROUP_N
    if (n >= plus_n_of(args, b, sh.N)) continue;   // past this member's N: never written
#endif
#if PLUS_GATED
    plus_epilogue_gated(args, b, m, n, s, s1);
#else
    plus_epilogue(args, b, m, n, s);
#endif
  }
}
#endif
