// gemm_hooks.cuh: default (identity) hooks shared by gemm.cuh and gemm_sm90a.cuh (CONTRACT.md 2.1).
// A plain contiguous problem: A = in[0] [batch,M,K], B = in[1] [batch,K,N] (PLUS_B_TRANS 0) or
// [batch,N,K] (1), C = out[0] [batch,M,N] of plus_c_t; args.v[0..3] = batch, M, N, K. Generated code
// #defines PLUS_HAS_<NAME> before defining its own; plus_c_t is plus_ab_t unless PLUS_HAS_C_T.
// Gated (PLUS_GATED 1): B is one combined weight [batch,K,2N] ([batch,2N,K]), B0 its first N columns (rows).
#pragma once

#ifndef PLUS_GATED
#define PLUS_GATED 0
#endif
#define PLUS_B_COLS (PLUS_GATED ? 2 : 1)   /* products stored side by side in a default B */

#ifndef PLUS_HAS_C_T
typedef plus_ab_t plus_c_t;
#endif

#ifndef PLUS_HAS_GEMM_SHAPE
PLUS_DEV PlusGemmShape plus_gemm_shape(const PlusArgs& args) {
  return PlusGemmShape{args.v[0], args.v[1], args.v[2], args.v[3]};
}
#endif

#ifndef PLUS_HAS_A_PTR
PLUS_DEV const plus_ab_t* plus_a_ptr(const PlusArgs& args, long long b) {
  const PlusGemmShape s = plus_gemm_shape(args);
  return (const plus_ab_t*)args.in[0] + b * s.M * s.K;
}
#endif

#ifndef PLUS_HAS_LDA
PLUS_DEV long long plus_lda(const PlusArgs& args) { return plus_gemm_shape(args).K; }
#endif

#ifndef PLUS_HAS_B_PTR
PLUS_DEV const plus_ab_t* plus_b_ptr(const PlusArgs& args, long long b) {
  const PlusGemmShape s = plus_gemm_shape(args);
  return (const plus_ab_t*)args.in[1] + b * s.K * s.N * PLUS_B_COLS;
}
#endif

#ifndef PLUS_HAS_LDB
PLUS_DEV long long plus_ldb(const PlusArgs& args) {
  const PlusGemmShape s = plus_gemm_shape(args);
  return PLUS_B_TRANS ? s.K : s.N * PLUS_B_COLS;
}
#endif

// A ragged horizontal group (PLUS_HAS_GROUP_N): members whose N (and so ldb) differ. plus_gemm_shape's N is
// the largest; the generated plus_group_n(args, b) / plus_group_ldb(args, b) give member b's own, and the
// templates use those through plus_n_of / plus_ldb_of (the identity without the hooks). A CTA whose columns
// all lie past its member's N returns at once.
#ifdef PLUS_HAS_GROUP_N
PLUS_DEV long long plus_n_of(const PlusArgs& args, long long b, long long) { return plus_group_n(args, b); }
PLUS_DEV long long plus_ldb_of(const PlusArgs& args, long long b) { return plus_group_ldb(args, b); }
#else
PLUS_DEV long long plus_n_of(const PlusArgs&, long long, long long n) { return n; }
PLUS_DEV long long plus_ldb_of(const PlusArgs& args, long long) { return plus_ldb(args); }
#endif

#if !defined(PLUS_HAS_EPILOGUE) && defined(PLUS_MATH) && PLUS_MATH == 3
PLUS_DEV void plus_epilogue(const PlusArgs& args, long long b, long long m, long long n, int acc) {
  const PlusGemmShape s = plus_gemm_shape(args);
  plus_store<plus_c_t>(args.out[0], (b * s.M + m) * s.N + n, (plus_c_t)acc);    // 8-bit GEMM: the exact s32 sum
}
#elif !defined(PLUS_HAS_EPILOGUE)
PLUS_DEV void plus_epilogue(const PlusArgs& args, long long b, long long m, long long n, float acc) {
  const PlusGemmShape s = plus_gemm_shape(args);
  plus_store<plus_c_t>(args.out[0], (b * s.M + m) * s.N + n, plus_cvt<plus_c_t>(acc));
}
#endif

// ---- gated products (PLUS_GATED 1): C0 = A·B0, C1 = A·B1, one epilogue call per element with both sums
#if PLUS_GATED
// The block tile's columns interleave the products by 8: logical column c is product plus_gated_part(c),
// column plus_gated_col(c) of it; the logical width of N columns per product is plus_gated_width(N).
PLUS_DEV int plus_gated_part(long long c) { return (int)((c >> 3) & 1); }
PLUS_DEV long long plus_gated_col(long long c) { return ((c >> 4) << 3) | (c & 7); }
PLUS_DEV long long plus_gated_width(long long n) { return ((n + 7) >> 3) << 4; }

#ifndef PLUS_HAS_B1_PTR
// Default: the second half of a combined [K, 2N] weight (rows N.. of an [2N, K] one with B_TRANS 1).
PLUS_DEV const plus_ab_t* plus_b1_ptr(const PlusArgs& args, long long b) {
  const PlusGemmShape s = plus_gemm_shape(args);
  return plus_b_ptr(args, b) + (PLUS_B_TRANS ? s.N * plus_ldb(args) : s.N);
}
#endif

#ifndef PLUS_HAS_EPILOGUE_GATED
PLUS_DEV void plus_epilogue_gated(const PlusArgs& args, long long b, long long m, long long n, float acc0,
                                  float acc1) {
  const PlusGemmShape s = plus_gemm_shape(args);
  plus_store<plus_c_t>(args.out[0], (b * s.M + m) * s.N + n, plus_cvt<plus_c_t>(acc0));
  plus_store<plus_c_t>(args.out[1], (b * s.M + m) * s.N + n, plus_cvt<plus_c_t>(acc1));
}
#endif
#endif

// ---- GEMM + row program in one launch (PLUS_HAS_ROW_FINISH; kernels/gemm/render.py, route kind "one") ----
// The epilogue stores the row program's fp32 input to scratch, as in the two-kernel plan; then the CTAs that
// together wrote rows [lo, hi) of it (`arrivals` of them: one per column tile) count themselves on the group's
// 64-bit word in scratch[PLUS_ROW_FINISH], and the last to arrive runs the generated
// plus_row_finish(args, lo, hi) over those rows instead of a second kernel. The word holds
// (tag << 16) | count, the tag being this launch's grid id (never 0): a word left by another launch, or any
// value the scratch held before, counts as 0, and the last arrival resets it to 0 for the next launch, so
// the scratch needs no clearing and concurrent launches (each with its own scratch) never meet.
#ifdef PLUS_HAS_ROW_FINISH
#ifdef PLUS_HAS_GROUP_N
#error "gemm_hooks.cuh: a ragged group's CTAs past a member's N never arrive (PLUS_HAS_ROW_FINISH)"
#endif
#include "plus_arrival.cuh"

PLUS_DEV void plus_finish_rows(const PlusArgs& args, long long group, unsigned arrivals, long long lo, long long hi) {
  __shared__ int plus_last;
  __threadfence();            // this thread's scratch stores are visible device-wide before the CTA counts itself
  __syncthreads();
  if (threadIdx.x == 0)
    plus_last = plus_last_arrival((unsigned long long*)args.scratch[PLUS_ROW_FINISH] + group, arrivals);
  __syncthreads();
  if (!plus_last) return;
  __threadfence();            // the other CTAs published their stores before counting; read them after ours
  plus_row_finish(args, lo, hi);
}
#endif
