// plus_common.cuh: what every generated PlusEP kernel source includes first (see kernels/CONTRACT.md).
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <math_constants.h>

#include "plus_abi.h"   // PlusArgs and the launcher's limits, shared with plus_ep/native/plan.h

#define PLUS_DEV __device__ __forceinline__

// Launch bounds of the generated row and point-wise kernels (kernels/codegen/row.py, kernels/codegen/pointwise.py): at
// most `threads` per block. Alone, ptxas may cap registers for full occupancy and spill; a kernel that
// spills is compiled again with -DPLUS_BOUNDS_MIN_BLOCKS=1 (kernels/build/compile.py), which asks for one
// resident block per SM only, so the whole register file is available.
#ifdef PLUS_BOUNDS_MIN_BLOCKS
#define PLUS_BOUNDS(threads) __launch_bounds__(threads, PLUS_BOUNDS_MIN_BLOCKS)
#else
#define PLUS_BOUNDS(threads) __launch_bounds__(threads)
#endif

// Problem sizes returned by the generated shape hooks (declared here: hooks precede the templates).
struct PlusGemmShape {
  long long batch, M, N, K;
};
struct PlusAttnShape {
  long long B, H, Hkv, Sq, Skv;
};

// ---- element conversions: hooks compute in float (or int64/bool for index and mask math) ----
PLUS_DEV float plus_f(float x) { return x; }
PLUS_DEV float plus_f(double x) { return (float)x; }
PLUS_DEV float plus_f(__half x) { return __half2float(x); }
PLUS_DEV float plus_f(__nv_bfloat16 x) { return __bfloat162float(x); }
PLUS_DEV float plus_f(long long x) { return (float)x; }
PLUS_DEV float plus_f(int x) { return (float)x; }
PLUS_DEV float plus_f(bool x) { return x ? 1.0f : 0.0f; }

template <typename T> PLUS_DEV T plus_cvt(float x) { return (T)x; }
template <> PLUS_DEV __half plus_cvt<__half>(float x) { return __float2half_rn(x); }
template <> PLUS_DEV __nv_bfloat16 plus_cvt<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> PLUS_DEV bool plus_cvt<bool>(float x) { return x != 0.0f; }
template <> PLUS_DEV long long plus_cvt<long long>(float x) { return (long long)x; }
template <> PLUS_DEV int plus_cvt<int>(float x) { return (int)x; }

template <typename T> PLUS_DEV T plus_load(const void* p, long long i) { return ((const T*)p)[i]; }
template <typename T> PLUS_DEV void plus_store(void* p, long long i, T x) { ((T*)p)[i] = x; }

#include "plus_quant.cuh"   // float8 values, saturation, packed int4 loads (QuantizeLinear / DequantizeLinear)

PLUS_DEV long long plus_cdiv(long long a, long long b) { return (a + b - 1) / b; }

// ---- warp / block reductions (blockDim.x a multiple of 32, at most 1024 threads) ----
PLUS_DEV float plus_warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
PLUS_DEV float plus_warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
PLUS_DEV float plus_warp_min(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fminf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
PLUS_DEV float plus_warp_prod(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x *= __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// Block-wide reduction; every thread gets the result. `red` is 33 floats of shared memory. max/min skip
// NaN (fmaxf/fminf); kernels/codegen/row.py applies onnxruntime's rule (NaN iff the row's first element is NaN).
#define PLUS_BLOCK_REDUCE(NAME, WARP_OP, IDENT)                                  \
  PLUS_DEV float NAME(float x, float* red) {                                    \
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;                 \
    const int nwarps = (blockDim.x + 31) >> 5;                                  \
    x = WARP_OP(x);                                                             \
    __syncthreads();                                                            \
    if (lane == 0) red[warp] = x;                                               \
    __syncthreads();                                                            \
    if (warp == 0) {                                                            \
      float y = lane < nwarps ? red[lane] : (IDENT);                            \
      y = WARP_OP(y);                                                           \
      if (lane == 0) red[32] = y;                                               \
    }                                                                           \
    __syncthreads();                                                            \
    return red[32];                                                             \
  }
PLUS_BLOCK_REDUCE(plus_block_sum, plus_warp_sum, 0.0f)
PLUS_BLOCK_REDUCE(plus_block_max, plus_warp_max, -CUDART_INF_F)
PLUS_BLOCK_REDUCE(plus_block_min, plus_warp_min, CUDART_INF_F)
PLUS_BLOCK_REDUCE(plus_block_prod, plus_warp_prod, 1.0f)
#undef PLUS_BLOCK_REDUCE
