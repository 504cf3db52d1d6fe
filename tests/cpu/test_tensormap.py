"""The emulated tensor-map encoding (kernels/ptx/tensormap.py): cuTensorMapEncodeTiled's documented
requirements each refused with a message naming the rule, a round trip through the 128 bytes, and
decoding refusing bytes that are no map."""
from __future__ import annotations

import pytest

from plus_ep.kernels.ptx import tensormap as TM

OK = dict(dtype=TM.F16, address=0x10000, dims=(72, 40), strides=(144,), box=(64, 16), swizzle=TM.SWIZZLE_128B)


def _enc(**kw):
    return TM.encode_tiled(**{**OK, **kw})


def test_round_trip():
    raw = _enc(l2_promotion=TM.L2_256B, oob_fill=TM.OOB_NAN)
    assert len(raw) == 128
    tm = TM.decode(raw)
    assert (tm.dtype, tm.rank, tm.address, tm.dims, tm.strides, tm.box) == (TM.F16, 2, 0x10000, (72, 40), (2, 144),
                                                                          (64, 16))
    assert (tm.swizzle, tm.l2_promotion, tm.oob_fill, tm.element_strides) == (TM.SWIZZLE_128B, TM.L2_256B,
                                                                              TM.OOB_NAN, (1, 1))
    assert tm.box_bytes == 64 * 16 * 2 and tm.extent_bytes() == 39 * 144 + 71 * 2 + 2


@pytest.mark.parametrize("kw,rule", [
    (dict(address=0x10008), "16-byte aligned"),
    (dict(dims=(72, 0)), "globalDim\\[1\\] = 0"),
    (dict(dims=(72, (1 << 32) + 1)), "at most 2\\^32"),
    (dict(strides=(136,)), "multiple of 16"),
    (dict(strides=(1 << 40,)), "less than 2\\^40"),
    (dict(strides=(128,)), "dimensions would overlap"),
    (dict(box=(64, 257)), "boxDim\\[1\\] = 257"),
    (dict(box=(4, 16), swizzle=TM.SWIZZLE_NONE), "multiple of 16"),
    (dict(box=(128, 16)), "exceeds the 128-byte swizzle span"),
    (dict(element_strides=(1, 9)), "elementStrides\\[1\\] = 9"),
    (dict(dims=(1, 2, 3, 4, 5, 6), strides=(16,) * 5, box=(8,) * 6), "at most 5"),
    (dict(interleave=TM.INTERLEAVE_16B), "at least 3 with interleave"),
    (dict(dims=(8, 4, 2), strides=(32, 128), box=(8, 4, 2), interleave=TM.INTERLEAVE_32B), "32-byte swizzle"),
    (dict(dtype=TM.S32, box=(32, 16), strides=(288,), oob_fill=TM.OOB_NAN), "NaN OOB fill"),
    (dict(dtype=77), "tensorDataType 77"),
    (dict(strides=(144, 16)), "rank 2: 2 strides"),
])
def test_driver_requirements_refused(kw, rule):
    with pytest.raises(TM.TensorMapError, match=rule):
        _enc(**kw)


def test_decode_refuses_what_is_no_map():
    raw = bytearray(_enc())
    with pytest.raises(TM.TensorMapError, match="bad magic or checksum"):
        TM.decode(bytes(raw[:120]) + b"\1\0\0\0" + bytes(raw[124:]))
    raw[20] ^= 1                         # one bit of the address flipped: the checksum no longer holds
    with pytest.raises(TM.TensorMapError, match="bad magic or checksum"):
        TM.decode(bytes(raw))
    with pytest.raises(TM.TensorMapError, match="128 bytes"):
        TM.decode(bytes(64))


def test_box_geometry():
    tm = TM.decode(_enc())
    addrs, inside = tm.box_addresses((40, 30))
    assert addrs.size == 64 * 16
    # element (j1, j0) of the box is global element (30 + j1, 40 + j0)
    assert addrs[5 * 64 + 3] == 0x10000 + 35 * 144 + 43 * 2
    assert inside.sum() == 10 * 32
    assert tm.outside((72, 0)) == 0 and tm.outside((0, -16)) == 1 and tm.outside((-63, 39)) is None
