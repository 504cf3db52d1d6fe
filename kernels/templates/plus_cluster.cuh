// plus_cluster.cuh: cluster-wide row reductions of the row program that kernels/codegen/row.py renders into the sm_90a
// GEMM's epilogue (PLUS_HAS_ROW_TILE, kernels/CONTRACT.md §2.1). The CTAs of one thread-block cluster own
// column slices of the same rows: each writes its per-row partial to a shared array, a cluster barrier
// (release/acquire) publishes them, and every CTA then combines all C ranks' partials of a row through
// distributed shared memory, in rank order, so every CTA gets the same bits. With split-K inside the cluster
// the CTAs of one split form such a group (plus_cluster_row_base).
#pragma once
#include "plus_ptx.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900

// The CTAs that share rows: all of the cluster, or with split-K inside the cluster (the sm_90a GEMM's
// PLUS_SPLITK_CLUSTER, cluster (PLUS_CLUSTER_X, 1, S)) the PLUS_CLUSTER_X ranks of this CTA's split, which
// hold the same rows: ranks base .. base + PLUS_CLUSTER_X - 1.
PLUS_DEV plus_u32 plus_cluster_row_base() {
#if defined(PLUS_SPLITK_CLUSTER) && defined(PLUS_CLUSTER_X) && PLUS_SPLITK_CLUSTER > 1
  return plus_cluster_ctarank() / PLUS_CLUSTER_X * PLUS_CLUSTER_X;
#else
  return 0;
#endif
}

// The float at `part` (this CTA's shared memory) as the CTA of rank `rank` among those sharing its rows
// holds it.
PLUS_DEV float plus_cluster_partial(const float* part, int rank) {
  return plus_ld_shared_cluster_f(plus_mapa_shared(plus_smem_u32(part), plus_cluster_row_base() + (plus_u32)rank));
}

// combine(...combine(combine(ident, p_0), p_1)..., p_{C-1}) of the partials p_q at `part` in ranks 0..C-1.
// Call it between a cluster barrier that follows every rank's write of `part` and the next write of it.
template <int C, typename Combine>
PLUS_DEV float plus_cluster_reduce(const float* part, float ident, Combine combine) {
  float acc = ident;
#pragma unroll
  for (int q = 0; q < C; ++q) acc = combine(acc, plus_cluster_partial(part, q));
  return acc;
}

#endif  // __CUDA_ARCH__ >= 900

// Four rows' partials reduced across a warp at once (v[i]: this lane's partial of row i): 6 shuffles instead of
// 4 x 5. Lane l returns the reduction over all 32 lanes of row l >> 3 (lanes 0-7: row 0, ..., 24-31: row 3).
template <typename Combine>
PLUS_DEV float plus_warp_reduce4(const float (&v)[4], Combine combine) {
  const unsigned lane = threadIdx.x & 31u;
  const bool h16 = lane & 16u, h8 = lane & 8u;
  // offset 16: lanes 0-15 keep rows 0 and 1, lanes 16-31 rows 2 and 3
  const float a = combine(h16 ? v[2] : v[0], __shfl_xor_sync(0xffffffffu, h16 ? v[0] : v[2], 16));
  const float b = combine(h16 ? v[3] : v[1], __shfl_xor_sync(0xffffffffu, h16 ? v[1] : v[3], 16));
  // offset 8: lanes with bit 3 clear keep the first of the pair, set the second
  float c = combine(h8 ? b : a, __shfl_xor_sync(0xffffffffu, h8 ? a : b, 8));
#pragma unroll
  for (int o = 4; o > 0; o >>= 1) c = combine(c, __shfl_xor_sync(0xffffffffu, c, o));
  return c;
}
