"""8-bit tensor-core forms and float8 conversions of the PTX interpreter, on hand-written PTX against tables written
here from the PTX ISA (independent of the interpreter's own tables and of the templates):

* mma.sync.aligned.m16n8k32.row.col{.satfinite}.s32.{s8,u8}.{s8,u8}.s32 and .f32.{e4m3,e5m2}.{e4m3,e5m2}.f32
  ("Matrix Fragments for mma.m16n8k32"): A a_i (i 0..15, four per .b32 register, low byte first) at row
  g for i in [0,4) and [8,12), g + 8 otherwise, column 4t + (i % 4) + 16 (i >= 8); B b_i (i 0..7) at row
  4t + (i % 4) + 16 (i >= 4), column g; C/D as the f32 m16n8 layout. Integer sums are exact: s32 wraps
  modulo 2^32, .satfinite clamps.
* wgmma.mma_async m64nNk32 with .s8/.u8 (s32) and .e4m3/.e5m2 (f32) operands, K-major in the 128-byte swizzle
  (32 bytes of K per row: the same bytes as k16 of 16-bit elements).
* cvt.rn{.satfinite}.{e4m3x2,e5m2x2}.f32 (a's code in the upper byte) and cvt.rn.f16x2.{e4m3x2,e5m2x2}, on values
  whose codes are worked out by hand below (ties to even, subnormals, overflow, infinities, NaN)."""
from __future__ import annotations

import numpy as np
import pytest

from plus_ep.kernels.ptx import GlobalMemory, Module
from plus_ep.kernels.ptx import semantics as S
from tests.support.poison import poisoned_like
from tests.support import ptx_wgmma
from tests.support.ptx_8bit import mma_text
from tests.support.ptx_wgmma import A_OFF, B_OFF, N, SBO, SMEM, d_coords


def _launch(text, arrays, threads=32):
    mod = Module.parse(text, name="int8")
    mem = GlobalMemory()
    ptrs = [mem.map_array(a, f"p{i}") for i, a in enumerate(arrays)]
    params = b"".join(int(p).to_bytes(8, "little") for p in ptrs)
    return mod.kernel("k").launch((1, 1, 1), (threads, 1, 1), 0, params, mem)


def a_coords(lane, i):            # A 16x32 8-bit: a_i, i in 0..15
    g, t = lane >> 2, lane % 4
    row = g if i in (0, 1, 2, 3, 8, 9, 10, 11) else g + 8
    return row, 4 * t + (i % 4) + (16 if i >= 8 else 0)


def b_coords(lane, i):            # B 32x8 8-bit: b_i, i in 0..7
    g, t = lane >> 2, lane % 4
    return 4 * t + (i % 4) + (16 if i >= 4 else 0), g


def c_coords(lane, i):            # C/D 16x8: c_i, i in 0..3
    g, t = lane >> 2, lane % 4
    return (g if i < 2 else g + 8), 2 * t + (i & 1)


def fragments(A_bytes, B_bytes, C):
    """Registers per lane from byte matrices A [16, 32], B [32, 8] (uint8 codes) and C [16, 8]."""
    afrag = np.zeros((32, 16), np.uint8)
    bfrag = np.zeros((32, 8), np.uint8)
    cfrag = np.zeros((32, 4), C.dtype)
    for lane in range(32):
        for i in range(16):
            afrag[lane, i] = A_bytes[a_coords(lane, i)]
        for i in range(8):
            bfrag[lane, i] = B_bytes[b_coords(lane, i)]
        for i in range(4):
            cfrag[lane, i] = C[c_coords(lane, i)]
    return afrag.view(np.uint32).copy(), bfrag.view(np.uint32).copy(), cfrag


def gather_d(dfrag):
    D = np.zeros((16, 8), dfrag.dtype)
    for lane in range(32):
        for i in range(4):
            D[c_coords(lane, i)] = dfrag[lane, i]
    return D


def run_int_mma(A, B, C, at, bt, satfinite=False):
    sat = ".satfinite" if satfinite else ""
    form = f"mma.sync.aligned.m16n8k32.row.col{sat}.s32.{at}.{bt}.s32"
    a, b, c = fragments(A.astype(np.int64).astype(np.uint8), B.astype(np.int64).astype(np.uint8), C.astype(np.int32))
    d = poisoned_like(np.zeros((32, 4), np.int32))
    r = _launch(mma_text(form, "s32"), [a, b, c, d])
    assert not r.findings
    return gather_d(d)


INT_RANGES = {"s8": (-128, 128), "u8": (0, 256)}


@pytest.mark.parametrize("at,bt", [("s8", "s8"), ("u8", "s8"), ("s8", "u8"), ("u8", "u8")])
@pytest.mark.parametrize("tiles", ["iota_x_identity", "identity_x_iota", "full_range"])
def test_mma_m16n8k32_integer_fragments(at, bt, tiles):
    rng = np.random.default_rng(5)
    iota_a = np.arange(16 * 32).reshape(16, 32) % 97 - (48 if at == "s8" else 0)
    iota_b = np.arange(32 * 8).reshape(32, 8) % 89 - (44 if bt == "s8" else 0)
    eye_a, eye_b = np.eye(16, 32, dtype=np.int64), np.eye(32, 8, dtype=np.int64)
    if tiles == "full_range":           # every byte value, extremes included: exact s32 sums
        A = rng.integers(*INT_RANGES[at], (16, 32))
        B = rng.integers(*INT_RANGES[bt], (32, 8))
        A[0, :], B[:, 0] = INT_RANGES[at][1] - 1, INT_RANGES[bt][0]
    else:
        A, B = {"iota_x_identity": (iota_a, eye_b), "identity_x_iota": (eye_a, iota_b)}[tiles]
    C = rng.integers(-1000, 1000, (16, 8))
    np.testing.assert_array_equal(run_int_mma(A, B, C, at, bt), A @ B + C)


def test_mma_integer_overflow_wraps_and_satfinite_clamps():
    A = np.full((16, 32), 127)
    B = np.full((32, 8), 127)
    C = np.full((16, 8), 2 ** 31 - 1000)               # + 32 * 127 * 127 = 516128 past INT32_MAX
    exact = A @ B + C
    wrapped = ((exact + 2 ** 31) % 2 ** 32) - 2 ** 31
    np.testing.assert_array_equal(run_int_mma(A, B, C, "s8", "s8"), wrapped)
    np.testing.assert_array_equal(run_int_mma(A, B, C, "s8", "s8", satfinite=True), np.full((16, 8), 2 ** 31 - 1))
    C2 = np.full((16, 8), -2 ** 31 + 10)
    np.testing.assert_array_equal(run_int_mma(-A, B, C2, "s8", "s8", satfinite=True), np.full((16, 8), -2 ** 31))


def _fp8_values(codes, kind):
    return S.fp8_bits_to_f32(codes, kind).astype(np.float64)


@pytest.mark.parametrize("at,bt", [("e4m3", "e4m3"), ("e5m2", "e4m3"), ("e5m2", "e5m2")])
def test_mma_m16n8k32_float8_fragments(at, bt):
    rng = np.random.default_rng(6)
    finite = {"e4m3": [c for c in range(256) if c & 0x7F != 0x7F], "e5m2": [c for c in range(256) if c & 0x7C != 0x7C]}
    A = rng.choice(finite[at], (16, 32)).astype(np.uint8)
    B = rng.choice(finite[bt], (32, 8)).astype(np.uint8)
    A[3, :] = B[:, 5] = 0
    A[3, 7], B[7, 5] = 0x38 if at == "e4m3" else 0x3C, 0x38 if bt == "e4m3" else 0x3C      # 1.0 * 1.0
    C = rng.standard_normal((16, 8)).astype(np.float32)
    a, b, c = fragments(A, B, C)
    d = poisoned_like(np.zeros((32, 4), np.float32))
    r = _launch(mma_text(f"mma.sync.aligned.m16n8k32.row.col.f32.{at}.{bt}.f32", "f32"), [a, b, c, d])
    assert not r.findings
    want = _fp8_values(A, at) @ _fp8_values(B, bt) + C
    np.testing.assert_allclose(gather_d(d), want.astype(np.float32), rtol=1e-6, atol=1e-6)
    assert gather_d(d)[3, 5] == np.float32(1.0 + C[3, 5])


# ---- wgmma m64nNk32 ------------------------------------------------------------------------------------------


def place_bytes(img, base, tile):
    """A [rows, 32] byte tile, K-major, in the 128-byte swizzle: row r of atom r // 8 at 128 (r % 8), its
    16-byte chunk c at position c XOR (r % 8)."""
    for r in range(tile.shape[0]):
        for c in range(tile.shape[1]):
            atom, j = divmod(r, 8)
            chunk, within = divmod(c, 16)
            img[base + atom * SBO + 128 * j + 16 * (chunk ^ j) + within] = tile[r, c]


def wgmma_text(form, acc, imms):
    return ptx_wgmma.text(acc, f"{form} {{{ptx_wgmma.regs()}}}, %rd9, %rd11, %p1{imms};")


def run_wgmma(A_bytes, B_bytes, form, acc, imms=""):
    """A [64, 32], B [32, N] byte codes, both stored K-major."""
    img = np.zeros(SMEM, np.uint8)
    place_bytes(img, A_OFF, A_bytes)
    place_bytes(img, B_OFF, B_bytes.T.copy())
    mem = GlobalMemory()
    out = poisoned_like(np.zeros((128, N // 2), np.int32 if acc == "s32" else np.float32))
    high = (1 << 16) | ((SBO >> 4) << 32) | (1 << 62)
    params = b"".join(int(x).to_bytes(8, "little") for x in (mem.map_array(img, "image"), mem.map_array(out, "out"),
                                                              high, high))
    r = Module.parse(wgmma_text(form, acc, imms), name="wgmma8").kernel("k").launch((1, 1, 1), (128, 1, 1), 0,
                                                                                     params, mem)
    assert not r.findings, r.findings
    return out


@pytest.mark.parametrize("at,bt", [("s8", "s8"), ("u8", "s8")])
def test_wgmma_k32_integer_fragment_and_swizzle(at, bt):
    rng = np.random.default_rng(8)
    A = rng.integers(*INT_RANGES[at], (64, 32))
    B = rng.integers(*INT_RANGES[bt], (32, N))
    got = run_wgmma(A.astype(np.uint8), B.astype(np.uint8), f"wgmma.mma_async.sync.aligned.m64n{N}k32.s32.{at}.{bt}",
                    "s32")
    d = A @ B
    want = np.array([[d[d_coords(tid, i)] for i in range(N // 2)] for tid in range(128)])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("at,bt", [("e4m3", "e4m3"), ("e4m3", "e5m2")])
def test_wgmma_k32_float8_fragment_and_swizzle(at, bt):
    rng = np.random.default_rng(9)
    small = {"e4m3": [0x30, 0x38, 0x40, 0xB8, 0x3C, 0x00], "e5m2": [0x38, 0x3C, 0x40, 0xBC, 0x3E, 0x00]}
    A = rng.choice(small[at], (64, 32)).astype(np.uint8)       # 0.5, 1, 2, -1, 1.5, 0 (e4m3) / 0.5, 1, 2, -1, 1.5, 0
    B = rng.choice(small[bt], (32, N)).astype(np.uint8)
    got = run_wgmma(A, B, f"wgmma.mma_async.sync.aligned.m64n{N}k32.f32.{at}.{bt}", "f32", ", 1, 1")
    d = _fp8_values(A, at) @ _fp8_values(B, bt)                 # exact: sums of small dyadic numbers
    want = np.array([[d[d_coords(tid, i)] for i in range(N // 2)] for tid in range(128)])
    np.testing.assert_array_equal(got, want.astype(np.float32))
    assert {0.5, 1.0, 2.0, -1.0, 1.5, 0.0} == set(_fp8_values(np.array(small[at], np.uint8), at).tolist())


def test_wgmma_8bit_swizzle_matters():
    """The check can fail: bytes placed without the XOR give a different D."""
    rng = np.random.default_rng(10)
    A, B = rng.integers(-128, 128, (64, 32)), rng.integers(-128, 128, (32, N))
    img_place = place_bytes.__globals__["place_bytes"]

    def plain(img, base, tile):
        for r in range(tile.shape[0]):
            atom, j = divmod(r, 8)
            img[base + atom * SBO + 128 * j:base + atom * SBO + 128 * j + tile.shape[1]] = tile[r]
    globals()["place_bytes"] = plain
    try:
        got = run_wgmma(A.astype(np.uint8), B.astype(np.uint8), f"wgmma.mma_async.sync.aligned.m64n{N}k32.s32.s8.s8",
                        "s32")
    finally:
        globals()["place_bytes"] = img_place
    d = A @ B
    assert (got != np.array([[d[d_coords(t, i)] for i in range(N // 2)] for t in range(128)])).any()


# ---- cvt to and from float8 ----------------------------------------------------------------------------------
CVT_TEXT = """.version 9.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 px, .param .u64 py)
{
.reg .b32 %t; .reg .f32 %x<2>; .reg .b16 %h; .reg .b32 %w; .reg .b64 %rd<8>;
mov.u32 %t, %tid.x;
ld.param.u64 %rd1, [px]; mul.wide.u32 %rd2, %t, 8; add.s64 %rd3, %rd1, %rd2;
ld.global.v2.f32 {%x0, %x1}, [%rd3];
CVT %h, %x0, %x1;
ld.param.u64 %rd4, [py]; mul.wide.u32 %rd5, %t, 2; add.s64 %rd6, %rd4, %rd5;
st.global.b16 [%rd6], %h;
ret;
}
"""

# (value, e4m3 .satfinite, e4m3 plain, e5m2 .satfinite, e5m2 plain), codes worked out by hand: sign | exponent field
# (bias 7 / 15) | mantissa; subnormals 2^-9 (e4m3) and 2^-16 (e5m2) per unit; ties to the even mantissa
HAND = [
    (1.0, 0x38, 0x38, 0x3C, 0x3C),
    (-2.0, 0xC0, 0xC0, 0xC0, 0xC0),
    (1.0625, 0x38, 0x38, 0x3C, 0x3C),          # e4m3: tie 1.0 / 1.125 -> even 1.0
    (1.1875, 0x3A, 0x3A, 0x3D, 0x3D),          # e4m3: tie 1.125 / 1.25 -> 1.25 (010); e5m2: 1.25 (01)
    (448.0, 0x7E, 0x7E, 0x5F, 0x5F),           # e4m3 largest; e5m2 448 = 1.75 * 2^8 -> exp 23
    (464.0, 0x7E, 0x7E, 0x5F, 0x5F),           # e4m3 tie 448 / 480 -> 448 (mantissa 110 even)
    (500.0, 0x7E, 0x7F, 0x60, 0x60),           # e4m3 past 448 after rounding: max / NaN; e5m2 512
    (57344.0, 0x7E, 0x7F, 0x7B, 0x7B),         # e5m2 largest
    (61440.0, 0x7E, 0x7F, 0x7B, 0x7C),         # e5m2 tie 57344 / 65536 -> up: max / infinity
    (float("inf"), 0x7E, 0x7F, 0x7B, 0x7C),
    (float("-inf"), 0xFE, 0x7F, 0xFB, 0xFC),    # a NaN result is the canonical NaN 0x7f
    (float("nan"), 0x7F, 0x7F, 0x7F, 0x7F),
    (2.0 ** -9, 0x01, 0x01, 0x18, 0x18),       # e4m3 smallest subnormal; e5m2 2^-9 normal (exponent field 6)
    (2.0 ** -10, 0x00, 0x00, 0x14, 0x14),      # e4m3 tie 0 / 2^-9 -> 0
    (3 * 2.0 ** -10, 0x02, 0x02, 0x1A, 0x1A),  # e4m3 tie 2^-9 / 2^-8 -> 2^-8 (code 2); e5m2 1.5 * 2^-9
    (2.0 ** -17, 0x00, 0x00, 0x00, 0x00),      # e5m2 tie 0 / 2^-16 -> 0
    (-0.0, 0x80, 0x80, 0x80, 0x80),
]


@pytest.mark.parametrize("kind,col", [("e4m3", 1), ("e4m3", 2), ("e5m2", 3), ("e5m2", 4)])
def test_cvt_f32_to_float8_hand_values(kind, col):
    sat = col in (1, 3)
    vals = np.array([h[0] for h in HAND], np.float32)
    x = np.stack([vals, vals[::-1]], 1).copy()            # a (upper byte) and b (lower byte) differ per lane
    y = poisoned_like(np.zeros(len(HAND), np.uint16))
    form = f"cvt.rn{'.satfinite' if sat else ''}.{kind}x2.f32"
    r = _launch(CVT_TEXT.replace("CVT", form), [x, y], threads=len(HAND))
    assert not r.findings
    want = np.array([h[col] for h in HAND])
    assert list(y >> 8) == list(want) and list(y & 0xFF) == list(want[::-1])


def test_cvt_float8_to_f16x2():
    text = CVT_TEXT.replace(".reg .b16 %h;", ".reg .b16 %h; .reg .b32 %g;").replace(
        "CVT %h, %x0, %x1;", "mov.b32 %w, %x0; cvt.u16.u32 %h, %w; cvt.rn.f16x2.KIND %g, %h; mov.b32 %x0, %g;"
    ).replace("st.global.b16 [%rd6], %h;", "st.global.b32 [%rd6], %x0;").replace("mul.wide.u32 %rd5, %t, 2",
                                                                               "mul.wide.u32 %rd5, %t, 4")
    # (code pair, e4m3 halves, e5m2 halves) as f16 bits: 0x38 -> 1.0 (0x3C00) in e4m3, 0.5 (0x3800) in e5m2;
    # 0x7E -> 448 (0x5F00) / NaN; 0x01 -> 2^-9 (0x1800) / 2^-16 (f16 subnormal 256 * 2^-24: 0x0100)
    pairs = [(0x3801, (0x3C00, 0x1800), (0x3800, 0x0100)), (0x7EB8, (0x5F00, 0xBC00), (None, 0xB800))]
    for kind, k in (("e4m3x2", 1), ("e5m2x2", 2)):
        x = np.zeros((len(pairs), 2), np.float32)
        x[:, 0] = np.array([p[0] for p in pairs], np.uint32).view(np.float32)
        y = poisoned_like(np.zeros(len(pairs), np.uint32))
        r = _launch(text.replace("KIND", kind), [x, y], threads=len(pairs))
        assert not r.findings
        for got, p in zip(y, pairs):
            hi, lo = p[k]
            assert int(got) & 0xFFFF == lo
            if hi is None:          # e5m2 0x7E is a NaN: any f16 NaN
                assert np.isnan(np.uint16(int(got) >> 16).view(np.float16))
            else:
                assert int(got) >> 16 == hi
