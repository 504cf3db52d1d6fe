"""wgmma.mma_async on hand-written PTX, independent of the templates: a 64x16 A and a 16x16 B tile (iota
and identity, exact small integers in f16) placed in shared memory by the host in the 128-byte swizzle
layout as the PTX ISA describes it, a descriptor built in PTX, and every thread's accumulator registers
checked against the ISA's wgmma .m64nNk16 D fragment figure.

Written from the PTX ISA (sections "Matrix Descriptor Format", "Shared Memory Matrix Layout" with the
128-byte swizzling mode, and "Register Fragments" for wgmma .m64nNk16):
* descriptor: bits 0-13 start address >> 4, 16-29 leading byte offset >> 4, 32-45 stride byte offset >> 4,
  49-51 base offset, 62-63 swizzle mode (1 = 128-byte swizzle);
* 128-byte swizzle: the tile is made of 8-row x 128-byte atoms (1024-byte aligned); row j of an atom
  lies at 128 * j, and its 16-byte chunk c is stored at chunk position c XOR j. K-major: a row is an M
  (or N) index holding consecutive K; the 8-row groups along M/N are SBO apart. MN-major: a row is a K
  index holding consecutive M/N; the 8-row groups along K are SBO apart.
* D fragment (f32): warp w of the warpgroup, lane l (g = l / 4, t = l % 4), register i holds
  D[16 w + g + 8 * ((i / 2) % 2), 8 * (i / 4) + 2 t + i % 2].
"""
from __future__ import annotations

import numpy as np
import pytest

from plus_ep.kernels.ptx import GlobalMemory, Module
from tests.support import ptx_wgmma
from tests.support.ptx_wgmma import A_OFF, B_OFF, N, SBO, SMEM, d_coords


def place(img: np.ndarray, base: int, tile: np.ndarray, k_major: bool) -> None:
    """Store tile (float, f16-exact) into the byte image as the ISA's 128-byte swizzle lays it out.
    k_major: tile is [MN, K]; else tile is [K, MN]."""
    rows, cols = tile.shape
    for r in range(rows):
        for c in range(cols):
            atom, j = divmod(r, 8)                      # 8-row atoms, SBO apart
            chunk, within = divmod(2 * c, 16)
            assert chunk < 8                            # one 128-byte row per atom row (tiles here fit)
            off = base + atom * SBO + 128 * j + 16 * (chunk ^ j) + within
            img[off:off + 2] = np.frombuffer(np.float16(tile[r, c]).tobytes(), np.uint8)


def kernel_text(trans_a: int, trans_b: int) -> str:
    return ptx_wgmma.text("f32", f"wgmma.mma_async.sync.aligned.m64n{N}k16.f32.f16.f16 {{{ptx_wgmma.regs()}}}, "
                                 f"%rd9, %rd11, %p1, 1, 1, {trans_a}, {trans_b};")


def descriptor_high(lbo: int = 16, sbo: int = SBO) -> int:
    """Descriptor bits other than the start address: LBO, SBO and the 128-byte swizzle mode."""
    return ((lbo >> 4) << 16) | ((sbo >> 4) << 32) | (1 << 62)


def run(a: np.ndarray, b: np.ndarray, trans_a: int, trans_b: int):
    """a [64, 16], b [16, N] as values; trans_a / trans_b: stored MN-major (1) or K-major (0)."""
    img = np.zeros(SMEM, np.uint8)
    place(img, A_OFF, a.T if trans_a else a, k_major=not trans_a)
    place(img, B_OFF, b if trans_b else b.T, k_major=not trans_b)
    mem = GlobalMemory()
    out = np.full((128, N // 2), np.nan, np.float32)
    pimg, pout = mem.map_array(img, "image"), mem.map_array(out, "out")
    params = b"".join(int(x).to_bytes(8, "little") for x in (pimg, pout, descriptor_high(), descriptor_high()))
    r = Module.parse(kernel_text(trans_a, trans_b), name="wgmma_layout").kernel("k").launch(
        (1, 1, 1), (128, 1, 1), 0, params, mem)
    assert not r.findings, r.findings
    assert r.counters["tensor_core_instructions"] == 1
    return out


def iota(rows, cols):
    return (np.arange(rows * cols, dtype=np.float64).reshape(rows, cols) % 1024) + 1


def identity(rows, cols):
    return (np.arange(rows)[:, None] % cols == np.arange(cols)[None, :]).astype(np.float64)


@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (0, 1), (1, 0), (1, 1)])
@pytest.mark.parametrize("tiles", ["iota_x_identity", "identity_x_iota"])
def test_wgmma_fragment_and_swizzled_layout(tiles, trans_a, trans_b):
    if tiles == "iota_x_identity":
        a, b = iota(64, 16), identity(16, N)
    else:
        a, b = identity(64, 16), iota(16, N)
    got = run(a, b, trans_a, trans_b)
    d = a @ b                                           # exact: small integers
    want = np.array([[d[d_coords(tid, i)] for i in range(N // 2)] for tid in range(128)])
    bad = np.argwhere(got != want)
    assert bad.size == 0, f"{len(bad)} registers differ, first thread/reg {bad[:4].tolist()}: " \
                          f"got {got[tuple(bad[0])]}, want {want[tuple(bad[0])]}"
    # every element of D is held by exactly one (thread, register)
    seen = {d_coords(tid, i) for tid in range(128) for i in range(N // 2)}
    assert len(seen) == 64 * N


def test_wrong_swizzle_is_seen():
    """The test can fail: the same tiles placed without the XOR give a different D."""
    a, b = iota(64, 16), identity(16, N)
    global place
    real = place

    def unswizzled(img, base, tile, k_major):
        rows, cols = tile.shape
        for r in range(rows):
            for c in range(cols):
                atom, j = divmod(r, 8)
                off = base + atom * SBO + 128 * j + 2 * c
                img[off:off + 2] = np.frombuffer(np.float16(tile[r, c]).tobytes(), np.uint8)
    place = unswizzled
    try:
        got = run(a, b, 0, 0)
    finally:
        place = real
    want = np.array([[(a @ b)[d_coords(tid, i)] for i in range(N // 2)] for tid in range(128)])
    assert (got != want).any()


def a_fragment_words(a: np.ndarray) -> np.ndarray:
    """[128, 4] .b32 words of A [64, 16] held in registers, from the ISA's wgmma A register fragment figure
    (.f16, m64nNk16): warp w holds rows 16w..16w+15; register r, half h (low half first) of lane l holds
    A[16w + l/4 + 8 (r % 2), 2 (l % 4) + h + 8 (r / 2)]."""
    out = np.zeros((128, 4), np.uint32)
    for tid in range(128):
        w, lane = divmod(tid, 32)
        g, t = divmod(lane, 4)
        for r in range(4):
            halves = [np.float16(a[16 * w + g + 8 * (r % 2), 2 * t + h + 8 * (r // 2)]).view(np.uint16)
                      for h in range(2)]
            out[tid, r] = int(halves[0]) | (int(halves[1]) << 16)
    return out


@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("tiles", ["iota_x_identity", "identity_x_iota", "iota_x_iota"])
def test_wgmma_a_from_registers(tiles, trans_b):
    """wgmma with A in registers (no transpose-a immediate): the A fragment words go in, D comes out as A B."""
    a, b = {"iota_x_identity": (iota(64, 16), identity(16, N)), "identity_x_iota": (identity(64, 16), iota(16, N)),
            "iota_x_iota": (iota(64, 16) % 7, iota(16, N) % 5)}[tiles]
    img = np.zeros(SMEM + 128 * 16, np.uint8)
    place(img, B_OFF, b if trans_b else b.T, k_major=not trans_b)
    img[SMEM:] = a_fragment_words(a).view(np.uint8).reshape(-1)
    mem = GlobalMemory()
    out = np.full((128, N // 2), np.nan, np.float32)
    pimg, pout = mem.map_array(img, "image"), mem.map_array(out, "out")
    params = b"".join(int(x).to_bytes(8, "little") for x in (pimg, pout, descriptor_high(), descriptor_high()))
    mma = (f"wgmma.mma_async.sync.aligned.m64n{N}k16.f32.f16.f16 {{{ptx_wgmma.regs()}}}, "
           f"{{%ra0, %ra1, %ra2, %ra3}}, %rd11, %p1, 1, 1, {trans_b};")
    r = Module.parse(ptx_wgmma.text("f32", mma, a_regs=True), name="wgmma_rs").kernel("k").launch(
        (1, 1, 1), (128, 1, 1), 0, params, mem)
    assert not r.findings, r.findings
    assert r.counters["tensor_core_instructions"] == 1
    d = a @ b
    want = np.array([[d[d_coords(tid, i)] for i in range(N // 2)] for tid in range(128)])
    assert (out == want).all(), np.argwhere(out != want)[:4].tolist()
