"""Arithmetic, logic, comparison, move and conversion instructions."""
from __future__ import annotations

import numpy as np

from . import semantics as S
from .access import GENERIC_LOCAL, GENERIC_PARAM, GENERIC_SHARED
from .decode import Mods, Op, handler, unsupported

INT_T = ("s16", "u16", "s32", "u32", "s64", "u64", "b16", "b32", "b64")
BIT_T = ("b16", "b32", "b64", "pred")
FLT_T = ("f32", "f64")
RND = ("rn", "rz", "rm", "rp")


def _cls_of(ty):
    if ty == "f32":
        return "fp32"
    if ty == "f64":
        return "fp64"
    if ty in ("f16", "bf16", "f16x2", "bf16x2"):
        return "half"
    return "int"


def _ops(stmt, n):
    if len(stmt.operands) != n:
        raise unsupported(stmt, f"expects {n} operands, got {len(stmt.operands)}")
    return stmt.operands


def _simple(stmt, ty, nsrc, compute, cls=None):
    """d = compute(*srcs) with every operand of type ty."""
    ops = _ops(stmt, nsrc + 1)

    def factory(M):
        put = M.wr(ops[0], ty)
        gets = [M.rd(o, ty) for o in ops[1:]]
        if nsrc == 1:
            g0, = gets
            return lambda m: put(compute(g0()), m)
        if nsrc == 2:
            g0, g1 = gets
            return lambda m: put(compute(g0(), g1()), m)
        g0, g1, g2 = gets
        return lambda m: put(compute(g0(), g1(), g2()), m)
    return Op(stmt.line, stmt.opcode, "op", cls or _cls_of(ty), factory)


def _wrap(dt):
    def f(fn):
        def g(*a):
            with np.errstate(over="ignore"):
                return np.asarray(fn(*a)).astype(dt, copy=False)
        return g
    return f


# ------------------------------------------------------------------------------------ add sub mul

@handler("add", "sub")
def _addsub(stmt):
    mo = Mods(stmt)
    sub = stmt.opcode.startswith("sub")
    rnd = mo.take(*RND)
    ftz, sat = mo.flag("ftz"), mo.flag("sat")
    cc = mo.take("cc")
    ty = mo.type()
    mo.done()
    if cc:
        raise unsupported(stmt, ".cc carry chains")
    if ty == "f32":
        mode = rnd or "rn"
        return _simple(stmt, ty, 2, lambda a, b: S.add_f32(a, b, mode, ftz, sat, neg_b=sub))
    if ty == "f64":
        if rnd not in (None, "rn") or ftz or sat:
            raise unsupported(stmt)
        return _simple(stmt, ty, 2, (lambda a, b: a - b) if sub else (lambda a, b: a + b))
    if ty in INT_T and not rnd and not ftz:
        dt = S.np_dtype(ty)
        if sat:
            if ty != "s32":
                raise unsupported(stmt, ".sat is for s32")
            def f(a, b):
                r = a.astype(np.int64) - b if sub else np.asarray(a).astype(np.int64) + b
                return np.clip(r, -2**31, 2**31 - 1).astype(np.int32)
            return _simple(stmt, ty, 2, f)
        return _simple(stmt, ty, 2, _wrap(dt)((lambda a, b: np.subtract(a, b, dtype=dt)) if sub else
                                           (lambda a, b: np.add(a, b, dtype=dt))))
    raise unsupported(stmt)


@handler("mul")
def _mul(stmt):
    mo = Mods(stmt)
    mode = mo.take("lo", "hi", "wide")
    rnd = mo.take(*RND)
    ftz, sat = mo.flag("ftz"), mo.flag("sat")
    ty = mo.type()
    mo.done()
    if ty == "f32" and not mode:
        return _simple(stmt, ty, 2, lambda a, b: S.mul_f32(a, b, rnd or "rn", ftz, sat))
    if ty == "f64" and not mode and not ftz and not sat and rnd in (None, "rn"):
        return _simple(stmt, ty, 2, lambda a, b: a * b)
    if ty not in INT_T or rnd or ftz or sat or mode is None:
        raise unsupported(stmt)
    dt = S.np_dtype(ty)
    if mode == "lo":
        return _simple(stmt, ty, 2, _wrap(dt)(lambda a, b: np.multiply(a, b, dtype=dt)))
    if mode == "hi":
        return _simple(stmt, ty, 2, lambda a, b: S.mul_hi(np.broadcast_to(a, np.broadcast(a, b).shape),
                                                          np.broadcast_to(b, np.broadcast(a, b).shape), ty))
    # wide: 16->32, 32->64
    bits = int(ty[1:])
    if bits not in (16, 32):
        raise unsupported(stmt)
    wty = ty[0] + str(2 * bits)
    wdt = S.np_dtype(wty)
    ops = _ops(stmt, 3)

    def factory(M):
        put = M.wr(ops[0], wty)
        a, b = M.rd(ops[1], ty), M.rd(ops[2], ty)
        return lambda m: put(np.multiply(np.asarray(a()).astype(wdt), np.asarray(b()).astype(wdt), dtype=wdt), m)
    return Op(stmt.line, stmt.opcode, "op", "int", factory)


@handler("mad")
def _mad(stmt):
    mo = Mods(stmt)
    mode = mo.take("lo", "hi", "wide")
    rnd = mo.take(*RND)
    ftz, sat = mo.flag("ftz"), mo.flag("sat")
    ty = mo.type()
    mo.done()
    if ty in FLT_T:
        if rnd is None:
            raise unsupported(stmt, "mad.f32 needs a rounding modifier")
        return _fma_like(stmt, ty, rnd, ftz, sat)
    if ty in INT_T and mode == "wide" and not sat and not ftz and int(ty[1:]) in (16, 32):
        # d (2n bits) = a * b (n-bit operands, product exact in 2n bits) + c (2n bits), wrapping
        wty = ty[0] + str(2 * int(ty[1:]))
        wdt = S.np_dtype(wty)
        ops = _ops(stmt, 4)

        def factory(M):
            put = M.wr(ops[0], wty)
            a, b, c = M.rd(ops[1], ty), M.rd(ops[2], ty), M.rd(ops[3], wty)

            def run(m):
                prod = np.multiply(np.asarray(a()).astype(wdt), np.asarray(b()).astype(wdt), dtype=wdt)
                with np.errstate(over="ignore"):
                    return put(np.add(prod, np.asarray(c()).astype(wdt), dtype=wdt), m)
            return run
        return Op(stmt.line, stmt.opcode, "op", "int", factory)
    if ty not in INT_T or mode != "lo" or sat or ftz:
        raise unsupported(stmt)
    dt = S.np_dtype(ty)
    return _simple(stmt, ty, 3, _wrap(dt)(lambda a, b, c: np.add(np.multiply(a, b, dtype=dt), c, dtype=dt)))


@handler("fma")
def _fma(stmt):
    mo = Mods(stmt)
    rnd = mo.take(*RND)
    ftz, sat = mo.flag("ftz"), mo.flag("sat")
    ty = mo.type(FLT_T)
    mo.done()
    if rnd is None:
        raise unsupported(stmt, "fma needs a rounding modifier")
    return _fma_like(stmt, ty, rnd, ftz, sat)


def _fma_like(stmt, ty, rnd, ftz, sat):
    if ty == "f32":
        return _simple(stmt, ty, 3, lambda a, b, c: S.fma_f32(a, b, c, rnd, ftz, sat))
    if rnd != "rn" or ftz or sat:
        raise unsupported(stmt, "f64 fma other than .rn")
    from fractions import Fraction

    def f64fma(a, b, c):
        a, b, c = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(b, np.float64),
                                      np.asarray(c, np.float64))
        out = np.empty(a.shape, np.float64)
        for i, (x, y, z) in enumerate(zip(a.ravel(), b.ravel(), c.ravel())):
            if not (np.isfinite(x) and np.isfinite(y) and np.isfinite(z)):
                out.ravel()[i] = x * y + z
            else:
                out.ravel()[i] = float(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z)))
        return out
    return _simple(stmt, ty, 3, f64fma)


# --------------------------------------------------------------------------------- div rem min max

@handler("div")
def _div(stmt):
    mo = Mods(stmt)
    rnd = mo.take(*RND)
    full = mo.take("full", "approx")
    ftz = mo.flag("ftz")
    ty = mo.type()
    mo.done()
    if ty == "f32":
        if full and rnd is None:        # div.approx / div.full.f32 (libdevice's fmodf): semantics.div_approx_f32
            return _simple(stmt, ty, 2, lambda a, b: S.div_approx_f32(a, b, full, ftz))
        if full or rnd is None:
            raise unsupported(stmt, "div.f32 needs .rn/.rz/.rm/.rp, .approx or .full")
        return _simple(stmt, ty, 2, lambda a, b: S.div_f32(a, b, rnd, ftz))
    if ty == "f64":
        if rnd != "rn":
            raise unsupported(stmt)
        return _simple(stmt, ty, 2, lambda a, b: np.divide(a, b))
    if ty in INT_T and not rnd and not full and not ftz:
        signed = ty.startswith("s")
        return _simple(stmt, ty, 2, lambda a, b: S.int_div(*np.broadcast_arrays(a, b), signed))
    raise unsupported(stmt)


@handler("rem")
def _rem(stmt):
    mo = Mods(stmt)
    ty = mo.type(INT_T)
    mo.done()
    signed = ty.startswith("s")
    return _simple(stmt, ty, 2, lambda a, b: S.int_rem(*np.broadcast_arrays(a, b), signed))


@handler("min", "max")
def _minmax(stmt):
    mo = Mods(stmt)
    is_max = stmt.opcode.startswith("max")
    ftz = mo.flag("ftz")
    nan = mo.flag("NaN")
    relu = mo.flag("relu")
    ty = mo.type()
    mo.done()
    if nan or relu:
        raise unsupported(stmt)
    if ty in FLT_T:
        dt = S.np_dtype(ty)
        if ftz:
            return _simple(stmt, ty, 2, lambda a, b: S.ftz32(S.minmax_f(S.ftz32(a), S.ftz32(b), is_max, dt)))
        return _simple(stmt, ty, 2, lambda a, b: S.minmax_f(a, b, is_max, dt))
    if ty in INT_T and not ftz:
        fn = np.maximum if is_max else np.minimum
        return _simple(stmt, ty, 2, fn)
    raise unsupported(stmt)


@handler("neg", "abs")
def _negabs(stmt):
    mo = Mods(stmt)
    ftz = mo.flag("ftz")
    ty = mo.type()
    mo.done()
    neg = stmt.opcode.startswith("neg")
    if ty == "f32":
        if neg:
            return _simple(stmt, ty, 1, lambda a: (S.ftz32(a) if ftz else np.asarray(a, np.float32)) * np.float32(-1)
                           if False else _sign(a, ftz, flip=True))
        return _simple(stmt, ty, 1, lambda a: _sign(a, ftz, flip=False))
    if ty == "f64" and not ftz:
        return _simple(stmt, ty, 1, np.negative if neg else np.abs)
    if ty in ("s16", "s32", "s64") and not ftz:
        dt = S.np_dtype(ty)
        return _simple(stmt, ty, 1, _wrap(dt)(np.negative if neg else np.abs), cls="int")
    raise unsupported(stmt)


def _sign(a, ftz, flip):
    """neg/abs.f32 act on the sign bit only (NaN payloads kept)."""
    x = np.asarray(S.ftz32(a) if ftz else a, np.float32)
    u = x.view(np.uint32)
    r = (u ^ np.uint32(0x80000000)) if flip else (u & np.uint32(0x7FFFFFFF))
    return np.asarray(r, np.uint32).view(np.float32)


@handler("copysign")
def _copysign(stmt):
    mo = Mods(stmt)
    ty = mo.type(FLT_T)
    mo.done()
    # copysign d, a, b: magnitude of b, sign of a
    if ty == "f32":
        def f(a, b):
            ua = np.asarray(a, np.float32).view(np.uint32)
            ub = np.asarray(b, np.float32).view(np.uint32)
            return np.asarray((ub & np.uint32(0x7FFFFFFF)) | (ua & np.uint32(0x80000000)), np.uint32).view(np.float32)
        return _simple(stmt, ty, 2, f)
    return _simple(stmt, ty, 2, lambda a, b: np.copysign(b, a))


# ---------------------------------------------------------------------------------------- logic

@handler("and", "or", "xor")
def _logic(stmt):
    mo = Mods(stmt)
    ty = mo.type(BIT_T)
    mo.done()
    fn = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[stmt.opcode.split(".")[0]]
    return _simple(stmt, ty, 2, fn, cls="predicate" if ty == "pred" else "logic")


@handler("not")
def _not(stmt):
    mo = Mods(stmt)
    ty = mo.type(BIT_T)
    mo.done()
    return _simple(stmt, ty, 1, np.invert, cls="predicate" if ty == "pred" else "logic")


@handler("shl", "shr")
def _shift(stmt):
    mo = Mods(stmt)
    ty = mo.type()
    mo.done()
    kind = stmt.opcode.split(".")[0]
    if kind == "shl" and ty not in ("b16", "b32", "b64"):
        raise unsupported(stmt)
    if kind == "shr" and ty not in ("b16", "b32", "b64", "u16", "u32", "u64", "s16", "s32", "s64"):
        raise unsupported(stmt)
    bits = int(ty[1:])
    ops = _ops(stmt, 3)

    def factory(M):
        put = M.wr(ops[0], ty)
        a, b = M.rd(ops[1], ty), M.rd(ops[2], "u32")
        if ops[2][0] == "imm" and 0 <= int(b()) < bits:     # constant in-range amount: one numpy call
            dt = np.dtype(S.np_dtype(ty))
            k = dt.type(int(b()))
            f = np.left_shift if kind == "shl" else np.right_shift
            return lambda m: put(f(a(), k, dtype=dt), m)
        return lambda m: put(S.shift(a(), b(), kind, bits), m)
    return Op(stmt.line, stmt.opcode, "op", "logic", factory)


@handler("bfi")
def _bfi(stmt):
    mo = Mods(stmt)
    ty = mo.type(("b32", "b64"))
    mo.done()
    ops = _ops(stmt, 5)
    bits = int(ty[1:])

    def factory(M):
        put = M.wr(ops[0], ty)
        a, b = M.rd(ops[1], ty), M.rd(ops[2], ty)
        c, d = M.rd(ops[3], "u32"), M.rd(ops[4], "u32")
        return lambda m: put(S.bfi(*np.broadcast_arrays(a(), b()), c(), d(), bits), m)
    return Op(stmt.line, stmt.opcode, "op", "logic", factory)


@handler("prmt")
def _prmt(stmt):
    mo = Mods(stmt)
    ty = mo.type(("b32",))
    if mo.parts:
        raise unsupported(stmt, "prmt modes other than the default")
    return _simple(stmt, ty, 3, S.prmt, cls="logic")


# ----------------------------------------------------------------------------------- setp selp mov

_CMP = ("eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs", "equ", "neu", "ltu", "leu", "gtu", "geu",
        "num", "nan")


@handler("setp")
def _setp(stmt):
    mo = Mods(stmt)
    cmp = mo.take(*_CMP)
    boolop = mo.take("and", "or", "xor")
    ftz = mo.flag("ftz")
    ty = mo.type()
    mo.done()
    if cmp is None:
        raise unsupported(stmt, "missing comparison")
    is_float = ty in FLT_T
    if ty in ("f16", "bf16"):
        raise unsupported(stmt, "16-bit float compares")
    if cmp in ("lo", "ls", "hi", "hs") and ty[0] not in "ub":
        raise unsupported(stmt)
    ops = stmt.operands
    if len(ops) != (4 if boolop else 3):
        raise unsupported(stmt, "operand count")
    dst = ops[0]
    f32 = ty == "f32"

    def factory(M):
        if dst[0] == "pair":
            pp, pq = M.wr(dst[1], "pred"), M.wr(dst[2], "pred")
        else:
            pp, pq = M.wr(dst, "pred"), None
        a, b = M.rd(ops[1], ty), M.rd(ops[2], ty)
        c = M.rd(ops[3], "pred") if boolop else None
        comb = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}.get(boolop)

        def run(m):
            x, y = a(), b()
            if ftz and f32:
                x, y = S.ftz32(x), S.ftz32(y)
            r = S.compare(cmp, x, y, is_float)
            if comb is not None:
                cv = c()
                p = comb(r, cv)
                q = comb(~r, cv)
            else:
                p, q = r, ~r
            pp(p, m)
            if pq is not None:
                pq(q, m)
        return run
    return Op(stmt.line, stmt.opcode, "op", "predicate", factory)


@handler("selp")
def _selp(stmt):
    mo = Mods(stmt)
    ty = mo.type()
    mo.done()
    ops = _ops(stmt, 4)

    def factory(M):
        put = M.wr(ops[0], ty)
        a, b, c = M.rd(ops[1], ty), M.rd(ops[2], ty), M.rd(ops[3], "pred")
        return lambda m: put(np.where(c(), a(), b()), m)
    return Op(stmt.line, stmt.opcode, "op", "move", factory)


@handler("mov")
def _mov(stmt):
    mo = Mods(stmt)
    ty = mo.type()
    mo.done()
    ops = _ops(stmt, 2)
    d, s = ops
    bits = 1 if ty == "pred" else int("".join(ch for ch in ty if ch.isdigit()) or 0)
    if s[0] == "vec":                                   # pack: first element is the least significant
        n = len(s[1])
        eb = bits // n
        ety = f"b{eb}"

        def factory(M):
            put = M.wr(d, ty)
            gets = [M.rd(x, ety) for x in s[1]]
            wdt = S.np_dtype(ty)

            def run(m):
                acc = np.asarray(gets[0]()).astype(wdt)
                for k in range(1, n):
                    acc = acc | (np.asarray(gets[k]()).astype(wdt) << wdt(eb * k))
                put(acc, m)
            return run
        return Op(stmt.line, stmt.opcode, "op", "move", factory)
    if d[0] == "vec":                                   # unpack
        n = len(d[1])
        eb = bits // n
        ety = f"b{eb}"

        def factory(M):
            puts = [M.wr(x, ety) for x in d[1]]
            get = M.rd(s, ty)
            edt = S.np_dtype(ety)
            wdt = S.np_dtype(ty)

            def run(m):
                v = np.asarray(get()).astype(wdt)
                for k in range(n):
                    puts[k]((v >> wdt(eb * k)).astype(edt), m)
            return run
        return Op(stmt.line, stmt.opcode, "op", "move", factory)

    def factory(M):
        put = M.wr(d, ty)
        get = M.rd(s, ty)
        return lambda m: put(get(), m)
    return Op(stmt.line, stmt.opcode, "op", "move", factory)


@handler("cvta")
def _cvta(stmt):
    mo = Mods(stmt)
    to = mo.flag("to")
    space = mo.take("global", "shared", "shared::cta", "local", "const", "param")
    ty = mo.type(("u32", "u64"))
    mo.done()
    ops = _ops(stmt, 2)
    if space == "global":                # global <-> generic: the identity here
        def factory(M):
            put, get = M.wr(ops[0], ty), M.rd(ops[1], ty)
            return lambda m: put(get(), m)
        return Op(stmt.line, stmt.opcode, "op", "move", factory)
    if space in ("shared", "shared::cta", "local") and ty == "u64":
        # generic = the shared window + GENERIC_SHARED, a thread's local frame + GENERIC_LOCAL
        base = np.uint64(GENERIC_SHARED if space != "local" else GENERIC_LOCAL)

        def factory(M):
            put, get = M.wr(ops[0], ty), M.rd(ops[1], ty)
            if to:
                return lambda m: put(get() - base, m)
            return lambda m: put(get() + base, m)
        return Op(stmt.line, stmt.opcode, "op", "move", factory)
    if space == "param" and ty == "u64" and not to:
        pbase = np.uint64(GENERIC_PARAM)             # a kernel parameter's generic address (__grid_constant__)

        def factory(M):
            put, get = M.wr(ops[0], ty), M.rd(ops[1], ty)
            return lambda m: put(get() + pbase, m)
        return Op(stmt.line, stmt.opcode, "op", "move", factory)
    raise unsupported(stmt, "only global, shared, local (.u64) and param (.u64, to generic) <-> generic are implemented")


# ---------------------------------------------------------------------------------------- cvt

@handler("cvt")
def _cvt(stmt):
    p = stmt.opcode.split(".")[1:]
    types = [x for x in p if x in S.INT_DTYPES or x in ("f16", "bf16", "f32", "f64", "tf32", "f16x2", "bf16x2")
             or x in _FP8X2]
    mods = [x for x in p if x not in types]
    if len(types) != 2 or p[-2:] != types:
        raise unsupported(stmt, "cvt needs a destination and a source type")
    dty, sty = types
    if dty in _FP8X2 or sty in _FP8X2:
        return _cvt_fp8(stmt, dty, sty, mods)
    rnd = None
    ftz = sat = relu = False
    for x in mods:
        if x in ("rn", "rz", "rm", "rp", "rna", "rni", "rzi", "rmi", "rpi"):
            rnd = x
        elif x == "ftz":
            ftz = True
        elif x == "sat":
            sat = True
        elif x == "relu":
            relu = True
        else:
            raise unsupported(stmt, f"modifier .{x}")
    if relu:
        raise unsupported(stmt, ".relu")
    ops = stmt.operands
    fn = _cvt_fn(stmt, dty, sty, rnd, ftz, sat)
    if dty in ("f16x2", "bf16x2"):
        if len(ops) != 3:
            raise unsupported(stmt)

        def factory(M):
            put = M.wr(ops[0], "b32")
            a, b = M.rd(ops[1], sty), M.rd(ops[2], sty)

            def run(m):
                hi = np.asarray(fn(a())).astype(np.uint32)
                lo = np.asarray(fn(b())).astype(np.uint32)
                put((hi << np.uint32(16)) | lo, m)
            return run
        return Op(stmt.line, stmt.opcode, "op", "conversion", factory)
    if len(ops) != 2:
        raise unsupported(stmt)
    store_ty = "b32" if dty == "tf32" else dty

    def factory(M):
        put, get = M.wr(ops[0], store_ty), M.rd(ops[1], sty)
        return lambda m: put(fn(get()), m)
    return Op(stmt.line, stmt.opcode, "op", "conversion", factory)


_FP8X2 = ("e4m3x2", "e5m2x2")


def _cvt_fp8(stmt, dty, sty, mods):
    """cvt.rn{.relu}{.satfinite}.{e4m3x2,e5m2x2}.f32 d, a, b (d.b16: a's code in the upper byte, b's in the lower);
    the same from .f16x2 (upper half to the upper byte); cvt.rn{.relu}.f16x2.{e4m3x2,e5m2x2} d, a (each byte to
    the f16 half of the same position, exactly). Rounding and saturation: semantics.f32_to_fp8_bits."""
    relu, satf = "relu" in mods, "satfinite" in mods
    if [x for x in mods if x not in ("rn", "relu", "satfinite")] or "rn" not in mods:
        raise unsupported(stmt, "fp8 cvt takes .rn with optional .relu / .satfinite")
    ops = stmt.operands
    if dty in _FP8X2 and sty == "f32":
        if len(ops) != 3:
            raise unsupported(stmt)
        kind = dty[:4]

        def factory(M):
            put = M.wr(ops[0], "b16")
            a, b = M.rd(ops[1], "f32"), M.rd(ops[2], "f32")

            def run(m):
                hi = S.f32_to_fp8_bits(a(), kind, satf, relu).astype(np.uint16)
                lo = S.f32_to_fp8_bits(b(), kind, satf, relu).astype(np.uint16)
                put((hi << np.uint16(8)) | lo, m)
            return run
        return Op(stmt.line, stmt.opcode, "op", "conversion", factory)
    if dty in _FP8X2 and sty == "f16x2":
        kind = dty[:4]
        if len(ops) != 2:
            raise unsupported(stmt)

        def factory(M):
            put, get = M.wr(ops[0], "b16"), M.rd(ops[1], "b32")

            def run(m):
                w = np.asarray(get()).astype(np.uint32)
                hi = S.f32_to_fp8_bits(S.f16_bits_to_f32((w >> np.uint32(16)).astype(np.uint16)), kind, satf, relu)
                lo = S.f32_to_fp8_bits(S.f16_bits_to_f32((w & np.uint32(0xFFFF)).astype(np.uint16)), kind, satf, relu)
                put((hi.astype(np.uint16) << np.uint16(8)) | lo.astype(np.uint16), m)
            return run
        return Op(stmt.line, stmt.opcode, "op", "conversion", factory)
    if dty == "f16x2" and sty in _FP8X2:
        if satf or len(ops) != 2:
            raise unsupported(stmt)
        kind = sty[:4]

        def factory(M):
            put, get = M.wr(ops[0], "b32"), M.rd(ops[1], "b16")

            def run(m):
                w = np.asarray(get()).astype(np.uint32)
                halves = []
                for sh in (8, 0):
                    v = S.fp8_bits_to_f32(((w >> np.uint32(sh)) & np.uint32(0xFF)).astype(np.uint8), kind)
                    if relu:
                        v = np.where(v < 0, np.float32(0), v)
                    halves.append(S.f32_to_f16_bits(v).astype(np.uint32))
                put((halves[0] << np.uint32(16)) | halves[1], m)
            return run
        return Op(stmt.line, stmt.opcode, "op", "conversion", factory)
    raise unsupported(stmt, "fp8 cvt forms: .e4m3x2/.e5m2x2 from .f32 or .f16x2, .f16x2 from .e4m3x2/.e5m2x2")


def _cvt_fn(stmt, dty, sty, rnd, ftz, sat):
    dint, sint = dty in S.INT_DTYPES, sty in S.INT_DTYPES
    dflt = dty in ("f32", "f64")
    sflt = sty in ("f32", "f64")
    if dint and sint:
        if rnd or ftz:
            raise unsupported(stmt)
        ddt = S.np_dtype(dty)
        if sat:
            lo, hi = S._INT_RANGE[dty.replace("b", "u")]
            return lambda x: np.clip(np.asarray(x).astype(np.float64) if np.asarray(x).dtype.itemsize < 8 else
                                     np.asarray(x), lo, hi).astype(ddt)
        return lambda x: np.asarray(x).astype(ddt)
    if dint and (sflt or sty in ("f16", "bf16")):
        if rnd not in ("rni", "rzi", "rmi", "rpi"):
            raise unsupported(stmt, "float -> integer needs rni/rzi/rmi/rpi")
        to_f = _to_float(sty, ftz)
        return lambda x: S.float_to_int(to_f(x), dty, rnd)
    if dflt and sint:
        if rnd not in ("rn", "rz", "rm", "rp") or ftz and dty != "f32":
            raise unsupported(stmt, "integer -> float needs rn/rz/rm/rp")
        post = S.sat_f32 if sat else (lambda v: v)
        return lambda x: post(S.int_to_float(x, dty, rnd))
    if dty == "f32" and sty == "f32":
        if rnd in ("rni", "rzi", "rmi", "rpi"):
            f = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}[rnd]
        elif rnd is None:
            f = None
        else:
            raise unsupported(stmt)

        def g(x):
            x = np.asarray(x, np.float32)
            if ftz:
                x = S.ftz32(x)
            if f is not None:
                x = f(x).astype(np.float32)
            if sat:
                x = S.sat_f32(x)
            if ftz:
                x = S.ftz32(x)
            return S.canon_nan32(x)
        return g
    if dty == "f32" and sty == "f64":
        if rnd not in RND:
            raise unsupported(stmt)
        return lambda x: _post32(S.round_f64_to_f32(x, rnd), ftz, sat)
    if dty == "f64" and sty == "f32":
        if rnd or ftz:
            raise unsupported(stmt)
        return lambda x: (S.sat_f32(x) if sat else np.asarray(x)).astype(np.float64)
    if dty == "f64" and sty == "f64":
        if rnd in ("rni", "rzi", "rmi", "rpi"):
            f = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}[rnd]
            return lambda x: f(np.asarray(x, np.float64))
        raise unsupported(stmt)
    if dty in ("f16", "bf16", "f16x2", "bf16x2") and sty == "f32":
        if rnd not in ("rn", "rz") or ftz or sat and dty.startswith("bf"):
            raise unsupported(stmt)
        if dty.startswith("f16"):
            if rnd != "rn":
                raise unsupported(stmt)
            if sat:
                return lambda x: S.f32_to_f16_bits(S.sat_f32(x))
            return lambda x: S.f32_to_f16_bits(x)
        return lambda x: S.f32_to_bf16_bits(x, rnd)
    if dty == "f32" and sty in ("f16", "bf16"):
        if rnd or sat:
            raise unsupported(stmt)
        f = S.f16_bits_to_f32 if sty == "f16" else S.bf16_bits_to_f32
        return (lambda x: S.ftz32(f(x))) if ftz else f
    if dty == "tf32" and sty == "f32":
        if rnd != "rna" or ftz or sat:
            raise unsupported(stmt, "only cvt.rna.tf32.f32")
        return S.tf32_rna
    raise unsupported(stmt)


def _to_float(sty, ftz):
    if sty == "f16":
        return S.f16_bits_to_f32
    if sty == "bf16":
        return S.bf16_bits_to_f32
    if sty == "f32" and ftz:
        return S.ftz32
    return lambda x: x


def _post32(x, ftz, sat):
    if ftz:
        x = S.ftz32(x)
    if sat:
        x = S.sat_f32(x)
    return S.canon_nan32(x)


# --------------------------------------------------------------------------------- approximations

@handler("ex2", "rsqrt", "lg2", "sin", "cos", "tanh", "rcp", "sqrt")
def _approx(stmt):
    mo = Mods(stmt)
    fn = stmt.opcode.split(".")[0]
    approx = mo.flag("approx")
    rnd = mo.take(*RND)
    ftz = mo.flag("ftz")
    ty = mo.type(("f32", "f64"))
    mo.done()
    if fn in ("rcp", "sqrt") and rnd:
        if approx:
            raise unsupported(stmt)
        if ty == "f64":
            if rnd != "rn" or ftz:
                raise unsupported(stmt)
            f = (lambda x: 1.0 / x) if fn == "rcp" else np.sqrt
            return _simple(stmt, ty, 1, f, cls="fp64")
        if rnd != "rn":
            raise unsupported(stmt, "directed rcp/sqrt")
        if fn == "rcp":
            return _simple(stmt, ty, 1, lambda x: S.div_f32(np.float32(1), x, "rn", ftz), cls="fp32")
        return _simple(stmt, ty, 1, lambda x: S.canon_nan32(np.sqrt(S.ftz32(x) if ftz else x)), cls="fp32")
    if not approx or ty != "f32":
        raise unsupported(stmt)
    if fn == "tanh" and ftz:
        raise unsupported(stmt)
    ops = _ops(stmt, 2)

    def factory(M):
        put, get = M.wr(ops[0], "f32"), M.rd(ops[1], "f32")
        if M.approx == "perturb":
            rng = M.rng
            return lambda m: put(S.perturb(fn, S.approx_f32(fn, get(), ftz), rng, ftz), m)
        return lambda m: put(S.approx_f32(fn, get(), ftz), m)
    return Op(stmt.line, stmt.opcode, "op", "mufu", factory)
