"""Hand-written PTX of the TMA / mbarrier tests (written from the PTX ISA, not from NVRTC output), and
numpy references computed from first principles (loops over the box, the swizzle written out bit by bit).

* `box_kernel(rank, nbytes, ...)`: warp 0 lane 0 arms an mbarrier with `nbytes` of transactions and issues
  one `cp.async.bulk.tensor.<rank>d` of the box at the coordinates in the parameters into shared memory;
  warp 1 waits on the barrier (try_wait.parity 0) and copies the shared bytes to `out`.
* `ring_kernel(stages, tiles, ...)`: a producer thread streams `tiles` boxes of a [tiles * rows, 32] f32
  matrix through a ring of `stages` full/empty mbarrier pairs; a consumer warp waits on each full barrier
  (parity flipping every lap), adds the tile into registers, and releases the stage on its empty barrier;
  out = the sum of the tiles.
Switches plant the bugs the checkers must catch (`flip`, `tx`, `early`, `coords`, ...).
"""
from __future__ import annotations

import struct

import numpy as np

from plus_ep.kernels.ptx import tensormap as TM

HEAD = ".version 8.0\n.target sm_90a\n.address_size 64\n"


def box_kernel(rank: int, nbytes: int, tx: int | None = None, wait: bool = True, parity: int = 0,
               multicast: int = 0, cluster: int = 1) -> str:
    """Params: out (u64), c0..c4 (s32), the tensor map (128 bytes, align 64). `tx`: the bytes expect_tx
    announces (default nbytes); `wait=False`: the consumer reads without waiting; `multicast` > 0: rank 0
    copies into the CTAs of that mask (a cluster of `cluster` CTAs), every CTA waits on its own barrier."""
    tx = nbytes if tx is None else tx
    coords = ", ".join(f"%c{i}" for i in range(rank))
    cluster_dir = f".reqnctapercluster {cluster}, 1, 1\n" if cluster > 1 else ""
    mc = ".multicast::cluster" if multicast else ""
    mask = ", %h0" if multicast else ""
    issue_guard = "@%p5 bra DONE;\n" if multicast else ""
    return HEAD + f""".visible .entry k(.param .u64 pout, .param .s32 pc0, .param .s32 pc1, .param .s32 pc2,
  .param .s32 pc3, .param .s32 pc4, .param .align 64 .b8 ptm[128])
{cluster_dir}{{
.reg .pred %p<8>;
.reg .b16 %h<2>;
.reg .b32 %r<32>;
.reg .b32 %c<5>;
.reg .b64 %rd<16>;
.shared .align 1024 .b8 buf[{max(nbytes, 16)}];
.shared .align 8 .b64 bar;
mov.u32 %r1, %tid.x;
mov.u32 %r2, bar;
mov.u32 %r20, %cluster_ctarank;
setp.ne.u32 %p5, %r20, 0;
setp.ne.u32 %p1, %r1, 0;
@%p1 bra L1;
mbarrier.init.shared::cta.b64 [%r2], 1;
mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r2], {tx};
L1:
{"barrier.cluster.arrive.aligned;" + chr(10) + "barrier.cluster.wait.aligned;" if cluster > 1 else "bar.sync 0;"}
setp.ge.u32 %p2, %r1, 32;
@%p2 bra CONS;
@%p1 bra DONE;
{issue_guard}ld.param.s32 %c0, [pc0];
ld.param.s32 %c1, [pc1];
ld.param.s32 %c2, [pc2];
ld.param.s32 %c3, [pc3];
ld.param.s32 %c4, [pc4];
mov.u16 %h0, {multicast};
mov.b64 %rd1, ptm;
cvta.param.u64 %rd2, %rd1;
mov.u32 %r5, buf;
cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes{mc} [%r5], [%rd2, {{{coords}}}], [%r2]{mask};
bra DONE;
CONS:
{"WAIT:" + chr(10) + f"mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r2], {parity};" + chr(10) + "@!%p3 bra WAIT;" if wait else ""}
sub.u32 %r6, %r1, 32;
shl.b32 %r7, %r6, 4;
ld.param.u64 %rd3, [pout];
cvt.u64.u32 %rd6, %r20;
mul.lo.u64 %rd6, %rd6, {max(nbytes, 16)};
add.s64 %rd3, %rd3, %rd6;
mov.u32 %r8, buf;
LOOP:
setp.ge.u32 %p4, %r7, {nbytes};
@%p4 bra DONE;
add.u32 %r9, %r8, %r7;
ld.shared.v4.b32 {{%r10, %r11, %r12, %r13}}, [%r9];
cvt.u64.u32 %rd4, %r7;
add.s64 %rd5, %rd3, %rd4;
st.global.v4.b32 [%rd5], {{%r10, %r11, %r12, %r13}};
add.u32 %r7, %r7, 512;
bra LOOP;
DONE:
{"barrier.cluster.arrive;" + chr(10) + "barrier.cluster.wait;" if cluster > 1 else ""}
ret;
}}
"""


def box_params(out_addr: int, coords, tmap: bytes) -> bytes:
    c = list(coords) + [0] * (5 - len(coords))
    head = struct.pack("<Q5i", out_addr, *c)
    return head + bytes(64 - len(head)) + tmap


def swizzled(offset: int, span: int) -> int:
    """Where byte `offset` of a (1024-aligned) box lands under the span-byte swizzle, written out: within
    each 128-byte line, the 16-byte chunk index is XORed with the line's index modulo span / 16."""
    if span == 0:
        return offset
    line, chunk, byte = offset // 128, (offset % 128) // 16, offset % 16
    return line * 128 + 16 * (chunk ^ (line % (span // 16))) + byte


def box_reference(src: np.ndarray, coords, box, span: int = 0) -> np.ndarray:
    """Bytes of the shared box: src (numpy, dims outermost first) read at coords (innermost first), zero
    outside, in box order (innermost fastest), then swizzled."""
    es = src.itemsize
    rank = src.ndim
    flat = []
    for j in np.ndindex(*reversed(box)):           # outermost first, dim 0 fastest
        x = [coords[d] + j[rank - 1 - d] for d in range(rank)]
        inside = all(0 <= x[d] < src.shape[rank - 1 - d] for d in range(rank))
        v = src[tuple(reversed(x))] if inside else np.zeros((), src.dtype)
        flat.append(np.asarray(v, src.dtype).tobytes())
    lin = b"".join(flat)
    out = bytearray(len(lin))
    for off in range(0, len(lin), es):
        for b in range(es):
            out[swizzled(off + b, span)] = lin[off + b]
    return np.frombuffer(bytes(out), np.uint8)


def ring_kernel(stages: int, tiles: int, rows: int = 4, flip: bool = True, early: bool = False,
                release_first: bool = False, tx_scale: int = 1) -> str:
    """Producer (thread 0) / consumer (warp 1) over a ring; see the module docstring. Params: out (u64),
    the tensor map (a [tiles * rows, 32] f32 matrix, box [32, rows]). Switches: `flip=False` the consumer
    never flips its parity; `early` it reads the next stage (not yet waited on) instead of its own;
    `release_first` it releases the stage before reading it; `tx_scale` multiplies expect_tx."""
    tile_bytes = rows * 32 * 4
    tx = tile_bytes * tx_scale
    S = stages
    read_stage = "%r30" if not early else "%r31"
    return HEAD + f""".visible .entry k(.param .u64 pout, .param .align 64 .b8 ptm[128])
{{
.reg .pred %p<12>;
.reg .b32 %r<40>;
.reg .f32 %f<8>;
.reg .b64 %rd<16>;
.shared .align 1024 .b8 buf[{S * tile_bytes}];
.shared .align 8 .b64 full[{S}];
.shared .align 8 .b64 empty[{S}];
mov.u32 %r1, %tid.x;
mov.u32 %r2, full;
mov.u32 %r3, empty;
setp.ne.u32 %p1, %r1, 0;
@%p1 bra INIT_DONE;
mov.u32 %r4, 0;
INIT:
shl.b32 %r5, %r4, 3;
add.u32 %r6, %r2, %r5;
mbarrier.init.shared::cta.b64 [%r6], 1;
add.u32 %r6, %r3, %r5;
mbarrier.init.shared::cta.b64 [%r6], 32;
add.u32 %r4, %r4, 1;
setp.lt.u32 %p2, %r4, {S};
@%p2 bra INIT;
INIT_DONE:
bar.sync 0;
setp.ge.u32 %p2, %r1, 32;
@%p2 bra CONS;
@%p1 bra DONE;
// ---- producer: tile i into stage i % S after waiting for the stage to be empty
mov.b64 %rd1, ptm;
cvta.param.u64 %rd2, %rd1;
mov.u32 %r10, 0;
mov.u32 %r11, 0;
mov.u32 %r12, 1;
PLOOP:
shl.b32 %r13, %r11, 3;
add.u32 %r14, %r3, %r13;
PWAIT:
mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r14], %r12;
@!%p3 bra PWAIT;
add.u32 %r15, %r2, %r13;
mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r15], {tx};
mov.u32 %r16, buf;
mad.lo.u32 %r16, %r11, {tile_bytes}, %r16;
mul.lo.u32 %r17, %r10, {rows};
mov.u32 %r18, 0;
cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r16], [%rd2, {{%r18, %r17}}], [%r15];
add.u32 %r10, %r10, 1;
add.u32 %r11, %r11, 1;
setp.eq.u32 %p4, %r11, {S};
@%p4 mov.u32 %r11, 0;
@%p4 xor.b32 %r12, %r12, 1;
setp.lt.u32 %p5, %r10, {tiles};
@%p5 bra PLOOP;
bra DONE;
// ---- consumer warp: lane l sums column l over the tiles' rows
CONS:
sub.u32 %r20, %r1, 32;
mov.f32 %f1, 0f00000000;
mov.u32 %r21, 0;
mov.u32 %r30, 0;
mov.u32 %r22, 0;
CLOOP:
add.u32 %r31, %r30, 1;
setp.eq.u32 %p6, %r31, {S};
@%p6 mov.u32 %r31, 0;
shl.b32 %r23, %r30, 3;
add.u32 %r24, %r2, %r23;
CWAIT:
mbarrier.try_wait.parity.shared::cta.b64 %p7, [%r24], %r22;
@!%p7 bra CWAIT;
add.u32 %r25, %r3, %r23;
{"mbarrier.arrive.shared::cta.b64 _, [%r25];" if release_first else ""}
mov.u32 %r26, buf;
mad.lo.u32 %r26, {read_stage}, {tile_bytes}, %r26;
shl.b32 %r27, %r20, 2;
add.u32 %r26, %r26, %r27;
mov.u32 %r28, 0;
RLOOP:
ld.shared.f32 %f2, [%r26];
add.f32 %f1, %f1, %f2;
add.u32 %r26, %r26, 128;
add.u32 %r28, %r28, 1;
setp.lt.u32 %p8, %r28, {rows};
@%p8 bra RLOOP;
{"" if release_first else "mbarrier.arrive.shared::cta.b64 _, [%r25];"}
add.u32 %r21, %r21, 1;
mov.u32 %r30, %r31;
setp.eq.u32 %p9, %r30, 0;
{"@%p9 xor.b32 %r22, %r22, 1;" if flip else ""}
setp.lt.u32 %p10, %r21, {tiles};
@%p10 bra CLOOP;
ld.param.u64 %rd3, [pout];
mul.wide.u32 %rd4, %r20, 4;
add.s64 %rd5, %rd3, %rd4;
st.global.f32 [%rd5], %f1;
DONE:
ret;
}}
"""


def ring_map(mat: np.ndarray, rows: int) -> bytes:
    """The tensor map of the ring test: f32 [R, 32] matrix, box [32, rows], no swizzle."""
    R, C = mat.shape
    return TM.encode_tiled(TM.F32, mat.ctypes.data, (C, R), (C * 4,), (32, rows))
