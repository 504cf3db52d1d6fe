"""TMA (cp.async.bulk.tensor), mbarriers, named barriers and setmaxnreg on the PTX interpreter, on
hand-written PTX (tests/support/ptx_tma_sources.py) against references computed from first principles:
the box read with loops and zero fill, the swizzle written out bit by bit, a producer/consumer ring's sum
in numpy. Planted bugs (a parity never flipped, a stage read before its wait or released before it is
read, expect_tx off, a box outside the map, a map one row past its buffer) must each be caught."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from plus_ep.kernels.ptx import GlobalMemory, Module, PtxError
from plus_ep.kernels.ptx import tensormap as TM
from tests.support import ptx_tma_sources as S


def _box(src, dtype, box, coords, swizzle=TM.SWIZZLE_NONE, tx=None, wait=True):
    rank = src.ndim
    es = src.itemsize
    dims = tuple(reversed(src.shape))
    strides = tuple(int(src.strides[rank - 1 - d]) for d in range(1, rank))
    tm = TM.encode_tiled(dtype, src.ctypes.data, dims, strides, box, swizzle=swizzle)
    nbytes = int(np.prod(box)) * es
    out = np.zeros(nbytes, np.uint8)
    mem = GlobalMemory()
    mem.map_array(out, "out")
    mem.map_array(src, "src")
    k = Module.parse(S.box_kernel(rank, nbytes, tx=tx, wait=wait)).kernel("k")
    res = k.launch((1, 1, 1), (64, 1, 1), params=S.box_params(out.ctypes.data, coords, tm), memory=mem)
    return res, out, S.box_reference(src, coords, box, TM.SWIZZLE_SPAN[swizzle])


def _pad(shape, dtype, inner_pad=0):
    """A C-contiguous array whose rows are 16-byte multiples (a tensor map's strides), values exact."""
    a = np.zeros(shape[:-1] + (shape[-1] + inner_pad,), dtype)
    a[...] = (np.arange(a.size).reshape(a.shape) % 251).astype(dtype)
    return a


@pytest.mark.parametrize("coords", [(0, 0), (8, 33), (-8, -3), (40, 35), (64, 0)])
def test_tensor_copy_2d_f16_swizzle128(coords):
    src = _pad((40, 72), np.float16)
    res, out, ref = _box(src, TM.F16, (64, 16), coords, TM.SWIZZLE_128B)
    assert res.findings == []
    np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("dtype,np_t,swz,box,shape,coords", [
    (TM.F32, np.float32, TM.SWIZZLE_NONE, (8, 4), (10, 12), (5, 8)),        # unswizzled, both edges
    (TM.F32, np.float32, TM.SWIZZLE_64B, (16, 8), (9, 20), (-4, 2)),        # 64-byte swizzle
    (TM.BF16, np.uint16, TM.SWIZZLE_32B, (16, 4), (7, 24), (16, 5)),        # 32-byte swizzle
])
def test_tensor_copy_2d_swizzle_modes(dtype, np_t, swz, box, shape, coords):
    src = _pad(shape, np_t)
    res, out, ref = _box(src, dtype, box, coords, swz)
    assert res.findings == []
    np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("shape,box,coords", [
    ((3, 5, 8), (8, 4, 2), (0, 3, 2)),                    # 3-D, rows and planes past the edges
    ((2, 2, 3, 3, 16), (16, 2, 2, 2, 2), (0, 2, -1, 1, 1)),   # 5-D, u8
])
def test_tensor_copy_higher_rank(shape, box, coords):
    np_t, dtype = (np.float32, TM.F32) if len(shape) == 3 else (np.uint8, TM.U8)
    src = _pad(shape, np_t)
    res, out, ref = _box(src, dtype, box, coords)
    assert res.findings == []
    np.testing.assert_array_equal(out, ref)


def test_tensor_copy_counts_bytes_once():
    """The box's in-bounds bytes are one issue's global reads; out-of-bounds fill reads nothing."""
    src = _pad((40, 72), np.float16)
    res, _, _ = _box(src, TM.F16, (64, 16), (40, 30), TM.SWIZZLE_128B)
    ld = res.counters["global_ld"]
    # in bounds: columns 40..71 (32 halves = 64 bytes) of rows 30..39, each row's 32-byte sectors
    base = src.ctypes.data
    sectors = {(base + r * 144 + c * 2) // 32 for r in range(30, 40) for c in range(40, 72)}
    assert ld["bytes"] == 10 * 64 and ld["sectors"] == len(sectors) and ld["requests"] == 1
    assert ld["ideal_sectors"] == 20


@pytest.mark.parametrize("mask,cluster", [(0b11, 2), (0b1111, 4)])
def test_tensor_copy_multicast(mask, cluster):
    src = np.arange(20 * 32, dtype=np.float32).reshape(20, 32)
    box, nbytes = (32, 8), 32 * 8 * 4
    tm = TM.encode_tiled(TM.F32, src.ctypes.data, (32, 20), (128,), box, swizzle=TM.SWIZZLE_128B)
    k = Module.parse(S.box_kernel(2, nbytes, multicast=mask, cluster=cluster)).kernel("k")
    out = np.zeros(nbytes * cluster, np.uint8)
    mem = GlobalMemory()
    mem.map_array(out, "out")
    mem.map_array(src, "src")
    res = k.launch((cluster, 1, 1), (64, 1, 1), params=S.box_params(out.ctypes.data, (0, 15), tm), memory=mem)
    assert res.findings == []
    ref = S.box_reference(src, (0, 15), box, 128)
    for r in range(cluster):
        np.testing.assert_array_equal(out[r * nbytes:(r + 1) * nbytes], ref)
    assert res.counters["global_ld"]["requests"] == 1      # read once, written into every CTA


def test_multicast_to_a_cta_that_waits_in_vain_deadlocks():
    src = np.arange(20 * 32, dtype=np.float32).reshape(20, 32)
    tm = TM.encode_tiled(TM.F32, src.ctypes.data, (32, 20), (128,), (32, 8))
    k = Module.parse(S.box_kernel(2, 1024, multicast=0b01, cluster=2)).kernel("k")
    out = np.zeros(2048, np.uint8)
    mem = GlobalMemory()
    mem.map_array(out, "out")
    mem.map_array(src, "src")
    with pytest.raises(PtxError, match="cluster deadlock.*transaction-count mismatch"):
        k.launch((2, 1, 1), (64, 1, 1), params=S.box_params(out.ctypes.data, (0, 0), tm), memory=mem)


# ----------------------------------------------------------------------------------------------- ring

def _ring(stages=3, tiles=7, rows=4, **kw):
    mat = ((np.arange(tiles * rows * 32, dtype=np.float32).reshape(tiles * rows, 32) % 97) * 0.5)
    out = np.zeros(32, np.float32)
    mem = GlobalMemory()
    mem.map_array(out, "out")
    mem.map_array(mat, "mat")
    k = Module.parse(S.ring_kernel(stages, tiles, rows, **kw)).kernel("k")
    params = struct.pack("<Q", out.ctypes.data) + bytes(56) + S.ring_map(mat, rows)
    res = k.launch((1, 1, 1), (64, 1, 1), params=params, memory=mem)
    return res, out, mat.sum(0)


@pytest.mark.parametrize("stages,tiles", [(1, 3), (2, 5), (3, 7), (4, 4)])
def test_ring_of_stages(stages, tiles):
    res, out, ref = _ring(stages, tiles)
    assert res.findings == []
    np.testing.assert_allclose(out, ref, rtol=0, atol=0)


def test_parity_not_flipped_is_a_phase_waited_twice():
    with pytest.raises(PtxError, match="mbarrier phase waited twice"):
        _ring(flip=False)


def test_consumer_reading_a_stage_early_is_caught():
    res, out, ref = _ring(early=True)
    kinds = {f.kind for f in res.findings}
    assert "shared memory read before its mbarrier phase" in kinds
    assert not np.array_equal(out, ref)          # the stage was not there yet


def test_stage_released_before_it_is_read_is_caught():
    res, _, _ = _ring(release_first=True)
    assert "shared memory read before its mbarrier phase" in {f.kind for f in res.findings}


def test_expect_tx_above_the_box_bytes_deadlocks_naming_the_mismatch():
    with pytest.raises(PtxError, match="deadlock.*transaction-count mismatch: every arrival is in but 512"):
        _ring(tx_scale=2)


def test_expect_tx_below_the_box_bytes_is_a_mismatch():
    src = _pad((40, 72), np.float16)
    with pytest.raises(PtxError, match="transaction-count mismatch"):
        _box(src, TM.F16, (64, 16), (0, 0), TM.SWIZZLE_128B, tx=64 * 16 * 2 - 16)


def test_box_wholly_outside_the_map_is_a_finding():
    src = _pad((40, 72), np.float16)
    res, out, ref = _box(src, TM.F16, (64, 16), (72, 0), TM.SWIZZLE_128B)
    assert [f.kind for f in res.findings] == ["TMA box outside the tensor map"]
    np.testing.assert_array_equal(out, ref)          # all fill


def test_map_one_row_past_its_buffer_is_out_of_bounds():
    """A tensor map whose dims say one row more than the allocation: the box reads past the buffer."""
    src = _pad((40, 72), np.float16)
    tm = TM.encode_tiled(TM.F16, src.ctypes.data, (72, 41), (144,), (64, 16), swizzle=TM.SWIZZLE_128B)
    out = np.zeros(2048, np.uint8)
    mem = GlobalMemory()
    mem.map_array(out, "out")
    mem.map_array(src, "src")
    k = Module.parse(S.box_kernel(2, 2048)).kernel("k")
    with pytest.raises(PtxError, match="out-of-bounds global access"):
        k.launch((1, 1, 1), (64, 1, 1), params=S.box_params(out.ctypes.data, (0, 32), tm), memory=mem)


def test_reading_without_waiting_reads_poison_and_is_caught():
    src = _pad((40, 72), np.float16)
    res, out, ref = _box(src, TM.F16, (64, 16), (0, 0), TM.SWIZZLE_128B, wait=False)
    kinds = {f.kind for f in res.findings}
    assert {"shared memory read before its mbarrier phase", "uninitialised shared read", "bulk copy never completed"} <= kinds
    assert not np.array_equal(out, ref)


# --------------------------------------------------------------------------------- mbarrier semantics

PHASES = S.HEAD + """.visible .entry k(.param .u64 pout)
{
.reg .pred %p<8>;
.reg .b32 %r<24>;
.reg .b64 %rd<12>;
.shared .align 8 .b64 bar;
mov.u32 %r1, %tid.x;
mov.u32 %r2, bar;
setp.ne.u32 %p1, %r1, 0;
@%p1 bra L1;
mbarrier.init.shared::cta.b64 [%r2], 48;
L1:
bar.sync 0;
ld.param.u64 %rd1, [pout];
mov.u32 %r3, 0;
ROUND:
// warp 1 (threads 32..63) takes a detour through LATE: warp 0 arrives first and parks in its wait
setp.lt.u32 %p2, %r1, 32;
@!%p2 bra LATE;
ARR:
// threads 48..63 never arrive (the barrier counts 48)
setp.ge.u32 %p4, %r1, 48;
@%p4 bra SKIP;
mbarrier.arrive.shared::cta.b64 %rd2, [%r2];
WAIT:
mbarrier.try_wait.shared::cta.b64 %p5, [%r2], %rd2;
@!%p5 bra WAIT;
mul.wide.u32 %rd3, %r3, 256;
mul.wide.u32 %rd4, %r1, 4;
add.s64 %rd5, %rd1, %rd3;
add.s64 %rd5, %rd5, %rd4;
add.u32 %r5, %r3, 1;
st.global.u32 [%rd5], %r5;
SKIP:
add.u32 %r3, %r3, 1;
setp.lt.u32 %p6, %r3, 3;
@%p6 bra ROUND;
ret;
LATE:
mov.u32 %r4, 0;
SPIN:
add.u32 %r4, %r4, 1;
setp.lt.u32 %p3, %r4, 5;
@%p3 bra SPIN;
bra ARR;
}
"""


def test_mbarrier_phases_with_state_tokens():
    """48 of 64 threads arrive each round (the barrier counts 48), one warp late: every round completes
    once, each arriving thread passes its wait once per round with its own token."""
    out = np.zeros(3 * 64, np.uint32)
    mem = GlobalMemory()
    mem.map_array(out, "out")
    k = Module.parse(PHASES).kernel("k")
    res = k.launch((1, 1, 1), (64, 1, 1), params=struct.pack("<Q", out.ctypes.data), memory=mem)
    assert res.findings == []
    ref = np.zeros((3, 64), np.uint32)
    ref[:, :48] = np.arange(1, 4)[:, None]
    np.testing.assert_array_equal(out.reshape(3, 64), ref)


def test_mbarrier_wait_nobody_completes_deadlocks():
    text = PHASES.replace("mbarrier.init.shared::cta.b64 [%r2], 48;", "mbarrier.init.shared::cta.b64 [%r2], 49;")
    out = np.zeros(3 * 64, np.uint32)
    mem = GlobalMemory()
    mem.map_array(out, "out")
    with pytest.raises(PtxError, match=r"deadlock.*48 of 49|deadlock.*1 of 49 arrivals pending"):
        Module.parse(text).kernel("k").launch((1, 1, 1), (64, 1, 1), params=struct.pack("<Q", out.ctypes.data),
                                              memory=mem)


def test_mbarrier_use_before_init_is_an_error():
    text = PHASES.replace("mbarrier.init.shared::cta.b64 [%r2], 48;", "")
    mem = GlobalMemory()
    out = np.zeros(3 * 64, np.uint32)
    mem.map_array(out, "out")
    with pytest.raises(PtxError, match="no mbarrier.init initialised one"):
        Module.parse(text).kernel("k").launch((1, 1, 1), (64, 1, 1), params=struct.pack("<Q", out.ctypes.data),
                                              memory=mem)


# --------------------------------------------------------------------------------- named barriers

NAMED = S.HEAD + """.visible .entry k(.param .u64 pout)
{
.reg .pred %p<8>;
.reg .b32 %r<24>;
.reg .b64 %rd<12>;
.shared .align 16 .b32 buf[96];
mov.u32 %r1, %tid.x;
ld.param.u64 %rd1, [pout];
shr.u32 %r2, %r1, 5;
setp.eq.u32 %p1, %r2, 2;
@%p1 bra PROD;
setp.eq.u32 %p2, %r2, 3;
@%p2 bra CONS;
// warps 0 and 1: two rounds on barrier 1 (64 threads), each exchanging a value through shared memory
mov.u32 %r3, buf;
shl.b32 %r4, %r1, 2;
add.u32 %r5, %r3, %r4;
add.u32 %r6, %r1, 100;
st.shared.u32 [%r5], %r6;
bar.sync 1, 64;
xor.b32 %r7, %r1, 32;
shl.b32 %r8, %r7, 2;
add.u32 %r9, %r3, %r8;
ld.shared.u32 %r10, [%r9];
bar.sync 1, 64;
st.shared.u32 [%r5], %r10;
bar.sync 1, 64;
ld.shared.u32 %r11, [%r9];
mul.wide.u32 %rd2, %r1, 4;
add.s64 %rd3, %rd1, %rd2;
st.global.u32 [%rd3], %r11;
ret;
PROD:
// warp 2 writes 32 values, signals barrier 2 (64 = warps 2 and 3) without waiting
and.b32 %r12, %r1, 31;
mov.u32 %r3, buf;
shl.b32 %r13, %r12, 2;
add.u32 %r14, %r3, %r13;
bar.sync 3, 64;
add.u32 %r15, %r12, 7000;
st.shared.u32 [%r14+256], %r15;
bar.arrive 2, 64;
ret;
CONS:
and.b32 %r12, %r1, 31;
mov.u32 %r3, buf;
shl.b32 %r13, %r12, 2;
add.u32 %r14, %r3, %r13;
bar.sync 3, 64;
bar.sync 2, 64;
ld.shared.u32 %r16, [%r14+256];
mul.wide.u32 %rd2, %r1, 4;
add.s64 %rd3, %rd1, %rd2;
st.global.u32 [%rd3], %r16;
ret;
}
"""


def test_named_barriers():
    out = np.zeros(128, np.uint32)
    mem = GlobalMemory()
    mem.map_array(out, "out")
    res = Module.parse(NAMED).kernel("k").launch((1, 1, 1), (128, 1, 1), params=struct.pack("<Q", out.ctypes.data),
                                                 memory=mem)
    assert res.findings == []
    t = np.arange(64)
    np.testing.assert_array_equal(out[:64], t + 100)               # swapped twice between the warps
    np.testing.assert_array_equal(out[96:], np.arange(32) + 7000)


def test_named_barrier_count_nobody_reaches_deadlocks():
    text = NAMED.replace("bar.sync 2, 64;", "bar.sync 2, 96;").replace("bar.arrive 2, 64;", "bar.arrive 2, 96;")
    out = np.zeros(128, np.uint32)
    mem = GlobalMemory()
    mem.map_array(out, "out")
    with pytest.raises(PtxError, match="deadlock.*named barrier 2: 64 of 96 threads arrived"):
        Module.parse(text).kernel("k").launch((1, 1, 1), (128, 1, 1), params=struct.pack("<Q", out.ctypes.data),
                                              memory=mem)


# --------------------------------------------------------------------------------- setmaxnreg, params

SETMAXNREG = S.HEAD + """.visible .entry k(.param .u64 pout)
{
.reg .pred %p<4>;
.reg .b32 %r<8>;
.reg .b64 %rd<8>;
mov.u32 %r1, %tid.x;
setp.lt.u32 %p1, %r1, LIMIT;
@%p1 bra LOW;
setmaxnreg.inc.sync.aligned.u32 232;
bra END;
LOW:
setmaxnreg.dec.sync.aligned.u32 40;
END:
ld.param.u64 %rd1, [pout];
mov.b64 %rd2, pout;
cvta.param.u64 %rd3, %rd2;
ld.u64 %rd4, [%rd3];
setp.ne.u64 %p2, %rd4, %rd1;
@%p2 bra BAD;
mul.wide.u32 %rd5, %r1, 4;
add.s64 %rd6, %rd1, %rd5;
st.global.u32 [%rd6], 1;
BAD:
ret;
}
"""


def test_setmaxnreg_per_warpgroup_and_generic_param_reads():
    out = np.zeros(256, np.uint32)
    mem = GlobalMemory()
    mem.map_array(out, "out")
    k = Module.parse(SETMAXNREG.replace("LIMIT", "128")).kernel("k")
    res = k.launch((1, 1, 1), (256, 1, 1), params=struct.pack("<Q", out.ctypes.data), memory=mem)
    assert res.findings == []
    assert (out == 1).all()      # the generic load of the parameter's own address read the parameter


def test_setmaxnreg_by_part_of_a_warpgroup_is_an_error():
    out = np.zeros(256, np.uint32)
    mem = GlobalMemory()
    mem.map_array(out, "out")
    k = Module.parse(SETMAXNREG.replace("LIMIT", "64")).kernel("k")
    with pytest.raises(PtxError, match="part of warpgroup"):
        k.launch((1, 1, 1), (256, 1, 1), params=struct.pack("<Q", out.ctypes.data), memory=mem)


def test_setmaxnreg_count_outside_the_range_is_refused():
    with pytest.raises(PtxError, match="register count 20"):
        Module.parse(SETMAXNREG.replace("LIMIT", "128").replace("u32 40;", "u32 20;"))
