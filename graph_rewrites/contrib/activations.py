"""Element-wise contrib ops: BiasGelu, Gelu, FastGelu, QuickGelu, BiasAdd.

Written as the element-wise chains torch exports (or the opset-20 Gelu node where the opset has it), so a
GEMM before them takes them as its epilogue: x·W + bias + GELU is the `gemm` pattern either way."""
from __future__ import annotations

import math

from .emit import Emitter, attr, inp, out

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)    # 0.7978845608028654
FAST_GELU_CUBIC = 0.044715


def gelu_erf(e: Emitter, x, y=None):
    """0.5 · x · (1 + erf(x / √2))."""
    dt = e.need_float(x)
    if e.opset >= 20:
        return e.op("Gelu", x, out=y)
    half = e.op("Mul", x, e.scalar(0.5, dt))
    erf = e.op("Erf", e.op("Mul", x, e.scalar(1.0 / math.sqrt(2.0), dt)))
    return e.op("Mul", half, e.op("Add", erf, e.scalar(1.0, dt)), out=y)


def gelu_tanh(e: Emitter, x, y=None):
    """0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 · x³)))."""
    dt = e.need_float(x)
    if e.opset >= 20:
        return e.op("Gelu", x, out=y, approximate="tanh")
    x2 = e.op("Mul", x, x)
    inner = e.op("Mul", x, e.op("Add", e.op("Mul", x2, e.scalar(SQRT_2_OVER_PI * FAST_GELU_CUBIC, dt)),
                                e.scalar(SQRT_2_OVER_PI, dt)))
    half = e.op("Mul", x, e.scalar(0.5, dt))
    return e.op("Mul", half, e.op("Add", e.op("Tanh", inner), e.scalar(1.0, dt)), out=y)


def bias_gelu(e: Emitter):
    """BiasGelu(A, B) = GELU_erf(A + B)."""
    n = e.node
    gelu_erf(e, e.op("Add", inp(n, 0), inp(n, 1)), y=out(n, 0))


def gelu(e: Emitter):
    """com.microsoft Gelu(X) = GELU_erf(X)."""
    gelu_erf(e, inp(e.node, 0), y=out(e.node, 0))


def fast_gelu(e: Emitter):
    """FastGelu(X, bias) = GELU_tanh(X + bias)."""
    n = e.node
    x = inp(n, 0)
    if inp(n, 1):
        x = e.op("Add", x, inp(n, 1))
    gelu_tanh(e, x, y=out(n, 0))


def quick_gelu(e: Emitter):
    """QuickGelu(X) = X · sigmoid(alpha · X), alpha 1.702 by default."""
    n = e.node
    x = inp(n, 0)
    dt = e.need_float(x)
    alpha = float(attr(n, "alpha", 1.702))
    scaled = x if alpha == 1.0 else e.op("Mul", x, e.scalar(alpha, dt))
    e.op("Mul", x, e.op("Sigmoid", scaled), out=out(n, 0))


def bias_add(e: Emitter):
    """BiasAdd(X, bias, skip) = X + bias + skip."""
    n = e.node
    e.need_float(inp(n, 0))
    e.op("Add", e.op("Add", inp(n, 0), inp(n, 1)), inp(n, 2), out=out(n, 0))
