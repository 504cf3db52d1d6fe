"""Fragment layouts of ldmatrix and mma.sync on hand-written PTX, against tables written here from the
PTX ISA's figures (section "Matrix Fragments for mma.m16n8k16" / "m16n8k8" and "ldmatrix"), independent
of the templates: iota and identity tiles, exact integer arithmetic."""
from __future__ import annotations

import numpy as np
import pytest

from plus_ep.kernels.ptx import GlobalMemory, Module, PtxError
from tests.support.poison import poisoned_like

HEAD = ".version 9.0\n.target sm_80\n.address_size 64\n"


def _launch(text, arrays, threads=32, smem=0):
    mod = Module.parse(text, name="layout")
    mem = GlobalMemory()
    ptrs = [mem.map_array(a, f"p{i}") for i, a in enumerate(arrays)]
    params = b"".join(int(p).to_bytes(8, "little") for p in ptrs)
    r = mod.kernel("k").launch((1, 1, 1), (threads, 1, 1), smem, params, mem)
    return r


# ISA tables (groupID = lane >> 2, threadID_in_group = lane % 4)
def a_f16_coords(lane, i):        # A 16x16: element a_i, i in 0..7 (two per .b32 register)
    g, t = lane >> 2, lane % 4
    row = g if i in (0, 1, 4, 5) else g + 8
    col = t * 2 + (i & 1) + (8 if i >= 4 else 0)
    return row, col


def b_f16_coords(lane, i):        # B 16x8: b_i, i in 0..3
    g, t = lane >> 2, lane % 4
    return t * 2 + (i & 1) + (8 if i >= 2 else 0), g


def c_coords(lane, i):            # C/D 16x8 f32: c_i, i in 0..3
    g, t = lane >> 2, lane % 4
    return (g if i < 2 else g + 8), t * 2 + (i & 1)


def a_tf32_coords(lane, i):       # A 16x8 tf32: a_i, i in 0..3
    g, t = lane >> 2, lane % 4
    return (g if i in (0, 2) else g + 8), (t if i < 2 else t + 4)


def b_tf32_coords(lane, i):       # B 8x8 tf32: b_i, i in 0..1
    g, t = lane >> 2, lane % 4
    return (t if i == 0 else t + 4), g


MMA_PTX = HEAD + """.visible .entry k(.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u64 pd)
{
.reg .b32 %a<4>; .reg .b32 %b<2>; .reg .f32 %c<4>; .reg .f32 %d<4>; .reg .b64 %rd<12>; .reg .b32 %t;
mov.u32 %t, %tid.x;
ld.param.u64 %rd1, [pa]; mul.wide.u32 %rd2, %t, 16; add.s64 %rd3, %rd1, %rd2;
ld.global.v4.b32 {%a0, %a1, %a2, %a3}, [%rd3];
ld.param.u64 %rd4, [pb]; mul.wide.u32 %rd5, %t, 8; add.s64 %rd6, %rd4, %rd5;
ld.global.v2.b32 {%b0, %b1}, [%rd6];
ld.param.u64 %rd7, [pc]; add.s64 %rd8, %rd7, %rd2;
ld.global.v4.f32 {%c0, %c1, %c2, %c3}, [%rd8];
MMA {%d0, %d1, %d2, %d3}, {%a0, %a1, %a2, %a3}, {%b0, %b1}, {%c0, %c1, %c2, %c3};
ld.param.u64 %rd9, [pd]; add.s64 %rd10, %rd9, %rd2;
st.global.v4.f32 [%rd10], {%d0, %d1, %d2, %d3};
ret;
}
"""


@pytest.mark.parametrize("kind", ["f16", "bf16", "tf32"])
@pytest.mark.parametrize("tiles", ["iota_x_identity", "identity_x_iota", "iota_x_iota"])
def test_mma_fragments(kind, tiles):
    K = 8 if kind == "tf32" else 16
    iota_a = (np.arange(16 * K).reshape(16, K) % 13 - 6).astype(np.float32)
    iota_b = (np.arange(K * 8).reshape(K, 8) % 7 - 3).astype(np.float32)
    eye_a, eye_b = np.eye(16, K, dtype=np.float32), np.eye(K, 8, dtype=np.float32)
    A, B = {"iota_x_identity": (iota_a, eye_b), "identity_x_iota": (eye_a, iota_b),
            "iota_x_iota": (iota_a, iota_b)}[tiles]
    C = (np.arange(128).reshape(16, 8) % 5).astype(np.float32)
    afrag = np.zeros((32, 4), np.uint32)
    bfrag = np.zeros((32, 2), np.uint32)
    cfrag = np.zeros((32, 4), np.float32)
    if kind == "tf32":
        for l in range(32):
            for i in range(4):
                afrag[l, i] = A[a_tf32_coords(l, i)].view(np.uint32)
            for i in range(2):
                bfrag[l, i] = B[b_tf32_coords(l, i)].view(np.uint32)
    else:
        enc = (lambda x: np.float16(x).view(np.uint16)) if kind == "f16" else \
              (lambda x: np.uint16(np.float32(x).view(np.uint32) >> 16))
        for l in range(32):
            for i in range(8):
                afrag[l, i // 2] |= np.uint32(int(enc(A[a_f16_coords(l, i)]))) << np.uint32(16 * (i % 2))
            for i in range(4):
                bfrag[l, i // 2] |= np.uint32(int(enc(B[b_f16_coords(l, i)]))) << np.uint32(16 * (i % 2))
    for l in range(32):
        for i in range(4):
            cfrag[l, i] = C[c_coords(l, i)]
    dfrag = poisoned_like(np.zeros((32, 4), np.float32))     # every fragment element must be written
    form = {"f16": "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
            "bf16": "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
            "tf32": "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"}[kind]
    r = _launch(MMA_PTX.replace("MMA", form), [afrag, bfrag, cfrag, dfrag])
    assert not r.findings
    D = np.zeros((16, 8), np.float32)
    for l in range(32):
        for i in range(4):
            D[c_coords(l, i)] = dfrag[l, i]
    np.testing.assert_array_equal(D, A @ B + C)


LDM_PTX = HEAD + """.visible .entry k(.param .u64 psrc, .param .u64 prow, .param .u64 pout)
{
.extern .shared .align 16 .b8 smem[];
.reg .b32 %x<4>; .reg .b32 %r<4>; .reg .b64 %rd<12>; .reg .b32 %t; .reg .b32 %s<3>;
mov.u32 %t, %tid.x;
ld.param.u64 %rd1, [psrc]; mul.wide.u32 %rd2, %t, 16; add.s64 %rd3, %rd1, %rd2;
ld.global.v4.b32 {%x0, %x1, %x2, %x3}, [%rd3];
mov.u32 %s0, smem; shl.b32 %s1, %t, 4; add.s32 %s1, %s0, %s1;
st.shared.v4.b32 [%s1], {%x0, %x1, %x2, %x3};
bar.sync 0;
ld.param.u64 %rd4, [prow]; mul.wide.u32 %rd5, %t, 4; add.s64 %rd6, %rd4, %rd5;
ld.global.u32 %s2, [%rd6]; add.s32 %s2, %s2, %s0;
LDM {%r0, %r1, %r2, %r3}, [%s2];
ld.param.u64 %rd7, [pout]; add.s64 %rd8, %rd7, %rd2;
st.global.v4.b32 [%rd8], {%r0, %r1, %r2, %r3};
ret;
}
"""


@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix_x4(trans):
    src = np.arange(32 * 8, dtype=np.uint16)              # 32 rows of 8 halves: value = 8 * row + col
    rng = np.random.default_rng(1)
    perm = rng.permutation(32)                              # lane l supplies the address of row perm[l]
    rows = (perm * 16).astype(np.uint32)
    out = poisoned_like(np.zeros((32, 4), np.uint32))
    form = "ldmatrix.sync.aligned.m8n8.x4" + (".trans" if trans else "") + ".shared.b16"
    r = _launch(LDM_PTX.replace("LDM", form), [src.view(np.uint32).reshape(32, 4).copy(), rows, out], smem=512)
    assert not r.findings
    mat = lambda i: src.reshape(32, 8)[perm[8 * i:8 * i + 8]]          # matrix i: rows from lanes 8i..8i+7
    for l in range(32):
        for i in range(4):
            m = mat(i).T if trans else mat(i)
            lo, hi = m[l >> 2, 2 * (l % 4)], m[l >> 2, 2 * (l % 4) + 1]
            assert out[l, i] == int(lo) | (int(hi) << 16), (l, i, trans)


def test_mma_with_a_missing_lane_is_an_error():
    text = MMA_PTX.replace("MMA", "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32")
    text = text.replace("mov.u32 %t, %tid.x;", "mov.u32 %t, %tid.x;\n.reg .pred %q; setp.eq.u32 %q, %t, 5; @%q ret;")
    arrays = [np.zeros((32, 4), np.uint32), np.zeros((32, 2), np.uint32), np.zeros((32, 4), np.float32),
              np.zeros((32, 4), np.float32)]
    with pytest.raises(PtxError) as e:
        _launch(text, arrays)
    assert "threads 5" in str(e.value) and e.value.line is not None and e.value.kernel == "k"
