"""Symbolic dimensions (ints, or strings such as "batch" or "seq*2" from shape inference) as
sympy expressions, printed as C (over `args.v[k]`) or as the launch plan's reverse-Polish tokens."""
from __future__ import annotations

import functools
import re

import sympy

_NAME = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")
# functions ONNX Runtime's symbolic shape inference writes into dims (a Reshape's -1 over a sum:
# floor(64*batch*(past+seq)/(16*past+16*seq))): sympy's, not symbols
_FUNCTIONS = {"floor": sympy.floor, "ceiling": sympy.ceiling, "Min": sympy.Min, "Max": sympy.Max,
              "Mod": sympy.Mod}


class DimError(ValueError):
    pass


def parse(dim) -> sympy.Expr:
    if isinstance(dim, (int, sympy.Integer)):
        return sympy.Integer(int(dim))
    if isinstance(dim, sympy.Expr):
        return dim
    if dim is None:
        raise DimError("unknown dimension")
    return _parse_text(str(dim))


@functools.lru_cache(maxsize=4096)
def _parse_text(text: str) -> sympy.Expr:
    """A dimension string as sympy reads it, memoised: sympy expressions are immutable, and re-parsing the
    same few dimension strings was most of a warm rewrite's time."""
    names = {n: sympy.Symbol(n, integer=True, nonnegative=True) for n in _NAME.findall(text)
             if n not in _FUNCTIONS}
    try:
        expr = sympy.sympify(text, locals={**_FUNCTIONS, **names})
        if expr.has(sympy.floor, sympy.ceiling):      # the quotient cancels: floor(4*batch) is 4*batch
            expr = expr.replace(lambda x: isinstance(x, (sympy.floor, sympy.ceiling)),
                                lambda x: type(x)(sympy.cancel(x.args[0])))
        return expr
    except (sympy.SympifyError, TypeError, SyntaxError) as exc:
        raise DimError(f"cannot read dimension {text!r}: {exc}") from None


def shape(dims) -> list:
    if dims is None:
        raise DimError("unknown shape")
    return [parse(d) for d in dims]


def numel(dims) -> sympy.Expr:
    out = sympy.Integer(1)
    for d in dims:
        out *= d
    return out


class Symbols:
    """Numbers the symbols a kernel uses; symbol k lives in `args.v[k]` (the plan sets v[k] = s[k])."""

    def __init__(self):
        self.names: list[str] = []

    def index(self, sym) -> int:
        name = str(sym)
        if name not in self.names:
            self.names.append(name)
        return self.names.index(name)

    # ---- C ------------------------------------------------------------------------------------
    def c(self, expr) -> str:
        expr = parse(expr)
        num, den = expr.as_numer_denom()
        if den != 1:
            return f"({self.c(num)} / {self.c(den)})"
        if expr.is_Integer:
            return f"{int(expr)}LL"
        if expr.is_Symbol:
            return f"args.v[{self.index(expr)}]"
        if expr.is_Add:
            return "(" + " + ".join(self.c(a) for a in expr.args) + ")"
        if expr.is_Mul:
            return "(" + " * ".join(self.c(a) for a in expr.args) + ")"
        if expr.is_Pow and expr.exp.is_Integer and int(expr.exp) > 0:
            return "(" + " * ".join([self.c(expr.base)] * int(expr.exp)) + ")"
        if isinstance(expr, sympy.floor) and expr.args[0].is_Mul:
            num, den = expr.args[0].as_numer_denom()
            return f"({self.c(num)} / {self.c(den)})"
        if isinstance(expr, (sympy.Max, sympy.Min)):     # a run-time broadcast's size (codegen/assumed.py)
            op = ">" if isinstance(expr, sympy.Max) else "<"
            out = self.c(expr.args[0])
            for a in expr.args[1:]:
                b = self.c(a)
                out = f"({out} {op} {b} ? {out} : {b})"
            return out
        raise DimError(f"dimension expression {expr} has no integer C form")

    # ---- plan RPN ------------------------------------------------------------------------------
    def rpn(self, expr) -> str:
        return ",".join(self._rpn(parse(expr)))

    def _rpn(self, expr) -> list:
        num, den = expr.as_numer_denom()
        if den != 1:
            return self._rpn(num) + self._rpn(den) + ["/"]
        if expr.is_Integer:
            return [str(int(expr))]
        if expr.is_Symbol:
            return [f"s{self.index(expr)}"]
        if expr.is_Add or expr.is_Mul:
            op = "+" if expr.is_Add else "*"
            args = list(expr.args)
            out = self._rpn(args[0])
            for a in args[1:]:
                if expr.is_Add and a.could_extract_minus_sign():
                    out += self._rpn(-a) + ["-"]
                else:
                    out += self._rpn(a) + [op]
            return out
        if expr.is_Pow and expr.exp.is_Integer and int(expr.exp) > 0:
            out = self._rpn(expr.base)
            for _ in range(int(expr.exp) - 1):
                out += self._rpn(expr.base) + ["*"]
            return out
        if isinstance(expr, (sympy.floor, sympy.ceiling)):
            num, den = expr.args[0].as_numer_denom()
            return self._rpn(num) + self._rpn(den) + ["/" if isinstance(expr, sympy.floor) else "cdiv"]
        if isinstance(expr, (sympy.Max, sympy.Min)):
            op = "max" if isinstance(expr, sympy.Max) else "min"
            out = self._rpn(expr.args[0])
            for a in expr.args[1:]:
                out += self._rpn(a) + [op]
            return out
        raise DimError(f"dimension expression {expr} has no integer plan form")
