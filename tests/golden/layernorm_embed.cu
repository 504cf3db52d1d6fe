#include "plus_common.cuh"

extern "C" __global__ void __launch_bounds__(256) plus_row(const PlusArgs args) {
  __shared__ float red[33];
  const long long rows = (args.v[0] * args.v[1]);
  const long long L = 64LL;
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    float r0s_acc = 0.0f;
    for (long long j = threadIdx.x; j < L; j += blockDim.x) {
      const long long x1 = plus_load<long long>(args.in[1], row);
      const long long g2 = (x1) < 0 ? (x1) + 1000LL : (x1);
      const float x3 = plus_load<float>(args.in[0], (g2) * 64LL + j);
      const long long x4 = plus_load<long long>(args.in[3], row);
      const long long g5 = (x4) < 0 ? (x4) + 2LL : (x4);
      const float x6 = plus_load<float>(args.in[2], (g5) * 64LL + j);
      const float t7 = (x3 + x6);
      const float x8 = plus_load<float>(args.in[4], ((row) % args.v[1]) * 64LL + j);
      const float t9 = (t7 + x8);
      r0s_acc = r0s_acc + t9;
    }
    const float r0s = plus_block_sum(r0s_acc, red);
    const float mean0 = r0s / (float)L;
    float r0q_acc = 0.0f;
    for (long long j = threadIdx.x; j < L; j += blockDim.x) {
      const long long x10 = plus_load<long long>(args.in[1], row);
      const long long g11 = (x10) < 0 ? (x10) + 1000LL : (x10);
      const float x12 = plus_load<float>(args.in[0], (g11) * 64LL + j);
      const long long x13 = plus_load<long long>(args.in[3], row);
      const long long g14 = (x13) < 0 ? (x13) + 2LL : (x13);
      const float x15 = plus_load<float>(args.in[2], (g14) * 64LL + j);
      const float t16 = (x12 + x15);
      const float x17 = plus_load<float>(args.in[4], ((row) % args.v[1]) * 64LL + j);
      const float t18 = (t16 + x17);
      r0q_acc = r0q_acc + (t18 - mean0) * (t18 - mean0);
    }
    const float r0q = plus_block_sum(r0q_acc, red);
    const float rstd0 = rsqrtf(r0q / (float)L + 9.999999960041972e-13f);
    for (long long j = threadIdx.x; j < L; j += blockDim.x) {
      const long long x19 = plus_load<long long>(args.in[1], row);
      const long long g20 = (x19) < 0 ? (x19) + 1000LL : (x19);
      const float x21 = plus_load<float>(args.in[0], (g20) * 64LL + j);
      const long long x22 = plus_load<long long>(args.in[3], row);
      const long long g23 = (x22) < 0 ? (x22) + 2LL : (x22);
      const float x24 = plus_load<float>(args.in[2], (g23) * 64LL + j);
      const float t25 = (x21 + x24);
      const float x26 = plus_load<float>(args.in[4], ((row) % args.v[1]) * 64LL + j);
      const float t27 = (t25 + x26);
      const float x28 = plus_load<float>(args.in[5], j);
      const float x29 = plus_load<float>(args.in[6], j);
      const float t30 = (((t27 - mean0) * rstd0) * x28) + x29;
      plus_store<float>(args.out[0], (row) * 64LL + j, t30);
    }
    __syncthreads();
  }
}
