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
                  launch_cluster=None, **switches):
    """Launch `cluster_source(dims, ...)` (or the PTX text `ptx`; `launch_cluster`: a launch-time cluster
    shape) on the interpreter; returns (LaunchResult, output [ncta, threads], numpy reference)."""
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
                                 sample_ctas=sample_ctas, cluster=launch_cluster)
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


# Ring exchange through remote stores: each CTA writes its row into the next rank's shared memory
# (st.shared::cluster), then reads what the previous rank wrote there with a local ld.shared.
# `sync`: "release" (arrive.release + wait), "relaxed_fence" (fence.acq_rel.cluster; arrive.relaxed),
# "relaxed" (arrive.relaxed without a fence: no ordering), "none" (no barrier between the store and the read).
# `split_warps`: the two warps arrive on different code paths (non-.aligned barrier, per-thread arrival).
RING = HEADER + r"""
__device__ __forceinline__ void plus_remote_st(float* p, unsigned rank, float v) {
    unsigned a = (unsigned)__cvta_generic_to_shared(p), r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
    asm volatile("st.shared::cluster.f32 [%0], %1;" :: "r"(r), "f"(v) : "memory");
}
extern "C" __global__ void __cluster_dims__(CX, 1, 1) k(const float* in, float* out) {
    __shared__ float s[64];
    const unsigned r = plus_rank(), n = plus_nrank();
    const unsigned cta = blockIdx.x + gridDim.x * blockIdx.y;
    plus_remote_st(s + threadIdx.x, (r + 1) % n, in[cta * 64 + threadIdx.x]);
    SYNC
    out[cta * 64 + threadIdx.x] = s[threadIdx.x];
    asm volatile("barrier.cluster.arrive; barrier.cluster.wait;" ::: "memory");
}
"""
RING_SYNC = {
    "release": 'asm volatile("barrier.cluster.arrive.release; barrier.cluster.wait.acquire;" ::: "memory");',
    "relaxed_fence": 'asm volatile("fence.acq_rel.cluster; barrier.cluster.arrive.relaxed; barrier.cluster.wait;" '
                     '::: "memory");',
    "relaxed": 'asm volatile("barrier.cluster.arrive.relaxed; barrier.cluster.wait;" ::: "memory");',
    "none": "",
    "split_warps": 'if (threadIdx.x < 32) { asm volatile("barrier.cluster.arrive; barrier.cluster.wait;" ::: "memory"); } '
                   'else { if (in[threadIdx.x] > 1e30f) out[0] = 1.0f; '
                   'asm volatile("barrier.cluster.arrive; barrier.cluster.wait;" ::: "memory"); }',
}


def ring_source(cx=4, sync="release") -> str:
    return RING.replace("CX", str(cx)).replace("SYNC", RING_SYNC[sync])


def run_ring(cx=4, grid=(4, 2, 1), sync="release"):
    """(LaunchResult, output [ncta, 64], reference [ncta, 64]) of ring_source on the interpreter."""
    import struct

    import numpy as np

    from tests.support import ptx_harness as H

    mod = H.module(ring_source(cx, sync), "sm_90a", f"ring_{sync}")
    ncta = grid[0] * grid[1]
    x = np.random.default_rng(2).standard_normal((ncta, 64)).astype(np.float32)
    dev = H.Device()
    pi, po = dev.upload(x, "in"), dev.output(x)
    res = mod.kernel("k").launch(grid, (64, 1, 1), 0, struct.pack("<QQ", pi, po), dev.mem)
    out = dev.download(po, x)
    ref = np.empty_like(x)
    for c in range(ncta):
        gx, gy = c % grid[0], c // grid[0]
        base, r = gx - gx % cx, gx % cx
        ref[c] = x[gy * grid[0] + base + (r - 1) % cx]
    return res, out, ref


# atom.shared::cluster.add.u32 (returning the old value), red.shared::cluster.add.f32 and
# red.relaxed.cluster...add.u32 by every thread of a 4-CTA cluster into rank 0's counters.
ATOMICS = r"""
extern "C" __global__ void __cluster_dims__(4, 1, 1) k(unsigned* out, float* fout) {
    __shared__ unsigned cnt[2]; __shared__ float f[1];
    unsigned r; asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    if (threadIdx.x == 0) { cnt[0] = 0; cnt[1] = 0; f[0] = 0.0f; }
    asm volatile("barrier.cluster.arrive.release.aligned; barrier.cluster.wait.acquire.aligned;" ::: "memory");
    unsigned a = (unsigned)__cvta_generic_to_shared(cnt), fa = (unsigned)__cvta_generic_to_shared(f), ra, rf, old;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(a), "r"(0u));
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(rf) : "r"(fa), "r"(0u));
    asm volatile("atom.shared::cluster.add.u32 %0, [%1], %2;" : "=r"(old) : "r"(ra), "r"(1u) : "memory");
    asm volatile("red.shared::cluster.add.f32 [%0], %1;" :: "r"(rf), "f"(0.5f) : "memory");
    asm volatile("red.relaxed.cluster.shared::cluster.add.u32 [%0], %1;" :: "r"(ra + 4), "r"(r) : "memory");
    asm volatile("barrier.cluster.arrive.release.aligned; barrier.cluster.wait.acquire.aligned;" ::: "memory");
    out[blockIdx.x * 32 + threadIdx.x] = old;
    if (r == 0 && threadIdx.x == 0) { out[128] = cnt[0]; out[129] = cnt[1]; fout[0] = f[0]; }
}
"""


# Warp 1 of every CTA takes one extra (non-.aligned) cluster barrier first, so at the common barrier
# warp 0 waits on phase 1 and warp 1 on phase 2 at the same instruction: warp 0 passes once every
# thread of the cluster has arrived once; warp 1 once the others have exited (exited threads count as
# arrived). out[cta * 64 + t] = 1 + the number of barriers thread t passed.
PHASES = r"""
extern "C" __global__ void __cluster_dims__(2, 1, 1) k(unsigned* out) {
    unsigned n = 1;
    if (threadIdx.x >= 32) { asm volatile("barrier.cluster.arrive; barrier.cluster.wait;" ::: "memory"); ++n; }
    asm volatile("barrier.cluster.arrive; barrier.cluster.wait;" ::: "memory");
    out[blockIdx.x * 64 + threadIdx.x] = n + 1;
}
"""


# A remote read at `s + OFF` floats in rank RANK's shared memory (s has 32 floats): OFF 32 is past the
# target's window, RANK 2 is outside a cluster of 2.
REMOTE_AT = HEADER + r"""
extern "C" __global__ void __cluster_dims__(2, 1, 1) k(float* out) {
    __shared__ float s[32];
    const unsigned r = plus_rank();
    s[threadIdx.x] = threadIdx.x;
    plus_arrive(); plus_wait();
    out[blockIdx.x * 32 + threadIdx.x] = plus_remote_ld(s + threadIdx.x + OFF, RANK);
    plus_arrive(); plus_wait();
}
"""


# Vector DSMEM accesses: each CTA stores a float4 per thread into the partner rank (st.shared::cluster.v4.f32),
# then reads its own slots back as two .v2.b32 loads through shared::cluster addresses of its own rank.
VECTORS = HEADER + r"""
extern "C" __global__ void __cluster_dims__(2, 1, 1) k(const float4* in, float4* out) {
    __shared__ __align__(16) float4 s[32];
    const unsigned r = plus_rank(), cta = blockIdx.x;
    unsigned a = (unsigned)__cvta_generic_to_shared(s + threadIdx.x), ra, own;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(a), "r"(r ^ 1u));
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(own) : "r"(a), "r"(r));
    float4 v = in[cta * 32 + threadIdx.x];
    asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};" :: "r"(ra), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
                 : "memory");
    plus_arrive(); plus_wait();
    unsigned x, y, z, w;
    asm volatile("ld.shared::cluster.v2.b32 {%0, %1}, [%2];" : "=r"(x), "=r"(y) : "r"(own) : "memory");
    asm volatile("ld.shared::cluster.v2.b32 {%0, %1}, [%2+8];" : "=r"(z), "=r"(w) : "r"(own) : "memory");
    out[cta * 32 + threadIdx.x] = make_float4(__uint_as_float(x), __uint_as_float(y), __uint_as_float(z),
                                              __uint_as_float(w));
    plus_arrive(); plus_wait();
}
"""
