// PlusEP generated kernel source (kernels/CONTRACT.md §2); edit a copy through PLUS_EP_OVERRIDE_DIR
// node:    layernorm_embed
// pattern: layernorm (template row_reduce)
// route:   0 of 1, taken when `1` is the first non-zero condition
// variant: row
// symbols: batch = args.v[0], seq = args.v[1], seq_4 = args.v[2]
// +Graph:
//   loop0 [batch, para] {x0,x1,x2,x3,x4,x15,x5,x6}:{x20}
//     loop1 [seq, para, (add, sqrt)] {x0,x1,x2,x3,x4,x15,x5,x6}:{x20}
//       loop2 [64, non-para, (gather, gather, add, add, reduceMean)] {x0,x1,x2,x3,x4}:{x10,x11}
//       loop3 [64, non-para, (sub, mul, reduceMean)] {x10,x11}:{x12,x14}
//       loop4 [64, para, (div, mul, add)] {x12,x17,x5,x6}:{x20}
#include "plus_common.cuh"

extern "C" __global__ void PLUS_BOUNDS(256) plus_row(const PlusArgs args) {
  const long long batch = args.v[0];
  const long long seq = args.v[1];
  const long long seq_4 = args.v[2];
  const long long rows = (batch * seq);
  const long long L = 64LL;
  const int me = threadIdx.x & 31;   // this lane's first column; a warp per row
  for (long long row = blockIdx.x + (long long)gridDim.x * (threadIdx.x >> 5); row < rows; row += (long long)gridDim.x * 8) {
    const long long o1 = (row) % seq;
    float xr0[2];
    #pragma unroll
    for (int e = 0; e < 2; ++e) {
      const long long j = me + 32LL * e;
      const long long x1 = plus_load<long long>(args.in[1], row);
      const long long g2 = (x1) < 0 ? (x1) + 1000LL : (x1);
      const bool g3 = g2 >= 0 && g2 < 1000LL;
      const long long g4 = g3 ? g2 : 0LL;
      const float x5 = plus_load<float>(args.in[0], (g4) * 64LL + j);
      const float t6 = g3 ? x5 : (float)0;
      const long long x7 = plus_load<long long>(args.in[3], row);
      const long long g8 = (x7) < 0 ? (x7) + 2LL : (x7);
      const bool g9 = g8 >= 0 && g8 < 2LL;
      const long long g10 = g9 ? g8 : 0LL;
      const float x11 = plus_load<float>(args.in[2], (g10) * 64LL + j);
      const float t12 = g9 ? x11 : (float)0;
      const float t13 = (t6 + t12);
      const float x14 = plus_load<float>(args.in[4], (seq_4 == seq) ? (o1) * 64LL + j : ((seq_4 == 1LL ? 0LL : o1)) * 64LL + j);
      const float t15 = (t13 + x14);
      xr0[e] = t15;
    }
    float r0s_acc = 0.0f;
    #pragma unroll
    for (int e = 0; e < 2; ++e) {
      const long long j = me + 32LL * e;
      r0s_acc = r0s_acc + xr0[e];
    }
    const float r0s = plus_warp_sum(r0s_acc);
    const float mean0 = r0s / (float)L;
    float r0q_acc = 0.0f;
    #pragma unroll
    for (int e = 0; e < 2; ++e) {
      const long long j = me + 32LL * e;
      r0q_acc = r0q_acc + (xr0[e] - mean0) * (xr0[e] - mean0);
    }
    const float r0q = plus_warp_sum(r0q_acc);
    const float rstd0 = rsqrtf(r0q / (float)L + 9.999999960041972e-13f);
    #pragma unroll
    for (int e = 0; e < 2; ++e) {
      const long long j = me + 32LL * e;
      const float x16 = plus_load<float>(args.in[5], j);
      const float x17 = plus_load<float>(args.in[6], j);
      const float t18 = (((xr0[e] - mean0) * rstd0) * x16) + x17;
      plus_store<float>(args.out[0], (row) * 64LL + j, t18);
    }
  }
}
