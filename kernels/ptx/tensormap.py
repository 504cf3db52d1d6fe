"""Tensor maps (CUtensorMap) as the emulated driver encodes them and the interpreter's TMA reads them.

    from plus_ep.kernels.ptx import tensormap
    raw = tensormap.encode_tiled(dtype=tensormap.F16, address=a.ctypes.data, dims=(K, M),
                                 strides=(K * 2,), box=(64, 128), swizzle=tensormap.SWIZZLE_128B)
    tm = tensormap.decode(raw)       # TensorMap(dtype, rank, address, dims, strides, box, ...)
    offs, inside = tm.box_addresses((k0, m0))     # byte addresses of the box's elements, in-bounds mask

A real CUtensorMap is 128 opaque bytes whose layout NVIDIA does not publish. The emulated driver
(plus_ep/native/emucuda.c, cuTensorMapEncodeTiled, through plus_ep/verification/emulator.py) writes this
module's encoding instead; the interpreter decodes it wherever a `cp.async.bulk.tensor` names a map (a
`__grid_constant__` kernel parameter, or global memory). Little-endian, 128 bytes, 64-byte aligned:

    0  u32 magic "PTM1"   4 u8 version (1)   5 u8 data type   6 u8 rank   7 u8 interleave
    8  u8 swizzle   9 u8 L2 promotion   10 u8 OOB fill   11..15 zero
    16 u64 global address
    24 u64 globalDim[5]          (innermost first; unused entries 0)
    64 u64 globalStrides[5]      (bytes; [0] = the element size, [1..rank) as given)
    104 u16 boxDim[5]   114 u8 elementStrides[5]   119 zero
    120 u32 CRC-32 of bytes 0..119   124..127 zero

`encode_tiled` applies cuTensorMapEncodeTiled's documented requirements (CUDA driver API, "Tensor Map
Object Management"): rank 1..5 (3..5 with interleave), a 16-byte aligned address (32 with 32-byte
interleave), dims in [1, 2^32], strides multiples of 16 (32 with 32-byte interleave) below 2^40 and not
overlapping (stride[i] >= dim[i-1] x stride[i-1]), box dims in [1, 256] with boxDim[0] x element size a
multiple of 16 bytes without interleave and within the swizzle span, element strides in [1, 8], 32-byte
interleave only with the 32-byte swizzle, the NaN OOB fill only for floating types. A violation raises
TensorMapError naming the rule (the driver returns CUDA_ERROR_INVALID_VALUE).
"""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import numpy as np

MAGIC = 0x314D5450          # "PTM1"
SIZE = 128
ALIGN = 64

# CUtensorMapDataType
U8, U16, U32, S32, U64, S64, F16, F32, F64, BF16, F32_FTZ, TF32, TF32_FTZ = range(13)
ELEM_BYTES = {U8: 1, U16: 2, U32: 4, S32: 4, U64: 8, S64: 8, F16: 2, F32: 4, F64: 8, BF16: 2, F32_FTZ: 4,
              TF32: 4, TF32_FTZ: 4}
FLOAT_TYPES = (F16, F32, F64, BF16, F32_FTZ, TF32, TF32_FTZ)
# CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill
INTERLEAVE_NONE, INTERLEAVE_16B, INTERLEAVE_32B = 0, 1, 2
SWIZZLE_NONE, SWIZZLE_32B, SWIZZLE_64B, SWIZZLE_128B = 0, 1, 2, 3
SWIZZLE_SPAN = {SWIZZLE_NONE: 0, SWIZZLE_32B: 32, SWIZZLE_64B: 64, SWIZZLE_128B: 128}
L2_NONE, L2_64B, L2_128B, L2_256B = 0, 1, 2, 3
OOB_ZERO, OOB_NAN = 0, 1

_HEAD = struct.Struct("<IBBBBBBB5xQ5Q5Q5H5Bx")     # bytes 0..119


class TensorMapError(ValueError):
    """A tensor map the driver refuses (encode_tiled) or bytes that are not one (decode)."""


@dataclass(frozen=True)
class TensorMap:
    dtype: int
    rank: int
    address: int
    dims: tuple            # innermost first
    strides: tuple         # bytes per step of each dim; strides[0] is the element size
    box: tuple
    element_strides: tuple
    interleave: int = INTERLEAVE_NONE
    swizzle: int = SWIZZLE_NONE
    l2_promotion: int = L2_NONE
    oob_fill: int = OOB_ZERO

    @property
    def elem_bytes(self) -> int:
        return ELEM_BYTES[self.dtype]

    @property
    def box_bytes(self) -> int:
        """Bytes one tiled copy of the box writes to shared memory (and counts as its transaction)."""
        return int(np.prod(self.box)) * self.elem_bytes

    def box_addresses(self, coords):
        """(global byte address of each element of the box starting at `coords` (innermost first), mask of
        the elements inside the tensor), both in the box's shared-memory order (dim 0 fastest)."""
        if len(coords) != self.rank:
            raise TensorMapError(f"{len(coords)} coordinates for a rank-{self.rank} tensor map")
        addr = np.zeros((), np.int64)
        inside = np.ones((), bool)
        for d in range(self.rank - 1, -1, -1):           # outermost first, so the last axis is dim 0
            x = np.int64(coords[d]) + np.arange(self.box[d], dtype=np.int64)
            addr = addr[..., None] + x * np.int64(self.strides[d])
            inside = inside[..., None] & (x >= 0) & (x < self.dims[d])
        return np.int64(self.address) + addr.reshape(-1), inside.reshape(-1)

    def outside(self, coords) -> int | None:
        """The first dimension in which the box starting at `coords` lies wholly outside the tensor (a copy
        of nothing but fill), or None."""
        for d in range(self.rank):
            if coords[d] >= self.dims[d] or coords[d] + self.box[d] <= 0:
                return d
        return None

    def extent_bytes(self) -> int:
        """One past the highest byte offset from `address` an in-bounds element occupies."""
        return sum((self.dims[d] - 1) * self.strides[d] for d in range(self.rank)) + self.elem_bytes

    def describe(self) -> str:
        return (f"tensor map (type {self.dtype}, dims {list(self.dims)}, strides {list(self.strides[1:self.rank])} "
                f"bytes, box {list(self.box)}, swizzle {SWIZZLE_SPAN[self.swizzle] or 'none'}) at "
                f"{self.address:#x}")


def swizzle(addr, span: int):
    """The shared-memory byte address a 16-byte granule lands at under the span-byte swizzle (32, 64, 128;
    0 = none): address bits [4, 4+log2(span/16)) are XORed with the bits three above them, on the absolute
    address, so the pattern repeats every 8 x span bytes (CUTLASS's Swizzle<B, 4, 3>)."""
    if not span:
        return addr
    mask = span // 16 - 1
    return addr ^ (((addr >> 7) & mask) << 4)


def encode_tiled(dtype: int, address: int, dims, strides, box, element_strides=None,
                 interleave: int = INTERLEAVE_NONE, swizzle: int = SWIZZLE_NONE, l2_promotion: int = L2_NONE,
                 oob_fill: int = OOB_ZERO) -> bytes:
    """The 128 bytes of cuTensorMapEncodeTiled's result, or TensorMapError naming the requirement broken.
    `dims`, `box`, `element_strides`: rank entries, innermost first; `strides`: rank - 1 byte strides of
    dims 1..rank-1 (cuTensorMapEncodeTiled's globalStrides)."""
    rank = len(dims)
    if dtype not in ELEM_BYTES:
        raise TensorMapError(f"tensorDataType {dtype} is not a CUtensorMapDataType the emulator implements")
    if interleave not in (INTERLEAVE_NONE, INTERLEAVE_16B, INTERLEAVE_32B):
        raise TensorMapError(f"interleave {interleave} is not a CUtensorMapInterleave")
    if swizzle not in SWIZZLE_SPAN:
        raise TensorMapError(f"swizzle {swizzle} is not a CUtensorMapSwizzle the emulator implements")
    if l2_promotion not in (L2_NONE, L2_64B, L2_128B, L2_256B):
        raise TensorMapError(f"l2Promotion {l2_promotion} is not a CUtensorMapL2promotion")
    if oob_fill not in (OOB_ZERO, OOB_NAN):
        raise TensorMapError(f"oobFill {oob_fill} is not a CUtensorMapFloatOOBfill")
    if not 1 <= rank <= 5:
        raise TensorMapError(f"tensorRank {rank} must be non-zero and at most 5")
    if interleave != INTERLEAVE_NONE and rank < 3:
        raise TensorMapError(f"tensorRank {rank} must be at least 3 with interleave")
    element_strides = tuple(element_strides) if element_strides is not None else (1,) * rank
    strides = tuple(int(s) for s in strides)
    if len(strides) != rank - 1 or len(box) != rank or len(element_strides) != rank:
        raise TensorMapError(f"rank {rank}: {len(strides)} strides (need {rank - 1}), {len(box)} box dims and "
                             f"{len(element_strides)} element strides (need {rank})")
    esize = ELEM_BYTES[dtype]
    align = 32 if interleave == INTERLEAVE_32B else 16
    if address % align:
        raise TensorMapError(f"globalAddress {address:#x} must be {align}-byte aligned")
    for d, n in enumerate(dims):
        if not 1 <= int(n) <= 1 << 32:
            raise TensorMapError(f"globalDim[{d}] = {n} must be non-zero and at most 2^32")
    for d, s in enumerate(strides):
        if s % align or not 0 <= s < 1 << 40:
            raise TensorMapError(f"globalStrides[{d}] = {s} must be a multiple of {align} and less than 2^40")
    full = (esize,) + strides
    for d in range(1, rank):
        if full[d] < int(dims[d - 1]) * full[d - 1]:
            raise TensorMapError(f"globalStrides[{d - 1}] = {full[d]} is less than globalDim[{d - 1}] x the stride "
                                 f"below it ({int(dims[d - 1]) * full[d - 1]}): dimensions would overlap")
    for d, b in enumerate(box):
        if not 1 <= int(b) <= 256:
            raise TensorMapError(f"boxDim[{d}] = {b} must be non-zero and at most 256")
    inner = int(box[0]) * esize
    if interleave == INTERLEAVE_NONE:
        if inner % 16:
            raise TensorMapError(f"boxDim[0] x element size = {inner} bytes must be a multiple of 16")
        span = SWIZZLE_SPAN[swizzle]
        if span and inner > span:
            raise TensorMapError(f"boxDim[0] x element size = {inner} bytes exceeds the {span}-byte swizzle span")
    for d, e in enumerate(element_strides):
        if not 1 <= int(e) <= 8:
            raise TensorMapError(f"elementStrides[{d}] = {e} must be non-zero and at most 8")
    if interleave == INTERLEAVE_32B and swizzle != SWIZZLE_32B:
        raise TensorMapError("32-byte interleave needs the 32-byte swizzle")
    if oob_fill == OOB_NAN and dtype not in FLOAT_TYPES:
        raise TensorMapError("the NaN OOB fill needs a floating-point tensorDataType")

    def pad(xs):
        return [int(x) for x in xs] + [0] * (5 - len(xs))
    head = _HEAD.pack(MAGIC, 1, dtype, rank, interleave, swizzle, l2_promotion, oob_fill, int(address),
                      *pad(dims), *pad(full), *pad(box), *pad(element_strides))
    return head + struct.pack("<II", zlib.crc32(head), 0)


def decode(raw: bytes) -> TensorMap:
    """The TensorMap of 128 bytes encode_tiled wrote; TensorMapError when they are not one (a kernel
    naming another parameter, a map corrupted or never encoded)."""
    raw = bytes(raw)
    if len(raw) != SIZE:
        raise TensorMapError(f"a tensor map is {SIZE} bytes, got {len(raw)}")
    f = _HEAD.unpack(raw[:120])
    crc, = struct.unpack("<I", raw[120:124])
    if f[0] != MAGIC or f[1] != 1 or crc != zlib.crc32(raw[:120]):
        raise TensorMapError("not a tensor map encoded by cuTensorMapEncodeTiled (bad magic or checksum)")
    dtype, rank, inter, swz, l2, oob, address = f[2:9]
    dims, strides, box, estr = f[9:14], f[14:19], f[19:24], f[24:29]
    return TensorMap(dtype, rank, address, tuple(dims[:rank]), tuple(strides[:rank]), tuple(box[:rank]),
                     tuple(estr[:rank]), inter, swz, l2, oob)


__all__ = ["TensorMap", "TensorMapError", "decode", "encode_tiled", "swizzle"]
