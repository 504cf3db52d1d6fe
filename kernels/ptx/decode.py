"""Decoding: each statement becomes an `Op` once, when the module is parsed.

An Op holds the statement's form, class and a *factory*: `factory(machine) -> run(mask)`, which binds
the operands to the machine's register views (typed numpy views made once per launch shape), so the
hot loop calls one closure per issued instruction. Opcode families register handlers with `@handler`;
a handler validates every modifier and raises PtxError naming the form and the PTX line for anything it
does not implement.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import PtxError
from .parse import Stmt

HANDLERS: dict = {}

# instruction classes for the counters
CLASSES = ("int", "fp32", "fp64", "half", "conversion", "mufu", "logic", "move", "predicate", "control",
           "barrier", "ld.global", "st.global", "ld.shared", "st.shared", "ld.param", "cp.async",
           "ldmatrix", "mma", "wgmma", "shfl", "fence", "cluster", "other")


@dataclass
class Op:
    line: int
    form: str
    kind: str                      # "op", "bra", "ret", "bar", "barwarp"
    cls: str                       # counter class
    factory: object = None         # machine -> run(mask)
    guard: tuple | None = None
    target: str | None = None      # branch label
    uni: bool = False
    text: str = ""
    meta: dict | None = None


def handler(*names):
    def deco(fn):
        for n in names:
            HANDLERS[n] = fn
        return fn
    return deco


def unsupported(stmt: Stmt, why: str = "") -> PtxError:
    return PtxError(f"unsupported PTX form {stmt.opcode!r}" + (f": {why}" if why else ""),
                    form=stmt.opcode, line=stmt.line)


def decode(stmt: Stmt) -> Op:
    base = stmt.opcode.split(".")[0]
    h = HANDLERS.get(base)
    if h is None:
        raise unsupported(stmt, "unknown opcode")
    op = h(stmt)
    op.guard = stmt.guard
    op.line = stmt.line
    op.form = stmt.opcode
    op.text = stmt.text
    return op


def form_supported(stmt: Stmt) -> str | None:
    """None when the statement decodes; else the reason."""
    try:
        decode(stmt)
        return None
    except PtxError as e:
        return str(e)


class Mods:
    """Modifier bag of an opcode: pops known modifiers, then `done()` fails on leftovers."""

    def __init__(self, stmt: Stmt):
        self.stmt = stmt
        self.parts = stmt.opcode.split(".")[1:]

    def take(self, *options, default=None):
        for o in options:
            if o in self.parts:
                self.parts.remove(o)
                return o
        return default

    def flag(self, name) -> bool:
        return self.take(name) is not None

    def type(self, allowed=None):
        """The last modifier as the instruction type."""
        if not self.parts:
            raise unsupported(self.stmt, "missing type")
        t = self.parts.pop()
        if allowed is not None and t not in allowed:
            raise unsupported(self.stmt, f"type .{t}")
        return t

    def done(self):
        if self.parts:
            raise unsupported(self.stmt, "modifier(s) " + ", ".join("." + p for p in self.parts))
