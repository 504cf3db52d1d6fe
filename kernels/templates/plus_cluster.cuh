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
