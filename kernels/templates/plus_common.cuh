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

// ---- 8-bit floats (ONNX float8e4m3fn: bias 7, no infinity, NaN 0x7f; float8e5m2: bias 15, IEEE-like) and
// packed 4-bit integers (two per byte, the low nibble first; loads only) ----
struct plus_fp8e4m3 { unsigned char bits; };
struct plus_fp8e5m2 { unsigned char bits; };

// x rounded to the nearest (ties to even) value of the 8-bit float with M mantissa bits and exponent bias
// BIAS, as a float. Overflow (past MAX after rounding) and infinities: MAX with `sat`, else NaN (E5 0) or
// infinity (E5 1); NaN stays NaN. ONNX QuantizeLinear/Cast to float8 with saturate=1/0.
template <int M, int BIAS, bool E5>
PLUS_DEV float plus_fp8_round(float x, bool sat) {
  const float MAX = E5 ? 57344.0f : 448.0f;
  const unsigned s = __float_as_uint(x) & 0x80000000u;
  float a = fabsf(x);
  if (a != a) return x;
  if (a == CUDART_INF_F) a = sat ? MAX : (E5 ? CUDART_INF_F : CUDART_NAN_F);
  else {
    int e = (int)((__float_as_uint(a) >> 23) & 0xff) - 127;
    if (e < 1 - BIAS) e = 1 - BIAS;                                   // subnormals share the smallest quantum
    const float up = __uint_as_float((unsigned)(M - e + 127) << 23);  // 2^(M - e): exact scaling
    const float down = __uint_as_float((unsigned)(e - M + 127) << 23);
    a = rintf(a * up) * down;
    if (a > MAX) a = sat ? MAX : (E5 ? CUDART_INF_F : CUDART_NAN_F);
  }
  return __uint_as_float(__float_as_uint(a) | s);
}
PLUS_DEV float plus_e4m3_round(float x, bool sat) { return plus_fp8_round<3, 7, false>(x, sat); }
PLUS_DEV float plus_e5m2_round(float x, bool sat) { return plus_fp8_round<2, 15, true>(x, sat); }

// The bits of a float that is a value of the 8-bit float (plus_fp8_round's results).
template <int M, int BIAS, bool E5>
PLUS_DEV unsigned char plus_fp8_bits(float r) {
  const unsigned u = __float_as_uint(r);
  const unsigned s = (u >> 24) & 0x80u;
  const float a = fabsf(r);
  if (a != a) return (unsigned char)(s | 0x7fu);
  if (a == CUDART_INF_F) return (unsigned char)(s | (E5 ? 0x7cu : 0x7fu));
  const int e = (int)((u >> 23) & 0xff) - 127;
  if (a == 0.0f) return (unsigned char)s;
  if (e < 1 - BIAS)                                                     // subnormal: a / 2^(1 - BIAS - M)
    return (unsigned char)(s | (unsigned)(a * __uint_as_float((unsigned)(M + BIAS - 1 + 127) << 23)));
  return (unsigned char)(s | ((unsigned)(e + BIAS) << M) | ((u >> (23 - M)) & ((1u << M) - 1)));
}
template <int M, int BIAS, bool E5>
PLUS_DEV float plus_fp8_value(unsigned char b) {
  const unsigned s = (unsigned)(b & 0x80u) << 24;
  const int e = (b >> M) & ((1 << (7 - M)) - 1), m = b & ((1 << M) - 1);
  float a;
  if (!E5 && (b & 0x7fu) == 0x7fu) a = CUDART_NAN_F;
  else if (E5 && e == 31) a = m ? CUDART_NAN_F : CUDART_INF_F;
  else if (e == 0) a = (float)m * __uint_as_float((unsigned)(127 + 1 - BIAS - M) << 23);
  else a = __uint_as_float((unsigned)(e - BIAS + 127) << 23 | (unsigned)m << (23 - M));
  return __uint_as_float(__float_as_uint(a) | s);
}
PLUS_DEV float plus_f(plus_fp8e4m3 x) { return plus_fp8_value<3, 7, false>(x.bits); }
PLUS_DEV float plus_f(plus_fp8e5m2 x) { return plus_fp8_value<2, 15, true>(x.bits); }
template <> PLUS_DEV plus_fp8e4m3 plus_cvt<plus_fp8e4m3>(float x) {
  return plus_fp8e4m3{plus_fp8_bits<3, 7, false>(plus_e4m3_round(x, true))};
}
template <> PLUS_DEV plus_fp8e5m2 plus_cvt<plus_fp8e5m2>(float x) {
  return plus_fp8e5m2{plus_fp8_bits<2, 15, true>(plus_e5m2_round(x, true))};
}

// ONNX QuantizeLinear's saturation of a rounded value: NaN goes to the lower bound (onnxruntime, onnx.reference).
PLUS_DEV long long plus_saturate(float v, float lo, float hi) {
  return (long long)(v >= lo ? (v <= hi ? v : hi) : lo);
}

PLUS_DEV long long plus_load_int4(const void* p, long long i) {
  const unsigned v = (((const unsigned char*)p)[i >> 1] >> ((i & 1) * 4)) & 15u;
  return (long long)((int)(v ^ 8u) - 8);
}
PLUS_DEV long long plus_load_uint4(const void* p, long long i) {
  return (long long)((((const unsigned char*)p)[i >> 1] >> ((i & 1) * 4)) & 15u);
}

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
