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
  __shared__ float red[33];
  const long long rows = (batch * seq);
  const long long L = 64LL;
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    float r0s_acc = 0.0f;
    for (long long j = threadIdx.x; j < L; j += blockDim.x) {
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
      const float x14 = plus_load<float>(args.in[4], (seq_4 == seq) ? ((row) % seq) * 64LL + j : ((seq_4 == 1LL ? 0LL : (row) % seq)) * 64LL + j);
      const float t15 = (t13 + x14);
      r0s_acc = r0s_acc + t15;
    }
    const float r0s = plus_block_sum(r0s_acc, red);
    const float mean0 = r0s / (float)L;
    float r0q_acc = 0.0f;
    for (long long j = threadIdx.x; j < L; j += blockDim.x) {
      const long long x16 = plus_load<long long>(args.in[1], row);
      const long long g17 = (x16) < 0 ? (x16) + 1000LL : (x16);
      const bool g18 = g17 >= 0 && g17 < 1000LL;
      const long long g19 = g18 ? g17 : 0LL;
      const float x20 = plus_load<float>(args.in[0], (g19) * 64LL + j);
      const float t21 = g18 ? x20 : (float)0;
      const long long x22 = plus_load<long long>(args.in[3], row);
      const long long g23 = (x22) < 0 ? (x22) + 2LL : (x22);
      const bool g24 = g23 >= 0 && g23 < 2LL;
      const long long g25 = g24 ? g23 : 0LL;
      const float x26 = plus_load<float>(args.in[2], (g25) * 64LL + j);
      const float t27 = g24 ? x26 : (float)0;
      const float t28 = (t21 + t27);
      const float x29 = plus_load<float>(args.in[4], (seq_4 == seq) ? ((row) % seq) * 64LL + j : ((seq_4 == 1LL ? 0LL : (row) % seq)) * 64LL + j);
      const float t30 = (t28 + x29);
      r0q_acc = r0q_acc + (t30 - mean0) * (t30 - mean0);
    }
    const float r0q = plus_block_sum(r0q_acc, red);
    const float rstd0 = rsqrtf(r0q / (float)L + 9.999999960041972e-13f);
    for (long long j = threadIdx.x; j < L; j += blockDim.x) {
      const long long x31 = plus_load<long long>(args.in[1], row);
      const long long g32 = (x31) < 0 ? (x31) + 1000LL : (x31);
      const bool g33 = g32 >= 0 && g32 < 1000LL;
      const long long g34 = g33 ? g32 : 0LL;
      const float x35 = plus_load<float>(args.in[0], (g34) * 64LL + j);
      const float t36 = g33 ? x35 : (float)0;
      const long long x37 = plus_load<long long>(args.in[3], row);
      const long long g38 = (x37) < 0 ? (x37) + 2LL : (x37);
      const bool g39 = g38 >= 0 && g38 < 2LL;
      const long long g40 = g39 ? g38 : 0LL;
      const float x41 = plus_load<float>(args.in[2], (g40) * 64LL + j);
      const float t42 = g39 ? x41 : (float)0;
      const float t43 = (t36 + t42);
      const float x44 = plus_load<float>(args.in[4], (seq_4 == seq) ? ((row) % seq) * 64LL + j : ((seq_4 == 1LL ? 0LL : (row) % seq)) * 64LL + j);
      const float t45 = (t43 + x44);
      const float x46 = plus_load<float>(args.in[5], j);
      const float x47 = plus_load<float>(args.in[6], j);
      const float t48 = (((t45 - mean0) * rstd0) * x46) + x47;
      plus_store<float>(args.out[0], (row) * 64LL + j, t48);
    }
    __syncthreads();
  }
}
