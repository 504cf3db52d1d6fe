// plus_cluster.cuh: cluster-wide row reductions of the row program that kernels/codegen/row.py renders into the sm_90a
// GEMM's epilogue (PLUS_HAS_ROW_TILE, kernels/CONTRACT.md §2.1). The CTAs of one thread-block cluster own
// column slices of the same rows: each writes its per-row partial to a shared array, a cluster barrier
// (release/acquire) publishes them, and every CTA then combines all C ranks' partials of a row through
// distributed shared memory, in rank order, so every CTA gets the same bits.
#pragma once
#include "plus_ptx.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900

// The float at `part` (this CTA's shared memory) as the CTA of rank `rank` of the cluster holds it.
PLUS_DEV float plus_cluster_partial(const float* part, int rank) {
  return plus_ld_shared_cluster_f(plus_mapa_shared(plus_smem_u32(part), (plus_u32)rank));
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
