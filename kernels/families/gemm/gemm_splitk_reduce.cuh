// gemm_splitk_reduce.cuh: the split-K reduction kernel of the Hopper GEMM templates (gemm_sm90a.cuh,
// gemm_sm90a_ws.cuh): with PLUS_SPLITK > 1 their plus_gemm writes fp32 partials [SPLITK][batch][M][N]
// ([SPLITK][2][batch][M][N] gated) to scratch[0], and plus_splitk_reduce sums them in split order and calls the
// epilogue. Include it after the hooks (gemm_hooks.cuh).
#pragma once

#if PLUS_SPLITK > 1
// Sums the PLUS_SPLITK fp32 partials of every (b, m, n) and applies the epilogue.
// Grid (cdiv(batch*M*N, 256)), block 256.
extern "C" __global__ void __launch_bounds__(256) plus_splitk_reduce(const PlusArgs args) {
  const PlusGemmShape shape = plus_gemm_shape(args);
  const long long total = shape.batch * shape.M * shape.N;
  const long long idx = (long long)blockIdx.x * 256 + threadIdx.x;
  if (idx >= total) return;
  const float* part = (const float*)args.scratch[0];
  const long long n = idx % shape.N, m = (idx / shape.N) % shape.M, b = idx / (shape.M * shape.N);
#ifdef PLUS_HAS_GROUP_N
  if (n >= plus_n_of(args, b, shape.N)) return;    // past this member's N: never written
#endif
#if PLUS_GATED
  float s = 0.0f, s1 = 0.0f;  // partial planes [SPLITK][2][batch][M][N]
#pragma unroll
  for (int k = 0; k < PLUS_SPLITK; ++k) {
    s += part[(2 * k) * total + idx];
    s1 += part[(2 * k + 1) * total + idx];
  }
  plus_epilogue_gated(args, b, m, n, s, s1);
#else
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < PLUS_SPLITK; ++k) s += part[k * total + idx];
  plus_epilogue(args, b, m, n, s);
#endif
}
#endif
