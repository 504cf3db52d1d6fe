// axis_softmax.cuh: softmax (log-softmax with PLUS_AXIS_LOG 1) over one axis that is not the innermost of a
// tensor viewed as [outer, R, inner]. One thread per column (o, i): three passes over its R elements, the max,
// the sum of exp(x - max), then the normalised value, each element read through the renderer's hooks. The
// threads of a warp take consecutive columns, so every pass reads consecutive addresses when inner > 1.
//
// Hooks (kernels/families/axis_softmax/render.py defines them after including this file, which declares them):
//   PlusAxisShape plus_axis_shape(args)                                  {outer, R, inner}
//   float plus_axis_x(args, long long o, long long r, long long i)       x[o, r, i], its prologue pulled in
//   void plus_axis_y(args, long long o, long long r, long long i, float y)   stores what is computed from y
// As ONNX Runtime's softmax: a column holding NaN gives NaN, a column of -inf gives NaN (0/0).
#pragma once

#ifndef PLUS_AXIS_LOG
#define PLUS_AXIS_LOG 0
#endif
#define PLUS_AXIS_THREADS 256

struct PlusAxisShape {
  long long outer, r, inner;
};
PLUS_DEV PlusAxisShape plus_axis_shape(const PlusArgs& args);
PLUS_DEV float plus_axis_x(const PlusArgs& args, long long o, long long r, long long i);
PLUS_DEV void plus_axis_y(const PlusArgs& args, long long o, long long r, long long i, float y);

extern "C" __global__ void PLUS_BOUNDS(PLUS_AXIS_THREADS) plus_axis_softmax(const PlusArgs args) {
  const PlusAxisShape s = plus_axis_shape(args);
  const long long n = s.outer * s.inner;
  for (long long q = (long long)blockIdx.x * PLUS_AXIS_THREADS + threadIdx.x; q < n;
       q += (long long)gridDim.x * PLUS_AXIS_THREADS) {
    const long long o = q / s.inner, i = q % s.inner;
    float m = -CUDART_INF_F;       // fmaxf skips a NaN, whose exp(NaN - m) then makes the sum NaN
    for (long long r = 0; r < s.r; ++r) m = fmaxf(m, plus_axis_x(args, o, r, i));
    float sum = 0.0f;
    for (long long r = 0; r < s.r; ++r) sum += expf(plus_axis_x(args, o, r, i) - m);
#if PLUS_AXIS_LOG
    const float lse = m + logf(sum);
    for (long long r = 0; r < s.r; ++r) plus_axis_y(args, o, r, i, plus_axis_x(args, o, r, i) - lse);
#else
    for (long long r = 0; r < s.r; ++r) plus_axis_y(args, o, r, i, expf(plus_axis_x(args, o, r, i) - m) / sum);
#endif
  }
}
