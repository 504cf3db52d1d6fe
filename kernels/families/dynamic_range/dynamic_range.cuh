// dynamic_range.cuh: lo = min x and hi = max x over all n elements of a float32 tensor in one launch, then the
// renderer's scalar epilogue (a dynamic quantization's scale and zero point) on them. Every CTA takes a
// grid-stride share, reduces it across the block and publishes its (lo, hi) to scratch; the last CTA to arrive
// (plus_arrival.cuh) combines the partials and calls plus_dr_finish once. Min and max are exact in any order.
// As onnxruntime's ReduceMin/ReduceMax (kernels/codegen/row.py's rule): NaN when the first element is NaN,
// NaN elsewhere skipped; no element gives lo = +inf, hi = -inf.
//
// Hooks (kernels/families/dynamic_range/render.py defines them after including this file, which declares them):
//   long long plus_dr_count(args)                    n
//   float plus_dr_x(args, long long i)               element i of x in its row-major order
//   void plus_dr_finish(args, float lo, float hi)    one thread: stores the outputs computed from lo and hi
// Scratch: args.scratch[PLUS_DR_SCRATCH], one 64-bit arrival word then 2 floats per CTA (grid <= PLUS_DR_MAX_GRID).
#pragma once
#include "plus_arrival.cuh"

#define PLUS_DR_THREADS 256
#define PLUS_DR_MAX_GRID 1024

PLUS_DEV long long plus_dr_count(const PlusArgs& args);
PLUS_DEV float plus_dr_x(const PlusArgs& args, long long i);
PLUS_DEV void plus_dr_finish(const PlusArgs& args, float lo, float hi);

extern "C" __global__ void PLUS_BOUNDS(PLUS_DR_THREADS) plus_dynamic_range(const PlusArgs args) {
  __shared__ float red[33];
  __shared__ int last;
  const long long n = plus_dr_count(args);
  float lo = CUDART_INF_F, hi = -CUDART_INF_F;
  for (long long i = (long long)blockIdx.x * PLUS_DR_THREADS + threadIdx.x; i < n;
       i += (long long)gridDim.x * PLUS_DR_THREADS) {
    const float v = plus_dr_x(args, i);
    lo = fminf(lo, v);
    hi = fmaxf(hi, v);
  }
  lo = plus_block_min(lo, red);
  hi = plus_block_max(hi, red);
  unsigned long long* word = (unsigned long long*)args.scratch[PLUS_DR_SCRATCH];
  float* part = (float*)(word + 1);
  if (threadIdx.x == 0) {
    part[2 * blockIdx.x] = lo;
    part[2 * blockIdx.x + 1] = hi;
  }
  __threadfence();            // the partial is visible device-wide before this CTA counts itself
  __syncthreads();
  if (threadIdx.x == 0) last = plus_last_arrival(word, gridDim.x);
  __syncthreads();
  if (!last) return;
  __threadfence();            // the other CTAs published before counting; read their partials after ours
  lo = CUDART_INF_F;
  hi = -CUDART_INF_F;
  for (unsigned c = threadIdx.x; c < gridDim.x; c += PLUS_DR_THREADS) {
    lo = fminf(lo, __ldcg(part + 2 * c));
    hi = fmaxf(hi, __ldcg(part + 2 * c + 1));
  }
  lo = plus_block_min(lo, red);
  hi = plus_block_max(hi, red);
  if (threadIdx.x == 0) {
    if (n > 0) {
      const float x0 = plus_dr_x(args, 0);
      if (x0 != x0) lo = hi = x0;
    }
    plus_dr_finish(args, lo, hi);
  }
}
