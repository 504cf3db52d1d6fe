"""Per-instruction property tests of the PTX interpreter, each instruction run through a one-instruction
PTX kernel (parse, decode, execute), against exact references written from the PTX ISA text:
fractions.Fraction for every rounding mode, NaN / +-0 / +-inf / subnormals with and without .ftz, .sat,
shift amounts >= width, division by zero, min/max NaN rules, integer wrap."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from plus_ep.kernels.ptx import GlobalMemory, Module, PtxError

N = 64
_TY = {"f32": np.float32, "f64": np.float64, "u32": np.uint32, "s32": np.int32, "u64": np.uint64,
       "s64": np.int64, "b32": np.uint32, "b16": np.uint16, "u16": np.uint16, "s16": np.int16}
_REG = {"f32": "f", "f64": "fd", "u32": "r", "s32": "r", "b32": "r", "u64": "rd", "s64": "rd", "b16": "rs",
        "u16": "rs", "s16": "rs"}
_DECL = {"f": ".f32", "fd": ".f64", "r": ".b32", "rd": ".b64", "rs": ".b16"}


def run1(instr: str, out_ty: str, ins: list[tuple[str, np.ndarray]], **launch):
    """Run `instr` (with %d for the destination, %a %b %c for the inputs) once per thread."""
    n = len(ins[0][1])
    lines = [".version 9.0", ".target sm_80", ".address_size 64", ".visible .entry k(.param .u64 pout, "
             + ", ".join(f".param .u64 p{i}" for i in range(len(ins))) + ")", "{",
             ".reg .pred %p<4>;", ".reg .b64 %addr<16>;", ".reg .b32 %tid;", ".reg .b64 %off;"]
    regs = {}
    for i, (ty, _) in enumerate(ins):
        regs[f"%{'abc'[i]}"] = ty
    regs["%d"] = out_ty
    for name, ty in regs.items():
        lines.append(f".reg {_DECL[_REG[ty]]} {name};")
    lines += ["mov.u32 %tid, %tid.x;"]
    for i, (ty, arr) in enumerate(ins):
        sz = arr.dtype.itemsize
        lines += [f"ld.param.u64 %addr{i}, [p{i}];", f"mul.wide.u32 %off, %tid, {sz};",
                  f"add.s64 %addr{i}, %addr{i}, %off;",
                  f"ld.global.{'b' if ty[0] in 'bus' else ty[0]}{sz * 8 if ty[0] in 'bus' else ty[1:]} %{'abc'[i]}, [%addr{i}];"]
    osz = np.dtype(_TY[out_ty]).itemsize
    lines += [instr.replace("%d", "%d").rstrip(";") + ";", "ld.param.u64 %addr9, [pout];",
              f"mul.wide.u32 %off, %tid, {osz};", "add.s64 %addr9, %addr9, %off;",
              f"st.global.b{osz * 8} [%addr9], %d;", "ret;", "}"]
    mod = Module.parse("\n".join(lines) + "\n", name="unit")
    mem = GlobalMemory()
    keep = [np.ascontiguousarray(a).copy() for _, a in ins]
    out = np.full(n * np.dtype(_TY[out_ty]).itemsize, 0xFF, np.uint8).view(_TY[out_ty])   # poisoned
    ptrs = [mem.map_array(out, "out")] + [mem.map_array(a, f"in{i}") for i, a in enumerate(keep)]
    params = b"".join(int(p).to_bytes(8, "little") for p in ptrs)
    r = mod.kernel("k").launch((1, 1, 1), (n, 1, 1), 0, params, mem, **launch)
    assert not r.findings
    assert not np.all(out.view(np.uint8).reshape(n, -1) == 0xFF, axis=1).any() or out_ty[0] in "bus", \
        "the kernel left an output element unwritten (poison 0xFF..)"
    return out


# ------------------------------------------------------------------------------------- references

def round_fraction(q: Fraction, mode: str, mbits=23, emin=-126, emax=127) -> float:
    """Exact rational -> binary float with `mbits` fraction bits, rounding mode rn/rz/rm/rp/rna."""
    if q == 0:
        return 0.0
    neg = q < 0
    a = -q if neg else q
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    e = max(e, emin)
    ulp = Fraction(2) ** (e - mbits)
    m = a / ulp
    fl = m.numerator // m.denominator
    rem = m - fl
    if mode == "rn":
        up = rem > Fraction(1, 2) or (rem == Fraction(1, 2) and fl % 2 == 1)
    elif mode == "rna":
        up = rem >= Fraction(1, 2)
    elif mode == "rz":
        up = False
    elif mode == "rp":
        up = rem > 0 and not neg
    else:
        up = rem > 0 and neg
    mag = (fl + int(up)) * ulp
    biggest = (2 - Fraction(2) ** -mbits) * Fraction(2) ** emax
    if mag > biggest:
        to_inf = mode in ("rn", "rna") or (mode == "rp" and not neg) or (mode == "rm" and neg)
        val = math.inf if to_inf else float(biggest)
    else:
        val = float(mag)
    return -val if neg else val


def f32s(allow_nan=True):
    return st.floats(width=32, allow_nan=allow_nan, allow_infinity=True, allow_subnormal=True)


def arr(xs, dt=np.float32):
    return np.array(xs, dt)


def same_f32(got, want):
    g, w = np.float32(got), np.float32(want)
    if np.isnan(w):
        return bool(np.isnan(g))
    return g.view(np.uint32) == w.view(np.uint32)


# ---------------------------------------------------------------------------------------------- fma

def _fma_traps():
    """Double-rounding traps: a*b+c exactly halfway between f32 values after one f64 rounding."""
    out = []
    for k in range(1, 30):
        a = np.float32(1 + 2.0 ** -12)
        b = np.float32(1 + 2.0 ** -12 + k * 2.0 ** -23)
        c = np.float32(-(2.0 ** -k))
        out.append((a, b, c))
    out += [(np.float32(1 + 2**-23), np.float32(1 + 2**-23), np.float32(-1)),
            (np.float32(2**-75), np.float32(2**-75), np.float32(2**-149)),
            (np.float32(3.4e38), np.float32(2), np.float32(-3.4e38)),
            (np.float32(0.0), np.float32(-1), np.float32(0.0)), (np.float32(1), np.float32(-1), np.float32(1))]
    return out


@pytest.mark.parametrize("mode", ["rn", "rz", "rm", "rp"])
@settings(max_examples=60, deadline=None, derandomize=True)
@given(xs=st.lists(st.tuples(f32s(False), f32s(False), f32s(False)), min_size=1, max_size=N))
def test_fma_f32_exact(mode, xs):
    xs = xs + _fma_traps()[: N - len(xs)] if len(xs) < N else xs
    a, b, c = (arr([x[i] for x in xs]) for i in range(3))
    got = run1(f"fma.{mode}.f32 %d, %a, %b, %c", "f32", [("f32", a), ("f32", b), ("f32", c)])
    for x, y, z, g in zip(a, b, c, got):
        if not (np.isfinite(x) and np.isfinite(y) and np.isfinite(z)):
            w = np.float32(np.float64(x) * np.float64(y) + np.float64(z))
            w = np.float32(np.nan) if np.isnan(w) else w
            assert same_f32(g, w) or (np.isnan(w) and np.isnan(g)), (x, y, z, g, w)
            continue
        q = Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))
        if q == 0:
            w = exact_zero_sum_f32(x, y, z, mode)
            assert same_f32(g, w), (mode, x, y, z, g, w)      # the sign of zero too
            continue
        w = round_fraction(q, mode)
        assert same_f32(g, w), (mode, x, y, z, g, w)


def exact_zero_sum_f32(x, y, z, mode: str) -> np.float32:
    """IEEE 754 §6.3 for fma(x, y, z) whose exact value is zero: when the product and z are both zeros of
    the same sign, that zero; otherwise (opposite signs, or x*y == -z != 0) +0, except -0 when rounding
    toward -inf (rm)."""
    product_negative = bool(np.signbit(x) != np.signbit(y))
    if (x == 0 or y == 0) and z == 0 and product_negative == bool(np.signbit(z)):
        return np.float32(-0.0) if product_negative else np.float32(0.0)
    return np.float32(-0.0) if mode == "rm" else np.float32(0.0)


def test_fma_zero_results_carry_the_ieee_sign():
    """Every sign combination of zero products and zero addends, and exact cancellation, in each mode."""
    z0, one = np.float32(0.0), np.float32(1.0)
    cases = [(sx * z0, sy * one, sz * z0) for sx in (1, -1) for sy in (1, -1) for sz in (1, -1)]
    cases += [(np.float32(1.5), np.float32(-2.0), np.float32(3.0)), (np.float32(-1.5), np.float32(-2.0), np.float32(-3.0))]
    a, b, c = (arr([t[i] for t in cases]) for i in range(3))
    for mode in ("rn", "rz", "rm", "rp"):
        got = run1(f"fma.{mode}.f32 %d, %a, %b, %c", "f32", [("f32", a), ("f32", b), ("f32", c)])
        want = [exact_zero_sum_f32(x, y, z, mode) for x, y, z in zip(a, b, c)]
        assert [bool(np.signbit(g)) for g in got] == [bool(np.signbit(w)) for w in want], (mode, got, want)
        assert all(same_f32(g, w) for g, w in zip(got, want))


def test_fma_double_rounding_trap_is_exact():
    """A case where computing in f64 and rounding once more to f32 is wrong."""
    a, b = np.float32(1 + 2.0 ** -12), np.float32(1 + 2.0 ** -12 + 2.0 ** -23)
    c = np.float32(-(2.0 ** -24))
    naive = np.float32(np.float64(a) * np.float64(b) + np.float64(c))
    q = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    want = round_fraction(q, "rn")
    got = run1("fma.rn.f32 %d, %a, %b, %c", "f32", [("f32", arr([a])), ("f32", arr([b])), ("f32", arr([c]))])[0]
    assert same_f32(got, want)
    if naive != np.float32(want):
        assert got != naive


def test_fma_specials():
    inf, nan = np.inf, np.nan
    a = arr([inf, 0.0, nan, inf, -0.0, 1e-45])
    b = arr([0.0, inf, 1.0, 1.0, 5.0, 1e-45])
    c = arr([1.0, 1.0, 1.0, -inf, -0.0, 0.0])
    got = run1("fma.rn.f32 %d, %a, %b, %c", "f32", [("f32", a), ("f32", b), ("f32", c)])
    assert np.isnan(got[:4]).all()
    assert got.view(np.uint32)[0] == 0x7FFFFFFF            # canonical NaN
    assert got[4] == 0 and np.signbit(got[4])               # -0 * 5 + -0 = -0
    assert got[5] == 0 and not np.signbit(got[5])           # underflow to +0
    ftz = run1("fma.rn.ftz.f32 %d, %a, %b, %c", "f32",
               [("f32", arr([1e-40, 1.0])), ("f32", arr([1.0, 1e-40])), ("f32", arr([0.0, 0.0]))])
    assert (ftz == 0).all()
    sat = run1("fma.rn.sat.f32 %d, %a, %b, %c", "f32",
               [("f32", arr([2.0, -1.0, nan])), ("f32", arr([1.0, 1.0, 1.0])), ("f32", arr([0.0, 0.0, 0.0]))])
    assert list(sat) == [1.0, 0.0, 0.0] and not np.signbit(sat[1])


# ------------------------------------------------------------------------------------ add mul div

@pytest.mark.parametrize("op", ["add", "sub", "mul"])
@pytest.mark.parametrize("mode", ["rn", "rz", "rm", "rp"])
@settings(max_examples=30, deadline=None, derandomize=True)
@given(xs=st.lists(st.tuples(f32s(False), f32s(False)), min_size=1, max_size=N))
def test_add_mul_f32_exact(op, mode, xs):
    a, b = (arr([x[i] for x in xs]) for i in range(2))
    got = run1(f"{op}.{mode}.f32 %d, %a, %b", "f32", [("f32", a), ("f32", b)])
    for x, y, g in zip(a, b, got):
        if not (np.isfinite(x) and np.isfinite(y)):
            continue
        fx, fy = Fraction(float(x)), Fraction(float(y))
        q = fx + fy if op == "add" else fx - fy if op == "sub" else fx * fy
        if q == 0:
            assert g == 0
            continue
        assert same_f32(g, round_fraction(q, mode)), (op, mode, x, y, g)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(xs=st.lists(st.tuples(f32s(), f32s()), min_size=1, max_size=N))
def test_div_rn_f32_is_ieee(xs):
    a, b = (arr([x[i] for x in xs]) for i in range(2))
    got = run1("div.rn.f32 %d, %a, %b", "f32", [("f32", a), ("f32", b)])
    for x, y, g in zip(a, b, got):
        if np.isfinite(x) and np.isfinite(y) and y != 0:
            q = Fraction(float(x)) / Fraction(float(y))
            if q != 0:
                assert same_f32(g, round_fraction(q, "rn"))
        elif np.isnan(x) or np.isnan(y) or (y == 0 and x == 0) or (np.isinf(x) and np.isinf(y)):
            assert np.isnan(g)
        elif y == 0:
            assert np.isinf(g) and np.signbit(g) == (np.signbit(x) != np.signbit(y))


def test_rcp_and_integer_division_by_zero():
    r = run1("rcp.rn.f32 %d, %a", "f32", [("f32", arr([0.0, -0.0, np.inf, 3.0]))])
    assert r[0] == np.inf and r[1] == -np.inf and r[2] == 0 and same_f32(r[3], round_fraction(Fraction(1, 3), "rn"))
    d = run1("div.u32 %d, %a, %b", "u32", [("u32", arr([7, 7], np.uint32)), ("u32", arr([0, 2], np.uint32))])
    assert list(d) == [0xFFFFFFFF, 3]
    s = run1("div.s32 %d, %a, %b", "s32", [("s32", arr([-7, -2**31, 7], np.int32)), ("s32", arr([2, -1, -2], np.int32))])
    assert list(s) == [-3, -2**31, -3]                     # truncation, MIN/-1 wraps
    m = run1("rem.s32 %d, %a, %b", "s32", [("s32", arr([-7, 7], np.int32)), ("s32", arr([2, -2], np.int32))])
    assert list(m) == [-1, 1]


# --------------------------------------------------------------------------------------- min / max

@pytest.mark.parametrize("op", ["min", "max"])
def test_minmax_nan_and_zero_rules(op):
    nan = np.float32(np.nan)
    a = arr([nan, 1.0, nan, -0.0, 0.0, 2.0])
    b = arr([1.0, nan, nan, 0.0, -0.0, 3.0])
    got = run1(f"{op}.f32 %d, %a, %b", "f32", [("f32", a), ("f32", b)])
    assert got[0] == 1 and got[1] == 1 and np.isnan(got[2])
    assert got.view(np.uint32)[2] == 0x7FFFFFFF
    want_neg = op == "min"
    assert got[3] == 0 and np.signbit(got[3]) == want_neg and np.signbit(got[4]) == want_neg
    assert got[5] == (2 if op == "min" else 3)


# ------------------------------------------------------------------------------------ integers, shifts

@settings(max_examples=30, deadline=None, derandomize=True)
@given(xs=st.lists(st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 100)), min_size=1, max_size=N))
def test_shifts_clamp_at_width(xs):
    a = arr([x for x, _ in xs], np.uint32)
    s = arr([y for _, y in xs], np.uint32)
    shl = run1("shl.b32 %d, %a, %b", "b32", [("b32", a), ("u32", s)])
    shr = run1("shr.u32 %d, %a, %b", "u32", [("u32", a), ("u32", s)])
    sra = run1("shr.s32 %d, %a, %b", "s32", [("s32", a.view(np.int32)), ("u32", s)])
    for x, y, l, r, q in zip(a.tolist(), s.tolist(), shl, shr, sra):
        assert int(l) == ((x << y) & 0xFFFFFFFF if y < 32 else 0)
        assert int(r) == (x >> y if y < 32 else 0)
        sx = x - 2**32 if x >= 2**31 else x
        assert int(q) == (sx >> min(y, 31))


@settings(max_examples=30, deadline=None, derandomize=True)
@given(xs=st.lists(st.tuples(st.integers(-2**31, 2**31 - 1), st.integers(-2**31, 2**31 - 1)), min_size=1, max_size=N))
def test_integer_wrap(xs):
    a = arr([x for x, _ in xs], np.int32)
    b = arr([y for _, y in xs], np.int32)
    add = run1("add.s32 %d, %a, %b", "s32", [("s32", a), ("s32", b)])
    mul = run1("mul.lo.s32 %d, %a, %b", "s32", [("s32", a), ("s32", b)])
    hi = run1("mul.hi.s32 %d, %a, %b", "s32", [("s32", a), ("s32", b)])
    wide = run1("mul.wide.s32 %d, %a, %b", "s64", [("s32", a), ("s32", b)])
    wrap = lambda v: (v + 2**31) % 2**32 - 2**31
    for x, y, s, m, h, w in zip(a.tolist(), b.tolist(), add, mul, hi, wide):
        assert int(s) == wrap(x + y) and int(m) == wrap(x * y)
        assert int(h) == (x * y) >> 32 and int(w) == x * y


@settings(max_examples=30, deadline=None, derandomize=True)
@given(xs=st.lists(st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1)),
                   min_size=1, max_size=N))
def test_mad_wide_wraps_at_64_bits(xs):
    """mad.wide.u32 / .s32: the 32 x 32 -> 64-bit product plus a 64-bit addend, modulo 2^64."""
    a = arr([x for x, _, _ in xs], np.uint32)
    b = arr([y for _, y, _ in xs], np.uint32)
    c = arr([z for _, _, z in xs], np.uint64)
    u = run1("mad.wide.u32 %d, %a, %b, %c", "u64", [("u32", a), ("u32", b), ("u64", c)])
    s = run1("mad.wide.s32 %d, %a, %b, %c", "s64", [("s32", a.view(np.int32)), ("s32", b.view(np.int32)),
                                                     ("s64", c.view(np.int64))])
    for x, y, z, gu, gs in zip(a.tolist(), b.tolist(), c.tolist(), u, s):
        assert int(gu) == (x * y + z) % 2**64
        sx, sy = (x - 2**32 if x >= 2**31 else x), (y - 2**32 if y >= 2**31 else y)
        assert int(gs) % 2**64 == (sx * sy + z) % 2**64


# ------------------------------------------------------------------------------------ conversions

@settings(max_examples=40, deadline=None, derandomize=True)
@given(xs=st.lists(f32s(), min_size=1, max_size=N))
def test_cvt_f16_bf16_tf32_rounding(xs):
    a = arr(xs)
    h = run1("cvt.rn.f16.f32 %d, %a", "b16", [("f32", a)])
    bf = run1("cvt.rn.bf16.f32 %d, %a", "b16", [("f32", a)])
    tf = run1("cvt.rna.tf32.f32 %d, %a", "b32", [("f32", a)])
    for x, hb, bb, tb in zip(a, h, bf, tf):
        if np.isnan(x):
            assert np.isnan(np.uint16(hb).view(np.float16)) and (int(bb) & 0x7F80) == 0x7F80 and int(bb) & 0x7F
            continue
        if np.isinf(x):
            continue
        q = Fraction(float(x))
        want_h = round_fraction(q, "rn", 10, -14, 15) if q else 0.0
        assert float(np.uint16(hb).view(np.float16)) == want_h, (x, hb)
        want_b = round_fraction(q, "rn", 7, -126, 127) if q else 0.0
        assert float((np.uint32(bb) << np.uint32(16)).view(np.float32)) == want_b, (x, bb)
        want_t = round_fraction(q, "rna", 10, -126, 127) if q else 0.0
        got_t = float(np.uint32(tb).view(np.float32))
        if abs(float(x)) >= 2.0 ** -126:                    # normal range: tf32 keeps 10 fraction bits
            assert got_t == want_t, (x, tb)


def test_cvt_sat_rzi_and_int_float():
    s = run1("cvt.sat.f32.f32 %d, %a", "f32", [("f32", arr([-1.0, 0.5, 7.0, np.nan, -0.0]))])
    assert list(s) == [0.0, 0.5, 1.0, 0.0, 0.0] and not np.signbit(s[4])
    z = run1("cvt.rzi.s64.f64 %d, %a", "s64", [("f64", arr([-2.7, 2.7, 1e300, np.nan], np.float64))])
    assert list(z) == [-2, 2, 2**63 - 1, 0]
    f = run1("cvt.rn.f64.s64 %d, %a", "f64", [("s64", arr([2**53 + 1, -3], np.int64))])
    assert list(f) == [float(2**53), -3.0]
    w = run1("cvt.u32.u64 %d, %a", "u32", [("u64", arr([2**40 + 5], np.uint64))])
    assert int(w[0]) == 5
    e = run1("cvt.s64.s32 %d, %a", "s64", [("s32", arr([-5], np.int32))])
    assert int(e[0]) == -5


def test_approx_ops_exact_and_perturbed_within_bounds():
    x = arr(np.linspace(-20, 20, N))
    exact = run1("ex2.approx.f32 %d, %a", "f32", [("f32", x)])
    want = np.exp2(x.astype(np.float64)).astype(np.float32)
    assert np.array_equal(exact, want)
    pert = run1("ex2.approx.f32 %d, %a", "f32", [("f32", x)], approx="perturb", seed=3)
    ulps = np.abs(pert.view(np.int32).astype(np.int64) - want.view(np.int32).astype(np.int64))
    assert ulps.max() <= 2 and (ulps > 0).any()
    y = arr(np.linspace(0.01, 100, N))
    rs = run1("rsqrt.approx.f32 %d, %a", "f32", [("f32", y)], approx="perturb", seed=1)
    rel = np.abs(rs.astype(np.float64) * np.sqrt(y.astype(np.float64)) - 1)
    assert rel.max() <= 2 ** -22.9
    sub = run1("ex2.approx.ftz.f32 %d, %a", "f32", [("f32", arr([-130.0, -1e-45]))])
    assert sub[0] == 0 and sub[1] == 1.0


def test_unknown_form_is_an_error_naming_form_and_line():
    with pytest.raises(PtxError) as e:
        run1("tanh.approx.ftz.f64 %d, %a", "f64", [("f64", arr([1.0], np.float64))])
    assert e.value.form == "tanh.approx.ftz.f64" and e.value.line is not None
    with pytest.raises(PtxError) as e:
        run1("frobnicate.b32 %d, %a", "b32", [("b32", arr([1], np.uint32))])
    assert "frobnicate" in str(e.value) and "line" in str(e.value)
