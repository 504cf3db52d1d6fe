// PlusEP generated kernel source (kernels/CONTRACT.md §2); edit a copy through PLUS_EP_OVERRIDE_DIR
// node:    tma_gemm_bias_gelu
// pattern: gemm (template gemm)
// route:   0 of 1, taken when `1` is the first non-zero condition
// variant: ws_128x128x64_s6_c2/splitk1
// symbols: batch = args.v[0], seq = args.v[1]
// +Graph:
//   loop0 [batch*seq, para] {x0,x1,x2,x3,x4,x5}:{x12}
//     loop1 [384, para, (add, div, erf, add, mul, mul)] {x0,x1,x2,x3,x4,x5}:{x12}
//       loop2 [128, non-para, (dot)] {x0,x1}:{x6}
#include "plus_common.cuh"
#define PLUS_MATH 2
#define PLUS_BM 128
#define PLUS_BN 128
#define PLUS_BK 64
#define PLUS_STAGES 6
#define PLUS_SPLITK 1
#define PLUS_B_TRANS 0
#define PLUS_WS_CLUSTER 2
typedef __half plus_ab_t;
#define PLUS_HAS_GEMM_SHAPE 1
PLUS_DEV PlusGemmShape plus_gemm_shape(const PlusArgs& args) {
  const long long batch = args.v[0];
  const long long seq = args.v[1];
  return PlusGemmShape{1LL, (batch * seq), 384LL, 128LL};
}
#define PLUS_HAS_A_PTR 1
PLUS_DEV const plus_ab_t* plus_a_ptr(const PlusArgs& args, long long b) {
  return (const plus_ab_t*)args.in[0] + 0;
}
#define PLUS_HAS_LDA 1
PLUS_DEV long long plus_lda(const PlusArgs& args) { return 128LL; }
#define PLUS_HAS_B_PTR 1
PLUS_DEV const plus_ab_t* plus_b_ptr(const PlusArgs& args, long long b) {
  return (const plus_ab_t*)args.in[1] + 0;
}
#define PLUS_HAS_LDB 1
PLUS_DEV long long plus_ldb(const PlusArgs& args) { return 384LL; }
#define PLUS_HAS_EPILOGUE 1
PLUS_DEV void plus_epilogue(const PlusArgs& args, long long b, long long m, long long n, float acc) {
  (void)args; (void)b;
  const float x1 = plus_f(plus_load<__half>(args.in[2], n));
  const float t2 = (acc + x1);
  const float t3 = (t2 / 1.4140625f);
  const float t4 = erff(t3);
  const float t5 = (t4 + 1.0f);
  const float t6 = (t2 * t5);
  const float t7 = (t6 * 0.5f);
  plus_store<__half>(args.out[0], (m) * 384LL + n, plus_cvt<__half>(t7));
}
#define PLUS_TMAPS 2
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
  return &maps.m[1];
}
#include "gemm_sm90a_ws.cuh"

