// gemm_sm90a_params.cuh: the variant parameters both sm_90a GEMM templates read (gemm_sm90a.cuh, cp.async;
// gemm_sm90a_ws.cuh, TMA), with their defaults: a 128 x 256 x 64 tile over 4 stages, no K split, f16/bf16
// wgmma (PLUS_MATH 2; gemm_sm90a_ws.cuh also takes 3, 8-bit integers), B stored [K, N], the epilogue walking n fastest, one
// product. The codegen defines the variant's values before including a template, e.g.
//
//   #define PLUS_BM 64
//   #define PLUS_BN 128
//   #include "gemm_sm90a_ws.cuh"     // includes this header: PLUS_STAGES 4, PLUS_SPLITK 1, ...
#pragma once

#ifndef PLUS_BM
#define PLUS_BM 128
#endif
#ifndef PLUS_BN
#define PLUS_BN 256
#endif
#ifndef PLUS_BK
#define PLUS_BK 64
#endif
#ifndef PLUS_STAGES
#define PLUS_STAGES 4
#endif
#ifndef PLUS_SPLITK
#define PLUS_SPLITK 1
#endif
#ifndef PLUS_MATH
#define PLUS_MATH 2
#endif
#ifndef PLUS_B_TRANS
#define PLUS_B_TRANS 0
#endif
// 1: the epilogue walks the C tile with m fastest (outputs contiguous along m); 0: n fastest; 2: per batch
// index, as the generated plus_epi_m_fastest hook says
#ifndef PLUS_EPI_M_FASTEST
#define PLUS_EPI_M_FASTEST 0
#endif
#ifndef PLUS_GATED
#define PLUS_GATED 0
#endif

#if PLUS_MATH != 2 && PLUS_MATH != 3
#error "the sm_90a GEMM templates implement PLUS_MATH 2 (f16/bf16 wgmma) and, gemm_sm90a_ws.cuh only, 3 (8-bit integers); use gemm.cuh for SIMT fp32 or TF32"
#endif
