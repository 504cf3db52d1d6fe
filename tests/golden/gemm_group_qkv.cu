// PlusEP generated kernel source (kernels/CONTRACT.md §2); edit a copy through PLUS_EP_OVERRIDE_DIR
// node:    gemm_group_qkv
// pattern: gemm_group (template gemm_group)
// route:   0 of 3, taken when `s0,s1,*,1024,<=` is the first non-zero condition
// variant: simt_32x64x16_w16x32/splitk1
// symbols: batch = args.v[0], seq = args.v[1]
// +Graph:
//   loop0 [batch*seq, para] {x0,x1,x2}:{x10}
//     loop1 [64, para, (add, reshape, transpose)] {x0,x1,x2}:{x10}
//       loop2 [64, non-para, (dot)] {x0,x1}:{x7}
//   loop3 [batch*seq, para] {x0,x3,x4}:{x14}
//     loop4 [64, para, (add, reshape, transpose)] {x0,x3,x4}:{x14}
//       loop5 [64, non-para, (dot)] {x0,x3}:{x11}
//   loop6 [batch*seq, para] {x0,x5,x6}:{x18}
//     loop7 [64, para, (add, reshape, transpose)] {x0,x5,x6}:{x18}
//       loop8 [64, non-para, (dot)] {x0,x5}:{x15}
#include "plus_common.cuh"
#define PLUS_MATH 0
#define PLUS_BM 32
#define PLUS_BN 64
#define PLUS_BK 16
#define PLUS_WM 16
#define PLUS_WN 32
#define PLUS_STAGES 2
#define PLUS_SPLITK 1
#define PLUS_B_TRANS 0
#define PLUS_ALIGNED 1
typedef float plus_ab_t;
#define PLUS_HAS_GEMM_SHAPE 1
PLUS_DEV PlusGemmShape plus_gemm_shape(const PlusArgs& args) {
  const long long batch = args.v[0];
  const long long seq = args.v[1];
  return PlusGemmShape{3LL, (batch * seq), 64LL, 64LL};
}
#define PLUS_HAS_A_PTR 1
PLUS_DEV const plus_ab_t* plus_a_ptr(const PlusArgs& args, long long plus_bg) {
  const long long b = plus_bg % 1LL;
  (void)b;
  return (const plus_ab_t*)args.in[0] + 0;
}
#define PLUS_HAS_LDA 1
PLUS_DEV long long plus_lda(const PlusArgs& args) { return 64LL; }
#define PLUS_HAS_B_PTR 1
PLUS_DEV const plus_ab_t* plus_b_ptr(const PlusArgs& args, long long plus_bg) {
  const long long plus_g = plus_bg / 1LL, b = plus_bg % 1LL;
  (void)plus_g; (void)b;
  const plus_ab_t* base = plus_g == 0 ? (const plus_ab_t*)args.in[1] : plus_g == 1 ? (const plus_ab_t*)args.in[4] : (const plus_ab_t*)args.in[7];
  return base + 0;
}
#define PLUS_HAS_LDB 1
PLUS_DEV long long plus_ldb(const PlusArgs& args) { return 64LL; }
#define PLUS_HAS_EPILOGUE 1
PLUS_DEV void plus_epilogue(const PlusArgs& args, long long plus_bg, long long m, long long n, float acc) {
  const long long seq = args.v[1];
  const long long plus_g = plus_bg / 1LL, b = plus_bg % 1LL;
  (void)plus_g; (void)b;
  (void)args;
  if (plus_g == 0) {
  const float x1 = plus_load<float>(args.in[2], n);
  const float t2 = (x1 + acc);
  plus_store<float>(args.out[0], ((((m) / seq) * 4LL + (n) / 16LL) * seq + (m) % seq) * 16LL + (n) % 16LL, t2);
  } else if (plus_g == 1) {
  const float x1 = plus_load<float>(args.in[5], n);
  const float t2 = (x1 + acc);
  plus_store<float>(args.out[2], (((m) / seq) * 64LL + n) * seq + (m) % seq, t2);
  } else {
  const float x1 = plus_load<float>(args.in[8], n);
  const float t2 = (x1 + acc);
  plus_store<float>(args.out[1], ((((m) / seq) * 4LL + (n) / 16LL) * seq + (m) % seq) * 16LL + (n) % 16LL, t2);
  }
}
#include "gemm.cuh"

