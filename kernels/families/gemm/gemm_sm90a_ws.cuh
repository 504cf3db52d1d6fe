// gemm_sm90a_ws.cuh: Hopper (sm_90a) GEMM, warp-specialised and persistent: TMA loads into a ring of
// mbarrier-guarded stages, wgmma consumers (kernels/CONTRACT.md §2.1, "TMA GEMM").
//
//   C[b, m, n] = sum_k A[b, m, k] * B[b, k, n]      A, B: half or __nv_bfloat16 (plus_ab_t), fp32 accumulate
//
// PLUS_MATH 3, 8-bit integers (ONNX MatMulInteger): A plus_ab_t, B plus_b_t (PLUS_HAS_B_T; default plus_ab_t),
// each signed or unsigned char, exact s32 sums (wgmma m64nBNk32 .s32, wrapping modulo 2^32) handed to the
// epilogue hook as an int. A k-tile is BK = 128 elements: one 128-byte swizzle row, as 64 16-bit elements are.
// No K split, no gated pair. 8-bit wgmma reads both operands K-major: a B stored [N, K] (PLUS_B_TRANS 1) lands
// so; a B stored [K, N] (PLUS_B_TRANS 0, ONNX MatMulInteger's) arrives as BN/128 boxes [128 k][128 n], which the
// consumers transpose in place into that layout once the stage is full, while the previous k-tile's wgmma
// group runs: 4 x 4 byte blocks swapped pairwise across the diagonal of each box (prmt), then fence.proxy.async
// and a named barrier over every consumer thread (1 + CONSUMERS) before their wgmmas read it.
//
// Same hooks as gemm_sm90a.cuh (gemm_hooks.cuh: shape, epilogue, gated epilogue, ragged groups, row finish),
// but A and B are read through tensor maps, never through plus_a_ptr / plus_b_ptr.
//
// Roles (threads = 128 x (1 + BM/64)):
// * warpgroup 0, the producer: one thread walks this CTA's work units and, per k-tile, waits for the stage to
//   be empty (its `empty` mbarrier), announces the stage's bytes on its `full` mbarrier (arrive.expect_tx) and
//   issues the TMA copies: the A box [64 k][BM m], and B as one box [64 k][BN n] (B_TRANS 1) or BN/64 boxes
//   [64 k][64 n] (B_TRANS 0), under the 128-byte swizzle, i.e. the wgmma canonical layouts of gemm_sm90a.cuh.
//   Past the edges TMA fills zeros. The other 127 threads have nothing to do. With two consumers the
//   warpgroup gives its registers to them (setmaxnreg 56 / 224).
// * warpgroups 1.. BM/64, the consumers: warpgroup w owns rows [64(w-1), +64) of the tile and all its BN
//   columns (BN/2 fp32 accumulators per thread). Per k-tile: wait for the full stage, 4 wgmma m64nBNk16,
//   commit, wait for the previous k-tile's group (wait_group 1), then its thread 0 releases the previous
//   stage (arrive on `empty`, which counts one arrival per consumer warpgroup). So the producer runs up to
//   STAGES k-tiles ahead, and one wgmma group is in flight behind the waits.
// * Persistent: the CTAs take work units blockIdx.x, blockIdx.x + gridDim.x, ... (grid = min(units, SMs));
//   a unit is one (split, batch, m tile, n tile), n fastest. Producer and consumers walk the same units and
//   the ring's stage and phase carry over from unit to unit, so the producer loads the next unit while the
//   consumers run the epilogue of this one.
// * Epilogue, per consumer warpgroup and 32-column chunk of its 64 x BN accumulators: the fragments go to its
//   own staging buffer in shared memory (named barrier 1 + w over its 128 threads before and after), then
//   each warp hands 32 consecutive columns of one row (or, PLUS_EPI_M_FASTEST, 32 consecutive rows of one
//   column) to the epilogue hook: whole sectors whatever the hook stores. Split-K (PLUS_SPLITK > 1) writes
//   fp32 partials to scratch[0] as gemm_sm90a.cuh does, and plus_splitk_reduce finishes.
// * Gated products (PLUS_GATED 1): the tile's first BN/2 columns are B0's, the last BN/2 B1's (two maps),
//   and the epilogue hands both sums of an element to plus_epilogue_gated.
// * Row finish (PLUS_HAS_ROW_FINISH, one unit per CTA: PLUS_PERSISTENT 0): after the tile, every thread
//   joins and the CTA counts itself on its row group as gemm_hooks.cuh's plus_finish_rows does.
// * B multicast (PLUS_WS_CLUSTER 2 or 4): a thread-block cluster of CL CTAs takes CL consecutive m tiles of one
//   n tile together; each CTA loads its own A box and its share of B (MN-major: the 64-column boxes rank,
//   rank + CL, ..., none when BN/64 < CL ranks; K-major: 1/CL of the rows), multicast into every CTA of the
//   cluster, so L2 serves B once per cluster. A stage then counts a release from every consumer of every CTA
//   (consumers arrive on their own and each peer's `empty`), the barriers are initialised before a cluster
//   barrier, and a final one keeps each CTA's shared memory until its peers are done with it. A cluster's m
//   tile past M loads M's last rows there (never stored).
//
// Tensor maps (the kernel's second parameter, built by the launcher from the plan's `tmap` records): by
// default A = maps.m[0] over (K, M, batch of A), B = maps.m[1] over (N, K, batch of B) (B_TRANS 0) or (K, N,
// batch) (B_TRANS 1), B1 = maps.m[2] (gated); the generated hooks plus_tma_a / plus_tma_b / plus_tma_b1
// (PLUS_HAS_TMA_MAPS) pick another map and batch coordinate per batch index (a horizontal group's members).
#pragma once

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "gemm_sm90a_ws.cuh needs wgmma and TMA: compile it with --gpu-architecture=sm_90a"
#endif

#include "gemm_sm90a_params.cuh"

#ifndef PLUS_PERSISTENT
#define PLUS_PERSISTENT 1
#endif
#ifndef PLUS_TMAPS
#define PLUS_TMAPS (PLUS_GATED ? 3 : 2)
#endif
#ifndef PLUS_WS_CLUSTER
#define PLUS_WS_CLUSTER 1
#endif
#if PLUS_WS_CLUSTER > 1
#define PLUS_WS_CLUSTER_DIMS __cluster_dims__(PLUS_WS_CLUSTER, 1, 1)
#else
#define PLUS_WS_CLUSTER_DIMS
#endif

#ifdef PLUS_HAS_ROW_TILE
#error "gemm_sm90a_ws.cuh has no row tile (gemm_sm90a.cuh's cluster does)"
#endif
#ifdef PLUS_HAS_ROW_FINISH
static_assert(PLUS_SPLITK == 1 && !PLUS_GATED && !PLUS_PERSISTENT && PLUS_WS_CLUSTER == 1,
              "gemm_sm90a_ws: the row finish needs whole sums of one product and one unit per CTA");
#endif
static_assert(PLUS_WS_CLUSTER == 1 || PLUS_WS_CLUSTER == 2 || PLUS_WS_CLUSTER == 4,
              "gemm_sm90a_ws: B multicast over 1, 2 or 4 CTAs");
// K-major B: each CTA loads 1/CL of the rows of a product, whole 8-row swizzle atoms (MN-major B: the CTAs take
// its 64-column boxes in turn, any number of them)
static_assert(PLUS_WS_CLUSTER == 1 || !PLUS_B_TRANS || (PLUS_BN / (PLUS_GATED ? 2 : 1)) % (PLUS_WS_CLUSTER * 8) == 0,
              "gemm_sm90a_ws: multicast shares of a K-major B must be whole 8-row atoms");
#if PLUS_GATED
static_assert(PLUS_EPI_M_FASTEST == 0, "gemm_sm90a_ws: the gated epilogue walks the tile with n fastest");
#endif

#if PLUS_MATH == 3
#define PLUS_WS_ELEM 1     /* bytes per operand element: 8-bit integers */
#ifndef PLUS_HAS_B_T
typedef plus_ab_t plus_b_t;
#endif
static_assert(sizeof(plus_ab_t) == 1 && sizeof(plus_b_t) == 1, "gemm_sm90a_ws: PLUS_MATH 3 needs 8-bit plus_ab_t and plus_b_t");
static_assert(PLUS_B_TRANS == 1 || PLUS_BN % 128 == 0, "gemm_sm90a_ws: an 8-bit B stored [K, N] comes in boxes of 128 columns");
#define PLUS_WS_TRANSPOSE (!PLUS_B_TRANS)   /* the consumers turn B's [k][n] boxes K-major */
static_assert(PLUS_SPLITK == 1 && !PLUS_GATED, "gemm_sm90a_ws: 8-bit GEMMs are never split along K nor gated");
#else
#define PLUS_WS_ELEM 2
#define PLUS_WS_TRANSPOSE 0
static_assert(sizeof(plus_ab_t) == 2, "gemm_sm90a_ws: plus_ab_t must be half or __nv_bfloat16");
#endif
#define PLUS_WS_CONSUMERS ((PLUS_BM) / 64)
#define PLUS_THREADS (128 * (1 + PLUS_WS_CONSUMERS))
// Epilogue staging per consumer warpgroup: 64 rows x (32 columns, or 16 of each product gated, + 8 pad) fp32,
// or transposed (m fastest) 32 columns x (64 + 4) rows; the larger of the two.
#define PLUS_WS_EPI_W (PLUS_GATED ? 16 : 32)
#define PLUS_WS_STAGE_FLOATS (64 * 40 > PLUS_WS_EPI_W * 68 ? 64 * 40 : PLUS_WS_EPI_W * 68)
// Stage ring (A then B per stage), epilogue staging, the 2 x STAGES mbarriers, and 1 KiB to realign the
// dynamic shared-memory base to the 1024-byte swizzle-atom boundary.
#define PLUS_SMEM_BYTES                                                                           \
  ((PLUS_STAGES) * ((PLUS_BM) + (PLUS_BN)) * (PLUS_BK) * PLUS_WS_ELEM + PLUS_WS_CONSUMERS * PLUS_WS_STAGE_FLOATS * 4 + \
   (PLUS_STAGES) * 16 + 1024)

static_assert(PLUS_BK * PLUS_WS_ELEM == 128, "gemm_sm90a_ws: BK must be one 128-byte swizzle row (64 16-bit or 128 8-bit elements)");
static_assert(PLUS_BM == 64 || PLUS_BM == 128 || PLUS_BM == 192, "gemm_sm90a_ws: BM is 64, 128 or 192 (one consumer per 64 rows)");
static_assert(PLUS_BN % 64 == 0 && PLUS_BN >= 64 && PLUS_BN <= 256, "gemm_sm90a_ws: BN must be 64, 128, 192 or 256");
static_assert(!PLUS_GATED || PLUS_BN % 128 == 0, "gemm_sm90a_ws: a gated tile holds whole 64-column boxes of each product");
static_assert(PLUS_STAGES >= 2 && PLUS_STAGES <= 16, "gemm_sm90a_ws: 2 to 16 stages");
static_assert(PLUS_SMEM_BYTES <= 232448, "gemm_sm90a_ws: the stage ring exceeds 227 KiB of shared memory");

#include "gemm_hooks.cuh"
#include "plus_tma.cuh"

// Default tensor maps: A = maps.m[0], B = maps.m[1], B1 = maps.m[2], each over its batch index b.
#ifndef PLUS_HAS_TMA_MAPS
PLUS_DEV const PlusTmap* plus_tma_a(const PlusTmaps& maps, long long b, int& z) {
  z = (int)b;
  return &maps.m[0];
}
PLUS_DEV const PlusTmap* plus_tma_b(const PlusTmaps& maps, long long b, int& z) {
  z = (int)b;
  return &maps.m[1];
}
#if PLUS_GATED
PLUS_DEV const PlusTmap* plus_tma_b1(const PlusTmaps& maps, long long b, int& z) {
  z = (int)b;
  return &maps.m[2];
}
#endif
#endif

namespace plus_ws {

constexpr int BM = PLUS_BM, BN = PLUS_BN, BK = PLUS_BK, STAGES = PLUS_STAGES, THREADS = PLUS_THREADS;
constexpr int CONSUMERS = PLUS_WS_CONSUMERS;
constexpr int CL = PLUS_WS_CLUSTER;                      // CTAs sharing (multicasting) one n tile's B
constexpr int A_BYTES = BM * BK * PLUS_WS_ELEM, B_BYTES = BN * BK * PLUS_WS_ELEM, STAGE_BYTES = A_BYTES + B_BYTES;
#if PLUS_MATH == 3
typedef int acc_t;                                       // exact s32 sums
constexpr int KSTEP = 32;                                // k of one wgmma (32 bytes of a swizzle row either way)
#else
typedef float acc_t;
constexpr int KSTEP = 16;
#endif
constexpr int MN_BLOCK_BYTES = BK * 128;                 // MN-major B: one [BK k][128 bytes of n] box
constexpr int BOX_N = 128 / PLUS_WS_ELEM;                // columns of one such box (64 16-bit, 128 8-bit)
constexpr int TRANSPOSED_BAR = 1 + CONSUMERS;            // named barrier: a stage's B transposed (PLUS_WS_TRANSPOSE)
constexpr int NCOLS = PLUS_GATED ? BN / 2 : BN;          // output columns of a tile (per product)
constexpr int EPI_W = PLUS_WS_EPI_W;
constexpr int SLD = EPI_W * (PLUS_GATED ? 2 : 1) + 8;    // staging row stride, n fastest (floats)
constexpr int TLD = 64 + 4;                              // staging column stride, m fastest (floats)
constexpr int STAGING_BYTES = PLUS_WS_STAGE_FLOATS * 4;
// Registers: with two or more consumers the producer warpgroup gives its own to them (65536 per SM).
constexpr bool SETMAXNREG = CONSUMERS >= 2
#ifdef PLUS_HAS_ROW_FINISH
                            && false
#endif
    ;
// The producer keeps 56: its unit walk (64-bit), a horizontal group's map hooks and the multicast's box loop spill
// under 40; two consumers of 64 x 256 (128 accumulators each) fit in 224. 128 x 56 + 256 x 224 <= 65536.
constexpr int PRODUCER_REGS = 56, CONSUMER_REGS = CONSUMERS == 2 ? 224 : 160;

PLUS_DEV void st_f2(plus_u32 dst, float x, float y) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(dst), "f"(x), "f"(y) : "memory");
}
PLUS_DEV void st_f(plus_u32 dst, float x) { asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(dst), "f"(x) : "memory"); }
PLUS_DEV float ld_f(plus_u32 src) {
  float x;
  asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(x) : "r"(src) : "memory");
  return x;
}
// the s32 sums of an 8-bit GEMM through the same staging buffer
PLUS_DEV void st_f2(plus_u32 dst, int x, int y) {
  asm volatile("st.shared.v2.s32 [%0], {%1, %2};\n" ::"r"(dst), "r"(x), "r"(y) : "memory");
}
PLUS_DEV void st_f(plus_u32 dst, int x) { asm volatile("st.shared.s32 [%0], %1;\n" ::"r"(dst), "r"(x) : "memory"); }
PLUS_DEV int ld_i(plus_u32 src) {
  int x;
  asm volatile("ld.shared.s32 %0, [%1];\n" : "=r"(x) : "r"(src) : "memory");
  return x;
}
PLUS_DEV void ld_acc(plus_u32 src, float& x) { x = ld_f(src); }
PLUS_DEV void ld_acc(plus_u32 src, int& x) { x = ld_i(src); }

#if PLUS_WS_TRANSPOSE
PLUS_DEV plus_u32 ld_w(plus_u32 a) {
  plus_u32 x;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(x) : "r"(a) : "memory");
  return x;
}
PLUS_DEV void st_w(plus_u32 a, plus_u32 x) { asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(a), "r"(x) : "memory"); }
// The word of row r (a multiple of 4) + i, bytes c..c + 3 (c a multiple of 4) of a [128][128] byte box at `box`
// (1024-aligned) under the 128-byte swizzle, byte (r, c) at r * 128 + ((c / 16 ^ r % 8) * 16) + c % 16: the fields
// are disjoint bits, so rows r + i differ from row r by i * 128 and a chunk index XORed with i, i.e. by XOR i * 0x90.
PLUS_DEV plus_u32 sw128_row0(plus_u32 box, unsigned r, unsigned c) {
  return box + r * 128u + ((((c >> 4) ^ r) & 7u) << 4) + (c & 15u);
}
// a 4 x 4 byte block (word i = row i, byte j = column j) transposed: byte j of word i <- byte i of word j
PLUS_DEV void transpose4(plus_u32 (&w)[4]) {
  const plus_u32 a = __byte_perm(w[0], w[1], 0x5140), b = __byte_perm(w[2], w[3], 0x5140);
  const plus_u32 c = __byte_perm(w[0], w[1], 0x7362), d = __byte_perm(w[2], w[3], 0x7362);
  w[0] = __byte_perm(a, b, 0x5410);
  w[1] = __byte_perm(a, b, 0x7632);
  w[2] = __byte_perm(c, d, 0x5410);
  w[3] = __byte_perm(c, d, 0x7632);
}
// A [128 k][128 n] box of B transposed in place into [128 n][128 k] (both swizzled): its 32 x 32 blocks of 4 x 4
// bytes, (bi, bj) swapped with (bj, bi), each transposed. The 528 pairs bi <= bj fold into 16 rows of 33: row r
// holds (r, r..31) and (31 - r, 31 - r..31). Thread `q0` of `step` takes pairs q0, q0 + step, ...
PLUS_DEV void transpose_box(plus_u32 box, unsigned q0, unsigned step) {
#pragma unroll 1
  for (unsigned q = q0; q < 528u; q += step) {
    const unsigned r = q / 33u, c = q % 33u;
    const bool upper = c < 32u - r;
    const unsigned bi = upper ? r : 31u - r, bj = upper ? r + c : c - 1u;
    const plus_u32 at_p = sw128_row0(box, 4 * bi, 4 * bj), at_t = sw128_row0(box, 4 * bj, 4 * bi);
    plus_u32 p[4], t[4];
#pragma unroll
    for (unsigned i = 0; i < 4; ++i) {
      p[i] = ld_w(at_p ^ (i * 0x90u));
      t[i] = ld_w(at_t ^ (i * 0x90u));
    }
    transpose4(p);
    transpose4(t);
#pragma unroll
    for (unsigned i = 0; i < 4; ++i) {
      st_w(at_t ^ (i * 0x90u), p[i]);
      st_w(at_p ^ (i * 0x90u), t[i]);
    }
  }
}
#endif

// A work unit: (split, batch, m tile, n tile) from its linear index, n fastest. With B multicast the index
// counts clusters of CL m tiles (tiles_m is then the clusters') and `rank` picks the CTA's tile of them.
struct Unit {
  long long b, m0, n0;   // n0: the first output column (per product when gated)
  int split;
};
PLUS_DEV Unit unit_of(long long u, long long tiles_n, long long tiles_m, long long batch, int rank = 0) {
  Unit t;
  const long long n = u % tiles_n;
  u /= tiles_n;
  const long long m = u % tiles_m;
  u /= tiles_m;
  t.b = u % batch;
  t.split = (int)(u / batch);
  t.m0 = (m * CL + rank) * BM;
  t.n0 = n * NCOLS;
  return t;
}

}  // namespace plus_ws

#include "gemm_splitk_reduce.cuh"

extern "C" __global__ void PLUS_WS_CLUSTER_DIMS __launch_bounds__(PLUS_THREADS, 1)
    plus_gemm(const PlusArgs args, const __grid_constant__ PlusTmaps maps) {
  using namespace plus_ws;
  extern __shared__ __align__(1024) unsigned char plus_ws_smem[];
  const plus_u32 smem_raw = (plus_u32)__cvta_generic_to_shared(plus_ws_smem);
  const plus_u32 smem = (smem_raw + 1023u) & ~1023u;
  const plus_u32 staging = smem + STAGES * STAGE_BYTES;
  const plus_u32 full = staging + CONSUMERS * STAGING_BYTES;   // mbarriers: full[STAGES], then empty[STAGES]
  const plus_u32 empty = full + STAGES * 8;

  const int tid = threadIdx.x;
  const int wg = tid / 128;
  const PlusGemmShape shape = plus_gemm_shape(args);
  const long long M = shape.M, K = shape.K;
  const long long tiles_n = (shape.N + NCOLS - 1) / NCOLS, tiles_m = (M + (long long)BM * CL - 1) / ((long long)BM * CL);
  const long long units = tiles_n * tiles_m * shape.batch * PLUS_SPLITK;   // CL m tiles each with multicast
#if PLUS_WS_CLUSTER > 1
  const int rank = (int)plus_cluster_ctarank();
  const long long ufirst = blockIdx.x / CL;
#else
  const int rank = 0;
  const long long ufirst = blockIdx.x;
#endif
  const long long ktiles = (K + BK - 1) / BK;
  const long long per_split = (ktiles + PLUS_SPLITK - 1) / PLUS_SPLITK;
#if PLUS_PERSISTENT
  const long long ustep = gridDim.x / CL;
#else
  const long long ustep = units;   // one unit per CTA
#endif

  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) {
      plus_mbar_init(full + 8 * s, 1);               // the producer's arrive.expect_tx, then the copies' bytes
      plus_mbar_init(empty + 8 * s, CONSUMERS * CL); // one release per consumer warpgroup of each CTA
    }
    plus_mbar_init_fence();
  }
#if PLUS_WS_CLUSTER > 1
  plus_cluster_sync();                               // the peer's barriers exist before anything reaches them
#else
  __syncthreads();
#endif

  if (wg == 0) {
    // ------------------------------------------------------------------ producer
    if (SETMAXNREG) plus_setmaxnreg_dec<PRODUCER_REGS>();
    if (tid == 0) {
      int stage = 0;
      plus_u32 phase = 0;
#pragma unroll 1
      for (long long u = ufirst; u < units; u += ustep) {
        const Unit t = unit_of(u, tiles_n, tiles_m, shape.batch, rank);
        const long long N = plus_n_of(args, t.b, shape.N);
        if (t.n0 >= N) continue;                       // a ragged group's member ends before this tile
        const long long kt0 = t.split * per_split;
        const long long nk = max(0LL, min(ktiles, kt0 + per_split) - kt0);
        int za, zb;
        const PlusTmap* ma = plus_tma_a(maps, t.b, za);
        const PlusTmap* mb = plus_tma_b(maps, t.b, zb);
#if PLUS_GATED
        int zb1;
        const PlusTmap* mb1 = plus_tma_b1(maps, t.b, zb1);
#endif
#pragma unroll 1
        for (long long kt = 0; kt < nk; ++kt) {
          plus_mbar_wait(empty + 8 * stage, phase ^ 1u);   // the consumers released this stage (a fresh one passes)
          const plus_u32 bar = full + 8 * stage;
          plus_mbar_arrive_expect_tx(bar, STAGE_BYTES);
          const plus_u32 sa = smem + stage * STAGE_BYTES, sb = sa + A_BYTES;
          const int k0 = (int)((kt0 + kt) * BK);
          // a cluster's m tile past M would bring only fill: load M's last rows instead (never stored)
          plus_tma_load_3d(sa, ma, k0, (int)min(t.m0, M - 1), za, bar);
#if PLUS_B_TRANS
          // K-major B: rows are n; with multicast each CTA loads 1/CL of the rows of each product
          constexpr int PROWS = NCOLS / CL;
#pragma unroll
          for (int p = 0; p < (PLUS_GATED ? 2 : 1); ++p) {
            const plus_u32 dst = sb + (plus_u32)(p * NCOLS + rank * PROWS) * 128u;
#if PLUS_GATED
            const PlusTmap* mp = p ? mb1 : mb;
            const int zp = p ? zb1 : zb;
#else
            const PlusTmap* mp = mb;
            const int zp = zb;
#endif
            const int row = (int)min(t.n0 + rank * PROWS, N - 1);
#if PLUS_WS_CLUSTER > 1
            plus_tma_load_3d_multicast(dst, mp, k0, row, zp, bar, (unsigned short)((1u << CL) - 1u));
#else
            plus_tma_load_3d(dst, mp, k0, row, zp, bar);
#endif
          }
#else
#pragma unroll
          for (int j = rank; j < BN / BOX_N; j += CL) {
            // a box starting past N would bring only fill: load the last columns instead (never stored)
            const int half = PLUS_GATED ? (j >= BN / 128) : 0;
            const long long c = t.n0 + (long long)BOX_N * (PLUS_GATED ? j % (BN / 128) : j);
            const int col = (int)min(c, N - 1);
#if PLUS_GATED
            const PlusTmap* mp = half ? mb1 : mb;
            const int zp = half ? zb1 : zb;
#else
            (void)half;
            const PlusTmap* mp = mb;
            const int zp = zb;
#endif
#if PLUS_WS_CLUSTER > 1
            plus_tma_load_3d_multicast(sb + j * MN_BLOCK_BYTES, mp, col, k0, zp, bar, (unsigned short)((1u << CL) - 1u));
#else
            plus_tma_load_3d(sb + j * MN_BLOCK_BYTES, mp, col, k0, zp, bar);
#endif
          }
#endif
          if (++stage == STAGES) {
            stage = 0;
            phase ^= 1u;
          }
        }
      }
    }
  } else {
    // ------------------------------------------------------------------ consumers
    if (SETMAXNREG) plus_setmaxnreg_inc<CONSUMER_REGS>();
    const int w = wg - 1;                                   // rows [64 w, 64 w + 64) of the tile
    const int wt = tid % 128, warp = wt / 32, lane = tid % 32;
    const plus_u32 a_off = (plus_u32)(w * 64) * 128u;
#if PLUS_B_TRANS || PLUS_MATH == 3
    constexpr plus_u32 B_LBO = 16, B_SBO = 1024, B_K16_STEP = 32;      // K-major (8-bit: as transposed): LBO unused
#else
    constexpr plus_u32 B_LBO = MN_BLOCK_BYTES, B_SBO = 1024, B_K16_STEP = 2 * 1024;   // MN-major
#endif
    const plus_u32 stg = staging + w * STAGING_BYTES;
    // a stage is free again once every consumer of every CTA writing into it (the multicast's) is done with it
    auto release = [&](int s) {
      plus_mbar_arrive(empty + 8 * s);
#if PLUS_WS_CLUSTER > 1
#pragma unroll
      for (int q = 1; q < CL; ++q) plus_mbar_arrive_cluster(plus_mapa_shared(empty + 8 * s, (rank + q) % CL));
#endif
    };
    const plus_u64 desc_a0 = plus_wgmma_desc_sw128(smem + a_off, 16, 1024);
    const plus_u64 desc_b0 = plus_wgmma_desc_sw128(smem + A_BYTES, B_LBO, B_SBO);
    int stage = 0;
    plus_u32 phase = 0;
    acc_t acc[BN / 2];
#pragma unroll 1
    for (long long u = ufirst; u < units; u += ustep) {
      const Unit t = unit_of(u, tiles_n, tiles_m, shape.batch, rank);
      const long long N = plus_n_of(args, t.b, shape.N);
      if (t.n0 >= N) continue;
      const long long kt0 = t.split * per_split;
      const long long nk = max(0LL, min(ktiles, kt0 + per_split) - kt0);
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) acc[i] = (acc_t)0;
      int prev = -1;
#pragma unroll 1
      for (long long kt = 0; kt < nk; ++kt) {
        plus_mbar_wait(full + 8 * stage, phase);
#if PLUS_WS_TRANSPOSE
        // B's [k][n] boxes turned K-major by every consumer thread together (the previous group still runs)
#pragma unroll 1
        for (int j = 0; j < BN / BOX_N; ++j)
          transpose_box(smem + stage * STAGE_BYTES + A_BYTES + j * MN_BLOCK_BYTES, (unsigned)(tid - 128), 128 * CONSUMERS);
        plus_fence_proxy_async();                      // the generic writes, before wgmma's async-proxy reads
        plus_named_sync(TRANSPOSED_BAR, 128 * CONSUMERS);
#endif
        // descriptors of stage `stage`: those of stage 0 with the start address moved (its field holds address
        // >> 4, and shared addresses stay below 256 KiB: no carry out of the field)
        const plus_u64 step = (plus_u64)((plus_u32)stage * (STAGE_BYTES >> 4));
        plus_wgmma_fence_regs(acc);
        plus_wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / KSTEP; ++kk) {
          const plus_u64 da = desc_a0 + step + (plus_u64)(kk * 32 >> 4);
          const plus_u64 db = desc_b0 + step + (plus_u64)(kk * B_K16_STEP >> 4);
#if PLUS_MATH == 3
          plus_wgmma_m64k32_i8<((plus_ab_t)-1 < 0), ((plus_b_t)-1 < 0), BN>(acc, da, db);
#else
          plus_wgmma_m64k16<plus_ab_t, BN, PLUS_B_TRANS ? 0 : 1>(acc, da, db);
#endif
        }
        plus_wgmma_commit();
        plus_wgmma_wait<1>();                          // the previous k-tile's group has read its stage
        plus_wgmma_fence_regs(acc);
        if (prev >= 0 && wt == 0) release(prev);
        prev = stage;
        if (++stage == STAGES) {
          stage = 0;
          phase ^= 1u;
        }
      }
      plus_wgmma_wait<0>();
      plus_wgmma_fence_regs(acc);
      if (prev >= 0 && wt == 0) release(prev);

      // ---- epilogue: 32-column chunks of this warpgroup's 64 x BN accumulators through its staging buffer
#if PLUS_EPI_M_FASTEST == 2
      const bool mf = plus_epi_m_fastest(args, t.b);
#else
      constexpr bool mf = PLUS_EPI_M_FASTEST == 1;
#endif
      const long long mrow = t.m0 + 64 * w;
#pragma unroll
      for (int cc = 0; cc < NCOLS; cc += EPI_W) {
        plus_named_sync(1 + w, 128);                   // the previous chunk's reads are done
        // fragment: lane l of warp q holds rows 16q + l/4 (+8) and columns 8j + 2(l%4) (+1) at acc[4j + 2h + e]
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = warp * 16 + (lane >> 2) + h * 8;
#pragma unroll
          for (int j = 0; j < EPI_W / 8; ++j) {
            const int c = j * 8 + (lane & 3) * 2;
#pragma unroll
            for (int p = 0; p < (PLUS_GATED ? 2 : 1); ++p) {
              const int ai = 4 * ((cc + p * NCOLS) / 8 + j) + 2 * h;
              const int sc = c + p * EPI_W;
              if (mf) {
                st_f(stg + (plus_u32)(sc * TLD + r) * 4u, acc[ai]);
                st_f(stg + (plus_u32)((sc + 1) * TLD + r) * 4u, acc[ai + 1]);
              } else {
                st_f2(stg + (plus_u32)(r * SLD + sc) * 4u, acc[ai], acc[ai + 1]);
              }
            }
          }
        }
        plus_named_sync(1 + w, 128);                   // the chunk is staged
        // n fastest: lane l of warp q takes column l % EPI_W of rows q RPW + l / EPI_W + 4 RPW i; m fastest: lane l
        // takes row l (+ 32) of columns q + 4 j (unsigned, powers of two: shifts, no division)
        constexpr unsigned RPW = 32 / EPI_W;           // rows per warp and step, n fastest
        constexpr unsigned STEPS = 16 / RPW;           // 64 x EPI_W elements over 128 threads (m fastest: EPI_W 32)
        const unsigned lr = mf ? (unsigned)lane : (unsigned)warp * RPW + (unsigned)lane / EPI_W;
        const unsigned lc = mf ? (unsigned)warp : (unsigned)lane % EPI_W;
        const plus_u32 lsrc = mf ? stg + (lc * TLD + lr) * 4u : stg + (lr * SLD + lc) * 4u;
        const long long nbase = t.n0 + cc;
        // step i's element of this lane: row lr + dr(i), column lc + dc(i), staged dsrc(i) bytes past lsrc
        auto dr = [&](unsigned i) { return mf ? 32u * (i & 1u) : 4u * RPW * i; };
        auto dc = [&](unsigned i) { return mf ? 4u * (i >> 1) : 0u; };
        auto dsrc = [&](unsigned i) { return mf ? (dc(i) * TLD + dr(i)) * 4u : dr(i) * SLD * 4u; };
        auto emit = [&](unsigned i) {
          const long long m = mrow + lr + dr(i), n = nbase + lc + dc(i);
          acc_t v;
          ld_acc(lsrc + dsrc(i), v);
#if PLUS_GATED
          const float v1 = ld_f(lsrc + dsrc(i) + EPI_W * 4u);
#if PLUS_SPLITK > 1
          const long long plane = shape.batch * M * shape.N, at = (t.b * M + m) * shape.N + n;
          ((float*)args.scratch[0])[(2LL * t.split) * plane + at] = v;
          ((float*)args.scratch[0])[(2LL * t.split + 1) * plane + at] = v1;
#else
          plus_epilogue_gated(args, t.b, m, n, v, v1);
#endif
#elif PLUS_SPLITK > 1
          ((float*)args.scratch[0])[(((long long)t.split * shape.batch + t.b) * M + m) * shape.N + n] = v;
#elif !defined(PLUS_HAS_EPILOGUE) && PLUS_MATH != 3
          ((plus_c_t*)args.out[0])[(t.b * M + m) * shape.N + n] = plus_cvt<plus_c_t>(v);
#else
          plus_epilogue(args, t.b, m, n, v);
#endif
        };
        if (mrow + 64 <= M && nbase + EPI_W <= N) {
          // the whole 64 x EPI_W chunk is inside C: no per-element bounds, constant offsets
#pragma unroll
          for (unsigned i = 0; i < STEPS; ++i) emit(i);
        } else {
#pragma unroll 1
          for (unsigned i = 0; i < STEPS; ++i)
            if (mrow + lr + dr(i) < M && nbase + lc + dc(i) < N) emit(i);
        }
      }
    }
  }
#if PLUS_WS_CLUSTER > 1
  plus_cluster_sync_any();   // the peer no longer multicasts into, nor releases stages of, this CTA
#endif
#ifdef PLUS_HAS_ROW_FINISH
  // one unit per CTA: every thread joins, and the last of the row group's column tiles finishes its rows
  if (blockIdx.x < units) {
    const Unit t = plus_ws::unit_of(blockIdx.x, tiles_n, tiles_m, shape.batch);
    plus_finish_rows(args, t.m0 / BM, (unsigned)tiles_n, t.m0, min(M, t.m0 + BM));
  }
#endif
}
