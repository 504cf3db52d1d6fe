"""Symbolic dims of the +Loop world: an int, or a string product of ints and symbols ("batch*seq",
"4*seq"); one set of helpers for lowering, the +Graph builder, the loop tree and the interpreter.
(The codegen's dims are sympy expressions: kernels/codegen/symdim.py.)"""
from __future__ import annotations

import re

import numpy as np

Dim = int | str
_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def factor(d, strict: bool = False):
    """(int coefficient, sorted symbol tuple) of a dim. ``strict``: None when a factor is neither an
    int nor a plain symbol ("seq+1"); otherwise such a factor counts as one opaque symbol."""
    if isinstance(d, (int, np.integer)):
        return int(d), ()
    coef, syms = 1, []
    for part in str(d).replace(" ", "").split("*"):
        if part.isdigit():
            coef *= int(part)
        elif strict and not _SYMBOL.fullmatch(part):
            return None
        else:
            syms.append(part)
    return coef, tuple(sorted(syms))


def factor_mul(a, b):
    """Product of two factored dims."""
    return a[0] * b[0], tuple(sorted(a[1] + b[1]))


def product(dims):
    """The factored product of several dims (equal products compare equal)."""
    out = (1, ())
    for d in dims:
        out = factor_mul(out, factor(d))
    return out


def mul(a: Dim, b: Dim) -> Dim:
    """The dim a*b, kept as ints when both are, without unit factors."""
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    if a == 1:
        return b
    if b == 1:
        return a
    return f"{a}*{b}"


def same(a: Dim, b: Dim) -> bool:
    return a == b or str(a) == str(b)
