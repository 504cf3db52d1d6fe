"""C expressions of ONNX element-wise operators (compute types: float, long long, bool), built from
the one op vocabulary (``graph_rewrites/ops.py``: each op's ``c`` spec). Each entry takes the node,
the argument expressions and their compute types and returns (expression, compute type). Composite
activations (erf/tanh GELU, SiLU, ...) reach the table as their primitives (Erf, Tanh, Sigmoid,
Mul...), so the generated code reads like the exported graph.
"""
from __future__ import annotations

import math

from onnx import TensorProto

from ...graph_rewrites import ops

F, I, B = "float", "long long", "bool"


attr = ops.attr         # the one attribute reader (graph_rewrites/ops.py)


def lit(x: float) -> str:
    if math.isnan(x):
        return "CUDART_NAN_F"
    if math.isinf(x):
        return "CUDART_INF_F" if x > 0 else "(-CUDART_INF_F)"
    r = repr(float(x))
    return (r if ("e" in r or "." in r) else r + ".0") + "f"


def _f(a, t):  # as float
    return a if t == F else f"((float)({a}))"


def _unary_f(fmt):
    return lambda node, a, t: (fmt.format(x=_f(a[0], t[0])), F)


def _binary(op, cmp=False):
    def emit(node, a, t):
        ct = F if F in t else (I if I in t else B)
        xs = [a[i] if t[i] == ct else f"(({ct})({a[i]}))" for i in range(2)]
        return f"({xs[0]} {op} {xs[1]})", (B if cmp else ct)
    return emit


def _pow(node, a, t, exponent=None):
    x = _f(a[0], t[0])
    if exponent is not None:
        if exponent == 2.0:
            return f"({x} * {x})", F
        if exponent == 3.0:
            return f"({x} * {x} * {x})", F
        if exponent == 0.5:
            return f"sqrtf({x})", F
        if exponent == 1.0:
            return x, F
    return f"powf({x}, {_f(a[1], t[1])})", F


def _minmax(fn, op):
    """Max/Min: a NaN operand gives NaN (ONNX, onnxruntime), where CUDA fmaxf/fminf return the other one."""
    def emit(node, a, t):
        ct = F if F in t else I
        out = a[0] if t[0] == ct else f"(({ct})({a[0]}))"
        for x, tx in zip(a[1:], t[1:]):
            x = x if tx == ct else f"(({ct})({x}))"
            out = (f"((isnan({out}) || isnan({x})) ? ({out}) + ({x}) : {fn}({out}, {x}))" if ct == F
                   else f"(({out}) {op} ({x}) ? ({out}) : ({x}))")
        return out, ct
    return emit


def _where(node, a, t):
    ct = F if F in t[1:] else (I if I in t[1:] else B)
    x, y = [a[i] if t[i] == ct else f"(({ct})({a[i]}))" for i in (1, 2)]
    return f"({a[0]} ? {x} : {y})", ct


def _clip(node, a, t):
    x = _f(a[0], t[0])
    lo = a[1] if len(a) > 1 and a[1] else (lit(attr(node, "min")) if attr(node, "min") is not None else None)
    hi = a[2] if len(a) > 2 and a[2] else (lit(attr(node, "max")) if attr(node, "max") is not None else None)
    # onnxruntime's order of comparisons: a NaN x stays NaN, a NaN bound clamps nothing (fmaxf/fminf
    # would turn a NaN x into the bound)
    if lo:
        x = f"(({x}) < ({lo}) ? ({lo}) : ({x}))"
    if hi:
        x = f"(({x}) > ({hi}) ? ({hi}) : ({x}))"
    return x, F


def _gelu(node, a, t):
    x = _f(a[0], t[0])
    if attr(node, "approximate", b"none") in (b"tanh", "tanh"):
        return f"(0.5f * {x} * (1.0f + tanhf(0.7978845608028654f * ({x} + 0.044715f * {x} * {x} * {x}))))", F
    return f"(0.5f * {x} * (1.0f + erff({x} * 0.7071067811865476f)))", F


def _leaky(node, a, t):
    x, al = _f(a[0], t[0]), lit(attr(node, "alpha", 0.01))
    return f"({x} >= 0.0f ? {x} : {al} * {x})", F


def _elu(node, a, t):
    x, al = _f(a[0], t[0]), lit(attr(node, "alpha", 1.0))
    return f"({x} >= 0.0f ? {x} : {al} * (expf({x}) - 1.0f))", F


def _hsig(node, a, t):
    x, al, be = _f(a[0], t[0]), lit(attr(node, "alpha", 0.2)), lit(attr(node, "beta", 0.5))
    y = f"({al} * {x} + {be})"
    return f"({y} < 0.0f ? 0.0f : ({y} > 1.0f ? 1.0f : {y}))", F      # NaN stays NaN, as in onnxruntime


def _not(node, a, t):
    return f"(!({a[0]}))", B


def _neg(node, a, t):
    return f"(-({a[0]}))", t[0]


def _identity(node, a, t):
    return a[0], t[0]


def _mod(node, a, t):
    if attr(node, "fmod", 0) or F in t:
        return f"fmodf({_f(a[0], t[0])}, {_f(a[1], t[1])})", F
    x, y = a
    return f"((({x}) % ({y}) + ({y})) % ({y}))", I


def _isinf(node, a, t):
    x = _f(a[0], t[0])
    pos, neg = attr(node, "detect_positive", 1), attr(node, "detect_negative", 1)
    if pos and neg:
        return f"isinf({x})", B
    return (f"({x} == CUDART_INF_F)" if pos else f"({x} == -CUDART_INF_F)"), B


def _selu(node, a, t):
    x = _f(a[0], t[0])
    al = lit(attr(node, "alpha", 1.67326319217681884765625))
    ga = lit(attr(node, "gamma", 1.05070102214813232421875))
    return f"({x} > 0.0f ? {ga} * {x} : {ga} * ({al} * expf({x}) - {al}))", F


def _hswish(node, a, t):
    x = _f(a[0], t[0])
    return f"({x} * fmaxf(0.0f, fminf(1.0f, {x} * (1.0f / 6.0f) + 0.5f)))", F


def _bitwise(op):
    def emit(node, a, t):
        if any(ti != I for ti in t):
            raise ValueError(f"{node.op_type} on non-integer operands")
        return (f"(~({a[0]}))" if op == "~" else f"(({a[0]}) {op} ({a[1]}))"), I
    return emit


def _prelu(node, a, t):
    x, slope = _f(a[0], t[0]), _f(a[1], t[1])
    return f"({x} < 0.0f ? {slope} * {x} : {x})", F


def _variadic_sum(mean):
    def emit(node, a, t):
        terms = [_f(x, tx) for x, tx in zip(a, t) if x]
        total = " + ".join(terms)
        return (f"(({total}) / {lit(float(len(terms)))})" if mean else f"({total})"), F
    return emit


def _quantize(node, a, t, qtype=None):
    """saturate(round_half_even(x / scale) + zero_point) as a value of `qtype` (its compute type): integers
    clamp to the type's range (NaN to the lower bound, as onnxruntime and onnx.reference); float8 rounds to
    nearest even with the node's saturate rule (plus_common.cuh) and has no zero point (ops.quant_reason)."""
    if qtype is None:
        raise ValueError("QuantizeLinear needs its output element type (kernels.pull passes it)")
    x = f"({_f(a[0], t[0])} / {_f(a[1], t[1])})"
    if qtype in ops.FLOAT8:
        fn = "plus_e4m3_round" if qtype == TensorProto.FLOAT8E4M3FN else "plus_e5m2_round"
        sat = "true" if attr(node, "saturate", 1) else "false"
        return f"{fn}({x}, {sat})", F
    lo, hi = ops.INT_RANGES[qtype]
    v = f"(rintf({x}) + {_f(a[2], t[2])})" if len(a) > 2 and a[2] else f"rintf({x})"
    return f"plus_saturate({v}, {lit(float(lo))}, {lit(float(hi))})", I


def _dequantize(node, a, t, qtype=None):
    """(x - zero_point) * scale: integer x subtracts in integers (int32 included), float8 x has no zero point."""
    s = _f(a[1], t[1])
    if len(a) > 2 and a[2] and t[0] == I:
        return f"((float)(({a[0]}) - ({a[2]})) * {s})", F
    if len(a) > 2 and a[2]:
        return f"(({_f(a[0], t[0])} - {_f(a[2], t[2])}) * {s})", F
    return f"({_f(a[0], t[0])} * {s})", F


_CUSTOM = {
    "Pow": _pow, "Max": _minmax("fmaxf", ">"), "Min": _minmax("fminf", "<"), "Where": _where,
    "Mod": _mod, "Clip": _clip, "Not": _not, "Neg": _neg, "Gelu": _gelu, "LeakyRelu": _leaky,
    "Elu": _elu, "Selu": _selu, "HardSigmoid": _hsig, "HardSwish": _hswish, "IsInf": _isinf,
    "IsNaN": lambda n, a, t: (f"isnan({_f(a[0], t[0])})", B),
    "BitwiseNot": _bitwise("~"), "BitwiseAnd": _bitwise("&"), "BitwiseOr": _bitwise("|"),
    "PRelu": _prelu, "Sum": _variadic_sum(False), "Mean": _variadic_sum(True),
    "QuantizeLinear": _quantize, "DequantizeLinear": _dequantize,
}


def _from_spec(spec: str):
    kind, _, arg = spec.partition(":")
    if spec.startswith("@"):
        return _CUSTOM[spec[1:]]
    if kind == "f":
        return _unary_f(arg)
    if kind in ("bin", "cmp"):
        return _binary(arg, cmp=kind == "cmp")
    raise ValueError(f"unknown C spec {spec!r}")


TABLE = {name: _from_spec(op.c) for name, op in ops.OPS.items() if op.c is not None}
TABLE.update({name: _identity for name in ops.with_role("alias")})   # pulled as a value: the input


def emit(node, args: list, types: list, const_exponent=None, qtype=None):
    """C expression and compute type of element-wise `node` applied to `args` (`qtype`: the quantized element
    type of a QuantizeLinear/DequantizeLinear node)."""
    if node.op_type == "Pow":
        return _pow(node, args, types, const_exponent)
    if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
        return _CUSTOM[node.op_type](node, args, types, qtype)
    return TABLE[node.op_type](node, args, types)


def supported(op_type: str) -> bool:
    return op_type in TABLE
