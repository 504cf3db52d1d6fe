"""Thread-block clusters on the PTX interpreter (kernels/ptx/cluster.py): a cluster all-reduce through
DSMEM compiled by NVRTC for sm_90a (tests/support/ptx_cluster_sources.py), executed on the CPU
interpreter and checked against numpy; launch-shape errors, sampling of whole clusters, and the
checkers and deadlock errors of broken barriers."""
from __future__ import annotations

import re

import numpy as np
import pytest

from plus_ep.kernels.ptx import PtxError
from plus_ep.kernels.compile.ptx import compile_ptx
from tests.support import ptx_harness as H
from tests.support.ptx_cluster_sources import (ATOMICS, PHASES, REMOTE_AT, VECTORS, cluster_source,
                                               run_allreduce, run_ring)
from tests.support.poison import poisoned_like


def _ok(res, out, ref):
    assert res.findings == [], [str(f) for f in res.findings]
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("dims,grid,form", [((2, 1, 1), (4, 1, 1), "asm"), ((4, 1, 1), (8, 1, 1), "asm"),
                                            ((8, 1, 1), (8, 1, 1), "asm"), ((4, 1, 1), (4, 1, 1), "builtin"),
                                            ((2, 2, 1), (4, 2, 2), "asm"), ((2, 1, 2), (2, 3, 2), "builtin")])
def test_cluster_allreduce(dims, grid, form):
    res, out, ref = run_allreduce(dims, grid, form=form)
    _ok(res, out, ref)
    n = dims[0] * dims[1] * dims[2]
    ncta = grid[0] * grid[1] * grid[2]
    assert res.counters["cluster"] == {"dims": list(dims), "ctas": n, "non_portable": False,
                                       "clusters_run": ncta // n}
    # every CTA reads the n - 1 other ranks remotely (one warp request of 4 bytes per lane each)
    assert res.counters["dsmem_ld"] == {"requests": ncta * (n - 1), "bytes": ncta * (n - 1) * 32 * 4}
    # DRAM: the input and output rows only (+ a sector per buffer for alignment), DSMEM never counted
    assert 2 * ncta * 32 * 4 <= res.counters["unique_dram_bytes"] <= 2 * ncta * 32 * 4 + 64


def test_cluster_directives_and_registers():
    src = cluster_source((2, 2, 1), form="builtin")
    ptx = compile_ptx(src, "sm_90a", name="cluster.cu")
    assert ".reqnctapercluster 2, 2, 1" in ptx
    k = H.module(src, "sm_90a", "cluster").kernel("k")
    assert k.cluster_dims == (2, 2, 1) and k.explicit_cluster
    probe = r"""
extern "C" __global__ void __cluster_dims__(2, 2, 1) k(unsigned* out) {
    dim3 ci = __clusterIdx(), cd = __clusterDim(), cg = __clusterGridDimInClusters(), cb = __clusterRelativeBlockIdx();
    unsigned* o = out + 16 * (blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z));
    if (threadIdx.x == 0) {
        o[0] = ci.x; o[1] = ci.y; o[2] = ci.z; o[3] = cd.x; o[4] = cd.y; o[5] = cd.z; o[6] = cg.x; o[7] = cg.y;
        o[8] = cg.z; o[9] = cb.x; o[10] = cb.y; o[11] = cb.z; o[12] = __clusterRelativeBlockRank();
        o[13] = __clusterSizeInBlocks();
        unsigned e;
        asm volatile("{ .reg .pred p; mov.pred p, %%is_explicit_cluster; selp.u32 %0, 1, 0, p; }" : "=r"(e));
        o[14] = e;
    }
}
"""
    import struct
    mod = H.module(probe, "sm_90a", "cluster_regs")
    dev = H.Device()
    grid = (4, 2, 3)
    out = poisoned_like(np.zeros((24, 16), np.uint32))
    po = dev.upload(out, "out")
    res = mod.kernel("k").launch(grid, (32, 1, 1), 0, struct.pack("<Q", po), dev.mem)
    assert res.findings == []
    got = dev.download(po, out)
    for z in range(3):
        for y in range(2):
            for x in range(4):
                row = got[x + 4 * (y + 2 * z)]
                cx, cy = x % 2, y % 2
                assert list(row[:15]) == [x // 2, y // 2, z, 2, 2, 1, 2, 1, 3, cx, cy, 0, cx + 2 * cy, 4, 1], (x, y, z)


def test_grid_not_a_multiple_of_the_cluster_shape():
    with pytest.raises(PtxError, match=r"kernel k.*not a multiple of the cluster shape \(4, 1, 1\)|"
                                       r"not a multiple of the cluster shape \(4, 1, 1\).*k"):
        run_allreduce((4, 1, 1), (6, 1, 1))


def test_cluster_of_more_than_16_ctas_is_an_error():
    ptx = compile_ptx(cluster_source((8, 1, 1)), "sm_90a", name="cluster.cu")
    big = re.sub(r"\.reqnctapercluster 8, 1, 1", ".reqnctapercluster 32, 1, 1", ptx)
    with pytest.raises(PtxError, match="at most 16"):
        run_allreduce((32, 1, 1), (32, 1, 1), ptx=big)
    sixteen = re.sub(r"\.reqnctapercluster 8, 1, 1", ".reqnctapercluster 16, 1, 1", ptx)
    res, out, ref = run_allreduce((16, 1, 1), (16, 1, 1), ptx=sixteen)
    _ok(res, out, ref)
    assert res.counters["cluster"]["non_portable"] is True


def test_launch_time_cluster_shape():
    """A kernel without .reqnctapercluster takes its shape at launch (cuLaunchKernelEx's attribute)."""
    ptx = compile_ptx(cluster_source((4, 1, 1)), "sm_90a", name="cluster.cu")
    free = ptx.replace(".reqnctapercluster 4, 1, 1", "")
    res, out, ref = run_allreduce((4, 1, 1), (8, 1, 1), ptx=free, launch_cluster=(4, 1, 1))
    _ok(res, out, ref)
    with pytest.raises(PtxError, match="needs a launch-time cluster shape"):
        run_allreduce((4, 1, 1), (8, 1, 1), ptx=free)
    with pytest.raises(PtxError, match="differs from the kernel's .reqnctapercluster"):
        run_allreduce((4, 1, 1), (8, 1, 1), ptx=ptx, launch_cluster=(2, 1, 1))
    capped = ptx.replace(".reqnctapercluster 4, 1, 1", ".maxclusterrank 2")
    with pytest.raises(PtxError, match="maxclusterrank 2"):
        run_allreduce((4, 1, 1), (8, 1, 1), ptx=capped, launch_cluster=(4, 1, 1))


def test_sample_ctas_runs_whole_clusters():
    res, out, ref = run_allreduce((4, 1, 1), (16, 2, 1), sample_ctas=5)
    assert res.findings == []
    ctas = res.ctas
    assert len(ctas) % 4 == 0 and len(ctas) >= 5 and len(ctas) < 32
    clusters = {(x // 4, y, z) for x, y, z in ctas}
    assert len(clusters) * 4 == len(ctas)
    for c in clusters:                        # every rank of a sampled cluster ran, and computed its sum
        for r in range(4):
            cta = (c[0] * 4 + r, c[1], c[2])
            assert cta in ctas
            i = cta[0] + 16 * cta[1]
            np.testing.assert_allclose(out[i], ref[i], rtol=1e-6, atol=1e-5)


def test_missing_barrier_before_remote_reads_is_a_finding():
    res, out, ref = run_allreduce((4, 1, 1), (4, 1, 1), first_barrier=False)
    kinds = {f.kind for f in res.findings}
    assert "DSMEM race" in kinds or "uninitialised DSMEM read" in kinds, kinds


def test_exit_without_trailing_barrier_is_a_finding():
    res, out, ref = run_allreduce((2, 1, 1), (2, 1, 1), trailing_barrier=False)
    assert "DSMEM access to an exited CTA" in {f.kind for f in res.findings}


def test_a_cta_that_skips_the_barrier():
    # skipping the arrive but waiting: the wait could never complete on a GPU (deadlock) -> error
    with pytest.raises(PtxError, match=r"(?s)deadlock.*kernel k|kernel k.*deadlock") as e:
        run_allreduce((4, 1, 1), (4, 1, 1), skip_rank=2, skip="arrive")
    assert "(2, 0, 0)" in str(e.value) and "line" in str(e.value)
    # skipping arrive and wait: the other CTAs' phase completes without it only once it exits or
    # arrives later; its early remote reads race with (or precede) the other CTAs' stores
    res, out, ref = run_allreduce((4, 1, 1), (4, 1, 1), skip_rank=1)
    assert res.findings


def test_deleting_a_cluster_barrier_is_caught():
    """Mutation: every single barrier.cluster.{arrive,wait} deleted from the all-reduce's PTX gives a
    wrong result, a checker finding or an interpreter error."""
    src = cluster_source((4, 1, 1))
    ptx = compile_ptx(src, "sm_90a", name="cluster.cu")
    lines = ptx.splitlines()
    sites = [i for i, ln in enumerate(lines) if ln.strip().startswith("barrier.cluster.")]
    assert len(sites) == 4
    for i in sites:
        mutant = "\n".join(lines[:i] + lines[i + 1:])
        try:
            res, out, ref = run_allreduce((4, 1, 1), (4, 1, 1), ptx=mutant)
        except PtxError:
            continue
        wrong = not np.allclose(out, ref, rtol=1e-6, atol=1e-5)
        assert res.findings or wrong, f"deleting line {i + 1} ({lines[i].strip()}) went unnoticed"


@pytest.mark.parametrize("sync", ["release", "relaxed_fence", "split_warps"])
def test_remote_stores_ordered_by_the_cluster_barrier(sync):
    """st.shared::cluster into the next rank, local ld.shared after the barrier: exact, no finding. The
    fence.acq_rel.cluster makes a later arrive.relaxed release; split_warps arrives on two code paths
    (non-.aligned, one warp parks at its wait while the other runs on)."""
    res, out, ref = run_ring(sync=sync)
    assert res.findings == [], [str(f) for f in res.findings]
    np.testing.assert_array_equal(out, ref)
    assert res.counters["dsmem_st"] == {"requests": 8 * 2, "bytes": 8 * 64 * 4}


@pytest.mark.parametrize("sync", ["relaxed", "none"])
def test_remote_store_racing_a_local_read_is_a_finding(sync):
    res, out, ref = run_ring(sync=sync)
    assert "DSMEM race" in {f.kind for f in res.findings}, [str(f) for f in res.findings]


def test_cluster_instructions_without_a_cluster_shape():
    """No __cluster_dims__: every CTA is a cluster of one (rank 0 of 1); the barrier still works."""
    import struct
    src = r"""
extern "C" __global__ void k(unsigned* out) {
    __shared__ unsigned s[32];
    s[threadIdx.x] = threadIdx.x;
    __cluster_barrier_arrive();
    __cluster_barrier_wait();
    unsigned* p = (unsigned*)__cluster_map_shared_rank(s, 0);
    out[blockIdx.x * 32 + threadIdx.x] = p[31 - threadIdx.x] + 100 * __clusterRelativeBlockRank() +
                                          1000 * __clusterSizeInBlocks() + 10000 * __clusterIdx().x;
}
"""
    k = H.module(src, "sm_90a", "cluster_implicit").kernel("k")
    assert k.cluster_dims == (1, 1, 1) and not k.explicit_cluster
    dev = H.Device()
    out = poisoned_like(np.zeros((3, 32), np.uint32))
    po = dev.upload(out, "out")
    res = k.launch((3, 1, 1), (32, 1, 1), 0, struct.pack("<Q", po), dev.mem)
    assert res.findings == []
    want = 31 - np.arange(32)[None, :] + 1000 + 10000 * np.arange(3)[:, None]
    np.testing.assert_array_equal(dev.download(po, out), want)


def test_cluster_atomics_into_rank_0():
    import struct
    mod = H.module(ATOMICS, "sm_90a", "cluster_atomics")
    dev = H.Device()
    out, fout = poisoned_like(np.zeros(130, np.uint32)), poisoned_like(np.zeros(1, np.float32))
    po, pf = dev.upload(out, "out"), dev.upload(fout, "fout")
    res = mod.kernel("k").launch((4, 1, 1), (32, 1, 1), 0, struct.pack("<QQ", po, pf), dev.mem)
    assert res.findings == []
    got = dev.download(po, out)
    assert sorted(got[:128].tolist()) == list(range(128))      # every old value of the counter once
    assert got[128:].tolist() == [128, 32 * (0 + 1 + 2 + 3)]
    assert dev.download(pf, fout)[0] == 64.0
    assert res.counters["dsmem_st"]["requests"] == 3 * 3           # ranks 1..3, three atomics each


def test_threads_on_different_phases_at_one_wait():
    import struct

    from plus_ep.kernels.ptx import cluster as C
    states = []
    orig = C.ClusterState.try_wait

    def spy(self, M, op, gm):
        s = orig(self, M, op, gm)
        states.append(s if isinstance(s, str) else "split")
        return s
    mod = H.module(PHASES, "sm_90a", "cluster_phases")
    dev = H.Device()
    out = poisoned_like(np.zeros(4 * 64, np.uint32))
    po = dev.upload(out, "out")
    try:
        C.ClusterState.try_wait = spy
        res = mod.kernel("k").launch((4, 1, 1), (64, 1, 1), 0, struct.pack("<Q", po), dev.mem)
    finally:
        C.ClusterState.try_wait = orig
    assert res.findings == []
    assert "split" in states                  # one wait instruction, two phases: some threads passed
    np.testing.assert_array_equal(dev.download(po, out).reshape(4, 64), np.repeat([[2] * 32 + [3] * 32], 4, 0))


@pytest.mark.parametrize("off,rank,msg", [(0, "r ^ 1u", None),
                                          (32, "r ^ 1u", r"out-of-bounds DSMEM access .* of CTA \(1, 0, 0\)"),
                                          (0, "2u", "names cluster rank 2, the cluster has 2 CTAs|mapa to cluster rank 2")])
def test_remote_access_outside_the_target_window_or_cluster(off, rank, msg):
    import struct
    src = REMOTE_AT.replace("OFF", str(off)).replace("RANK", rank)
    mod = H.module(src, "sm_90a", "cluster_remote_at")
    dev = H.Device()
    out = poisoned_like(np.zeros((2, 32), np.float32))
    po = dev.upload(out, "out")
    launch = lambda: mod.kernel("k").launch((2, 1, 1), (32, 1, 1), 0, struct.pack("<Q", po), dev.mem)  # noqa: E731
    if msg is None:
        assert launch().findings == []
        np.testing.assert_array_equal(dev.download(po, out), np.tile(np.arange(32, dtype=np.float32), (2, 1)))
    else:
        with pytest.raises(PtxError, match=msg):
            launch()


def test_vector_dsmem_accesses():
    import struct
    mod = H.module(VECTORS, "sm_90a", "cluster_vectors")
    assert "st.shared::cluster.v4.f32" in mod.text and "ld.shared::cluster.v2.b32" in mod.text
    dev = H.Device()
    x = np.random.default_rng(3).standard_normal((4, 32, 4)).astype(np.float32)
    pi, po = dev.upload(x, "in"), dev.alloc(x.nbytes, "out", fill=0xFF)
    res = mod.kernel("k").launch((4, 1, 1), (32, 1, 1), 0, struct.pack("<QQ", pi, po), dev.mem)
    assert res.findings == [], [str(f) for f in res.findings]
    np.testing.assert_array_equal(dev.download(po, x), x[[1, 0, 3, 2]])     # each CTA holds its partner's row
    assert res.counters["dsmem_st"] == {"requests": 4, "bytes": 4 * 32 * 16}
    assert "dsmem_ld" not in res.counters          # loads through the own rank's window are local shared loads
