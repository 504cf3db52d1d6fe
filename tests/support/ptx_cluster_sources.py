"""CUDA sources of the cluster tests (thread-block clusters, DSMEM, cluster barriers), compiled for
sm_90a by tests/support/ptx_harness.module. `cluster_source(dims, ...)` renders one kernel `k`:

    out[cta, t] = sum over the cluster's ranks q of s_q[t], where s_q[t] = in[cta_q, t] (each CTA
    stages its row of `in` in shared memory, cluster barrier, every CTA reads every rank through DSMEM)

The switches remove pieces for the checker tests: `first_barrier=False` drops the barrier between
the stores and the remote reads, `trailing_barrier=False` the one that keeps shared memory alive until
every CTA has read it, `skip_rank` makes one rank skip the first barrier (arrive and wait) or only
its arrive (`skip="arrive"`). `form="asm"` uses the forms NVRTC emits for shared::cluster code
(mapa.shared::cluster.u32, ld.shared::cluster, barrier.cluster.*.aligned) through inline PTX;
`form="builtin"` the CUDA builtins (generic mapa.u64 and ld, non-.aligned barriers)."""
from __future__ import annotations

HEADER = r"""
__device__ __forceinline__ unsigned plus_rank() { unsigned r; asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)); return r; }
__device__ __forceinline__ unsigned plus_nrank() { unsigned r; asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r)); return r; }
__device__ __forceinline__ void plus_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ void plus_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }
__device__ __forceinline__ float plus_remote_ld(const float* p, unsigned rank) {
    unsigned a = (unsigned)__cvta_generic_to_shared(p), r; float v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(r) : "memory");
    return v;
}
"""


def cluster_source(dims=(4, 1, 1), threads=32, form="asm", first_barrier=True, trailing_barrier=True,
                   skip_rank=None, skip="both") -> str:
    X, Y, Z = dims
    if form == "asm":
        arrive, wait, rank, nrank = "plus_arrive();", "plus_wait();", "plus_rank()", "plus_nrank()"
        load = "plus_remote_ld(s, q)"
    else:
        arrive, wait = "__cluster_barrier_arrive();", "__cluster_barrier_wait();"
        rank, nrank = "__clusterRelativeBlockRank()", "__clusterSizeInBlocks()"
        load = "((const float*)__cluster_map_shared_rank((void*)s, q))[threadIdx.x]"
    if form == "asm":
        load = "plus_remote_ld(s + threadIdx.x, q)"
    first = ""
    if first_barrier:
        if skip_rank is None:
            first = f"{arrive} {wait}"
        elif skip == "arrive":
            first = f"if (r != {skip_rank}) {{ {arrive} }} {wait}"
        else:
            first = f"if (r != {skip_rank}) {{ {arrive} {wait} }}"
    trailing = f"{arrive} {wait}" if trailing_barrier else ""
    return HEADER + f"""
extern "C" __global__ void __cluster_dims__({X}, {Y}, {Z}) k(const float* in, float* out) {{
    __shared__ float s[{threads}];
    const unsigned r = {rank};
    const unsigned cta = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    s[threadIdx.x] = in[cta * {threads} + threadIdx.x];
    {first}
    float acc = 0.0f;
    for (unsigned q = 0; q < {nrank}; ++q) acc += {load};
    {trailing}
    out[cta * {threads} + threadIdx.x] = acc + 0.0f * r;
}}
"""


def run_allreduce(dims=(4, 1, 1), grid=None, threads=32, form="asm", checks=True, sample_ctas=None, ptx=None,
                  **switches):
    """Launch `cluster_source(dims, ...)` (or the PTX text `ptx`) on the interpreter; returns
    (LaunchResult, output [ncta, threads], numpy reference [ncta, threads])."""
    import struct

    import numpy as np

    from plus_ep.kernels.ptx import Module
    from tests.support import ptx_harness as H

    grid = tuple(grid or dims)
    src = cluster_source(dims, threads, form, **switches)
    mod = Module.parse(ptx, name="cluster_mutant") if ptx is not None else H.module(src, "sm_90a", "cluster")
    gx, gy, gz = grid
    ncta = gx * gy * gz
    x = np.random.default_rng(1).standard_normal((ncta, threads)).astype(np.float32)
    dev = H.Device()
    pi, po = dev.upload(x, "in"), dev.alloc(x.nbytes, "out", fill=0xFF)
    res = mod.kernel("k").launch(grid, (threads, 1, 1), 0, struct.pack("<QQ", pi, po), dev.mem, checks=checks,
                                 sample_ctas=sample_ctas)
    out = dev.download(po, x)
    xs = x.astype(np.float64).reshape(gz, gy, gx, threads)
    X, Y, Z = dims
    ref = np.zeros_like(xs)
    for cz in range(0, gz, Z):
        for cy in range(0, gy, Y):
            for cx in range(0, gx, X):
                tot = xs[cz:cz + Z, cy:cy + Y, cx:cx + X].sum(axis=(0, 1, 2))
                ref[cz:cz + Z, cy:cy + Y, cx:cx + X] = tot
    return res, out, ref.reshape(ncta, threads)
