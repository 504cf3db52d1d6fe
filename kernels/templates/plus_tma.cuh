// plus_tma.cuh: Hopper's asynchronous machinery as inline-PTX wrappers (sm_90+), one copy each, for the
// warp-specialised templates (gemm_sm90a_ws.cuh; attention later). Semantics from the PTX ISA (9.0):
//   mbarrier.init / arrive / arrive.expect_tx / try_wait.parity   an arrival count and a transaction count
//     (bytes) per phase; the phase completes when both reach 0; try_wait.parity p returns once the phase of
//     parity p has completed (the first wait of a fresh barrier with parity 1 returns at once)
//   cp.async.bulk.tensor.{2,3}d ... mbarrier::complete_tx::bytes   a box of a tensor map (TMA) into shared
//     memory; its bytes count on the mbarrier's transaction count; elements outside the tensor are zero
//   fence.proxy.async.shared::cta, fence.mbarrier_init.release.cluster
//   bar.sync / bar.arrive id, n   named barriers over n threads (whole warps)
//   setmaxnreg.{inc,dec}.sync.aligned.u32 n   a warpgroup's register budget
// Tensor maps arrive as the kernel's second parameter (kernels/CONTRACT.md §1, §3): a __grid_constant__
// PlusTmaps of PLUS_TMAPS maps, each named by its parameter address. Shared-memory operands are 32-bit
// shared-window addresses (plus_smem_u32). Every wrapper that touches memory carries a "memory" clobber.
#pragma once
#include "plus_ptx.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900

struct __align__(64) PlusTmap { unsigned long long opaque[16]; };   // a CUtensorMap: 128 bytes, opaque
#ifndef PLUS_TMAPS
#define PLUS_TMAPS 1
#endif
struct PlusTmaps { PlusTmap m[PLUS_TMAPS]; };

// ---- mbarriers -------------------------------------------------------------------------------------------

PLUS_DEV void plus_mbar_init(plus_u32 bar, plus_u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes this thread's mbarrier.init visible to the other threads (and to the async proxy) before they use it.
PLUS_DEV void plus_mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
PLUS_DEV void plus_mbar_arrive(plus_u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Arrive and announce `bytes` of transactions (the bulk copies this phase waits for).
PLUS_DEV void plus_mbar_arrive_expect_tx(plus_u32 bar, plus_u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// Whether the phase of parity `parity` of the barrier has completed (try_wait: the hardware may suspend the
// thread a while before answering no).
PLUS_DEV bool plus_mbar_try_wait(plus_u32 bar, plus_u32 parity) {
  plus_u32 done;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}
// Block until the phase of parity `parity` of the barrier has completed.
PLUS_DEV void plus_mbar_wait(plus_u32 bar, plus_u32 parity) {
  while (!plus_mbar_try_wait(bar, parity)) {
  }
}

// ---- TMA (tensor copies into shared memory, completing on an mbarrier) ------------------------------------

// The box of tensor map `map` at coordinates (c0, c1[, c2]) (innermost first) into shared `dst` (128-byte
// aligned; 1024 under the 128-byte swizzle), its bytes counted on `bar`.
PLUS_DEV void plus_tma_load_2d(plus_u32 dst, const PlusTmap* map, int c0, int c1, plus_u32 bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(map), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}
PLUS_DEV void plus_tma_load_3d(plus_u32 dst, const PlusTmap* map, int c0, int c1, int c2, plus_u32 bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n" ::"r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}

// The same box written to the same shared offset in every CTA of the cluster that `mask` names (bit r: rank r),
// its bytes counted on the mbarrier at `bar`'s offset in each of them.
PLUS_DEV void plus_tma_load_3d_multicast(plus_u32 dst, const PlusTmap* map, int c0, int c1, int c2, plus_u32 bar,
                                         unsigned short mask) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, "
      "{%2, %3, %4}], [%5], %6;\n" ::"r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(bar), "h"(mask)
      : "memory");
}
// Arrive on the mbarrier at shared::cluster address `bar` (another CTA's, from plus_mapa_shared).
PLUS_DEV void plus_mbar_arrive_cluster(plus_u32 bar) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// The cluster barrier without .aligned: threads may reach it on different paths (the end of a warp-specialised
// kernel, whose roles finish apart).
PLUS_DEV void plus_cluster_sync_any() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}

// ---- named barriers, register budgets ---------------------------------------------------------------------

// The `n` threads (whole warps) that use barrier `id` (1..15; 0 is __syncthreads') wait for each other.
PLUS_DEV void plus_named_sync(plus_u32 id, plus_u32 n) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }

// This warpgroup's registers per thread from here on (all four warps execute it, converged): producers give
// theirs up (dec), consumers take them (inc); n a multiple of 8 in 24..256.
template <int N> PLUS_DEV void plus_setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }
template <int N> PLUS_DEV void plus_setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }

#endif  // __CUDA_ARCH__ >= 900
