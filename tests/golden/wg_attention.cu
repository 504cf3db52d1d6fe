// PlusEP generated kernel source (kernels/CONTRACT.md §2); edit a copy through PLUS_EP_OVERRIDE_DIR
// node:    wg_attention
// pattern: attention (template flash_attention)
// route:   1 of 2, taken when `1` is the first non-zero condition
// variant: wg_d64_q128_kv128_s2
// symbols: batch = args.v[0], seq = args.v[1], batch_3 = args.v[2], seq_3 = args.v[3]
// +Graph:
//   loop0 [batch, para] {x0,x1,x2,x3,x4}:{x14}
//     loop1 [4, para] {x0,x1,x2,x3,x4}:{x14}
//       loop2 [seq, para] {x0,x1,x2,x3,x4}:{x14}
//         loop3 [seq, non-para, (mul, add, reduceMax)] {x0,x1,x2,x3}:{x8,x9}
//           loop4 [64, non-para, (transpose, dot)] {x0,x1}:{x6}
//         loop5 [seq, non-para, (sub, exp, reduceSum)] {x8,x9}:{x11,x12}
//         loop6 [seq, para, (div)] {x11,x12}:{x13}
//         loop7 [64, para] {x13,x4}:{x14}
//           loop8 [seq, non-para, (dot)] {x13,x4}:{x14}
#include "plus_common.cuh"
#define PLUS_HEAD_DIM 64
#define PLUS_BQ 128
#define PLUS_BKV 128
#define PLUS_WARPS 12
#define PLUS_MATH 2
#define PLUS_ATTN_WGMMA 1
#define PLUS_ATTN_STAGES 2
#define PLUS_MASKED_ROW_NAN 1
typedef __half plus_qkv_t;
#define PLUS_HAS_ATTN_SHAPE 1
PLUS_DEV PlusAttnShape plus_attn_shape(const PlusArgs& args) {
  const long long batch = args.v[0];
  const long long seq = args.v[1];
  return PlusAttnShape{batch, 4LL, 4LL, seq, seq};
}
#define PLUS_HAS_Q 1
PLUS_DEV float plus_q(const PlusArgs& args, long long b, long long h, long long i, int d) {
  const long long seq = args.v[1];
  if (d >= 64) return 0.0f;
  const float x1 = plus_f(plus_load<__half>(args.in[1], (((b) * 4LL + h) * seq + i) * 64LL + d));
  return x1;
}
#define PLUS_HAS_K 1
PLUS_DEV float plus_k(const PlusArgs& args, long long b, long long h, long long j, int d) {
  const long long seq = args.v[1];
  if (d >= 64) return 0.0f;
  const float x2 = plus_f(plus_load<__half>(args.in[0], (((b) * 4LL + h) * seq + j) * 64LL + d));
  return x2;
}
#define PLUS_HAS_V 1
PLUS_DEV float plus_v(const PlusArgs& args, long long b, long long h, long long j, int d) {
  const long long seq = args.v[1];
  if (d >= 64) return 0.0f;
  const float x3 = plus_f(plus_load<__half>(args.in[4], (((b) * 4LL + h) * seq + j) * 64LL + d));
  return x3;
}
#define PLUS_HAS_QKV_PTR 1
PLUS_DEV const plus_qkv_t* plus_q_ptr(const PlusArgs& args, long long b, long long h) {
  const PlusAttnShape s = plus_attn_shape(args);
  return (const plus_qkv_t*)args.in[1] + (b * s.H + h) * s.Sq * 64LL;
}
PLUS_DEV long long plus_q_ld(const PlusArgs&) { return 64; }
PLUS_DEV const plus_qkv_t* plus_v_ptr(const PlusArgs& args, long long b, long long hkv) {
  const PlusAttnShape s = plus_attn_shape(args);
  return (const plus_qkv_t*)args.in[4] + (b * s.Hkv + hkv) * s.Skv * 64LL;
}
PLUS_DEV long long plus_v_ld(const PlusArgs&) { return 64; }
#define PLUS_HAS_SCORE 1
PLUS_DEV float plus_score(const PlusArgs& args, long long b, long long h, long long i, long long j, float s) {
  const float t4 = (s * 0.125f);
  return t4;
}
#define PLUS_HAS_KEY_BIAS 1
PLUS_DEV float plus_key_bias(const PlusArgs& args, long long b, long long h, long long j) {
  const long long batch = args.v[0];
  const long long seq = args.v[1];
  const long long batch_3 = args.v[2];
  const long long seq_3 = args.v[3];
  const float x5 = plus_f(plus_load<__half>(args.in[3], (batch_3 == batch && seq_3 == seq) ? (((b))) * seq + j : ((((batch_3 == 1LL ? 0LL : b)))) * seq_3 + (seq_3 == 1LL ? 0LL : j)));
  return x5;
}
#define PLUS_HAS_ATTN_OUT 1
PLUS_DEV void plus_attn_out(const PlusArgs& args, long long b, long long h, long long i, int d, float o) {
  const long long seq = args.v[1];
  if (d >= 64) return;
  plus_store<__half>(args.out[0], (((b) * 4LL + h) * seq + i) * 64LL + d, plus_cvt<__half>(o));
}
#include "attention.cuh"

