// gemm_sm90a.cuh: Hopper (sm_90a) GEMM template built on wgmma.mma_async (see kernels/CONTRACT.md §2.1).
//
//   C[b, m, n] = sum_k A[b, m, k] * B[b, k, n]      A, B: half or __nv_bfloat16 (plus_ab_t), fp32 accumulate
//
// Schedule
// --------
// * One CTA computes a BM x BN tile of C.  It holds (BM/WM) x (BN/WN) consumer warpgroups of 128 threads;
//   a warpgroup owns a WM x WN sub-tile (WM = 64 or 128, i.e. one or two m64 wgmma rows; WN = 64..256 in
//   steps of 64, the N of one wgmma.m64nNk16).  Accumulators live in registers: (WM/64) * WN/2 floats/thread.
// * Global -> shared memory: every thread issues 16-byte `cp.async` copies (zero-filling past the edges of
//   the problem) into a ring of PLUS_STAGES stage buffers, whenever both operands are 16-byte aligned with
//   row strides of 8 elements: proved by the codegen (PLUS_ALIGNED=1) or checked once per CTA at run time
//   (PLUS_ALIGNED=0, which keeps a guarded scalar fallback for truly unaligned operands).  We do not use TMA because that needs a
//   CUtensorMap built by the host, and the PlusEP launcher only passes a PlusArgs struct.
// * Shared memory holds every operand in the wgmma "canonical" layout with the 128-byte swizzle, so the
//   tensor cores read it straight from shared memory (no ldmatrix, no registers for A/B):
//     - A tile   [BM rows (m)][64 k]  : K-major; row r is 128 bytes; its 16-byte chunk c sits at chunk c^(r%8)
//     - B, TRANS=1 ([N,K] in memory): K-major exactly like A, rows are n
//     - B, TRANS=0 ([K,N] in memory): MN-major; BN/64 column blocks of [64 k rows][64 n] (8 KiB each); inside
//       a block, row k is 128 bytes and chunk c (8 n values) sits at chunk c^(k%8)
//   An 8-row x 128-byte "swizzle atom" is 1024 bytes, and every tile starts on a 1024-byte boundary, so the
//   descriptors' base-offset field stays 0.
// * Pipeline, per k-tile i (stage s = i % STAGES):
//       wait for my cp.async group of tile i; fence.proxy.async; __syncthreads
//       [optional A prologue hook rewrites stage s in place; fence; __syncthreads]
//       wgmma.fence; 4 (k16) x WM/64 wgmma.mma_async; wgmma.commit_group; wgmma.wait_group 1
//       cp.async tile i+STAGES-2 into stage (i-2) % STAGES; cp.async.commit_group
//   wait_group 1 keeps one wgmma group (tile i) in flight behind the loads.  The stage being refilled was
//   read by the wgmma group of tile i-2, which every warpgroup retired (wait_group 1 in iteration i-1)
//   before it reached this iteration's __syncthreads.  Hence STAGES-2 tiles are in flight in the copy
//   engine while the tensor cores work, and STAGES >= 3.
// * Epilogue: after the last wgmma group retires, the fp32 accumulators go to shared memory (the stage
//   ring, reused as a [BM][BN + 8] fp32 tile), and each warp then handles 32 consecutive columns of one row:
//   plus_epilogue (or the default store, or the split-K partial store to scratch[0] when PLUS_SPLITK > 1;
//   plus_splitk_reduce then sums them and calls the epilogue) writes whole sectors whatever it does per
//   element.  With PLUS_HAS_ROW_TILE the generated plus_row_tile hook takes over from the staged tile instead:
//   a row program (LayerNorm/RMSNorm) over the CTA's column slice, rows reduced across a thread-block
//   cluster of PLUS_CLUSTER_X CTAs (kernels/CONTRACT.md §2.1).
//
// * Gated products (PLUS_GATED 1, CONTRACT.md §2.1): B's column (B_TRANS 1: row) chunks of 8 alternate between
//   B0 = plus_b_ptr and B1 = plus_b1_ptr (gemm_hooks.cuh plus_gated_*), so both products of an element sit in
//   one CTA's staged C tile 8 columns apart; the epilogue walks BM x BN/2 elements and calls
//   plus_epilogue_gated with both sums.
//
// This file only compiles for sm_90a (wgmma is an "arch-specific" feature); the route chooser uses
// gemm.cuh (mma.sync) for every other architecture, plain sm_90 included.
#pragma once

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "gemm_sm90a.cuh needs wgmma: compile it with --gpu-architecture=sm_90a (use gemm.cuh for sm_90 and others)"
#endif

// ------------------------------------------------------------------------------------------------------
// Variant parameters (the codegen defines them; defaults = the "wg128x256" config): those both sm_90a
// templates read (tile, stages, splits, math, B layout, epilogue order, gated) in gemm_sm90a_params.cuh
// ------------------------------------------------------------------------------------------------------
#include "gemm_sm90a_params.cuh"
#if PLUS_MATH != 2
#error "gemm_sm90a.cuh: f16/bf16 only (PLUS_MATH 2); 8-bit integers take gemm_sm90a_ws.cuh"
#endif

#ifndef PLUS_WM
#define PLUS_WM 64
#endif
#ifndef PLUS_WN
#define PLUS_WN PLUS_BN
#endif
#ifndef PLUS_SPLITK_CLUSTER
#define PLUS_SPLITK_CLUSTER 1
#endif
#ifndef PLUS_ALIGNED
#define PLUS_ALIGNED 1
#endif

#if PLUS_GATED
static_assert(!PLUS_EPI_M_FASTEST, "gemm_sm90a: the gated epilogue walks the C tile with n fastest");
#ifdef PLUS_HAS_ROW_TILE
#error "gemm_sm90a: PLUS_GATED has no row tile"
#endif
#endif

// cp.async writes shared memory through the generic proxy and wgmma reads it through the async proxy;
// the PTX memory model asks for fence.proxy.async between the two (ptxas emits MEMBAR.CTA +
// FENCE.VIEW.ASYNC.S).  0 drops it from the main loop, to measure its cost on a GPU;
// the spec-conforming default is 1.
#ifndef PLUS_WG_PROXY_FENCE
#define PLUS_WG_PROXY_FENCE 1
#endif


// A row program over the CTA's column slice of the staged C tile (PLUS_HAS_ROW_TILE, generated by kernels/codegen/row.py
// in tile mode): the CTAs of one row of tiles form a thread-block cluster of PLUS_CLUSTER_X = cdiv(N, BN) CTAs
// (declared with __cluster_dims__, so a plain cuLaunchKernel launches it) and reduce whole rows through
// distributed shared memory.  The hook replaces the epilogue loop: it stores every output itself.
//
// Split-K inside a thread-block cluster (PLUS_SPLITK_CLUSTER = S in 2, 4, 8): the S CTAs that split the K range
// of one C tile form the cluster's z dimension (grid.z = batch * S, blockIdx.z = b * S + split), each stages
// its fp32 partial tile in its own shared memory, and after a cluster barrier CTA `split` sums rows
// [split * BM/S, (split + 1) * BM/S) of all S partials through distributed shared memory, in split order (the
// same bits whichever CTA sums), then runs the epilogue (or the row tile) on those rows only: one launch, no
// scratch.  With the row tile the cluster is (PLUS_CLUSTER_X, 1, S): rank = x + split * PLUS_CLUSTER_X, and
// the row reductions combine the PLUS_CLUSTER_X ranks of one split (plus_cluster.cuh).
#ifdef PLUS_HAS_ROW_TILE
#ifndef PLUS_CLUSTER_X
#error "gemm_sm90a.cuh: PLUS_HAS_ROW_TILE needs PLUS_CLUSTER_X (CTAs per cluster = cdiv(N, BN))"
#endif
static_assert(PLUS_SPLITK == 1 && !PLUS_EPI_M_FASTEST, "gemm_sm90a: the row tile needs the whole sum, n fastest");
static_assert(PLUS_CLUSTER_X >= 1 && PLUS_CLUSTER_X * PLUS_SPLITK_CLUSTER <= 8,
              "gemm_sm90a: portable clusters have at most 8 CTAs");
#define PLUS_WG_CLUSTER_X PLUS_CLUSTER_X
#else
#define PLUS_WG_CLUSTER_X 1
#endif
#ifdef PLUS_HAS_ROW_FINISH
static_assert(PLUS_SPLITK == 1 && !PLUS_GATED, "gemm_sm90a: the row finish needs whole sums of one product");
#ifdef PLUS_HAS_ROW_TILE
#error "gemm_sm90a.cuh: PLUS_HAS_ROW_FINISH and PLUS_HAS_ROW_TILE are two plans for the same rows"
#endif
#endif
#if PLUS_SPLITK_CLUSTER > 1
static_assert(PLUS_SPLITK == 1, "gemm_sm90a: split-K through scratch (PLUS_SPLITK) or in the cluster, not both");
static_assert(PLUS_SPLITK_CLUSTER == 2 || PLUS_SPLITK_CLUSTER == 4 || PLUS_SPLITK_CLUSTER == 8,
              "gemm_sm90a: PLUS_SPLITK_CLUSTER is 2, 4 or 8");
static_assert(PLUS_BM % (8 * PLUS_SPLITK_CLUSTER) == 0, "gemm_sm90a: each split reduces whole 8-row groups");
static_assert(PLUS_SPLITK_CLUSTER <= 8, "gemm_sm90a: portable clusters have at most 8 CTAs");
// the gated epilogue walks the whole tile (both products of a column pair): its split-K goes through scratch
static_assert(!PLUS_GATED, "gemm_sm90a: a gated GEMM splits K through scratch (PLUS_SPLITK), not in a cluster");
#endif
#if defined(PLUS_HAS_ROW_TILE) || PLUS_SPLITK_CLUSTER > 1
#define PLUS_WG_CLUSTER __cluster_dims__(PLUS_WG_CLUSTER_X, 1, PLUS_SPLITK_CLUSTER)
#else
#define PLUS_WG_CLUSTER
#endif

// 128 threads per warpgroup; one CTA = (BM/WM) x (BN/WN) warpgroups.
#define PLUS_THREADS (((PLUS_BM) / (PLUS_WM)) * ((PLUS_BN) / (PLUS_WN)) * 128)
// Stage ring (A tile then B tile per stage, 2-byte elements) + 1 KiB to realign the dynamic
// shared-memory base to the 1024-byte swizzle-atom boundary.
#define PLUS_SMEM_BYTES ((PLUS_STAGES) * ((PLUS_BM) + (PLUS_BN)) * (PLUS_BK) * 2 + 1024)

static_assert(PLUS_BK == 64, "gemm_sm90a: BK must be 64 (one 128-byte swizzle row of 16-bit elements)");
static_assert(PLUS_WM == 64 || PLUS_WM == 128, "gemm_sm90a: WM (rows per warpgroup) must be 64 or 128");
static_assert(PLUS_BM % PLUS_WM == 0, "gemm_sm90a: BM must be a multiple of WM");
static_assert(PLUS_WN % 64 == 0 && PLUS_WN >= 64 && PLUS_WN <= 256, "gemm_sm90a: WN must be 64, 128, 192 or 256");
static_assert(PLUS_BN % PLUS_WN == 0, "gemm_sm90a: BN must be a multiple of WN");
static_assert(PLUS_STAGES >= 3, "gemm_sm90a: the pipeline needs at least 3 stages");
static_assert(PLUS_SPLITK >= 1, "gemm_sm90a: PLUS_SPLITK >= 1");
static_assert(PLUS_THREADS <= 384, "gemm_sm90a: at most 3 warpgroups per CTA");
static_assert((PLUS_WM / 64) * (PLUS_WN / 2) <= 128, "gemm_sm90a: at most 128 fp32 accumulators per thread");
static_assert(PLUS_SMEM_BYTES <= 232448, "gemm_sm90a: the stage ring exceeds 227 KiB of shared memory");
static_assert(sizeof(plus_ab_t) == 2, "gemm_sm90a: plus_ab_t must be half or __nv_bfloat16");

// ------------------------------------------------------------------------------------------------------
// Hooks and their defaults (a plain contiguous problem: A = in[0] [batch,M,K], B = in[1] [batch,K,N] or
// [batch,N,K], C = out[0] [batch,M,N]; args.v[0..3] = batch, M, N, K)
// ------------------------------------------------------------------------------------------------------
#include "gemm_hooks.cuh"

#include "plus_ptx.cuh"

// Raw bits of a 16-bit element and back.
template <typename T> PLUS_DEV unsigned short plus_wg_bits(T x) { return *reinterpret_cast<const unsigned short*>(&x); }
template <typename T> PLUS_DEV T plus_wg_from_bits(unsigned short b) { return *reinterpret_cast<const T*>(&b); }

// ------------------------------------------------------------------------------------------------------
// Tile loads
// ------------------------------------------------------------------------------------------------------
namespace plus_wg {

constexpr int BM = PLUS_BM, BN = PLUS_BN, BK = PLUS_BK, WM = PLUS_WM, WN = PLUS_WN;
constexpr int STAGES = PLUS_STAGES, THREADS = PLUS_THREADS;
constexpr int MS = WM / 64;                    // m64 wgmma slices per warpgroup
constexpr int WGS_N = BN / WN;                 // warpgroups along N
constexpr int A_BYTES = BM * BK * 2;           // one stage of A
constexpr int B_BYTES = BN * BK * 2;           // one stage of B
constexpr int STAGE_BYTES = A_BYTES + B_BYTES; // multiple of 1024: BM, BN multiples of 64
constexpr int MN_BLOCK_BYTES = BK * 128;       // MN-major B: one [64 k][64 n] column block
// Staged C tile (epilogue), fp32: [BM][BN + 8] (n fastest), or [BN][BM + 4] with PLUS_EPI_M_FASTEST (the
// codegen sets it when every output is contiguous along m, e.g. a stored K^T).  The pads make the fragment
// writes and the row/column reads conflict-free.
// PLUS_EPI_M_FASTEST 2: the order is chosen per batch index at run time by the generated hook
// `bool plus_epi_m_fastest(const PlusArgs&, long long b)` (a horizontal GEMM group whose members disagree).
constexpr bool M_FASTEST = PLUS_EPI_M_FASTEST == 1;
constexpr int C_LD = M_FASTEST ? BM + 4 : BN + 8;
static_assert((M_FASTEST ? BN : BM) * C_LD * 4 <= STAGES * STAGE_BYTES,
              "gemm_sm90a: the staged C tile must fit in the stage ring");
static_assert(PLUS_EPI_M_FASTEST != 2 || BN * (BM + 4) * 4 <= STAGES * STAGE_BYTES,
              "gemm_sm90a: the staged C tile must fit in the stage ring");
PLUS_DEV plus_u32 c_offset(bool mf, int r, int c) { return (plus_u32)(mf ? c * (BM + 4) + r : r * (BN + 8) + c) * 4u; }

PLUS_DEV void plus_st_shared_f2(plus_u32 dst, float x, float y) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(dst), "f"(x), "f"(y) : "memory");
}
PLUS_DEV void plus_st_shared_f(plus_u32 dst, float x) {
  asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(dst), "f"(x) : "memory");
}
PLUS_DEV float plus_ld_shared_f(plus_u32 src) {
  float x;
  asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(x) : "r"(src) : "memory");
  return x;
}

// Whether an operand allows 16-byte copies: base 16-byte aligned and row stride a multiple of 8 elements.
// With PLUS_ALIGNED=1 the codegen has proved it (kernels/gemm/routes.py); otherwise it is checked once per CTA
// (a uniform branch), so aligned data takes the cp.async path whatever the codegen could prove.
PLUS_DEV bool vec_ok(const plus_ab_t* p, long long ld) {
#if PLUS_ALIGNED
  (void)p; (void)ld;
  return true;
#else
  return ((reinterpret_cast<unsigned long long>(p) & 15ull) | ((unsigned long long)ld & 7ull)) == 0;
#endif
}

// Copy 8 elements (16 bytes) of a row to shared memory: `src` points at the first, `valid` (0..8) of them
// lie inside the problem, the rest become 0.  `fallback` is any readable address (used when valid == 0).
PLUS_DEV void copy_chunk_async(plus_u32 dst, const plus_ab_t* src, int valid, const plus_ab_t* fallback) {
  plus_cp_async16(dst, valid > 0 ? (const void*)src : (const void*)fallback, valid * 2);
}
#if !PLUS_ALIGNED
// Rows are not 16-byte aligned: guarded scalar loads, one 16-byte shared store.
PLUS_DEV void copy_chunk_scalar(plus_u32 dst, const plus_ab_t* src, int valid) {
  const unsigned short* p = reinterpret_cast<const unsigned short*>(src);
  plus_u32 w[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const plus_u32 lo = (2 * e < valid) ? (plus_u32)p[2 * e] : 0u;
    const plus_u32 hi = (2 * e + 1 < valid) ? (plus_u32)p[2 * e + 1] : 0u;
    w[e] = lo | (hi << 16);
  }
  plus_st_shared16(dst, w[0], w[1], w[2], w[3]);
}
#endif

PLUS_DEV int clamp8(long long n) { return n <= 0 ? 0 : (n >= 8 ? 8 : (int)n); }

// Copies of one operand tile, one k-tile after the other.  Everything that does not change along k
// (this thread's rows/columns, their bounds checks, its shared-memory offsets) is computed once by init();
// load() then costs a few instructions per 16-byte chunk.  A thread always copies the same 16-byte
// column chunk `c` of the tile, on rows r0, r0 + STEP, r0 + 2*STEP, ...  `vec` (see vec_ok) selects
// cp.async (unrolled; zero-fill at the edges) or the guarded scalar fallback (one chunk at a time, to stay
// clear of the accumulators' register budget).

// K-major tile [ROWS][64 k] (A: rows are m; B with TRANS=1: rows are n) from a matrix with row stride ld
// and k contiguous.  Rows >= nrows and k >= K are zero-filled.
template <int ROWS>
struct KMajorLoader {
  static constexpr int STEP = THREADS / 8;                       // rows between a thread's chunks
  static constexpr int ITERS = (ROWS * 8 + THREADS - 1) / THREADS;
  static_assert(STEP % 8 == 0, "the swizzle phase (row % 8) must not change between a thread's chunks");
  const plus_ab_t* base;  // start of the matrix (readable fallback address for empty chunks)
  const plus_ab_t* src;   // this thread's first chunk in the current k-tile
  long long step;         // STEP rows, in elements
  long long kc;           // k of this thread's chunk within the tile (c * 8)
  plus_u32 dst;           // byte offset of the first chunk in the tile
  int r0;                 // first row (tile-relative)
  unsigned rows_ok;       // bit it: row r0 + it*STEP is inside the problem
  bool all_rows;          // every row of mine is inside the problem

  // g1 (B with TRANS=1 of a gated GEMM, PLUS_GATED): tile row r is logical row row0 + r, i.e. row
  // plus_gated_col of B0 (g) or B1 (g1); STEP is a multiple of 16, so a thread's rows stay in one product,
  // STEP/2 source rows apart. The A loader passes no g1.
  PLUS_DEV void init(const plus_ab_t* g, long long ld, long long row0, long long nrows, long long kt0, int tid,
                     const plus_ab_t* g1 = nullptr) {
    const int c = tid & 7;
    r0 = tid >> 3;
    kc = c * 8;
    base = g;
    long long sr = row0 + r0, rstep = STEP;       // this thread's first source row, rows between its chunks
    const plus_ab_t* m = g;
#if PLUS_GATED
    static_assert(STEP % 16 == 0, "gated rows: a thread's rows must stay in one product");
    if (g1 != nullptr) {
      m = plus_gated_part(sr) ? g1 : g;
      sr = plus_gated_col(sr);
      rstep = STEP / 2;
    }
#endif
    step = rstep * ld;
    src = m + sr * ld + kt0 * BK + kc;
    dst = r0 * 128 + ((c ^ (r0 & 7)) << 4);
    rows_ok = 0;
#pragma unroll
    for (int it = 0; it < ITERS; ++it)
      if (sr + it * rstep < nrows) rows_ok |= 1u << it;
    all_rows = rows_ok == (1u << ITERS) - 1;
  }
  // Copy the k-tile starting at k0 into the tile at shared address s_tile, then step to the next k-tile.
  PLUS_DEV void load(plus_u32 s_tile, long long k0, long long K, bool vec) {
    const int kv = clamp8(K - k0 - kc);  // valid elements of my chunk on every row
    if (vec) {
      if (all_rows && k0 + BK <= K) {  // interior: no bounds checks
#pragma unroll
        for (int it = 0; it < ITERS; ++it)
          if ((ROWS * 8) % THREADS == 0 || r0 + it * STEP < ROWS)
            plus_cp_async16(s_tile + dst + it * STEP * 128, src + it * step);
      } else {
#pragma unroll
        for (int it = 0; it < ITERS; ++it)
          if ((ROWS * 8) % THREADS == 0 || r0 + it * STEP < ROWS)
            copy_chunk_async(s_tile + dst + it * STEP * 128, src + it * step, (rows_ok >> it) & 1 ? kv : 0, base);
      }
    } else {
#if !PLUS_ALIGNED
#pragma unroll 1
      for (int it = 0; it < ITERS; ++it)
        if ((ROWS * 8) % THREADS == 0 || r0 + it * STEP < ROWS)
          copy_chunk_scalar(s_tile + dst + it * STEP * 128, src + it * step, (rows_ok >> it) & 1 ? kv : 0);
#endif
    }
    src += BK;
  }
};

// MN-major B tile (TRANS=0): [64 k][BN n] from a matrix with row stride ld and n contiguous.  Column
// block cb = n/64 occupies [cb*8 KiB, +8 KiB); inside it row k is 128 bytes with chunk cc at cc ^ (k%8).
struct MNMajorLoader {
  static constexpr int CPR = BN / 8;     // chunks per k row
  static constexpr int STEP = THREADS / CPR;  // k rows between a thread's chunks
  static constexpr int ITERS = (BK * CPR + THREADS - 1) / THREADS;
  static_assert(THREADS % CPR == 0, "a thread must keep its column chunk");
  const plus_ab_t* base;
  const plus_ab_t* src;   // this thread's first chunk in the current k-tile
  long long step;         // STEP k rows, in elements
  long long ld;
  int kr0;                // first k row (tile-relative)
  int nv;                 // valid n elements of my chunk (same on every row)
  int cb, cc;             // column block and chunk within it

  // g1 (B1 of a gated GEMM, PLUS_GATED): my chunk (logical columns n0 + 8c..) is then 8 columns of B0 (g, c even)
  // or B1 (g1, c odd).
  PLUS_DEV void init(const plus_ab_t* g, long long ld_, long long n0, long long N, long long kt0, int tid,
                     const plus_ab_t* g1 = nullptr) {
    const int c = tid % CPR;
    kr0 = tid / CPR;
    cb = c >> 3;
    cc = c & 7;
    ld = ld_;
    base = g;
    step = (long long)STEP * ld;
    long long col = n0 + c * 8;
    const plus_ab_t* m = g;
#if PLUS_GATED
    m = plus_gated_part(col) ? g1 : g;
    col = plus_gated_col(col);
#else
    (void)g1;
#endif
    nv = clamp8(N - col);
    src = m + (kt0 * BK + kr0) * ld + col;
  }
  PLUS_DEV plus_u32 offset(int kr) const { return cb * MN_BLOCK_BYTES + kr * 128 + ((cc ^ (kr & 7)) << 4); }
  PLUS_DEV void load(plus_u32 s_tile, long long k0, long long K, bool vec) {
    if (vec) {
      if (nv == 8 && k0 + BK <= K) {  // interior: no bounds checks
#pragma unroll
        for (int it = 0; it < ITERS; ++it) {
          const int kr = kr0 + it * STEP;
          if ((BK * CPR) % THREADS == 0 || kr < BK) plus_cp_async16(s_tile + offset(kr), src + it * step);
        }
      } else {
#pragma unroll
        for (int it = 0; it < ITERS; ++it) {
          const int kr = kr0 + it * STEP;
          if ((BK * CPR) % THREADS == 0 || kr < BK)
            copy_chunk_async(s_tile + offset(kr), src + it * step, k0 + kr < K ? nv : 0, base);
        }
      }
    } else {
#if !PLUS_ALIGNED
#pragma unroll 1
      for (int it = 0; it < ITERS; ++it) {
        const int kr = kr0 + it * STEP;
        if ((BK * CPR) % THREADS == 0 || kr < BK)
          copy_chunk_scalar(s_tile + offset(kr), src + it * step, k0 + kr < K ? nv : 0);
      }
#endif
    }
    src += BK * ld;
  }
};

#if PLUS_SPLITK_CLUSTER > 1
// Split-K in the cluster: rows [r_lo, r_lo + RS) of the staged fp32 C tile become the sum of the S ranks'
// partial tiles (ranks x + q * PLUS_WG_CLUSTER_X, q = 0 .. S-1, added in that order), 16 bytes at a time
// along the tile's contiguous axis (n, or m with the m-fastest layout). Only this CTA reads or writes these
// rows of its own tile; the other ranks read its other rows.
PLUS_DEV void split_reduce(plus_u32 c_tile, bool mf, int r_lo, int RS, int tid) {
  const plus_u32 x = plus_cluster_ctarank() % PLUS_WG_CLUSTER_X;
  const int units = RS * BN / 4;
#pragma unroll 1
  for (int u = tid; u < units; u += THREADS) {
    const int r = r_lo + (mf ? (u % (RS / 4)) * 4 : u / (BN / 4)), c = mf ? u / (RS / 4) : (u % (BN / 4)) * 4;
    const plus_u32 off = c_tile + c_offset(mf, r, c);
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int q = 0; q < PLUS_SPLITK_CLUSTER; ++q) {
      float p[4];
      plus_ld_shared_cluster_f4(plus_mapa_shared(off, x + (plus_u32)q * PLUS_WG_CLUSTER_X), p);
#pragma unroll
      for (int e = 0; e < 4; ++e) v[e] += p[e];
    }
    plus_st_shared16(off, __float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]), __float_as_uint(v[3]));
  }
}
#endif

#ifdef PLUS_HAS_PROLOGUE_A
// Apply plus_prologue_a to the in-range elements of the A tile in stage `s_tile` (k-tile at k0);
// zero padding (k >= K) stays 0 so it adds nothing to the sums.
PLUS_DEV void prologue_a(const PlusArgs& args, long long b, plus_u32 s_tile, long long m0, long long M,
                         long long k0, long long K, int tid) {
  constexpr int CHUNKS = BM * 8;
#pragma unroll 1
  for (int id = tid; id < CHUNKS; id += THREADS) {
    const int r = id >> 3, c = id & 7;
    const long long m = m0 + r, k = k0 + c * 8;
    if (m >= M || k >= K) continue;
    const plus_u32 addr = s_tile + r * 128 + ((c ^ (r & 7)) << 4);
    plus_u32 w[4];
    plus_ld_shared16(addr, w[0], w[1], w[2], w[3]);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      if (k + e < K) {
        const plus_ab_t x = plus_wg_from_bits<plus_ab_t>((unsigned short)(w[e >> 1] >> ((e & 1) * 16)));
        const unsigned short bits = plus_wg_bits(plus_cvt<plus_ab_t>(plus_prologue_a(args, b, m, k + e, plus_f(x))));
        w[e >> 1] = (w[e >> 1] & (0xFFFF0000u >> ((e & 1) * 16))) | ((plus_u32)bits << ((e & 1) * 16));
      }
    }
    plus_st_shared16(addr, w[0], w[1], w[2], w[3]);
  }
}
#endif

}  // namespace plus_wg

// ------------------------------------------------------------------------------------------------------
// Entry point
// ------------------------------------------------------------------------------------------------------
extern "C" __global__ void PLUS_WG_CLUSTER __launch_bounds__(PLUS_THREADS, 1) plus_gemm(const PlusArgs args) {
  using namespace plus_wg;
  extern __shared__ __align__(1024) unsigned char plus_wg_smem[];
  // Swizzle atoms must start on 1024-byte boundaries (in the shared window): realign the base.
  const plus_u32 smem_raw = (plus_u32)__cvta_generic_to_shared(plus_wg_smem);
  const plus_u32 smem = (smem_raw + 1023u) & ~1023u;

  const int tid = threadIdx.x;
  const int wg = tid / 128;                            // warpgroup
  const int wg_m = wg / WGS_N, wg_n = wg % WGS_N;      // its position in the CTA tile
  const int warp = (tid % 128) / 32, lane = tid % 32;  // warp within the warpgroup

  const PlusGemmShape shape = plus_gemm_shape(args);
  const long long M = shape.M, K = shape.K;
#if PLUS_SPLITK_CLUSTER > 1
  constexpr int NSPLIT = PLUS_SPLITK_CLUSTER;
  const long long b = (long long)blockIdx.z / NSPLIT;
  const int split = (int)(blockIdx.z % NSPLIT);      // also the cluster's z index: the rank's split
#else
  constexpr int NSPLIT = PLUS_SPLITK;
  const long long b = (long long)blockIdx.z % shape.batch;
  const int split = (int)((long long)blockIdx.z / shape.batch);
#endif
  const long long m0 = (long long)blockIdx.y * BM, n0 = (long long)blockIdx.x * BN;
  const long long N = plus_n_of(args, b, shape.N);   // a ragged group's member N (else shape.N)
#ifdef PLUS_HAS_GROUP_N
  static_assert(!PLUS_GATED, "gemm_sm90a: a gated GEMM is not a ragged group");
  if (n0 >= N) return;                               // the whole CTA lies past its member's columns
#endif

  const plus_ab_t* A = plus_a_ptr(args, b);
  const plus_ab_t* B = plus_b_ptr(args, b);
  const long long lda = plus_lda(args), ldb = plus_ldb_of(args, b);

  // k-tiles [kt0, kt0 + nk) belong to this split.
  const long long ktiles = (K + BK - 1) / BK;
  const long long per_split = (ktiles + NSPLIT - 1) / NSPLIT;
  const long long kt0 = split * per_split;
  const int nk = (int)max(0LL, min(ktiles, kt0 + per_split) - kt0);

  // Copy engines for A and B; load_next() issues the next k-tile (in order) into stage `s`.
  KMajorLoader<BM> a_loader;
  a_loader.init(A, lda, m0, M, kt0, tid);
#if PLUS_B_TRANS
  KMajorLoader<BN> b_loader;
#else
  MNMajorLoader b_loader;
#endif
#if PLUS_GATED
  const plus_ab_t* B1 = plus_b1_ptr(args, b);
#else
  const plus_ab_t* B1 = nullptr;
#endif
  b_loader.init(B, ldb, n0, N, kt0, tid, B1);
  // 16-byte copies when every operand allows them (uniform over the CTA; always with PLUS_ALIGNED=1).
  const bool vec = vec_ok(A, lda) && vec_ok(B, ldb) && (!PLUS_GATED || vec_ok(B1, ldb));
  long long k_next = kt0 * BK;
  auto load_next = [&](int s) {
    const plus_u32 sa = smem + s * STAGE_BYTES;
    a_loader.load(sa, k_next, K, vec);
    b_loader.load(sa + A_BYTES, k_next, K, vec);
    k_next += BK;
  };

  float acc[MS][WN / 2];
#pragma unroll
  for (int ms = 0; ms < MS; ++ms)
#pragma unroll
    for (int i = 0; i < WN / 2; ++i) acc[ms][i] = 0.0f;

  // Descriptor parts that do not depend on the stage.  A: this warpgroup's WM rows start at row wg_m*WM.
  // B (K-major): rows wg_n*WN..; B (MN-major): column blocks wg_n*WN/64...
  const plus_u32 a_off = (plus_u32)(wg_m * WM) * 128u;
#if PLUS_B_TRANS
  const plus_u32 b_off = A_BYTES + (plus_u32)(wg_n * WN) * 128u;
  constexpr plus_u32 B_LBO = 16, B_SBO = 1024;   // K-major: LBO unused
  constexpr plus_u32 B_K16_STEP = 32;            // next 16 k: 32 bytes further along the 128-byte row
#else
  const plus_u32 b_off = A_BYTES + (plus_u32)(wg_n * WN / 64) * MN_BLOCK_BYTES;
  constexpr plus_u32 B_LBO = MN_BLOCK_BYTES, B_SBO = 1024;  // MN-major: next 64 n, next 8 k
  constexpr plus_u32 B_K16_STEP = 2 * 1024;                  // next 16 k: two 8-row atoms further
#endif

  // Prologue: fill STAGES-2 stages (one commit group per tile, empty groups past the end).
#pragma unroll
  for (int t = 0; t < STAGES - 2; ++t) {
    if (t < nk) load_next(t);
    plus_cp_async_commit();
  }

  int stage = 0;                    // stage of tile i
  int refill = STAGES - 2;          // stage of tile i + STAGES - 2
#pragma unroll 1
  for (int i = 0; i < nk; ++i) {
    // Tile i has landed (for this thread's copies); publish it to the async proxy and to all threads.
    plus_cp_async_wait<STAGES - 3>();
#if PLUS_WG_PROXY_FENCE
    plus_fence_proxy_async();
#endif
    __syncthreads();

    const plus_u32 s_base = smem + stage * STAGE_BYTES;
#ifdef PLUS_HAS_PROLOGUE_A
    prologue_a(args, b, s_base, m0, M, (kt0 + i) * BK, K, tid);
    plus_fence_proxy_async();
    __syncthreads();
#endif

#pragma unroll
    for (int ms = 0; ms < MS; ++ms) plus_wgmma_fence_regs(acc[ms]);
    plus_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      const plus_u64 db = plus_wgmma_desc_sw128(s_base + b_off + kk * B_K16_STEP, B_LBO, B_SBO);
#pragma unroll
      for (int ms = 0; ms < MS; ++ms) {
        const plus_u64 da = plus_wgmma_desc_sw128(s_base + a_off + ms * 64 * 128 + kk * 32, 16, 1024);
        plus_wgmma_m64k16<plus_ab_t, WN, PLUS_B_TRANS ? 0 : 1>(acc[ms], da, db);
      }
    }
    plus_wgmma_commit();
    // Keep this tile's wgmma group in flight; the previous one (tile i-1) is retired after this.
    plus_wgmma_wait<1>();
#pragma unroll
    for (int ms = 0; ms < MS; ++ms) plus_wgmma_fence_regs(acc[ms]);

    // Refill the stage that tile i-2 used (retired by every warpgroup before the barrier above).
    if (i + STAGES - 2 < nk) load_next(refill);
    plus_cp_async_commit();
    stage = stage + 1 == STAGES ? 0 : stage + 1;
    refill = refill + 1 == STAGES ? 0 : refill + 1;
  }
  plus_wgmma_wait<0>();
#pragma unroll
  for (int ms = 0; ms < MS; ++ms) plus_wgmma_fence_regs(acc[ms]);
  plus_cp_async_wait<0>();
  __syncthreads();  // every warpgroup's wgmma reads of the stage ring have retired: reuse it for C

  // Epilogue, staged through shared memory so that each warp stores 32 consecutive columns of one row
  // (coalesced whatever the hook does per element).  Accumulator fragment of wgmma m64nN (fp32): in warp
  // w of the warpgroup, lane l holds for every 8 columns j: rows 16w + l/4 (+8) and columns 8j + 2(l%4)
  // (+1) -> acc[4j + 2h + e].  The C tile is fp32 [BM][BN + 8]: the 8-float pad puts the 8 rows of one
  // 64-bit store request in two 128-byte wavefronts (the minimum for 256 bytes).
  const plus_u32 c_tile = smem;
#if PLUS_EPI_M_FASTEST == 2
  const bool mf = plus_epi_m_fastest(args, b);
#else
  constexpr bool mf = M_FASTEST;
#endif
#pragma unroll
  for (int ms = 0; ms < MS; ++ms) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = wg_m * WM + ms * 64 + warp * 16 + (lane >> 2) + h * 8;
#pragma unroll
      for (int j = 0; j < WN / 8; ++j) {
        const int c = wg_n * WN + j * 8 + (lane & 3) * 2;
        if (mf) {
          plus_st_shared_f(c_tile + c_offset(mf, r, c), acc[ms][4 * j + 2 * h]);
          plus_st_shared_f(c_tile + c_offset(mf, r, c + 1), acc[ms][4 * j + 2 * h + 1]);
        } else {
          plus_st_shared_f2(c_tile + c_offset(mf, r, c), acc[ms][4 * j + 2 * h], acc[ms][4 * j + 2 * h + 1]);
        }
      }
    }
  }
  __syncthreads();
#if PLUS_SPLITK_CLUSTER > 1
  // The rows this CTA finishes, [r_lo, r_lo + RS): the sum of the S partial tiles in split order.
  constexpr int RS = BM / NSPLIT;
  const int r_lo = split * RS;
  plus_cluster_sync();   // every split's partial tile is staged (release / acquire)
  split_reduce(c_tile, mf, r_lo, RS, tid);
  __syncthreads();       // the summed rows are visible to the whole CTA
#else
  constexpr int RS = BM;
  const int r_lo = 0;
#endif
#ifdef PLUS_HAS_ROW_TILE
  // tile[r * C_LD + c] = C[b, m0 + r, n0 + c] (fp32) for r < rows, c < cols; the hook may rewrite it in place.
  // Its first cluster barrier follows this CTA's split-K reads of the other ranks' tiles (PLUS_SPLITK_CLUSTER),
  // and its trailing one keeps this CTA's tile alive until every rank has read it.
  plus_row_tile(args, b, reinterpret_cast<float*>(plus_wg_smem + (smem - smem_raw)) + r_lo * C_LD, C_LD, m0 + r_lo,
                n0, (int)max(0LL, min((long long)RS, M - m0 - r_lo)), (int)min((long long)BN, N - n0));
#elif PLUS_GATED
  // Gated: logical columns 16t + e and 16t + 8 + e of the tile are element (n0/2 + 8t + e) of both products.
#pragma unroll 2
  for (int idx = tid; idx < BM * (BN / 2); idx += THREADS) {
    const int r = idx / (BN / 2), c = idx % (BN / 2);
    const int c0 = ((c >> 3) << 4) | (c & 7);
    const long long m = m0 + r, n = n0 / 2 + c;
    if (m >= M || n >= N) continue;
    const float v0 = plus_ld_shared_f(c_tile + c_offset(false, r, c0));
    const float v1 = plus_ld_shared_f(c_tile + c_offset(false, r, c0 + 8));
#if PLUS_SPLITK > 1
    // fp32 partial planes [SPLITK][2][batch][M][N] in scratch[0]
    const long long plane = shape.batch * M * N, at = (b * M + m) * N + n;
    ((float*)args.scratch[0])[(2LL * split) * plane + at] = v0;
    ((float*)args.scratch[0])[(2LL * split + 1) * plane + at] = v1;
#else
    plus_epilogue_gated(args, b, m, n, v0, v1);
#endif
  }
#else
#if PLUS_SPLITK_CLUSTER > 1
  plus_cluster_arrive();   // every read of the other ranks' tiles is done
#endif
#pragma unroll 2
  for (int idx = tid; idx < RS * BN; idx += THREADS) {
    const int r = r_lo + (mf ? idx % RS : idx / BN), c = mf ? idx / RS : idx % BN;
    const long long m = m0 + r, n = n0 + c;
    if (m >= M || n >= N) continue;
    const float v = plus_ld_shared_f(c_tile + c_offset(mf, r, c));
#if PLUS_SPLITK > 1
    // fp32 partials [SPLITK][batch][M][N] in scratch[0] (N: plus_gemm_shape's, also in a ragged group)
    ((float*)args.scratch[0])[(((long long)split * shape.batch + b) * M + m) * shape.N + n] = v;
#elif !defined(PLUS_HAS_EPILOGUE)
    ((plus_c_t*)args.out[0])[(b * M + m) * shape.N + n] = plus_cvt<plus_c_t>(v);   // [batch, M, shape N]
#else
    plus_epilogue(args, b, m, n, v);
#endif
  }
#if PLUS_SPLITK_CLUSTER > 1
  plus_cluster_wait();     // no rank still reads this CTA's tile
#endif
#ifdef PLUS_HAS_ROW_FINISH
  // one launch of GEMM + row program: this CTA wrote rows [m0 + r_lo, + RS) of the row input for its columns;
  // the last of the gridDim.x column tiles to do so finishes those rows (gemm_hooks.cuh)
  plus_finish_rows(args, (long long)blockIdx.y * NSPLIT + split, gridDim.x, m0 + r_lo, min(M, m0 + r_lo + RS));
#endif
#endif  // PLUS_HAS_ROW_TILE
}

#include "gemm_splitk_reduce.cuh"
