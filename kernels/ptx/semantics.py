"""Per-instruction arithmetic of PTX, in numpy, from the PTX ISA 9.0 text (no interpreter state here).

Values travel as numpy arrays of the instruction type (float32, int32, uint64, ...); 16-bit floating
types travel as their uint16 bit patterns. Everything rounding-sensitive is exact:

* `fma_f32(a, b, c, mode)`: the product of two f32 is exact in f64; the f64 sum `s` plus its TwoSum
  error `e` is the exact a*b+c; rounding s to f32 is then corrected where it can be wrong (s exactly a
  f32 midpoint with e != 0 for `rn`; the direction of s+e against the rounded value for rm/rp/rz).
  Computing in f64 and casting once is wrong on double-rounding cases; this is not.
* f64 -> f32 with every rounding mode (`round_f64_to_f32`), f32 -> f16 / bf16 round-to-nearest-even,
  tf32 round-to-nearest-ties-away (`cvt.rna.tf32.f32`), float -> integer with rni/rzi/rmi/rpi and
  saturation (NaN -> 0), `.sat` for floats (clamp to [0, 1], NaN -> 0), `.ftz` (subnormal inputs and
  results become sign-preserving zeros).
* Approximate instructions (`ex2.approx`, `rsqrt.approx`, `tanh.approx`, `rcp.approx`, `lg2.approx`,
  `sin/cos.approx`, `sqrt.approx`) are correctly rounded from an f64 evaluation by default;
  `perturb(...)` moves them within the ISA's stated error bounds for fuzzing.
"""
from __future__ import annotations

import numpy as np

F32_CANON_NAN = np.uint32(0x7FFFFFFF)
F16_CANON_NAN = np.uint16(0x7FFF)
BF16_CANON_NAN = np.uint16(0x7FFF)
F32_MIN_NORMAL = np.float32(2.0 ** -126)

INT_DTYPES = {"u8": np.uint8, "s8": np.int8, "b8": np.uint8, "u16": np.uint16, "s16": np.int16,
              "b16": np.uint16, "u32": np.uint32, "s32": np.int32, "b32": np.uint32,
              "u64": np.uint64, "s64": np.int64, "b64": np.uint64}
FLOAT_DTYPES = {"f32": np.float32, "f64": np.float64}
HALF_TYPES = ("f16", "bf16")


def np_dtype(ty: str):
    """numpy dtype a PTX type travels as (16-bit floats: their uint16 bits)."""
    if ty in INT_DTYPES:
        return INT_DTYPES[ty]
    if ty in FLOAT_DTYPES:
        return FLOAT_DTYPES[ty]
    if ty in HALF_TYPES:
        return np.uint16
    if ty in ("f16x2", "bf16x2", "tf32"):
        return np.uint32
    if ty == "pred":
        return np.bool_
    raise KeyError(ty)


# ------------------------------------------------------------------------------------- float helpers

def ftz32(x):
    """Flush f32 subnormals to sign-preserving zero."""
    x = np.asarray(x, np.float32)
    return np.where(np.abs(x) < F32_MIN_NORMAL, np.copysign(np.float32(0), x), x).astype(np.float32)


def canon_nan32(x):
    """Replace every NaN by the canonical f32 NaN (what PTX f32 arithmetic returns)."""
    x = np.asarray(x, np.float32)
    nan = np.isnan(x)
    if nan.any():
        x = np.where(nan, F32_CANON_NAN.view(np.float32), x).astype(np.float32)
    return x


def _next_toward(f, direction):
    return np.nextafter(f, np.float32(np.inf) if direction > 0 else np.float32(-np.inf)).astype(np.float32)


def round_exact_to_f32(s, e, mode: str):
    """Round the exact value s + e (s: f64, e: f64 error with |e| <= ulp(s)/2, s = fl(s + e)) to f32."""
    s = np.asarray(s, np.float64)
    e = np.asarray(e, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        f = s.astype(np.float32)
    r = f.astype(np.float64)
    fin = np.isfinite(s)
    if mode == "rn":
        # s rounds to f correctly unless s is exactly halfway between two f32 values and e decides
        # the tie; a halfway point has at most 25 significant bits, so its low 28 f64 fraction bits
        # are zero: without such an s (the common case) the cast is the answer
        tie = fin & (e != 0) & ((np.ascontiguousarray(s).view(np.uint64) & np.uint64(0x0FFFFFFF)) == 0)
        if not tie.any():
            return f.astype(np.float32, copy=False)
        up, dn = _next_toward(f, 1), _next_toward(f, -1)
        with np.errstate(over="ignore", invalid="ignore"):
            mid_up = (r + up.astype(np.float64)) * 0.5
            mid_dn = (r + dn.astype(np.float64)) * 0.5
        f = np.where(fin & (s == mid_up) & (e > 0), up, f)
        f = np.where(fin & (s == mid_dn) & (e < 0), dn, f)
        # s itself overflowed the f32 cast although s+e is just below the rounding threshold: impossible,
        # since e cannot move a value across an f64-representable midpoint.
        return f.astype(np.float32)
    above = fin & ((r > s) | ((r == s) & (e < 0)))     # rounded value above the exact one
    below = fin & ((r < s) | ((r == s) & (e > 0)))
    if mode == "rm":
        return np.where(above, _next_toward(f, -1), f).astype(np.float32)
    if mode == "rp":
        return np.where(below, _next_toward(f, 1), f).astype(np.float32)
    if mode == "rz":
        pos = (s > 0) | ((s == 0) & (e > 0))
        out = np.where(pos & above, _next_toward(f, -1), f)
        out = np.where(~pos & below, _next_toward(f, 1), out)
        return out.astype(np.float32)
    raise ValueError(f"rounding mode {mode}")


def round_f64_to_f32(x, mode: str = "rn"):
    """f64 -> f32 with an IEEE rounding mode (exact: no intermediate rounding)."""
    return round_exact_to_f32(np.asarray(x, np.float64), np.zeros(np.shape(x)), mode)


def fma_f32(a, b, c, mode: str = "rn", ftz: bool = False, sat: bool = False):
    """fma.{rn,rz,rm,rp}{.ftz}{.sat}.f32, correctly rounded (single rounding of a*b+c)."""
    a, b, c = (np.asarray(v, np.float32) for v in (a, b, c))
    if ftz:
        a, b, c = ftz32(a), ftz32(b), ftz32(c)
    with np.errstate(all="ignore"):
        p = a.astype(np.float64) * b.astype(np.float64)     # exact (48-bit significand product)
        c64 = c.astype(np.float64)
        s = p + c64
        bv = s - p
        e = (p - (s - bv)) + (c64 - bv)                      # TwoSum: s + e == p + c exactly
        e = np.where(np.isfinite(s), e, 0.0)
    out = round_exact_to_f32(s, e, mode)
    # exact zero results: IEEE sign rules (x + -x = +0 except in rm, where it is -0)
    zero = (s == 0) & (e == 0)
    if zero.any():
        same = np.signbit(p) == np.signbit(c64)
        z = np.where(same, np.copysign(0.0, c64), -0.0 if mode == "rm" else 0.0).astype(np.float32)
        out = np.where(zero, z, out)
    if ftz:
        out = ftz32(out)
    if sat:
        out = sat_f32(out)
    return canon_nan32(out)


def add_f32(a, b, mode="rn", ftz=False, sat=False, neg_b=False):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    if ftz:
        a, b = ftz32(a), ftz32(b)
    if neg_b:
        b = -b
    with np.errstate(all="ignore"):
        if mode == "rn":
            out = (a + b).astype(np.float32)
        else:
            s = a.astype(np.float64) + b.astype(np.float64)   # exact: two f32 sum fits f64 unless far apart
            bv = s - a.astype(np.float64)
            e = (a.astype(np.float64) - (s - bv)) + (b.astype(np.float64) - bv)
            out = round_exact_to_f32(s, np.where(np.isfinite(s), e, 0.0), mode)
            zero = s == 0
            if zero.any():
                same = np.signbit(a) == np.signbit(b)
                out = np.where(zero, np.where(same, a, np.float32(-0.0 if mode == "rm" else 0.0)), out)
    out = ftz32(out) if ftz else out
    return canon_nan32(sat_f32(out) if sat else out)


def mul_f32(a, b, mode="rn", ftz=False, sat=False):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    if ftz:
        a, b = ftz32(a), ftz32(b)
    with np.errstate(all="ignore"):
        if mode == "rn":
            out = (a * b).astype(np.float32)
        else:
            out = round_f64_to_f32(a.astype(np.float64) * b.astype(np.float64), mode)  # product exact in f64
    out = ftz32(out) if ftz else out
    return canon_nan32(sat_f32(out) if sat else out)


def div_f32(a, b, mode="rn", ftz=False):
    """div.rn.f32 (IEEE). Directed modes through an exact remainder test."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    if ftz:
        a, b = ftz32(a), ftz32(b)
    with np.errstate(all="ignore"):
        q = (a / b).astype(np.float32)
        if mode != "rn":
            q64 = a.astype(np.float64) / b.astype(np.float64)
            # remainder a - q*b exactly (q, b f32: product exact in f64, difference exact by Sterbenz-ish
            # bounds for nearby values); its sign tells on which side the exact quotient lies.
            r = a.astype(np.float64) - q64 * b.astype(np.float64)
            e = r / b.astype(np.float64)
            q = round_exact_to_f32(q64, np.where(np.isfinite(q64), e, 0.0), mode)
    q = ftz32(q) if ftz else q
    return canon_nan32(q)


def div_approx_f32(a, b, mode: str, ftz: bool = False):
    """div.approx.f32 / div.full.f32: within 2 ulp of a / b (here correctly rounded); .approx returns 0 (NaN
    for an infinite a) for 2^126 < |b| < 2^128, as the ISA says its a * (1 / b) does."""
    q = div_f32(a, b, "rn", ftz)
    if mode == "approx":
        a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
        big = (np.abs(b) > np.float32(2.0 ** 126)) & np.isfinite(b)
        q = np.where(big, np.where(np.isinf(a), np.float32(np.nan), np.float32(0.0) * np.sign(a) * np.sign(b)), q)
    return canon_nan32(np.asarray(q, np.float32))


def sat_f32(x):
    """.sat: clamp to [0.0, 1.0]; NaN -> +0.0."""
    x = np.asarray(x, np.float32)
    with np.errstate(invalid="ignore"):
        out = np.where(np.isnan(x), np.float32(0), np.clip(x, np.float32(0), np.float32(1)))
    # -0.0 clamps to +0.0
    return np.where(out == 0, np.float32(0), out).astype(np.float32)


def minmax_f(a, b, is_max: bool, dtype=np.float32):
    """min/max.f32/f64: NaN inputs are ignored (both NaN: canonical NaN); -0.0 < +0.0."""
    a, b = np.asarray(a, dtype), np.asarray(b, dtype)
    with np.errstate(invalid="ignore"):
        pick_a = (a > b) if is_max else (a < b)
        eqz = (a == b) & (a == 0)
        sa = np.signbit(a)
        pick_a = pick_a | (eqz & ((~sa) if is_max else sa))
        out = np.where(pick_a, a, b)
        out = np.where(np.isnan(b), a, out)
        out = np.where(np.isnan(a), b, out)
    if dtype == np.float32:
        return canon_nan32(out.astype(np.float32))
    return out.astype(dtype)


# ----------------------------------------------------------------------------------- 16-bit floats

def f32_to_f16_bits(x, mode="rn"):
    """cvt.rn.f16.f32 (round to nearest even; NaN -> canonical f16 NaN)."""
    x = np.asarray(x, np.float32)
    if mode != "rn":
        raise ValueError("only .rn conversions to f16 are implemented")
    with np.errstate(over="ignore", invalid="ignore"):
        h = x.astype(np.float16).view(np.uint16)
    return np.where(np.isnan(x), F16_CANON_NAN, h).astype(np.uint16)


def f16_bits_to_f32(b):
    return np.asarray(b, np.uint16).view(np.float16).astype(np.float32)


def f32_to_bf16_bits(x, mode="rn"):
    """cvt.rn.bf16.f32: round to nearest even on the upper 16 bits; NaN -> canonical."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    if mode == "rn":
        r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    elif mode == "rz":
        r = u >> 16
    else:
        raise ValueError(f"bf16 rounding mode {mode}")
    nan = np.isnan(np.asarray(x, np.float32))
    return np.where(nan, BF16_CANON_NAN, r.astype(np.uint16)).astype(np.uint16)


def bf16_bits_to_f32(b):
    return (np.asarray(b, np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def tf32_rna(x):
    """cvt.rna.tf32.f32: nearest, ties away from zero, on the 13 low bits (result keeps f32 layout)."""
    x = np.asarray(x, np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    r = ((u + 0x1000) & 0xFFFFE000).astype(np.uint32)
    return np.where(np.isfinite(x), r, x.view(np.uint32)).astype(np.uint32)


# ------------------------------------------------------------------------------------ 8-bit floats
# kind -> (mantissa bits, exponent bias, largest finite value, has infinities). e4m3 (sm_89+: cvt, mma, wgmma) has
# no infinity and one NaN pattern per sign (0x7f / 0xff); e5m2 is IEEE-like (infinity 0x7c, NaN 0x7d..0x7f).
FP8 = {"e4m3": (3, 7, 448.0, False), "e5m2": (2, 15, 57344.0, True)}
FP8_CANON_NAN = 0x7F


def fp8_bits_to_f32(b, kind: str):
    """The value of each 8-bit float code (exact in f32 and in f16)."""
    m, bias, _, inf = FP8[kind]
    b = np.asarray(b, np.uint8).astype(np.int64)
    sign = np.where(b & 0x80, -1.0, 1.0)
    e, f = (b >> m) & ((1 << (7 - m)) - 1), b & ((1 << m) - 1)
    mag = np.where(e == 0, f * 2.0 ** (1 - bias - m), (1.0 + f / 2.0 ** m) * np.exp2(e - bias))
    top = e == (1 << (7 - m)) - 1
    if inf:
        mag = np.where(top, np.where(f == 0, np.inf, np.nan), mag)
    else:
        mag = np.where(top & (f == (1 << m) - 1), np.nan, mag)
    return (sign * mag).astype(np.float32)


def f32_to_fp8_bits(x, kind: str, satfinite: bool, relu: bool = False):
    """cvt.rn{.relu}{.satfinite}.{e4m3,e5m2}x2 of one f32 element: nearest, ties to even, at the type's precision
    (subnormals included). Past the largest finite value after rounding, and for infinities: that value with
    .satfinite, else NaN (e4m3) or infinity (e5m2). NaN gives the canonical NaN 0x7f; .relu clamps negatives to +0."""
    m, bias, top, has_inf = FP8[kind]
    x = np.asarray(x, np.float32).astype(np.float64)
    nan = np.isnan(x)
    if relu:
        x = np.where(x < 0, 0.0, x)
    neg = np.signbit(x)
    a = np.abs(np.where(nan, 0.0, x))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        e = np.maximum(np.frexp(np.where(np.isinf(a), 1.0, a))[1] - 1, 1 - bias)
        q = np.exp2(e - m)
        r = np.where(np.isinf(a), np.inf, np.rint(a / q) * q)
    over = r > top
    big = top if satfinite else (np.inf if has_inf else np.nan)
    r = np.where(over, big, r)
    # encode: exponent field e + bias (normal) or 0 (subnormal), mantissa r / 2^(e - m) - 2^m
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        e2 = np.maximum(np.frexp(np.where(np.isfinite(r) & (r > 0), r, 1.0))[1] - 1, 1 - bias)
        sub = r < 2.0 ** (1 - bias)
        mant = np.where(sub, r / 2.0 ** (1 - bias - m), r / np.exp2(e2 - m) - 2 ** m)
        field = np.where(sub, 0, e2 + bias)
        code = (field.astype(np.int64) << m) | np.nan_to_num(mant, nan=0, posinf=0).astype(np.int64)
    code = np.where(np.isinf(r), 0x7C, code)
    code = np.where(np.isnan(r), FP8_CANON_NAN, code)
    code = np.where(neg & ~np.isnan(r), code | 0x80, code)
    return np.where(nan, FP8_CANON_NAN, code).astype(np.uint8)


# -------------------------------------------------------------------------------- float -> integer

_INT_RANGE = {"s8": (-2**7, 2**7 - 1), "u8": (0, 2**8 - 1), "s16": (-2**15, 2**15 - 1), "u16": (0, 2**16 - 1),
              "s32": (-2**31, 2**31 - 1), "u32": (0, 2**32 - 1), "s64": (-2**63, 2**63 - 1),
              "u64": (0, 2**64 - 1)}


def float_to_int(x, ity: str, mode: str):
    """cvt.{rni,rzi,rmi,rpi}.<int>.<float>: round to an integer value, then saturate to the integer
    type's range; NaN -> 0 (PTX float-to-integer conversions always saturate)."""
    x = np.asarray(x, np.float64)
    fn = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}[mode]
    with np.errstate(invalid="ignore"):
        r = fn(x)
    lo, hi = _INT_RANGE[ity]
    dt = INT_DTYPES[ity]
    out = np.zeros(np.shape(x), dt)
    nan = np.isnan(r)
    big = (r >= float(hi)) & ~nan
    small = (r <= float(lo)) & ~nan
    mid = ~(nan | big | small)
    out = np.where(mid, np.where(mid, r, 0).astype(dt), out)
    out = np.where(big, dt(hi), out)
    out = np.where(small, dt(lo), out)
    return out.astype(dt)


def int_to_float(x, fty: str, mode: str = "rn"):
    x = np.asarray(x)
    if fty == "f64":
        if mode != "rn" and x.dtype.itemsize == 8:
            return np.array([_int_to_f64_directed(int(v), mode) for v in x.reshape(-1)]).reshape(x.shape)
        return x.astype(np.float64)
    if fty == "f32":
        if mode == "rn":
            return x.astype(np.float32)
        return np.array([_int_to_f32_directed(int(v), mode) for v in x.reshape(-1)],
                        np.float32).reshape(x.shape)
    if fty == "f16":
        return f32_to_f16_bits(x.astype(np.float64).astype(np.float32)) if mode == "rn" else None
    raise ValueError(fty)


def _int_to_f32_directed(v: int, mode: str) -> np.float32:
    from fractions import Fraction
    return round_fraction_f32(Fraction(v), mode)


def _int_to_f64_directed(v: int, mode: str) -> float:
    f = float(v)
    if int(f) == v:
        return f
    import math
    lo = f if int(f) < v else math.nextafter(f, -math.inf)
    hi = f if int(f) > v else math.nextafter(f, math.inf)
    if mode == "rm":
        return lo
    if mode == "rp":
        return hi
    return lo if v > 0 else hi   # rz


def round_fraction_f32(q, mode: str) -> np.float32:
    """Exact rational -> f32 with a rounding mode (reference for tests and rare paths)."""
    from fractions import Fraction
    if q == 0:
        return np.float32(0.0)
    neg = q < 0
    a = -q if neg else q
    # find exponent: 2^k <= a < 2^(k+1)
    k = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** k > a:
        k -= 1
    k = max(k, -126)
    ulp = Fraction(2) ** (k - 23)
    m = a / ulp
    fl = m.numerator // m.denominator
    rem = m - fl
    if mode == "rn":
        up = rem > Fraction(1, 2) or (rem == Fraction(1, 2) and fl % 2 == 1)
    elif mode == "rz":
        up = False
    elif mode == "rp":
        up = rem > 0 and not neg
    elif mode == "rm":
        up = rem > 0 and neg
    else:
        raise ValueError(mode)
    mag = (fl + (1 if up else 0)) * ulp
    if mag >= Fraction(2) ** 128 or (mag > Fraction((2 ** 24 - 1) * 2 ** 104)):
        if mode == "rn" or (mode == "rp" and not neg) or (mode == "rm" and neg):
            val = np.float32(np.inf)
        else:
            val = np.float32(3.4028234663852886e38)
    else:
        val = np.float32(float(mag))
    return np.float32(-val) if neg else val


# ----------------------------------------------------------------------------------- approximations

# ISA bounds used by perturb(): (kind, amount); "ulp": +-amount ulps, "rel": relative error 2^-amount,
# "abs": absolute error 2^-amount.
APPROX_BOUNDS = {"ex2": ("ulp", 2), "rsqrt": ("rel", 22.9), "rcp": ("ulp", 1), "sqrt": ("rel", 23),
                 "lg2": ("abs", 22), "sin": ("abs", 20.5), "cos": ("abs", 20.5), "tanh": ("rel", 11)}


def approx_f32(fn: str, x, ftz: bool):
    """Correctly rounded (from f64) value of an approximate f32 instruction."""
    x = np.asarray(x, np.float32)
    if ftz:
        x = ftz32(x)
    x64 = x.astype(np.float64)
    with np.errstate(all="ignore"):
        if fn == "ex2":
            y = np.exp2(x64)
        elif fn == "rsqrt":
            y = 1.0 / np.sqrt(x64)
        elif fn == "rcp":
            y = 1.0 / x64
        elif fn == "sqrt":
            y = np.sqrt(x64)
        elif fn == "lg2":
            y = np.log2(x64)
        elif fn == "sin":
            y = np.sin(x64)
        elif fn == "cos":
            y = np.cos(x64)
        elif fn == "tanh":
            y = np.tanh(x64)
        else:
            raise KeyError(fn)
        out = y.astype(np.float32)
    if ftz:
        out = ftz32(out)
    return canon_nan32(out)


def perturb(fn: str, y, rng, ftz: bool):
    """Move approximate results within the ISA's error bound (finite, non-zero results only)."""
    y = np.asarray(y, np.float32)
    kind, amt = APPROX_BOUNDS[fn]
    fin = np.isfinite(y) & (y != 0)
    if kind == "ulp":
        steps = rng.integers(-amt, amt + 1, size=y.shape)
        u = y.view(np.int32).astype(np.int64)
        moved = (u + np.where(y < 0, -steps, steps)).astype(np.int32).view(np.float32)
        same_sign = np.signbit(moved) == np.signbit(y)
        out = np.where(fin & same_sign & np.isfinite(moved), moved, y)
    else:
        # keep room for the correctly rounded start (1/2 ulp) and the final rounding (1/2 ulp)
        bound = 2.0 ** -amt - (2.0 ** -23 if kind == "rel" else 0.0)
        if kind == "rel":
            f = 1.0 + rng.uniform(-bound, bound, size=y.shape) * 0.999
            out = np.where(fin, (y.astype(np.float64) * f).astype(np.float32), y)
        else:
            d = rng.uniform(-bound, bound, size=y.shape) * 0.999
            out = np.where(fin, (y.astype(np.float64) + d).astype(np.float32), y)
    out = out.astype(np.float32)
    return ftz32(out) if ftz else out


# ------------------------------------------------------------------------------------------ integers

def shift(x, amount, kind: str, bits: int):
    """shl / shr.u / shr.s with PTX clamping: amounts >= width give 0 (or the sign fill for shr.s)."""
    x = np.asarray(x)
    amt = np.asarray(amount).astype(np.uint64)
    big = amt >= bits
    a = np.where(big, 0, amt).astype(x.dtype if x.dtype.kind == "u" else np.dtype(f"u{x.dtype.itemsize}"))
    a = a.astype(x.dtype)
    if kind == "shl":
        return np.where(big, x.dtype.type(0), np.left_shift(x, a)).astype(x.dtype)
    if kind == "shr":
        r = np.right_shift(x, a)
        if x.dtype.kind == "i":
            fill = np.where(x < 0, x.dtype.type(-1), x.dtype.type(0))
            return np.where(big, fill, r).astype(x.dtype)
        return np.where(big, x.dtype.type(0), r).astype(x.dtype)
    raise ValueError(kind)


def int_div(a, b, signed: bool):
    """div.s/u: truncating division; division by zero gives all ones (unspecified in the ISA); the
    s32/s64 overflow case (MIN / -1) wraps to MIN."""
    a, b = np.asarray(a), np.asarray(b)
    dt = a.dtype
    with np.errstate(all="ignore"):
        zero = b == 0
        bb = np.where(zero, dt.type(1), b)
        if signed:
            ovf = (bb == dt.type(-1))
            q = np.where(ovf, (0 - a.astype(dt)).astype(dt), np.zeros_like(a))
            bs = np.where(ovf, dt.type(1), bb)
            qa = np.floor_divide(a, bs)
            fix = (qa < 0) & (qa * bs != a)
            qn = (qa + fix.astype(dt)).astype(dt)
            q = np.where(ovf, q, qn)
        else:
            q = np.floor_divide(a, bb)
    return np.where(zero, dt.type(-1) if signed else np.iinfo(dt).max, q).astype(dt)


def int_rem(a, b, signed: bool):
    """rem.s/u: remainder with the sign of the dividend; x rem 0 -> x (unspecified in the ISA)."""
    a, b = np.asarray(a), np.asarray(b)
    dt = a.dtype
    with np.errstate(all="ignore"):
        zero = b == 0
        bb = np.where(zero, dt.type(1), b)
        if signed:
            bb = np.where(bb == dt.type(-1), dt.type(1), bb)   # x rem -1 == 0, avoids MIN % -1
            r = np.fmod(a, bb)
        else:
            r = np.remainder(a, bb)
    return np.where(zero, a, r).astype(dt)


def mul_hi(a, b, ty: str):
    """mul.hi: upper half of the full product."""
    a, b = np.asarray(a), np.asarray(b)
    bits = int(ty[1:])
    if bits <= 32:
        wide = np.int64 if ty[0] == "s" else np.uint64
        return ((a.astype(wide) * b.astype(wide)) >> wide(bits)).astype(a.dtype)
    mask = (1 << 64) - 1
    out = []
    for x, y in zip(a.reshape(-1).tolist(), b.reshape(-1).tolist()):
        p = int(x) * int(y)
        out.append((p >> 64) & mask)
    res = np.array(out, dtype=np.uint64).reshape(a.shape)
    return res.view(a.dtype) if a.dtype != np.uint64 else res


def bfi(a, b, pos, length, bits=32):
    """bfi.b32/b64 d, a, b, c, d2: insert len bits of a into b at pos (pos, len taken mod 256)."""
    a, b = np.asarray(a), np.asarray(b)
    pos = np.asarray(pos).astype(np.int64) & 0xFF
    ln = np.asarray(length).astype(np.int64) & 0xFF
    dt = b.dtype
    hi = np.minimum(pos + ln, bits)
    width = np.clip(hi - pos, 0, bits)
    one = np.uint64(1)
    m = np.where(width >= 64, np.uint64(0xFFFFFFFFFFFFFFFF),
                 (one << np.minimum(width, 63).astype(np.uint64)) - one)
    ps = np.minimum(pos, bits - 1).astype(np.uint64)
    mask = np.where(pos >= bits, np.uint64(0), m << ps)
    mask = (mask & np.uint64((1 << bits) - 1)).astype(dt)
    ins = (a.astype(np.uint64) << ps).astype(dt) if True else None
    return ((b & ~mask) | (ins & mask)).astype(dt)


def prmt(a, b, c):
    """prmt.b32 default mode: select 4 bytes of {b, a} by the nibbles of c (bit 3: replicate sign)."""
    a, b, c = (np.asarray(v).astype(np.uint64) for v in (a, b, c))
    src = a | (b << np.uint64(32))
    out = np.zeros(np.broadcast(a, b, c).shape, np.uint64)
    for k in range(4):
        sel = (c >> np.uint64(4 * k)) & np.uint64(0xF)
        byte = (src >> ((sel & np.uint64(7)) * np.uint64(8))) & np.uint64(0xFF)
        sign = np.where((byte & np.uint64(0x80)) != 0, np.uint64(0xFF), np.uint64(0))
        byte = np.where((sel & np.uint64(8)) != 0, sign, byte)
        out |= byte << np.uint64(8 * k)
    return out.astype(np.uint32)


def compare(op: str, a, b, is_float: bool):
    """setp comparison: eq ne lt le gt ge (ordered for floats), lo ls hi hs (unsigned),
    equ neu ltu leu gtu geu (unordered: true when either is NaN), num, nan."""
    with np.errstate(invalid="ignore"):
        if op in ("num", "nan"):
            n = np.isnan(a) | np.isnan(b)
            return ~n if op == "num" else n
        base = op[:-1] if (is_float and op.endswith("u") and op not in ("lu",)) else op
        unordered = is_float and op.endswith("u") and len(op) == 3
        base = op[:2] if unordered else op
        base = {"lo": "lt", "ls": "le", "hi": "gt", "hs": "ge"}.get(base, base)
        r = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
             "ge": np.greater_equal}[base](a, b)
        if is_float:
            n = np.isnan(a) | np.isnan(b)
            r = (r | n) if unordered else (r & ~n)
        return np.asarray(r, bool)
