"""One hand-written sm_90a kernel around one wgmma (tests/cpu/test_ptx_wgmma_layout.py, test_ptx_8bit.py):
a [64, K] A tile and a [K, N] B tile copied from a byte image into 128-byte-swizzled shared memory at
A_OFF and B_OFF, one wgmma with descriptors built from `pda`/`pdb` (their high bits: LBO, SBO, swizzle),
the 64 x N accumulator fragments stored per thread (d_coords maps thread and register to D's row and
column). E.g. text("f32", "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {" + regs() + "}, %rd9,
%rd11, %p1, 1, 1, 0, 0;")."""
from __future__ import annotations

N = 16                                  # the wgmma's N
SBO = 1024                              # stride between 8-row core-matrix atoms
A_OFF, B_OFF, SMEM = 0, 8192, 10240     # tile offsets in shared memory, and its size


def regs() -> str:
    """The accumulator registers, `%f0, ..., %f<N/2 - 1>`."""
    return ", ".join(f"%f{i}" for i in range(N // 2))


def d_coords(tid: int, i: int):
    """(row, column) of D held by thread `tid` in accumulator register i."""
    w, lane = divmod(tid, 32)
    g, t = divmod(lane, 4)
    return 16 * w + g + 8 * ((i // 2) % 2), 8 * (i // 4) + 2 * t + i % 2


def text(acc: str, mma: str, a_regs: bool = False) -> str:
    """The kernel's PTX: accumulators of type `acc` (f32, s32), `mma` the wgmma line (operands %rd9 and
    %rd11 are A's and B's descriptors, %p1 is false: D = A B). `a_regs`: each thread also loads four .b32
    words %ra0..%ra3 (its A fragment, for a wgmma with A from registers) from the image at SMEM + 16 tid."""
    copies = "\n".join(f"ld.global.v4.b32 {{%v0, %v1, %v2, %v3}}, [%rd4+{2048 * j}];\n"
                       f"st.shared.v4.b32 [%a+{2048 * j}], {{%v0, %v1, %v2, %v3}};" for j in range(SMEM // 2048))
    return f""".version 9.0
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 pimg, .param .u64 pout, .param .u64 pda, .param .u64 pdb)
{{
.reg .b32 %t, %s, %a, %o, %v<4>, %ra<4>;
.reg .b64 %rd<20>;
.reg .{acc} %f<{N // 2}>;
.reg .pred %p1;
.shared .align 1024 .b8 tiles[{SMEM}];
mov.u32 %t, %tid.x;
ld.param.u64 %rd1, [pimg];
ld.param.u64 %rd2, [pout];
mov.u32 %s, tiles;
mul.wide.u32 %rd3, %t, 16;
add.s64 %rd4, %rd1, %rd3;
mul.lo.u32 %o, %t, 16;
add.u32 %a, %s, %o;
{copies}
{f"ld.global.v4.b32 {{%ra0, %ra1, %ra2, %ra3}}, [%rd4+{SMEM}];" if a_regs else ""}
bar.sync 0;
fence.proxy.async.shared::cta;
wgmma.fence.sync.aligned;
ld.param.u64 %rd5, [pda];
ld.param.u64 %rd6, [pdb];
cvt.u64.u32 %rd7, %s;
add.s64 %rd8, %rd7, {A_OFF};
shr.u64 %rd8, %rd8, 4;
and.b64 %rd8, %rd8, 16383;
or.b64 %rd9, %rd5, %rd8;
add.s64 %rd10, %rd7, {B_OFF};
shr.u64 %rd10, %rd10, 4;
and.b64 %rd10, %rd10, 16383;
or.b64 %rd11, %rd6, %rd10;
setp.ne.u32 %p1, %t, %t;
{mma}
wgmma.commit_group.sync.aligned;
wgmma.wait_group.sync.aligned 0;
mul.wide.u32 %rd12, %t, {4 * (N // 2)};
add.s64 %rd13, %rd2, %rd12;
st.global.v4.{acc} [%rd13], {{%f0, %f1, %f2, %f3}};
st.global.v4.{acc} [%rd13+16], {{%f4, %f5, %f6, %f7}};
ret;
}}
"""
