// plus_quant.cuh: element helpers of QuantizeLinear / DequantizeLinear (kernels/codegen/cexpr.py), included by
// plus_common.cuh. Plain C++ on float bits: tests/cpu/test_quant_codegen.py compiles this file with g++ (PLUS_DEV,
// __float_as_uint, __uint_as_float and the CUDART constants given as host shims) against onnx.reference.
#pragma once

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
#ifndef PLUS_QUANT_HOST
template <> PLUS_DEV plus_fp8e4m3 plus_cvt<plus_fp8e4m3>(float x) {
  return plus_fp8e4m3{plus_fp8_bits<3, 7, false>(plus_e4m3_round(x, true))};
}
template <> PLUS_DEV plus_fp8e5m2 plus_cvt<plus_fp8e5m2>(float x) {
  return plus_fp8e5m2{plus_fp8_bits<2, 15, true>(plus_e5m2_round(x, true))};
}
#endif

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

