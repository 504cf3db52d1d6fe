// plus_ptx.cuh: the inline-PTX wrappers every PlusEP template uses (gemm.cuh, gemm_sm90a.cuh,
// attention.cuh), one copy each. Semantics from the PTX ISA (9.0):
//   cp.async.cg ... 16 [, src-size]   16-byte global -> shared copy; bytes past src-size are zero-filled
//   cp.async.commit_group / wait_group N   the copies of all but the newest N groups have landed
//   ldmatrix.m8n8.x4 [.trans] .b16    four 8x8 b16 matrices; lane 8k+r gives the address of row r of matrix k
//   mma.sync m16n8k16 (f16/bf16) / m16n8k8 (tf32), row.col, fp32 accumulators
//   fence.proxy.async.shared::cta     orders generic-proxy shared writes before async-proxy reads (wgmma)
//   wgmma.fence / commit_group / wait_group and wgmma.mma_async m64nNk16 with shared-memory descriptors, m64nNk32
//     .s32 with 8-bit integer operands
//     (sm_90a only: declared when __CUDA_ARCH_FEAT_SM90_ALL is defined)
//   %cluster_ctarank, barrier.cluster.arrive.release / wait.acquire, mapa.shared::cluster,
//     ld.shared::cluster (.f32, .v4.f32) (thread-block clusters, sm_90+: declared when __CUDA_ARCH__ >= 900)
// Shared-memory operands are 32-bit shared-window addresses (plus_smem_u32 converts a generic pointer).
// Every wrapper that touches memory carries a "memory" clobber, so the compiler never moves ordinary
// loads/stores across it.
#pragma once

typedef unsigned int plus_u32;  // NVRTC has no <cstdint>
typedef unsigned long long plus_u64;

PLUS_DEV plus_u32 plus_smem_u32(const void* p) { return (plus_u32)__cvta_generic_to_shared(p); }

// ---- asynchronous copies (sm_80+) ----------------------------------------------------------------

// 16 bytes from `src` to shared `dst`; only the first `src_bytes` (0..16) are read, the rest become 0.
// `src` must be a valid global address even when src_bytes is 0.
PLUS_DEV void plus_cp_async16(plus_u32 dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}
// 16 bytes, all inside the problem.
PLUS_DEV void plus_cp_async16(plus_u32 dst, const void* src) {
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
PLUS_DEV void plus_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> PLUS_DEV void plus_cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

// ---- shared-memory vector access -----------------------------------------------------------------

PLUS_DEV void plus_st_shared16(plus_u32 dst, plus_u32 x, plus_u32 y, plus_u32 z, plus_u32 w) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst), "r"(x), "r"(y), "r"(z), "r"(w) : "memory");
}
PLUS_DEV void plus_ld_shared16(plus_u32 src, plus_u32& x, plus_u32& y, plus_u32& z, plus_u32& w) {
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n" : "=r"(x), "=r"(y), "=r"(z), "=r"(w) : "r"(src) : "memory");
}

// ---- ldmatrix (sm_75+) ---------------------------------------------------------------------------

PLUS_DEV void plus_ldmatrix_x4(plus_u32 (&r)[4], plus_u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
PLUS_DEV void plus_ldmatrix_x4_trans(plus_u32 (&r)[4], plus_u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
PLUS_DEV void plus_ldmatrix_x4(plus_u32 (&r)[4], const void* p) { plus_ldmatrix_x4(r, plus_smem_u32(p)); }
PLUS_DEV void plus_ldmatrix_x4_trans(plus_u32 (&r)[4], const void* p) { plus_ldmatrix_x4_trans(r, plus_smem_u32(p)); }

// ---- mma.sync (sm_80+) ---------------------------------------------------------------------------

// d (16x8, fp32) += a (16x16, row major, 4 b16x2 registers) * b (16x8, column major, 2 registers),
// element type E = __half or __nv_bfloat16.
template <typename E> struct PlusMma16;
template <> struct PlusMma16<__half> {
  static PLUS_DEV void run(float (&d)[4], const plus_u32 (&a)[4], plus_u32 b0, plus_u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  // Two floats as one b16x2 register, x in the low half (the lower column).
  static PLUS_DEV plus_u32 pack(float x, float y) {
    __half2 v = __floats2half2_rn(x, y);
    return *reinterpret_cast<plus_u32*>(&v);
  }
};
template <> struct PlusMma16<__nv_bfloat16> {
  static PLUS_DEV void run(float (&d)[4], const plus_u32 (&a)[4], plus_u32 b0, plus_u32 b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static PLUS_DEV plus_u32 pack(float x, float y) {
    __nv_bfloat162 v = __floats2bfloat162_rn(x, y);
    return *reinterpret_cast<plus_u32*>(&v);
  }
};
template <typename E>
PLUS_DEV void plus_mma_m16n8k16(float (&d)[4], const plus_u32 (&a)[4], plus_u32 b0, plus_u32 b1) {
  PlusMma16<E>::run(d, a, b0, b1);
}

// d (16x8, fp32) += a (16x8 tf32, row major, 4 registers) * b (8x8 tf32, column major, 2 registers).
PLUS_DEV void plus_mma_m16n8k8_tf32(float (&d)[4], const plus_u32 (&a)[4], plus_u32 b0, plus_u32 b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// d (16x8, s32) += a (16x32 8-bit, row major, 4 registers of 4 bytes) * b (32x8 8-bit, column major, 2 registers):
// exact integer sums (wrapping modulo 2^32). AS / BS: the operand is signed (.s8) or unsigned (.u8).
template <bool AS, bool BS>
PLUS_DEV void plus_mma_m16n8k32_i8(int (&d)[4], const plus_u32 (&a)[4], plus_u32 b0, plus_u32 b1) {
#define PLUS_MMA_I8(AT, BT)                                                                                   \
  asm volatile("mma.sync.aligned.m16n8k32.row.col.s32." AT "." BT ".s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, " \
               "{%8, %9}, {%0, %1, %2, %3};\n"                                                                \
               : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])                                               \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))
  if (AS && BS) PLUS_MMA_I8("s8", "s8");
  else if (AS) PLUS_MMA_I8("s8", "u8");
  else if (BS) PLUS_MMA_I8("u8", "s8");
  else PLUS_MMA_I8("u8", "u8");
#undef PLUS_MMA_I8
}

// fp32 bits -> tf32 (round to nearest, ties away), the operand form mma .tf32 expects.
PLUS_DEV plus_u32 plus_to_tf32(plus_u32 x) {
  plus_u32 r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(__uint_as_float(x)));
  return r;
}

// ---- thread-block clusters (sm_90+) -----------------------------------------------------------------
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900

// This CTA's rank in its cluster (0 .. cluster size - 1).
PLUS_DEV plus_u32 plus_cluster_ctarank() {
  plus_u32 r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
// Cluster barrier, split: arrive (release: this thread's earlier shared-memory writes become visible to
// the cluster) and wait (acquire: returns once every thread of every CTA of the cluster has arrived).
// Both are .aligned: every thread of the CTA executes them, in convergence.
PLUS_DEV void plus_cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory"); }
PLUS_DEV void plus_cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory"); }
PLUS_DEV void plus_cluster_sync() {
  plus_cluster_arrive();
  plus_cluster_wait();
}
// The shared::cluster address of shared::cta address `addr` (same variable) in the CTA of rank `rank`.
PLUS_DEV plus_u32 plus_mapa_shared(plus_u32 addr, plus_u32 rank) {
  plus_u32 r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}
// One fp32 from distributed shared memory (a shared::cluster address, e.g. from plus_mapa_shared).
PLUS_DEV float plus_ld_shared_cluster_f(plus_u32 addr) {
  float x;
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(x) : "r"(addr) : "memory");
  return x;
}
// Four consecutive fp32 (16-byte aligned) from distributed shared memory.
PLUS_DEV void plus_ld_shared_cluster_f4(plus_u32 addr, float (&x)[4]) {
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(x[0]), "=f"(x[1]), "=f"(x[2]), "=f"(x[3]) : "r"(addr) : "memory");
}

#endif  // __CUDA_ARCH__ >= 900

// ---- wgmma (sm_90a only) -------------------------------------------------------------------------
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// Orders this thread's generic-proxy shared-memory writes (cp.async, st.shared) before later async-proxy
// reads (wgmma operands); a CTA barrier after it publishes them to the other warps.
PLUS_DEV void plus_fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

PLUS_DEV void plus_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
PLUS_DEV void plus_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> PLUS_DEV void plus_wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }

// Compiler-only fence on accumulator registers: keeps the compiler from moving reads/writes of `d`
// across a wgmma fence/wait (the hardware writes them asynchronously).
template <int R> PLUS_DEV void plus_wgmma_fence_regs(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

template <int R> PLUS_DEV void plus_wgmma_fence_regs(int (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+r"(d[i])::"memory");
}

// wgmma shared-memory matrix descriptor (PTX ISA "Matrix Descriptor Format"):
//   bits  0-13 start address >> 4      bits 16-29 leading-dimension byte offset >> 4
//   bits 32-45 stride-dimension byte offset >> 4   bits 49-51 base offset (0: tiles are 1024-aligned)
//   bits 62-63 swizzle mode, 1 = 128-byte swizzle
PLUS_DEV plus_u64 plus_wgmma_desc_sw128(plus_u32 smem_addr, plus_u32 lbo_bytes, plus_u32 sbo_bytes) {
  plus_u64 d = 0;
  d |= (plus_u64)((smem_addr & 0x3FFFFu) >> 4);
  d |= (plus_u64)((lbo_bytes & 0x3FFFFu) >> 4) << 16;
  d |= (plus_u64)((sbo_bytes & 0x3FFFFu) >> 4) << 32;
  d |= (plus_u64)1 << 62;
  return d;
}

// Operand lists of wgmma.mma_async.m64nNk16 with fp32 accumulators: N/2 registers per thread.
#define PLUS_WG_R0 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define PLUS_WG_R1 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define PLUS_WG_R2 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47"
#define PLUS_WG_R3 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define PLUS_WG_R4 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79"
#define PLUS_WG_R5 "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define PLUS_WG_R6 "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111"
#define PLUS_WG_R7 "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define PLUS_WG_REGS_64 "{" PLUS_WG_R0 ", " PLUS_WG_R1 "}"
#define PLUS_WG_REGS_128 "{" PLUS_WG_R0 ", " PLUS_WG_R1 ", " PLUS_WG_R2 ", " PLUS_WG_R3 "}"
#define PLUS_WG_REGS_192 \
  "{" PLUS_WG_R0 ", " PLUS_WG_R1 ", " PLUS_WG_R2 ", " PLUS_WG_R3 ", " PLUS_WG_R4 ", " PLUS_WG_R5 "}"
#define PLUS_WG_REGS_256                                                                                 \
  "{" PLUS_WG_R0 ", " PLUS_WG_R1 ", " PLUS_WG_R2 ", " PLUS_WG_R3 ", " PLUS_WG_R4 ", " PLUS_WG_R5 ", " \
  PLUS_WG_R6 ", " PLUS_WG_R7 "}"
// wgmma accumulator operands: 8 / 32 consecutive registers d[i..] under the constraint C ("+f" fp32, "+r" s32)
#define PLUS_WG_ACC8(C, d, i)                                                                             \
  C(d[(i) + 0]), C(d[(i) + 1]), C(d[(i) + 2]), C(d[(i) + 3]), C(d[(i) + 4]), C(d[(i) + 5]), C(d[(i) + 6]), \
      C(d[(i) + 7])
#define PLUS_WG_ACC32(C, d, i) \
  PLUS_WG_ACC8(C, d, i), PLUS_WG_ACC8(C, d, (i) + 8), PLUS_WG_ACC8(C, d, (i) + 16), PLUS_WG_ACC8(C, d, (i) + 24)
#define PLUS_WG_F32(d, i) PLUS_WG_ACC32("+f", d, i)
#define PLUS_WG_OPS_64(d) PLUS_WG_F32(d, 0)
#define PLUS_WG_OPS_128(d) PLUS_WG_F32(d, 0), PLUS_WG_F32(d, 32)
#define PLUS_WG_OPS_192(d) PLUS_WG_F32(d, 0), PLUS_WG_F32(d, 32), PLUS_WG_F32(d, 64)
#define PLUS_WG_OPS_256(d) PLUS_WG_F32(d, 0), PLUS_WG_F32(d, 32), PLUS_WG_F32(d, 64), PLUS_WG_F32(d, 96)

// D(64 x N, fp32) (+)= A(64 x 16, smem desc) * B(16 x N, smem desc).  scale-d (0: D = A B, 1: accumulate), no negation,
// A K-major (imm-trans-a 0), B K-major (trans-b 0) or MN-major (1).  IA/IB/IS/IT: operand numbers of the
// A descriptor, B descriptor, scale-d and trans-b after the N/2 accumulators.
#define PLUS_WG_MMA(N, TY, IA, IB, IS, IT)                                                               \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" IS ", 0;\n"                                         \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " " PLUS_WG_REGS_##N ", %" IA \
               ", %" IB ", p, 1, 1, 0, %" IT ";\n}\n"                                                    \
               : PLUS_WG_OPS_##N(d)                                                                      \
               : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TRANS_B))

template <typename T> struct PlusIsBf16 { static constexpr bool value = false; };
template <> struct PlusIsBf16<__nv_bfloat16> { static constexpr bool value = true; };

// One wgmma.mma_async.m64nNk16 with element type E (__half or __nv_bfloat16); TRANS_B 1 = B MN-major.
// scale_d 0: D = A B (the accumulators' old values are not read), 1: D += A B.
template <typename E, int N, int TRANS_B>
PLUS_DEV void plus_wgmma_m64k16(float (&d)[N / 2], plus_u64 desc_a, plus_u64 desc_b, int scale_d = 1) {
  constexpr bool bf16 = PlusIsBf16<E>::value;
  if constexpr (N == 64) {
    if constexpr (bf16) PLUS_WG_MMA(64, "bf16", "32", "33", "34", "35");
    else PLUS_WG_MMA(64, "f16", "32", "33", "34", "35");
  } else if constexpr (N == 128) {
    if constexpr (bf16) PLUS_WG_MMA(128, "bf16", "64", "65", "66", "67");
    else PLUS_WG_MMA(128, "f16", "64", "65", "66", "67");
  } else if constexpr (N == 192) {
    if constexpr (bf16) PLUS_WG_MMA(192, "bf16", "96", "97", "98", "99");
    else PLUS_WG_MMA(192, "f16", "96", "97", "98", "99");
  } else {
    static_assert(N == 256, "wgmma N must be 64, 128, 192 or 256");
    if constexpr (bf16) PLUS_WG_MMA(256, "bf16", "128", "129", "130", "131");
    else PLUS_WG_MMA(256, "f16", "128", "129", "130", "131");
  }
}

// s32 accumulators of wgmma.mma_async.m64nNk32 with 8-bit integer operands: N/2 registers per thread.
#define PLUS_WG_I32(d, i) PLUS_WG_ACC32("+r", d, i)
#define PLUS_WG_IOPS_64(d) PLUS_WG_I32(d, 0)
#define PLUS_WG_IOPS_128(d) PLUS_WG_I32(d, 0), PLUS_WG_I32(d, 32)
#define PLUS_WG_IOPS_192(d) PLUS_WG_I32(d, 0), PLUS_WG_I32(d, 32), PLUS_WG_I32(d, 64)
#define PLUS_WG_IOPS_256(d) PLUS_WG_I32(d, 0), PLUS_WG_I32(d, 32), PLUS_WG_I32(d, 64), PLUS_WG_I32(d, 96)

// D(64 x N, s32) (+)= A(64 x 32, smem desc) * B(32 x N, smem desc), 8-bit integers (TA, TB: "s8" or "u8"), both
// K-major (the only layout of 8-bit wgmma operands); exact sums, wrapping modulo 2^32. IA/IB/IS: operand numbers
// of the A descriptor, B descriptor and scale-d after the N/2 accumulators.
#define PLUS_WG_MMA_I8(N, TA, TB, IA, IB, IS)                                                                \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" IS ", 0;\n"                                             \
               "wgmma.mma_async.sync.aligned.m64n" #N "k32.s32." TA "." TB " " PLUS_WG_REGS_##N ", %" IA ", %" \
               IB ", p;\n}\n"                                                                                 \
               : PLUS_WG_IOPS_##N(d)                                                                           \
               : "l"(desc_a), "l"(desc_b), "r"(scale_d))
#define PLUS_WG_MMA_I8_TYPES(N, IA, IB, IS)                      \
  if constexpr (AS && BS) PLUS_WG_MMA_I8(N, "s8", "s8", IA, IB, IS); \
  else if constexpr (AS) PLUS_WG_MMA_I8(N, "s8", "u8", IA, IB, IS);  \
  else if constexpr (BS) PLUS_WG_MMA_I8(N, "u8", "s8", IA, IB, IS);  \
  else PLUS_WG_MMA_I8(N, "u8", "u8", IA, IB, IS)

// One wgmma.mma_async.m64nNk32 of 8-bit integers; AS / BS: A / B signed (.s8) or unsigned (.u8). scale_d 0:
// D = A B, 1: D += A B. E.g. plus_wgmma_m64k32_i8<true, true, 128>(acc, desc_a, desc_b) for int8 x int8.
template <bool AS, bool BS, int N>
PLUS_DEV void plus_wgmma_m64k32_i8(int (&d)[N / 2], plus_u64 desc_a, plus_u64 desc_b, int scale_d = 1) {
  if constexpr (N == 64) {
    PLUS_WG_MMA_I8_TYPES(64, "32", "33", "34");
  } else if constexpr (N == 128) {
    PLUS_WG_MMA_I8_TYPES(128, "64", "65", "66");
  } else if constexpr (N == 192) {
    PLUS_WG_MMA_I8_TYPES(192, "96", "97", "98");
  } else {
    static_assert(N == 256, "wgmma N must be 64, 128, 192 or 256");
    PLUS_WG_MMA_I8_TYPES(256, "128", "129", "130");
  }
}

// D(64 x N, fp32) += A(64 x 16, registers) * B(16 x N, smem desc): A as four .b32 words per thread, laid
// out as mma.m16n8k16's A fragment for warp w's rows 16w..16w+15 (reg r, half h -> A[16w + g + 8(r&1),
// 2t + h + 8(r>>1)]); B K-major (TRANS_B 0) or MN-major (1). No transpose-a immediate (A is in registers).
// A0..A3, IB, IS, IT: operand numbers of A's words, the B descriptor, scale-d and trans-b.
#define PLUS_WG_MMA_RS(N, TY, A0, A1, A2, A3, IB, IS, IT)                                                  \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" IS ", 0;\n"                                           \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " " PLUS_WG_REGS_##N ", {%" A0   \
               ", %" A1 ", %" A2 ", %" A3 "}, %" IB ", p, 1, 1, %" IT ";\n}\n"                              \
               : PLUS_WG_OPS_##N(d)                                                                        \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1), "n"(TRANS_B))

// One wgmma.mma_async.m64nNk16 with A from registers (four .b32 words of E pairs, above), N = 64 or 128.
template <typename E, int N, int TRANS_B>
PLUS_DEV void plus_wgmma_m64k16_rs(float (&d)[N / 2], const plus_u32 (&a)[4], plus_u64 desc_b) {
  constexpr bool bf16 = PlusIsBf16<E>::value;
  if constexpr (N == 64) {
    if constexpr (bf16) PLUS_WG_MMA_RS(64, "bf16", "32", "33", "34", "35", "36", "37", "38");
    else PLUS_WG_MMA_RS(64, "f16", "32", "33", "34", "35", "36", "37", "38");
  } else {
    static_assert(N == 128, "plus_wgmma_m64k16_rs: N must be 64 or 128");
    if constexpr (bf16) PLUS_WG_MMA_RS(128, "bf16", "64", "65", "66", "67", "68", "69", "70");
    else PLUS_WG_MMA_RS(128, "f16", "64", "65", "66", "67", "68", "69", "70");
  }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL
