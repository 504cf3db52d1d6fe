// PlusEP generated kernel source (kernels/CONTRACT.md §2); edit a copy through PLUS_EP_OVERRIDE_DIR
// node:    tma_gemm_group_qkv
// pattern: gemm_group (template gemm_group)
// route:   0 of 1, taken when `1` is the first non-zero condition
// variant: ws_128x128x64_s6_c2/splitk1
// symbols: batch = args.v[0], seq = args.v[1]
// +Graph:
//   loop0 [batch*seq, para] {x0,x1,x2}:{x10}
//     loop1 [128, para, (add, reshape, transpose)] {x0,x1,x2}:{x10}
//       loop2 [128, non-para, (dot)] {x0,x1}:{x7}
//   loop3 [batch*seq, para] {x0,x3,x4}:{x14}
//     loop4 [128, para, (add, reshape, transpose)] {x0,x3,x4}:{x14}
//       loop5 [128, non-para, (dot)] {x0,x3}:{x11}
//   loop6 [batch*seq, para] {x0,x5,x6}:{x18}
//     loop7 [128, para, (add, reshape, transpose)] {x0,x5,x6}:{x18}
//       loop8 [128, non-para, (dot)] {x0,x5}:{x15}
#include "plus_common.cuh"
#define PLUS_MATH 2
#define PLUS_BM 128
#define PLUS_BN 128
#define PLUS_BK 64
#define PLUS_STAGES 6
#define PLUS_SPLITK 1
#define PLUS_B_TRANS 0
#define PLUS_WS_CLUSTER 2
#define PLUS_EPI_M_FASTEST 2
typedef __half plus_ab_t;
#define PLUS_HAS_GEMM_SHAPE 1
PLUS_DEV PlusGemmShape plus_gemm_shape(const PlusArgs& args) {
  const long long batch = args.v[0];
  const long long seq = args.v[1];
  return PlusGemmShape{3LL, (batch * seq), 128LL, 128LL};
}
#define PLUS_HAS_A_PTR 1
PLUS_DEV const plus_ab_t* plus_a_ptr(const PlusArgs& args, long long plus_bg) {
  const long long b = plus_bg % 1LL;
  (void)b;
  return (const plus_ab_t*)args.in[0] + 0;
}
#define PLUS_HAS_LDA 1
PLUS_DEV long long plus_lda(const PlusArgs& args) { return 128LL; }
#define PLUS_HAS_B_PTR 1
PLUS_DEV const plus_ab_t* plus_b_ptr(const PlusArgs& args, long long plus_bg) {
  const long long plus_g = plus_bg / 1LL, b = plus_bg % 1LL;
  (void)plus_g; (void)b;
  const plus_ab_t* base = plus_g == 0 ? (const plus_ab_t*)args.in[1] : plus_g == 1 ? (const plus_ab_t*)args.in[3] : (const plus_ab_t*)args.in[5];
  return base + 0;
}
#define PLUS_HAS_LDB 1
PLUS_DEV long long plus_ldb(const PlusArgs& args) { return 128LL; }
#define PLUS_HAS_EPILOGUE 1
PLUS_DEV void plus_epilogue(const PlusArgs& args, long long plus_bg, long long m, long long n, float acc) {
  const long long seq = args.v[1];
  const long long plus_g = plus_bg / 1LL, b = plus_bg % 1LL;
  (void)plus_g; (void)b;
  (void)args;
  if (plus_g == 0) {
  const float x1 = plus_f(plus_load<__half>(args.in[2], n));
  const float t2 = (acc + x1);
  plus_store<__half>(args.out[0], ((((m) / seq) * 2LL + (n) / 64LL) * seq + (m) % seq) * 64LL + (n) % 64LL, plus_cvt<__half>(t2));
  } else if (plus_g == 1) {
  const float x1 = plus_f(plus_load<__half>(args.in[4], n));
  const float t2 = (acc + x1);
  plus_store<__half>(args.out[1], (((m) / seq) * 128LL + n) * seq + (m) % seq, plus_cvt<__half>(t2));
  } else {
  const float x1 = plus_f(plus_load<__half>(args.in[6], n));
  const float t2 = (acc + x1);
  plus_store<__half>(args.out[2], ((((m) / seq) * 2LL + (n) / 64LL) * seq + (m) % seq) * 64LL + (n) % 64LL, plus_cvt<__half>(t2));
  }
}
#define PLUS_HAS_EPI_M_FASTEST 1
PLUS_DEV bool plus_epi_m_fastest(const PlusArgs& args, long long plus_bg) {
  const long long plus_g = plus_bg / 1LL;
  return plus_g == 1;
}
#define PLUS_TMAPS 4
#include "plus_tma.cuh"
#define PLUS_HAS_TMA_MAPS 1
PLUS_DEV const PlusTmap* plus_tma_a(const PlusTmaps& maps, long long plus_bg, int& z) {
  const long long plus_g = plus_bg / 1LL, b = plus_bg % 1LL;
  (void)plus_g; (void)b;
  z = 0;
  return &maps.m[0];
}
PLUS_DEV const PlusTmap* plus_tma_b(const PlusTmaps& maps, long long plus_bg, int& z) {
  const long long plus_g = plus_bg / 1LL, b = plus_bg % 1LL;
  (void)plus_g; (void)b;
  z = 0;
  return &maps.m[1 + plus_g];
}
#include "gemm_sm90a_ws.cuh"

