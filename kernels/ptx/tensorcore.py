"""ldmatrix, mma.sync and wgmma.mma_async, with fragment layouts written from the PTX ISA's figures.

Fragment tables (g = lane >> 2, t = lane & 3; a .b32 register holds two 16-bit elements, the lower
index in the low half):
* mma.m16n8k16 f16/bf16: A reg r (0..3), half h -> A[g + 8(r&1), 2t + h + 8(r>>1)];
  B reg r (0..1), half h -> B[2t + h + 8r, g]; C/D reg i (0..3) -> C[g + 8(i>>1), 2t + (i&1)].
* mma.m16n8k8 tf32: A reg r -> A[g + 8(r&1), t + 4(r>>1)]; B reg r -> B[t + 4r, g]; C/D as above.
* ldmatrix.m8n8 (.x1/.x2/.x4): lanes 8i..8i+7 give the 16-byte rows of matrix i; destination reg i of
  lane l holds row l>>2, columns 2(l&3), 2(l&3)+1 (with .trans: M[2(l&3)][l>>2], M[2(l&3)+1][l>>2]).
* wgmma m64nNk16, f32 accumulators: warp w of the warpgroup, lane l, reg i ->
  D[16w + g + 8((i>>1)&1), 8(i>>2) + 2t + (i&1)].
* wgmma with A from registers (f16/bf16): four .b32 registers per thread, warp w holding rows 16w..16w+15 as
  the mma.m16n8k16 A fragment above; read when the wgmma is issued.
* wgmma shared-memory matrix descriptor: start address bits 0-13 (>>4), leading byte offset 16-29
  (>>4), stride byte offset 32-45 (>>4), base offset 49-51, layout (swizzle) 62-63 (1 = 128B swizzle).
  128B swizzle canonical layouts (16-bit elements, T = 8 per 16 bytes):
  K-major ((8,m),(T,2k)):((8T,SBO),(1,T)) and MN-major ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)), then the
  swizzle XORs address bits [4:6] with bits [7:9].

Arithmetic: products are exact in f64 and summed in f64 with the accumulator, then rounded once to f32
(the hardware's fused dot product truncates differently: tests use tolerances, see semantics docs).
"""
from __future__ import annotations

import numpy as np

from . import access as A
from . import semantics as S
from .decode import Mods, Op, handler, unsupported
from .errors import PtxError
from .access import addr_getter
from .ops_warp import whole_warps

_lane = np.arange(32)
_g, _t = _lane >> 2, _lane & 3


def _mma_maps(kind):
    """(rows, cols) index arrays [regs, elements per reg, 32] for A and B, and [4, 32] for C."""
    if kind == "k16":
        ar = np.array([[_g + 8 * (r & 1) for h in range(2)] for r in range(4)])
        ac = np.array([[2 * _t + h + 8 * (r >> 1) for h in range(2)] for r in range(4)])
        br = np.array([[2 * _t + h + 8 * r for h in range(2)] for r in range(2)])
        bc = np.array([[_g for h in range(2)] for r in range(2)])
    elif kind == "k32":   # 8-bit elements, four per register (byte j low to high)
        ar = np.array([[_g + 8 * (r & 1) for j in range(4)] for r in range(4)])
        ac = np.array([[4 * _t + j + 16 * (r >> 1) for j in range(4)] for r in range(4)])
        br = np.array([[4 * _t + j + 16 * r for j in range(4)] for r in range(2)])
        bc = np.array([[_g for j in range(4)] for r in range(2)])
    else:  # tf32 k8: one element per register
        ar = np.array([[_g + 8 * (r & 1)] for r in range(4)])
        ac = np.array([[_t + 4 * (r >> 1)] for r in range(4)])
        br = np.array([[_t + 4 * r] for r in range(2)])
        bc = np.array([[_g] for r in range(2)])
    cr = np.array([_g + 8 * (i >> 1) for i in range(4)])
    cc = np.array([2 * _t + (i & 1) for i in range(4)])
    return ar, ac, br, bc, cr, cc


MAPS = {"k16": _mma_maps("k16"), "k8": _mma_maps("k8"), "k32": _mma_maps("k32")}
INT8 = ("s8", "u8")
FP8 = ("e4m3", "e5m2")


def _halves(words, ety):
    """[.., regs, 32] uint32 -> f32 values [.., regs, 2, 32]."""
    lo = (words & np.uint32(0xFFFF)).astype(np.uint16)
    hi = (words >> np.uint32(16)).astype(np.uint16)
    conv = S.f16_bits_to_f32 if ety == "f16" else S.bf16_bits_to_f32
    return np.stack([conv(lo), conv(hi)], axis=-2)


def byte_values(words, ety):
    """[.., regs, 32] uint32 -> the four 8-bit elements of each register (byte 0 first) [.., regs, 4, 32], as int64
    (s8, u8) or float64 (e4m3, e5m2)."""
    b = np.stack([((words >> np.uint32(8 * j)) & np.uint32(0xFF)).astype(np.uint8) for j in range(4)], axis=-2)
    if ety == "s8":
        return b.view(np.int8).astype(np.int64)
    if ety == "u8":
        return b.astype(np.int64)
    return S.fp8_bits_to_f32(b, ety).astype(np.float64)


def int_result(v, satfinite: bool):
    """An exact integer sum as s32: clamped with .satfinite, else wrapped modulo 2^32."""
    v = np.asarray(v, np.int64)
    if satfinite:
        return np.clip(v, -2 ** 31, 2 ** 31 - 1).astype(np.int32)
    return v.astype(np.uint64).astype(np.uint32).view(np.int32)


@handler("mma")
def _mma(stmt):
    p = stmt.opcode.split(".")
    shape = p[3] if len(p) > 3 else ""
    if p[1:3] != ["sync", "aligned"] or p[4:6] != ["row", "col"]:
        raise unsupported(stmt)
    rest = p[6:]
    satfinite = bool(rest) and rest[0] == "satfinite"
    rest = rest[1:] if satfinite else rest
    if len(rest) != 4:
        raise unsupported(stmt)
    dt, at, bt, ct = rest
    if shape == "m16n8k32" and at in INT8 and bt in INT8 and dt == ct == "s32":
        kind = "k32"
    elif shape == "m16n8k32" and at in FP8 and bt in FP8 and dt == ct == "f32" and not satfinite:
        kind = "k32"
    elif not satfinite and dt == ct == "f32" and ((shape == "m16n8k16" and at == bt and at in ("f16", "bf16")) or
                                                  (shape == "m16n8k8" and at == bt == "tf32")):
        kind = "k16" if shape == "m16n8k16" else "k8"
    else:
        raise unsupported(stmt, "mma shape/type")
    integer = dt == "s32"
    d, a, b, c = stmt.operands
    if not all(x[0] == "vec" for x in (d, a, b, c)) or len(d[1]) != 4 or len(a[1]) != 4 or len(b[1]) != 2 \
            or len(c[1]) != 4:
        raise unsupported(stmt, "operand vectors")
    K = {"k16": 16, "k8": 8, "k32": 32}[kind]
    op = Op(stmt.line, stmt.opcode, "op", "mma")
    op.meta = {"flops": 2 * 16 * 8 * K, "precision": "tf32" if kind == "k8" else "int8" if integer else
               "fp8" if at in FP8 else "fp16"}

    def factory(M):
        puts = [M.wr(x, dt) for x in d[1]]
        ga = [M.view(x[1], "b32") for x in a[1]]
        gb = [M.view(x[1], "b32") for x in b[1]]
        gc = [M.rd(x, ct) for x in c[1]]
        ar, ac, br, bc, cr, cc = MAPS[kind]
        T, W = M.T, M.W
        acc_t = np.int64 if integer else np.float64

        def run(m):
            warps = whole_warps(M, op, m)
            nw = len(warps)
            Aw = np.stack([x.reshape(W, 32)[warps] for x in ga], 1)    # [nw, 4, 32]
            Bw = np.stack([x.reshape(W, 32)[warps] for x in gb], 1)
            if kind == "k16":
                Av, Bv = _halves(Aw, at), _halves(Bw, at)              # [nw, r, 2, 32]
            elif kind == "k32":
                Av, Bv = byte_values(Aw, at), byte_values(Bw, bt)      # [nw, r, 4, 32]
            else:
                Av = (Aw & np.uint32(0xFFFFE000)).view(np.float32)[:, :, None, :]
                Bv = (Bw & np.uint32(0xFFFFE000)).view(np.float32)[:, :, None, :]
            Am = np.zeros((nw, 16, K), acc_t)
            Bm = np.zeros((nw, K, 8), acc_t)
            Am[:, ar, ac] = Av
            Bm[:, br, bc] = Bv
            Cm = np.zeros((nw, 16, 8), acc_t)
            for i in range(4):
                Cm[:, cr[i], cc[i]] = np.broadcast_to(gc[i](), (T,)).reshape(W, 32)[warps]
            with np.errstate(all="ignore"):
                Dm = np.matmul(Am, Bm) + Cm
                Dm = int_result(Dm, satfinite) if integer else Dm.astype(np.float32)
            for i in range(4):
                full = np.zeros((W, 32), Dm.dtype)
                full[warps] = Dm[:, cr[i], cc[i]]
                puts[i](full.reshape(-1), m)
        return run
    op.factory = factory
    return op


@handler("ldmatrix")
def _ldmatrix(stmt):
    mo = Mods(stmt)
    if not (mo.flag("sync") and mo.flag("aligned") and mo.flag("m8n8")):
        raise unsupported(stmt)
    num = mo.take("x1", "x2", "x4")
    trans = mo.flag("trans")
    if mo.take("shared", "shared::cta") is None:
        raise unsupported(stmt, "state space")
    mo.type(("b16",))
    mo.done()
    if num is None:
        raise unsupported(stmt)
    n = int(num[1:])
    d, src = stmt.operands
    dsts = d[1] if d[0] == "vec" else (d,)
    if len(dsts) != n or src[0] != "mem":
        raise unsupported(stmt, "operands")
    op = Op(stmt.line, stmt.opcode, "op", "ldmatrix")

    def factory(M):
        ag = addr_getter(M, src)
        puts = [M.wr(x, "b32") for x in dsts]
        T, W = M.T, M.W

        def run(m):
            warps = whole_warps(M, op, m)
            addr = np.broadcast_to(ag(), (T,)).reshape(W, 32)[warps][:, :8 * n]     # [nw, 8n] row addresses
            tids = (warps[:, None] * 32 + np.arange(8 * n)).reshape(-1)
            rows = A.shared_read(M, op, addr.reshape(-1), 16, tids, proxy="ldmatrix")
            if M.counters is not None:
                M.counters.ldmatrix(M, op, addr, tids)
            mats = rows.view(np.uint16).reshape(len(warps), n, 8, 8)             # [nw, mat, row, col]
            if trans:
                mats = mats.transpose(0, 1, 3, 2)
            lo = mats[:, :, _g, 2 * _t].astype(np.uint32)                          # [nw, mat, 32]
            hi = mats[:, :, _g, 2 * _t + 1].astype(np.uint32)
            words = lo | (hi << np.uint32(16))
            for i in range(n):
                full = np.zeros((W, 32), np.uint32)
                full[warps] = words[:, i]
                puts[i](full.reshape(-1), m)
        return run
    op.factory = factory
    return op


# ------------------------------------------------------------------------------------------- wgmma

def decode_descriptor(desc: int) -> dict:
    d = int(desc)
    return {"start": (d & 0x3FFF) << 4, "lbo": ((d >> 16) & 0x3FFF) << 4, "sbo": ((d >> 32) & 0x3FFF) << 4,
            "base_offset": (d >> 49) & 7, "layout": (d >> 62) & 3}


def swizzle128(addr):
    return addr ^ (((addr >> 7) & 7) << 4)


def operand_addresses(desc: int, rows: int, cols: int, major: str, esize: int = 2) -> np.ndarray:
    """Byte addresses [rows, cols] of an operand described by a wgmma descriptor (elements of `esize` bytes: 2 for
    f16/bf16, 1 for s8/u8/e4m3/e5m2, whose wgmma reads K-major operands only).
    major "K": rows index M (or N), cols index K; "MN": rows index K, cols index M (or N)."""
    dd = decode_descriptor(desc)
    if dd["layout"] != 1:
        raise PtxError(f"wgmma descriptor layout {dd['layout']} (only the 128-byte swizzle, 1, is implemented)")
    if dd["base_offset"] != 0:
        raise PtxError(f"wgmma descriptor base offset {dd['base_offset']} is not implemented")
    r = np.arange(rows)[:, None]
    c = np.arange(cols)[None, :]
    if major == "K":
        lin = dd["start"] + (r % 8) * 128 + (r // 8) * dd["sbo"] + c * esize
    elif esize == 2:
        lin = dd["start"] + (c % 64) * 2 + (r % 8) * 128 + (r // 8) * dd["sbo"] + (c // 64) * dd["lbo"]
    else:
        raise PtxError("8-bit wgmma operands are K-major only")
    return swizzle128(lin)


def wgmma_fragment(N: int):
    """(rows, cols) of accumulator register i for the 128 threads of a warpgroup: arrays [N/2, 128]."""
    tid = np.arange(128)
    w, l = tid // 32, tid % 32
    i = np.arange(N // 2)[:, None]
    rows = 16 * w + (l >> 2) + 8 * ((i >> 1) & 1)
    cols = 8 * (i >> 2) + 2 * (l & 3) + (i & 1)
    return rows, cols


@handler("wgmma")
def _wgmma(stmt):
    p = stmt.opcode.split(".")
    if p[1:] == ["fence", "sync", "aligned"]:
        op = Op(stmt.line, stmt.opcode, "op", "wgmma")
        op.factory = lambda M: (lambda m: (_wg_groups(M, op, m), None)[1])
        return op
    if p[1:] == ["commit_group", "sync", "aligned"]:
        op = Op(stmt.line, stmt.opcode, "op", "wgmma")

        def factory(M):
            def run(m):
                for wg in _wg_groups(M, op, m):
                    M.wg.groups[wg].append(M.wg.pending[wg])
                    M.wg.pending[wg] = []
            return run
        op.factory = factory
        return op
    if p[1:] == ["wait_group", "sync", "aligned"]:
        if len(stmt.operands) != 1 or stmt.operands[0][0] != "imm":
            raise unsupported(stmt)
        keep = stmt.operands[0][1]
        op = Op(stmt.line, stmt.opcode, "op", "wgmma")

        def factory(M):
            def run(m):
                n = 0
                for wg in _wg_groups(M, op, m):
                    while len(M.wg.groups[wg]) > keep:
                        for job in M.wg.groups[wg].pop(0):
                            _land(M, job)
                            n += 1
                M.retired[stmt.line] = M.retired.get(stmt.line, 0) + n
            return run
        op.factory = factory
        return op
    if p[1:4] != ["mma_async", "sync", "aligned"] or len(p) not in (8, 9):
        raise unsupported(stmt)
    satfinite = len(p) == 9
    if satfinite and p[5] != "satfinite":
        raise unsupported(stmt)
    shape, dty, aty, bty = [p[4]] + p[-3:]
    import re
    sm = re.fullmatch(r"m64n(\d+)k(16|32)", shape)
    eight = aty in INT8 + FP8
    integer = aty in INT8
    if not sm or (sm.group(2) == "32") != eight:
        raise unsupported(stmt, "wgmma shape/types")
    if integer and not (dty == "s32" and bty in INT8):
        raise unsupported(stmt, "wgmma shape/types")
    if not integer and (satfinite or dty != "f32" or (aty in FP8) != (bty in FP8) or
                        (aty not in FP8 and (aty != bty or aty not in ("f16", "bf16")))):
        raise unsupported(stmt, "wgmma shape/types")
    N = int(sm.group(1))
    K = int(sm.group(2))
    if N % 8 or not 8 <= N <= 256:
        raise unsupported(stmt, "N")
    ops = stmt.operands
    # A from registers (f16/bf16 only): four .b32 registers per thread, no transpose-a immediate
    a_regs = ops[1][0] == "vec" if len(ops) > 1 else False
    if a_regs and (aty not in ("f16", "bf16") or len(ops[1][1]) != 4):
        raise unsupported(stmt, "A from registers: four .b32 registers of f16/bf16 pairs")
    n_imm = 0 if integer else (2 if aty in FP8 else 3 if a_regs else 4)  # scale-a, scale-b (, trans-a), trans-b
    if len(ops) != 4 + n_imm or ops[0][0] != "vec" or len(ops[0][1]) != N // 2:
        raise unsupported(stmt, "operands")
    if any(o[0] != "imm" for o in ops[4:]):
        raise unsupported(stmt, "immediates")
    imms = [o[1] for o in ops[4:]]
    if a_regs:
        imms = imms[:2] + [0] + imms[2:]
    sa, sb, ta, tb = (imms + [1, 1, 0, 0][len(imms):])
    if sa not in (1, -1) or sb not in (1, -1) or ta not in (0, 1) or tb not in (0, 1):
        raise unsupported(stmt, "scale/transpose immediates")
    op = Op(stmt.line, stmt.opcode, "op", "wgmma")
    op.meta = {"flops": 2 * 64 * N * K, "precision": "int8" if integer else "fp8" if aty in FP8 else "fp16"}

    def factory(M):
        ga = [M.rd(x, "b32") for x in ops[1][1]] if a_regs else M.rd(ops[1], "u64")
        gb = M.rd(ops[2], "u64")
        gd = M.rd(ops[3], "pred")
        dregs = [M.view(x[1], dty) for x in ops[0][1]]
        T = M.T

        def run(m):
            a = None if a_regs else np.broadcast_to(ga(), (T,))
            words = [np.broadcast_to(g(), (T,)) for g in ga] if a_regs else None
            b = np.broadcast_to(gb(), (T,))
            sd = np.broadcast_to(gd(), (T,))
            for wg in _wg_groups(M, op, m):
                sl = slice(128 * wg, 128 * wg + 128)
                if (not a_regs and (a[sl] != a[sl][0]).any()) or (b[sl] != b[sl][0]).any() \
                        or (sd[sl] != sd[sl][0]).any():
                    raise PtxError("wgmma operands differ within the warpgroup", form=op.form, line=op.line,
                                   kernel=M.name)
                # A from registers is read when the wgmma is issued (the ISA forbids changing them before
                # the group is waited on; the values taken here are those the tensor core reads)
                da = _a_from_regs([w[sl] for w in words], aty) if a_regs else int(a[sl][0])
                job = (op, wg, N, aty, da, int(b[sl][0]), bool(sd[sl][0]), sa, sb, ta, tb, dregs, bty,
                       satfinite)
                M.wg.pending[wg].append(job)
                if M.checks is not None:
                    nbytes = _operand_bytes(job)
                    M.checks.wgmma_operands(nbytes, 1)
                    ok = (nbytes >= 0) & (nbytes < M.checks.tma_bar.size)
                    if (M.checks.tma_bar[nbytes[ok]] >= 0).any():    # operands a bulk copy writes (bulk.py)
                        M.checks.bulk_read(M, op, nbytes[ok], None, group=np.arange(128 * wg, 128 * wg + 128))
        return run
    op.factory = factory
    return op


def _wg_groups(M, op, m):
    """Warpgroups executing (each must be whole: 4 full warps)."""
    warps = whole_warps(M, op, m, "wgmma (.sync.aligned over a warpgroup)")
    groups = np.unique(warps // 4)
    for g in groups:
        need = set(range(4 * g, 4 * g + 4))
        if not need <= set(warps.tolist()) or 4 * g + 3 >= M.W + 0 and M.T < 128 * (g + 1):
            raise PtxError(f"wgmma executed by part of warpgroup {g} (warps {sorted(set(warps) & need)})",
                           form=op.form, line=op.line, kernel=M.name)
    return groups


def _a_from_regs(words, aty) -> np.ndarray:
    """The [64, 16] A tile (float64) of a wgmma whose A comes from registers: `words` are the four .b32
    registers of the warpgroup's 128 threads; warp w holds rows 16w..16w+15 as mma.m16n8k16's A fragment
    (reg r, half h -> A[16w + g + 8(r&1), 2t + h + 8(r>>1)])."""
    tid = np.arange(128)
    w, lane = tid // 32, tid % 32
    g, t = lane >> 2, lane & 3
    out = np.zeros((64, 16), np.float64)
    conv = S.f16_bits_to_f32 if aty == "f16" else S.bf16_bits_to_f32
    for r, word in enumerate(words):
        word = np.asarray(word).astype(np.uint32)
        for h in range(2):
            bits = ((word >> (16 * h)) & 0xFFFF).astype(np.uint16)
            out[16 * w + g + 8 * (r & 1), 2 * t + h + 8 * (r >> 1)] = conv(bits).astype(np.float64)
    return out


def _esize(aty) -> int:
    return 1 if aty in INT8 + FP8 else 2


def _operands(job):
    """Shared addresses of a wgmma job's A [64, K] and B [K, N] elements (K 16 for 16-bit, 32 for 8-bit types)."""
    op, wg, N, aty, da, db, scale_d, sa, sb, ta, tb, dregs, bty, satfinite = job
    es = _esize(aty)
    K = 32 // es
    if not isinstance(da, int):              # A from registers: no shared addresses
        A_addr = np.zeros((0, K), np.int64)
    else:
        A_addr = operand_addresses(da, 64, K, "K", es) if ta == 0 else operand_addresses(da, K, 64, "MN").T
    B_addr = operand_addresses(db, N, K, "K", es).T if tb == 0 else operand_addresses(db, K, N, "MN")
    return A_addr, B_addr


def _operand_bytes(job):
    """Every shared byte a wgmma job reads (2 per f16/bf16 element, 1 per 8-bit element)."""
    A_addr, B_addr = _operands(job)
    es = _esize(job[3])
    flat = np.concatenate([A_addr.reshape(-1), B_addr.reshape(-1)]).astype(np.int64)
    return (flat[:, None] + np.arange(es)).reshape(-1)


def _land(M, job):
    op, wg, N, aty, da, db, scale_d, sa, sb, ta, tb, dregs, bty, satfinite = job
    A_addr, B_addr = _operands(job)
    if M.checks is not None:
        M.checks.wgmma_operands(_operand_bytes(job), -1)
    tids = np.arange(128 * wg, 128 * wg + 128)
    integer = aty in INT8

    def elems(addrs, ety):
        flat = addrs.reshape(-1)
        es = _esize(ety)
        raw = A.shared_read(M, op, flat, es, np.full(flat.size, tids[0]), proxy="async")
        if es == 1:
            bits = raw.view(np.uint8).reshape(addrs.shape)
            if ety == "s8":
                return bits.view(np.int8).astype(np.int64)
            if ety == "u8":
                return bits.astype(np.int64)
            return S.fp8_bits_to_f32(bits, ety).astype(np.float64)
        bits = raw.view(np.uint16).reshape(addrs.shape)
        return (S.f16_bits_to_f32(bits) if ety == "f16" else S.bf16_bits_to_f32(bits)).astype(np.float64)

    Am = (da if not isinstance(da, int) else elems(A_addr, aty)) * sa      # [64, K]
    Bm = elems(B_addr, bty) * sb                # [K, N]
    rows, cols = wgmma_fragment(N)
    D = np.zeros((64, N), np.int64 if integer else np.float64)
    if scale_d:
        for i, r in enumerate(dregs):
            D[rows[i], cols[i]] = r[tids]
    with np.errstate(all="ignore"):
        out = int_result(Am @ Bm + D, satfinite) if integer else (Am @ Bm + D).astype(np.float32)
    for i, r in enumerate(dregs):
        r[tids] = out[rows[i], cols[i]]
    if M.counters is not None:
        M.counters.wgmma_operands(M, op, A_addr, B_addr)


# ------------------------------------------------------------------------------------------ setmaxnreg

@handler("setmaxnreg")
def _setmaxnreg(stmt):
    """setmaxnreg.{inc,dec}.sync.aligned.u32 n: a warpgroup's register budget; checked (whole warpgroups, n a
    multiple of 8 in 24..256), no effect on execution."""
    mo = Mods(stmt)
    which = mo.take("inc", "dec")
    if not (mo.flag("sync") and mo.flag("aligned")) or which is None:
        raise unsupported(stmt)
    mo.type(("u32",))
    mo.done()
    if len(stmt.operands) != 1 or stmt.operands[0][0] != "imm":
        raise unsupported(stmt, "an immediate register count")
    n = stmt.operands[0][1]
    if n % 8 or not 24 <= n <= 256:
        raise unsupported(stmt, f"register count {n} (a multiple of 8 in 24..256)")
    op = Op(stmt.line, stmt.opcode, "op", "other")
    op.factory = lambda M: (lambda m: (_wg_groups(M, op, m), None)[1])
    return op
