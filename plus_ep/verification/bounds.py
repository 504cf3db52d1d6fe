"""Per-element error bounds: how far a correct kernel's output may be from the exact result.

`plus-ep verify` compares each fused node's outputs, element by element, with its function body
evaluated in float64 on the very inputs the kernel got, and allows each element its own bound,
derived from what a correct kernel does to reach it: the length of every reduction on its path, the
math (exact fp32, TF32 operands, f16 / bf16 storage; fp32 accumulation in every case) and the
magnitudes involved (a GEMM's sum of |a||b|, the conditioning of softmax and of LayerNorm on nearly
constant rows). A kernel that adds an error of 1e-3 of the output's scale fails where correct kernels
stay far below their bounds.

    from plus_ep.verification.bounds import evaluate, compare, matmul, softmax, layernorm, Bounded
    res = evaluate(function_proto, [x, w, b], math="tf32")   # float64 value and bound of every output
    c = compare(kernel_out, res.outputs[0])                   # worst element against its own bound
    c["ok"], c["ratio"], c["worst"]                           # ratio = |kernel - exact| / bound there
    a = Bounded.exact(x); y = matmul(a, Bounded.exact(w), math="tf32")   # one op, for template tests

The error model (Higham's forward analysis with probabilistic rounding, "Rounding errors of
inner products", Higham & Mary 2019, for the reductions):

* every value carries a float64 value `v` and a bound `e` of |computed - exact|, and the storage type
  of the tensor in the body (float32 / float16 / bfloat16) with its unit roundoff u (2^-24, 2^-11, 2^-8);
* an inner product of length K (MatMul, Gemm) adds LAMBDA * sqrt(K) * u32 * sum|a||b| for the fp32
  accumulation, plus LAMBDA * u_tf32 * sqrt(2/3 * sum (a b)^2) for TF32 operand rounding (2^-11 each),
  plus the propagated input bounds |A| e_B + e_A |B| + e_A e_B;
* reductions (ReduceSum/Mean) add LAMBDA * sqrt(n) * u32 * sum|x|; softmax adds the input bound
  through its condition p_i (e_i + sum_j p_j e_j) and exp's rounding, with the exponent's own rounding
  u32 (|x_i| + max|x|); LayerNormalization propagates through |g| / sigma and adds the cancellation of
  x - mean (u32 (|x| + |mean|) + sqrt(n) u32 mean|x|), which is large on nearly constant rows;
* element-wise ops propagate bounds by evaluating the op at the corners of the input intervals, and add
  C_EXACT (+, -, *, /, sqrt, max ...) or C_TRANSCENDENTAL (exp, erf, tanh ...) units of fp32 rounding;
* data movement (Reshape, Transpose, Gather, Slice, Concat, Where ...) moves bounds with the data;
* every op's result is rounded to its storage type: + u(type) |v|, and may underflow: + eta (_ETA).

This module is the one owner of these formulas, of the unit roundoffs (`unit`, U32, U_TF32) and of the bounds
the test suite checks kernels with: node-level checks take `matmul`, `layernorm`, `evaluate` and `compare`
(without MARGIN where a test says so); whole-model runs take the measured bounds at the end of this module
(`sensitivity`, `element_bound`, `assert_within`: the model re-run by ONNX Runtime CPU with every weight
perturbed by one rounding, 10x that spread per element), which `plus-ep verify` does not use.

A body op outside these rules raises Unsupported; verify then falls back to the flat tolerance of the
math mode (plus_ep/verification/tolerances.py) and says so. The model here assumes kernels accumulate in fp32 and do
fp32 arithmetic on f16/bf16 data, as PlusEP's templates do.
"""
from __future__ import annotations

import math as _math
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Bounded", "Evaluation", "Unsupported", "compare", "evaluate", "layernorm", "matmul",
           "softmax", "unit", "C_TRANSCENDENTAL", "LAMBDA", "MATHS", "U32", "U_TF32", "UNIT", "FACTOR",
           "POISON_BYTE", "unwritten", "sensitivity", "element_bound", "assert_within", "upcast_fp16"]

MATHS = ("exact", "tf32", "fp16", "bf16")
U32 = 2.0 ** -24
U_TF32 = 2.0 ** -11
LAMBDA = 6.0                 # probabilistic bounds: deviations of up to LAMBDA sigma are allowed
C_EXACT = 1.0                # correctly rounded op: one unit of fp32
C_TRANSCENDENTAL = 8.0       # exp/erf/tanh... in fp32 (fast intrinsics: a few ulp)
# what compare() allows: MARGIN times the derived bound. The derived bound is reached by correct kernels
# only where one rounding dominates (an f16 output just above a power of two: its half ulp is u |v|);
# the margin keeps such elements near 0.5 of what is allowed, far from a verdict on the edge.
MARGIN = 2.0
_UNITS = {"float64": 2.0 ** -53, "float32": U32, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8,
          "quant": 0.0}      # a QuantizeLinear / MatMulInteger result: integers or float8 values, no rounding of its own
# smallest positive normal per storage type: below it, flush-to-zero and subnormal rounding
_TINY = {"float64": 2.2e-308, "float32": 1.18e-38, "float16": 6.1e-5, "bfloat16": 1.18e-38, "quant": 0.0}
# underflow of one op (the standard model fl(x op y) = (x op y)(1 + d) + eta): the fp32 arithmetic's eta, taken
# as the smallest normal (a result below it may be flushed, or lost when an intermediate such as exp(-x) in a
# sigmoid overflows), plus half the spacing of the storage type's subnormals where it is narrower than fp32
_ETA = {"float64": 1.18e-38, "float32": 1.18e-38, "float16": 1.18e-38 + 2.0 ** -25, "bfloat16": 1.18e-38,
        "quant": 0.0}
_ONNX_FLOAT = {1: "float32", 10: "float16", 16: "bfloat16", 11: "float64"}
# largest finite value per storage type: an exact result beyond it is infinite in that type
_MAX = {"float32": 3.4028234663852886e38, "float16": 65504.0, "bfloat16": 3.3895313892515355e38}


class Unsupported(ValueError):
    """The body has an op without an error model here."""


def unit(dtype) -> float:
    """Unit roundoff of a storage type (a numpy dtype, an ONNX elem type, or a name); 0 for non-floats."""
    name = _dtype_name(dtype)
    return _UNITS.get(name, 0.0)


def _dtype_name(dtype) -> str:
    if isinstance(dtype, int):
        return _ONNX_FLOAT.get(dtype, "int")
    name = str(np.dtype(dtype)) if not isinstance(dtype, str) else dtype
    return name if name in _UNITS else ("bfloat16" if "bfloat16" in name else name)


@dataclass
class Bounded:
    """A float64 value, a bound of its computed version's error, and the tensor's storage type."""
    v: np.ndarray
    e: np.ndarray
    dtype: str = "float32"

    @classmethod
    def exact(cls, x, dtype=None) -> Bounded:
        """An input given exactly (the kernel read these very numbers)."""
        x = np.asarray(x)
        name = _dtype_name(dtype if dtype is not None else x.dtype)
        if name not in _UNITS:
            return cls(x, np.zeros(x.shape), name)
        return cls(x.astype(np.float64), np.zeros(x.shape), name)

    @property
    def is_float(self) -> bool:
        return self.dtype in _UNITS

    def rounded(self, c_ops: float = 0.0) -> Bounded:
        """This value rounded to its storage type after an op costing c_ops units of fp32 rounding, plus the
        op's underflow (_ETA): absolute, so it matters only for results near the bottom of the range."""
        if not self.is_float:
            return self
        e = self.e + (c_ops * U32 + unit(self.dtype)) * np.abs(self.v) + _ETA[self.dtype]
        return _overflowed(Bounded(self.v, e, self.dtype), c_ops)


def _overflowed(b: Bounded, c_ops: float = 0.0) -> Bounded:
    """`b` with exact values beyond the storage type's range made what that type holds: a value past the
    largest finite one by more than its rounding is infinite there (exp(100) is +inf in float32), and one
    within that rounding of it may be either (its bound becomes infinite: not checked)."""
    top = _MAX.get(b.dtype)
    if top is None:
        return b
    with np.errstate(invalid="ignore", over="ignore"):
        a = np.abs(b.v)
        slack = top * (c_ops + 1.0) * U32 + b.e
        over = np.isfinite(b.v) & (a - slack > top)
        edge = np.isfinite(b.v) & ~over & (a + slack > top)
    if not (over.any() or edge.any()):
        return b
    v = np.where(over, np.copysign(np.inf, b.v), b.v)
    e = np.where(over, 0.0, np.where(edge, np.inf, b.e))
    return Bounded(v, e, b.dtype)


@dataclass
class Evaluation:
    outputs: list
    values: dict = field(default_factory=dict)


def _finite_abs(x):
    with np.errstate(invalid="ignore"):
        return np.abs(np.where(np.isfinite(x), x, 0.0))


# --------------------------------------------------------------------------------- op rules
def matmul(a: Bounded, b: Bounded, math: str = "exact", out_dtype=None) -> Bounded:
    """C = A @ B with numpy broadcasting (MatMul semantics)."""
    v = a.v @ b.v
    k = a.v.shape[-1] if a.v.ndim else 1
    aa, ab = _finite_abs(a.v), _finite_abs(b.v)
    base = aa @ ab
    e = LAMBDA * _math.sqrt(max(k, 1)) * U32 * base
    if math == "tf32" and (a.dtype == "float32" or b.dtype == "float32"):
        e = e + LAMBDA * U_TF32 * np.sqrt(2.0 / 3.0 * ((aa * aa) @ (ab * ab)))
    if a.e.any() or b.e.any():
        e = e + aa @ b.e + a.e @ ab + a.e @ b.e
    return Bounded(v, e, _dtype_name(out_dtype) if out_dtype is not None else a.dtype).rounded()


def softmax(x: Bounded, axis: int = -1, log: bool = False) -> Bounded:
    m = np.max(np.where(np.isnan(x.v), -np.inf, x.v), axis=axis, keepdims=True)
    with np.errstate(invalid="ignore", over="ignore"):
        z = np.exp(x.v - m)
        s = z.sum(axis=axis, keepdims=True)
        p = z / s
    n = x.v.shape[axis] if x.v.ndim else 1
    ex = x.e + U32 * _finite_abs(x.v) + U32 * _finite_abs(m)          # exponent error: input + x - max rounding
    with np.errstate(invalid="ignore", over="ignore"):
        spread = ex + np.sum(np.where(p > 0, p * ex, 0.0), axis=axis, keepdims=True)
    if log:
        v = x.v - m - np.log(s)
        e = spread + (C_TRANSCENDENTAL + LAMBDA * _math.sqrt(n)) * U32 * (1.0 + _finite_abs(v))
        return Bounded(v, e, x.dtype).rounded()
    rel = np.expm1(np.minimum(spread, 50.0)) + (C_TRANSCENDENTAL + LAMBDA * _math.sqrt(n)) * U32
    e = p * rel
    return Bounded(p, e, x.dtype).rounded()


def layernorm(x: Bounded, g: Bounded, b: Bounded | None, axis: int = -1, epsilon: float = 1e-5,
              rms: bool = False) -> tuple:
    """LayerNormalization (or RMS norm with rms=True) over the axes from `axis` on; returns (y, mean, inv_std)."""
    axis = axis % x.v.ndim
    axes = tuple(range(axis, x.v.ndim))
    n = int(np.prod([x.v.shape[a] for a in axes]))
    mu = np.zeros_like(x.v.sum(axis=axes, keepdims=True)) if rms else x.v.mean(axis=axes, keepdims=True)
    d = x.v - mu
    var = (d * d).mean(axis=axes, keepdims=True)
    inv = 1.0 / np.sqrt(var + epsilon)
    xhat = d * inv
    ax = _finite_abs(x.v)
    mean_abs = ax.mean(axis=axes, keepdims=True)
    # error of x - mean: the input bound (and its mean), the subtraction's rounding, the mean's rounding
    ed = x.e + (0.0 if rms else x.e.mean(axis=axes, keepdims=True))
    ed = ed + C_EXACT * U32 * (ax + _finite_abs(mu)) + (0.0 if rms else LAMBDA * _math.sqrt(n) * U32 * mean_abs)
    # relative error of the standard deviation: from ed, the variance sum's and rsqrt's rounding
    sd_rel = (np.abs(xhat) * ed * inv).mean(axis=axes, keepdims=True) \
        + (LAMBDA * _math.sqrt(n) + C_TRANSCENDENTAL) * U32
    gg = _finite_abs(g.v)
    e_hat = ed * inv + np.abs(xhat) * sd_rel
    y = xhat * g.v
    e = gg * e_hat + np.abs(xhat) * g.e + e_hat * g.e + C_EXACT * U32 * np.abs(y)
    if b is not None:
        y = y + b.v
        e = e + b.e + C_EXACT * U32 * np.abs(y)
    out = Bounded(y, e, x.dtype).rounded()
    return out, Bounded(mu, ed.max(axis=axes, keepdims=True), "float32"), \
        Bounded(inv, inv * sd_rel, "float32")


# ---------------------------------------------------------------------------- op tables
_MOVES = {  # op -> indices of the inputs that carry data (the others are shapes, indices, axes)
    "Reshape": (0,), "Transpose": (0,), "Squeeze": (0,), "Unsqueeze": (0,), "Flatten": (0,),
    "Expand": (0,), "Slice": (0,), "Gather": (0,), "GatherElements": (0,), "GatherND": (0,),
    "Identity": (0,), "Tile": (0,), "Pad": (0, 2), "Where": (1, 2), "Split": (0,), "Concat": None,
    "DepthToSpace": (0,), "SpaceToDepth": (0,), "Dropout": (0,), "ReduceMax": (0,), "ReduceMin": (0,),
    "MaxPool": (0,), "Trilu": (0,), "ScatterND": (0, 2), "ScatterElements": (0, 2),
}
_EXACT_ELEMENTWISE = {"Add", "Sub", "Mul", "Div", "Neg", "Abs", "Relu", "Max", "Min", "Sqrt", "Reciprocal",
                      "Clip", "Sum", "Mean", "LeakyRelu", "PRelu", "Sign", "Floor", "Ceil", "Round",
                      "HardSigmoid", "HardSwish", "Mod"}
_TRANSCENDENTAL = {"Exp", "Log", "Erf", "Tanh", "Sigmoid", "Pow", "Gelu", "Softplus", "Softsign", "Sin", "Cos",
                   "Elu", "Selu", "Celu", "Mish", "Atan", "Asin", "Acos", "Sinh", "Cosh", "Tan",
                   "ThresholdedRelu", "FastGelu", "QuickGelu", "BiasGelu"}
_NO_ERROR = {"Shape", "Size", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And",
             "Or", "Xor", "IsNaN", "IsInf", "NonZero", "ArgMax", "ArgMin", "Range", "ConstantOfShape",
             "Constant", "EyeLike", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseNot", "BitwiseXor"}
_REDUCE_SUM = {"ReduceSum", "ReduceMean"}


def _run(node, arrays: list, opsets: dict) -> list:
    """Evaluate one ONNX node on numpy arrays (onnx.reference), outputs in node order."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator
    names = [f"i{k}" if nm else "" for k, nm in enumerate(node.input)]
    if node.op_type == "GatherElements" and node.domain in ("", "ai.onnx"):
        return [_gather_elements(arrays[0], arrays[1], int(_attr(node, "axis", 0)))]
    n = helper.make_node(node.op_type, names, [f"o{k}" for k in range(len(node.output))], domain=node.domain)
    n.attribute.extend(node.attribute)
    opset = [helper.make_opsetid(d, v) for d, v in opsets.items()]
    graph = helper.make_graph([n], "op", [helper.make_tensor_value_info(nm, 1, None) for nm in names if nm],
                              [helper.make_tensor_value_info(o, 1, None) for o in n.output])
    model = helper.make_model(graph, opset_imports=opset)
    feeds = {nm: a for nm, a in zip(names, arrays) if nm}
    return ReferenceEvaluator(model).run(None, feeds)


def _gather_elements(data, indices, axis: int):
    """ONNX GatherElements with numpy: onnx.reference (1.23) refuses a negative axis with an index narrower
    than the data along it, and gathers through np.choose, which takes at most 64 choices (DeBERTa's c2p/p2c
    gathers: axis -1 over 2 x position_buckets relative positions)."""
    data, indices = np.asarray(data), np.asarray(indices, np.int64)
    axis = axis % data.ndim
    indices = np.where(indices < 0, indices + data.shape[axis], indices)
    sub = tuple(slice(None) if d == axis else slice(0, indices.shape[d]) for d in range(data.ndim))
    return np.take_along_axis(data[sub], indices, axis=axis)


def _corners(node, ins: list, opsets: dict, v_out):
    """max over the corners of the float inputs' intervals of |f(corner) - f(v)|."""
    idx = [k for k, b in enumerate(ins) if b is not None and b.is_float and np.any(b.e)]
    if not idx:
        return 0.0
    total = np.zeros(np.shape(v_out))
    groups = [idx] if len(idx) <= 3 else [[k] for k in idx]      # 2^3 corners at most per evaluation
    for group in groups:                                          # independent groups: deviations add up
        worst = np.zeros(np.shape(v_out))
        for signs in range(1 << len(group)):
            arrays = [b.v if b is not None else None for b in ins]
            for bit, k in enumerate(group):
                arrays[k] = ins[k].v + (ins[k].e if signs >> bit & 1 else -ins[k].e)
            with np.errstate(all="ignore"):
                got = np.asarray(_run(node, arrays, opsets)[0], dtype=np.float64)
                d = np.abs(got - v_out)
            worst = np.maximum(worst, np.where(np.isnan(d) & ~np.isnan(v_out), np.inf, np.nan_to_num(d, nan=0.0)))
        total = total + worst
    return total


def _attr(node, name, default=None):
    from onnx import helper
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _apply(node, ins: list, math: str, opsets: dict) -> list:
    """Bounded outputs of one body node."""
    op = node.op_type
    if any(b is not None and b.dtype == "quant" for b in ins) and op in _EXACT_ELEMENTWISE:
        # an integer result held as float64 ("quant") meets other integers (MatMulInteger - za * colsum): all exact
        # float64 integers, the op evaluated on them
        ins = [b if b is None or b.is_float else Bounded(np.asarray(b.v, np.float64), b.e, "quant") for b in ins]
    vals = [b.v if b is not None else None for b in ins]
    float_in = [b for b in ins if b is not None and b.is_float]
    dtype0 = float_in[0].dtype if float_in else "int"
    if op == "Cast":
        to = _dtype_name(int(_attr(node, "to")))
        x = ins[0]
        if to in _UNITS:
            if x.is_float:
                return [Bounded(x.v, x.e, to).rounded()]
            return [Bounded.exact(x.v.astype(np.float64), to)]
        with np.errstate(invalid="ignore"):
            out = _run(node, [x.v], opsets)[0]
        if x.is_float and np.any(x.e) and np.asarray(out).dtype.kind in "iu":
            # an integer from an inexact float (a dynamic zero point rounded from min / scale): every integer
            # within the input's bound
            return [Bounded(np.asarray(out, np.float64), np.ceil(np.nan_to_num(x.e, nan=np.inf)), "quant")]
        return [Bounded.exact(out)]
    if op in ("Constant", "ConstantOfShape"):
        outs = _run(node, vals, opsets)
        return [Bounded.exact(o) for o in outs]
    if op == "MatMul":
        return [matmul(ins[0], ins[1], math)]
    if op == "Gemm":
        a, b = ins[0], ins[1]
        if _attr(node, "transA", 0):
            a = Bounded(np.swapaxes(a.v, -1, -2), np.swapaxes(a.e, -1, -2), a.dtype)
        if _attr(node, "transB", 0):
            b = Bounded(np.swapaxes(b.v, -1, -2), np.swapaxes(b.e, -1, -2), b.dtype)
        y = matmul(a, b, math)
        alpha, beta = float(_attr(node, "alpha", 1.0)), float(_attr(node, "beta", 1.0))
        v, e = alpha * y.v, abs(alpha) * y.e
        if len(ins) > 2 and ins[2] is not None:
            v = v + beta * ins[2].v
            e = e + abs(beta) * ins[2].e + C_EXACT * U32 * np.abs(v)
        return [Bounded(v, e, a.dtype).rounded()]
    if op in ("QuantizeLinear", "DequantizeLinear", "MatMulInteger") and node.domain in ("", "ai.onnx"):
        return [_quant(node, ins, opsets)]
    if op in ("Softmax", "LogSoftmax"):
        return [softmax(ins[0], int(_attr(node, "axis", -1)), log=op == "LogSoftmax")]
    if op == "LayerNormalization":
        outs = layernorm(ins[0], ins[1], ins[2] if len(ins) > 2 else None, int(_attr(node, "axis", -1)),
                         float(_attr(node, "epsilon", 1e-5)))
        return list(outs[:len(node.output)])
    if op in ("SimplifiedLayerNormalization", "RMSNormalization"):
        outs = layernorm(ins[0], ins[1], None, int(_attr(node, "axis", -1)), float(_attr(node, "epsilon", 1e-5)),
                         rms=True)
        return [outs[0]]
    if op in _NO_ERROR or not float_in:
        with np.errstate(all="ignore"):
            outs = _run(node, vals, opsets)
        return [Bounded.exact(o, dtype0 if np.asarray(o).dtype.kind == "f" else None) for o in outs]
    if op in _MOVES:
        data = _MOVES[op] if _MOVES[op] is not None else tuple(range(len(ins)))
        outs = _run(node, vals, opsets)
        errs = [b.e if (k in data and b is not None and b.is_float) else (b.v if b is not None else None)
                for k, b in enumerate(ins)]
        if op == "Where":
            errs[0] = ins[0].v
        eo = _run(node, errs, opsets)
        return [Bounded(np.asarray(o, np.float64), np.abs(np.asarray(e, np.float64)), dtype0)
                for o, e in zip(outs, eo)]
    if op in _REDUCE_SUM:
        out = np.asarray(_run(node, vals, opsets)[0], np.float64)
        errs = list(vals)
        errs[0] = ins[0].e
        e = np.asarray(_run(node, errs, opsets)[0], np.float64)
        absx = list(vals)
        absx[0] = _finite_abs(ins[0].v)
        mag = np.asarray(_run(node, absx, opsets)[0], np.float64)
        n = max(1, ins[0].v.size // max(1, out.size))
        return [Bounded(out, e + LAMBDA * _math.sqrt(n) * U32 * mag, dtype0).rounded()]
    if op in _EXACT_ELEMENTWISE or op in _TRANSCENDENTAL:
        with np.errstate(all="ignore"):
            out = np.asarray(_run(node, vals, opsets)[0], np.float64)
        e = _corners(node, ins, opsets, out)
        if op in ("Sin", "Cos"):       # 1-Lipschitz and bounded by 2: the corners miss a turn of the period
            e = np.minimum(ins[0].e, 2.0) if ins[0].is_float else e
        c = C_EXACT if op in _EXACT_ELEMENTWISE else C_TRANSCENDENTAL
        formula = _FORMULAS.get(op) if node.domain in ("", "ai.onnx") else None
        if formula is not None:       # its own rounding follows the formula's conditioning (cancellation)
            e = e + formula(ins[0].v, node)
            c = C_EXACT
        if op in ("Sum", "Mean") and dtype0 in _MAX:
            # a partial sum past the type's range is infinite in fp32 (ONNX Runtime's Mean(3e38, 3e38) is inf)
            with np.errstate(all="ignore"):
                total = sum(_finite_abs(b.v) for b in float_in)
            e = np.where(total > _MAX[dtype0], np.inf, e)
        return [Bounded(out, np.broadcast_to(np.asarray(e, np.float64), out.shape) + 0.0, dtype0).rounded(c)]
    raise Unsupported(f"no error model for {node.domain + '::' if node.domain else ''}{op}")


# ------------------------------------------------------------- the rounding of composite activations
# An activation that ONNX defines as a formula over exp / erf / tanh (GELU, ELU, SELU, CELU) is computed in
# fp32 by that formula, by ONNX Runtime and by the kernels alike, and the formula cancels: 1 + tanh(z) for
# z -> -inf, exp(x) - 1 for x -> 0. Its rounding is bounded by a running error analysis of the formula in
# float64 (each fp32 operation adds u |its result|, each library function C_TRANSCENDENTAL u |its result|,
# errors propagate through the operations): in saturation GELU's bound is about 0.5 |x| C u, not C u |GELU(x)|,
# which is what an fp32 evaluation can meet (-0.0 for an exact -4e-16). Everywhere else it stays a few ulps.
class _Run:
    """A value computed in fp32 and a bound of its error (float64 arrays)."""

    def __init__(self, v, e=0.0):
        self.v, self.e = np.asarray(v, np.float64), np.asarray(e, np.float64) + 0.0

    @staticmethod
    def const(c: float) -> _Run:
        return _Run(c, U32 * abs(c))            # the literal rounded to fp32

    def __add__(self, o):
        o = o if isinstance(o, _Run) else _Run.const(o)
        v = self.v + o.v
        return _Run(v, self.e + o.e + U32 * np.abs(v))

    def __sub__(self, o):
        o = o if isinstance(o, _Run) else _Run.const(o)
        v = self.v - o.v
        return _Run(v, self.e + o.e + U32 * np.abs(v))

    def __mul__(self, o):
        o = o if isinstance(o, _Run) else _Run.const(o)
        v = self.v * o.v
        return _Run(v, np.abs(self.v) * o.e + np.abs(o.v) * self.e + self.e * o.e + U32 * np.abs(v))

    def fn(self, f) -> _Run:
        """A library function (C_TRANSCENDENTAL ulps), its argument's error through its steepest corner."""
        v = f(self.v)
        d = np.maximum(np.abs(f(self.v + self.e) - v), np.abs(f(self.v - self.e) - v))
        return _Run(v, np.where(np.isfinite(d), d, 0.0) + C_TRANSCENDENTAL * U32 * np.abs(v))


def _erf(v):
    return np.vectorize(_math.erf, otypes=[np.float64])(v)


def _gelu_bound(x, node):
    x = _Run(np.where(np.isfinite(x), x, 0.0))
    if _attr(node, "approximate", "none") in ("tanh", b"tanh"):
        inner = (x + x * x * x * 0.044715) * _math.sqrt(2.0 / _math.pi)
        y = x * 0.5 * (inner.fn(np.tanh) + 1.0)
    else:
        y = x * 0.5 * ((x * (1.0 / _math.sqrt(2.0))).fn(_erf) + 1.0)
    return y.e


def _expm1_bound(x, alpha: float, scale: float = 1.0):
    """alpha (exp(x / scale) - 1) for x < 0 (ELU, SELU's inner term, CELU), 0 elsewhere."""
    xn = _Run(np.where(np.isfinite(x) & (x < 0), x, 0.0))
    y = ((xn * (1.0 / scale) if scale != 1.0 else xn).fn(np.exp) - 1.0) * alpha
    return np.where(np.isfinite(x) & (x < 0), y.e, 0.0)


_FORMULAS = {
    "Gelu": _gelu_bound,
    "Elu": lambda x, n: _expm1_bound(x, float(_attr(n, "alpha", 1.0))),
    "Selu": lambda x, n: abs(float(_attr(n, "gamma", 1.05070102214813232421875))) *
    _expm1_bound(x, float(_attr(n, "alpha", 1.67326319217681884765625))),
    "Celu": lambda x, n: _expm1_bound(x, float(_attr(n, "alpha", 1.0)), float(_attr(n, "alpha", 1.0))),
}


def _quant_param(node, b, x_shape):
    """A scale or zero point (Bounded or None) broadcast to x's shape (per tensor, per axis or blocked)."""
    from ..graph_rewrites.ops import quant_layout
    if b is None:
        return 0.0
    p = np.asarray(b.v, np.float64)
    kind, axis, block = quant_layout(node, len(x_shape), p.shape)
    if kind == "tensor":
        return p.reshape(-1)[0]
    if kind == "axis":
        dims = [1] * len(x_shape)
        dims[axis] = p.size
        return p.reshape(dims)
    return np.repeat(p, block, axis=axis).take(range(x_shape[axis]), axis=axis)


def _quantize(node, y, z, qtype):
    """ONNX QuantizeLinear of the quotient y = x / scale: integers saturate(rint(y) + z) (NaN to the lower bound),
    float8 the nearest value of y (ties to even) with the node's saturate rule; float64 results."""
    from onnx import TensorProto, helper
    from ..graph_rewrites.ops import FLOAT8, INT_RANGES
    with np.errstate(all="ignore"):
        if qtype in FLOAT8:
            np_t = helper.tensor_dtype_to_np_dtype(qtype)
            y = np.asarray(y, np.float32)
            if _attr(node, "saturate", 1):
                from onnx.numpy_helper import saturate_cast
                return saturate_cast(y, np_t).astype(np.float64)
            return y.astype(np_t).astype(np.float64)
        lo, hi = INT_RANGES.get(qtype, INT_RANGES[TensorProto.INT8])
        q = np.rint(np.asarray(y, np.float64)) + z
        return np.where(np.isnan(q), lo, np.clip(q, lo, hi))


def _quant(node, ins: list, opsets: dict) -> Bounded:
    """QuantizeLinear, DequantizeLinear, MatMulInteger with exact integer semantics. An integer result is exact
    from exact inputs; the bounds of x, the scale and the zero point widen it to every value their intervals reach
    (Q is monotonic in x / scale and in the zero point: the quantized ends of the quotient's interval, widened by
    the fp32 division's rounding), in the "quant" storage type (no rounding of its own). DequantizeLinear adds one
    fp32 rounding (the product)."""
    op = node.op_type
    if op == "MatMulInteger":
        a, b = ins[0], ins[1]
        za = 0.0 if len(ins) < 3 or ins[2] is None else np.asarray(ins[2].v, np.float64)
        zb = 0.0 if len(ins) < 4 or ins[3] is None else np.asarray(ins[3].v, np.float64)
        za = za.reshape(-1, 1) if np.ndim(za) == 1 and a.v.ndim > 1 else za
        ac, bc = np.asarray(a.v, np.float64) - za, np.asarray(b.v, np.float64) - zb
        e = np.abs(ac) @ b.e + a.e @ np.abs(bc) + a.e @ b.e
        return Bounded(ac @ bc, e, "quant")
    x = ins[0]
    xv = np.asarray(x.v, np.float64)
    s = _quant_param(node, ins[1], xv.shape)
    es = _quant_param(node, Bounded(ins[1].e, ins[1].e, ins[1].dtype), xv.shape)
    zb = ins[2] if len(ins) > 2 else None
    z = _quant_param(node, zb, xv.shape)
    ez = 0.0 if zb is None else _quant_param(node, Bounded(zb.e, zb.e, zb.dtype), xv.shape)
    if op == "DequantizeLinear":
        with np.errstate(all="ignore"):
            v = (xv - z) * s
            e = (x.e + ez) * np.abs(s) + np.abs(xv - z) * es
        out = _attr(node, "output_dtype", 0)
        return Bounded(v, e, _dtype_name(int(out)) if out else ins[1].dtype).rounded(C_EXACT)
    from onnx import TensorProto, helper
    qtype = (helper.np_dtype_to_tensor_dtype(np.asarray(zb.v).dtype) if zb is not None and zb.dtype != "quant"
             else int(_attr(node, "output_dtype", 0) or TensorProto.UINT8))
    s32 = np.asarray(s, np.float32)
    with np.errstate(all="ignore"):
        y = (xv.astype(np.float32) / s32).astype(np.float32)          # the quotient as the kernel computes it
        corners = [(xv + dx) / (s + ds) for dx in (-x.e, x.e) for ds in (-es, es)]
        slack = 2 * U32 * np.abs(y.astype(np.float64))
        ylo, yhi = np.minimum.reduce(corners) - slack, np.maximum.reduce(corners) + slack
        z = np.asarray(z, np.float64)
        v, lo, hi = _quantize(node, y, z, qtype), _quantize(node, ylo, z - ez, qtype), _quantize(node, yhi, z + ez, qtype)
        e = np.maximum(np.abs(lo - v), np.abs(hi - v))
    return Bounded(v, np.where(np.isnan(v), 0.0, np.nan_to_num(e, nan=np.inf)), "quant")


def evaluate(body, inputs, math: str = "exact", opsets: dict | None = None) -> Evaluation:
    """Evaluate a FunctionProto or GraphProto on `inputs` (arrays or Bounded, in input order) in float64
    with per-element bounds. Returns Evaluation(outputs=[Bounded per output], values={name: Bounded})."""
    if math not in MATHS:
        raise ValueError(f"math must be one of {MATHS}, not {math!r}")
    in_names = list(body.input) if hasattr(body, "attribute_proto") or not hasattr(body, "initializer") \
        else [i.name for i in body.input]
    out_names = list(body.output) if not hasattr(body, "initializer") else [o.name for o in body.output]
    if opsets is None:
        opsets = {o.domain: o.version for o in getattr(body, "opset_import", [])} or {"": 17}
    opsets.setdefault("", 17)
    values: dict = {}
    for nm, x in zip(in_names, inputs):
        values[nm] = x if isinstance(x, Bounded) else Bounded.exact(x)
    if hasattr(body, "initializer"):
        from onnx import numpy_helper
        for t in body.initializer:
            values[t.name] = Bounded.exact(numpy_helper.to_array(t))
    for node in body.node:
        ins = [values[nm] if nm else None for nm in node.input]
        outs = _apply(node, ins, math, opsets)
        for nm, b in zip(node.output, outs):
            if nm:
                values[nm] = b
    return Evaluation([values[nm] for nm in out_names], values)


def compare(kernel, ref: Bounded, extra: float = 0.0) -> dict:
    """Kernel output against the exact value and its bound, element by element.

    An element is wrong when |kernel - v| > MARGIN * e + tiny (tiny: the smallest normal of the storage
    type, for flush-to-zero), or when the exact value is NaN / infinite and the kernel's is not the same; elements
    whose bound is infinite or NaN (ill-conditioned: an input interval reaching a pole) are not checked
    and counted. Returns ok, ratio (the worst element's |kernel - v| / what it is allowed), worst (index),
    worst_kernel / worst_ref / worst_bound, max_abs, scale (max |v|), rel (max_abs / scale), unchecked.
    """
    k = np.asarray(kernel)
    v, e = ref.v, ref.e
    if k.shape != v.shape:
        return {"ok": False, "ratio": float("inf"), "max_abs": float("inf"), "rel": float("inf"),
                "shape": list(k.shape), "note": f"shape {list(k.shape)} differs from the reference's {list(v.shape)}"}
    if k.dtype.kind not in "fc" and np.any(e):       # integers within a quantization's own bound (_quant)
        diff = np.abs(k.astype(np.float64) - v)
        ok = bool(np.all(diff <= e))
        worst = np.unravel_index(int(np.argmax(diff - e)), diff.shape) if k.size else ()
        return {"ok": ok, "ratio": float(np.max(diff / np.maximum(e, 1.0))) if k.size else 0.0,
                "max_abs": float(diff.max()) if k.size else 0.0, "rel": 0.0 if ok else float("inf"),
                "shape": list(k.shape), "worst": [int(i) for i in worst], "unchecked": 0}
    if k.dtype.kind not in "fc":
        same = bool(np.array_equal(k, v.astype(k.dtype) if v.dtype != k.dtype else v))
        return {"ok": same, "ratio": 0.0 if same else float("inf"), "max_abs": 0.0 if same else float("inf"),
                "rel": 0.0 if same else float("inf"), "shape": list(k.shape), "unchecked": 0}
    if k.size == 0:
        return {"ok": True, "ratio": 0.0, "max_abs": 0.0, "rel": 0.0, "shape": list(k.shape), "unchecked": 0}
    k64 = k.astype(np.float64)
    fin = np.isfinite(v)
    nonfinite_bad = ~fin & ~((k64 == v) | (np.isnan(k64) & np.isnan(v)))
    nonfinite_bad |= unwritten(k)          # never written by a kernel (the emulated driver's poison), NaN or not
    bound = MARGIN * e + _TINY.get(ref.dtype, 1e-38) + extra
    checkable = fin & np.isfinite(bound)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(fin, np.abs(k64 - v), 0.0)
        diff = np.where(np.isnan(diff), np.inf, diff)
        ratio = np.where(checkable, diff / bound, 0.0)
    ratio = np.where(nonfinite_bad, np.inf, ratio)
    worst = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    scale = float(_finite_abs(v).max())
    max_abs = float(np.where(checkable, diff, 0.0).max())
    if nonfinite_bad.any():
        max_abs = float("inf")
    r = float(ratio[worst])
    return {"ok": bool(r <= 1.0), "ratio": r, "max_abs": max_abs, "scale": scale,
            "rel": max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf")),
            "shape": list(k.shape), "worst": [int(i) for i in worst], "worst_kernel": float(k64[worst]),
            "worst_ref": float(v[worst]), "worst_bound": float(bound[worst]),
            "unchecked": int((fin & ~np.isfinite(bound)).sum()), "nonfinite_mismatches": int(nonfinite_bad.sum())}


# ------------------------------------------------------------------------------ unwritten elements
# The emulated CUDA driver fills every allocation with all-ones bytes (plus_ep/native/emucuda.c), as the test
# harnesses fill output buffers (tests/support/poison.py): NaN in every float width with a payload the PTX
# interpreter never produces (its arithmetic gives the canonical NaNs), -1 in every signed integer width. An
# element still holding it was never written by a kernel.
POISON_BYTE = 0xFF


def unwritten(a) -> np.ndarray:
    """Boolean mask (a's shape) of the elements whose bytes are all POISON_BYTE."""
    a = np.asarray(a)                  # a 0-d output stays 0-d (ascontiguousarray makes it 1-d)
    if a.size == 0:
        return np.zeros(a.shape, bool)
    raw = np.ascontiguousarray(a).view(np.uint8).reshape(a.size, a.dtype.itemsize)
    return np.all(raw == POISON_BYTE, axis=1).reshape(a.shape)


# -------------------------------------------------------------------------- whole-model bounds (tests)
# A model's output differs from ONNX Runtime CPU by the rounding of the kernels' math (fp32 summation order,
# TF32 / f16 / bf16 operands, f16 activations between kernels), amplified by the model's own conditioning (a
# peaky softmax, a LayerNorm of a low-variance row). Each element gets a bound from its own sensitivity,
# measured: the reference is re-run with every float weight and input scaled by (1 +- u) (random signs, u the
# unit roundoff of the math) and the spread of each element over a few such runs says how much it moves under
# rounding of that size.
#
#     spread = sensitivity(model, feeds, UNIT["fp16"])             # {output: array}
#     bound = element_bound(ref, spread[name], "fp16")             # FACTOR x (spread + u |ref|) + u rms
#     assert_within(got, ref, bound, "output y")                   # per element, poison and NaN aware
#
# Measured on the demo BERT and zoo exports through correct kernels, |kernel - reference| stays below about
# 3.5x (spread + u |ref|) per element (the tests on the PTX interpreter); the bound takes FACTOR = 10x. A
# planted bug of 1e-3 of the output scale is far outside it where the math is exact.
UNIT = {"exact": C_TRANSCENDENTAL * U32, "tf32": U_TF32, "fp16": unit("float16"), "bf16": unit("bfloat16")}
FACTOR = 10.0


def _perturbed(model, u: float, rng):
    import onnx
    from onnx import TensorProto, numpy_helper
    p = onnx.ModelProto()
    p.CopyFrom(model)
    for k, t in enumerate(p.graph.initializer):
        if t.data_type in (TensorProto.FLOAT, TensorProto.FLOAT16):
            a = numpy_helper.to_array(t)
            if a.size >= 16:
                v = a.astype(np.float64) * (1 + u * rng.choice([-1.0, 1.0], a.shape))
                p.graph.initializer[k].CopyFrom(numpy_helper.from_array(v.astype(a.dtype), t.name))
    return p


def sensitivity(model, feeds: dict, u: float, draws: int = 3, seed: int = 1, optimized: bool = True) -> dict:
    """{output name: max over `draws` runs of |ref(perturbed) - ref|}, weights (>= 16 elements) and
    float feeds scaled by (1 +- u) with random signs, on ONNX Runtime CPU (optimized=False: with its graph
    optimizations off)."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if not optimized:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL

    def run(m, f):
        s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
        return dict(zip([o.name for o in s.get_outputs()], s.run(None, f)))
    ref = run(model, feeds)
    rng = np.random.default_rng(seed)
    spread = {k: np.zeros(v.shape) for k, v in ref.items()}
    for _ in range(draws):
        f = {k: np.asarray(v * (1 + u * rng.choice([-1.0, 1.0], v.shape)), v.dtype) if v.dtype.kind == "f" else v
             for k, v in feeds.items()}
        got = run(_perturbed(model, u, rng), f)
        for k in ref:
            if ref[k].dtype.kind == "f":
                d = np.abs(got[k].astype(np.float64) - ref[k].astype(np.float64))
                spread[k] = np.maximum(spread[k], np.where(np.isfinite(d), d, 0.0))
    return spread


def element_bound(ref, spread, math: str) -> np.ndarray:
    """Per-element bound on |kernel - ref|: FACTOR x (measured spread + u |ref|) plus u x the output's
    rms (elements that cancel to ~0)."""
    r = np.abs(np.asarray(ref, np.float64))
    u = UNIT[math]
    fin = np.isfinite(r)
    rms = float(np.sqrt(np.mean(r[fin] ** 2))) if fin.any() else 0.0
    return FACTOR * (np.asarray(spread, np.float64) + u * np.where(fin, r, 0.0)) + u * rms


def assert_within(got, ref, bound, what: str) -> float:
    """Every element written (no poison), non-finite values where the reference has them, and
    |got - ref| <= bound elsewhere; raises AssertionError naming the worst element. Returns the worst ratio
    error / bound."""
    got, ref = np.asarray(got), np.asarray(ref)
    if got.shape != ref.shape:
        raise AssertionError(f"{what}: shape {got.shape} != {ref.shape}")
    if got.dtype.kind in "iub":
        if not np.array_equal(got, ref):
            raise AssertionError(f"{what}: integer output differs")
        return 0.0
    bad = unwritten(got)
    if bad.any():
        raise AssertionError(f"{what}: {int(bad.sum())} elements never written (poison) first at {np.argwhere(bad)[0]}")
    g, r = got.astype(np.float64), ref.astype(np.float64)
    fin = np.isfinite(r)
    same_nonfinite = (g == r) | (np.isnan(g) & np.isnan(r))
    if not np.all(same_nonfinite[~fin]):
        raise AssertionError(f"{what}: non-finite reference values differ")
    err = np.where(fin, np.abs(g - r), 0.0)
    err = np.where(np.isnan(err), np.inf, err)
    ratio = err / np.maximum(bound, 1e-300)
    worst = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    if not ratio[worst] <= 1.0:
        raise AssertionError(f"{what}: {int((ratio > 1).sum())} of {ratio.size} elements outside their bound; worst "
                             f"at {tuple(int(i) for i in worst)}: got {g[worst]:.7g}, want {r[worst]:.7g}, bound "
                             f"{bound[worst]:.3g}")
    return float(ratio[worst])


def upcast_fp16(model):
    """A copy of a float16 model computing in float32: every float16 input, output, value_info,
    initializer, Constant and Cast target becomes float32 (the higher-precision reference of a float16
    run; its Cast round trips through float16 then round nothing)."""
    import onnx
    from onnx import TensorProto, numpy_helper
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if vi.type.tensor_type.elem_type == TensorProto.FLOAT16:
            vi.type.tensor_type.elem_type = TensorProto.FLOAT

    def tensor32(t):
        return numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), t.name)
    for k, t in enumerate(g.initializer):
        if t.data_type == TensorProto.FLOAT16:
            g.initializer[k].CopyFrom(tensor32(t))
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TensorProto.FLOAT16:
                a.t.CopyFrom(tensor32(a.t))
            elif n.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT16:
                a.i = TensorProto.FLOAT
    return out
