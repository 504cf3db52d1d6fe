"""Synthetic inputs for the node-level stress runs of `plus-ep verify`, independent of the model's weights.

Every float tensor input of a fused node (activations, weights and biases alike) gets random normal
values, none zero, so a dropped bias or a sign slip shows even on a model whose biases are all zero.
Inputs with at most one element keep the model's value: they are the graph's constants (GELU's sqrt(2),
an attention scale, a mask's fill value), whose meaning the function body fixes. Integer and bool
inputs (indices, shapes, masks) keep the model's values too: they are valid by construction.

Then the scales are set where they matter, using the function body evaluated in float64:

* softmax made peaky: the float inputs the softmax input depends on are scaled together until its rows
  have a standard deviation of SOFTMAX_STD (about 8): the largest probabilities approach one, so a
  wrong scale, exp base or missed rescale changes outputs by O(1), not by 1e-3 as on untrained weights;
* LayerNorm rows made nearly constant: the input that reaches a LayerNormalization's input through
  additions and data movement only (the residual, or the embedding table) is shifted by LN_OFFSET
  times the row's spread, so x - mean cancels and the kernel's variance computation is tested;
* infinities and NaN where the graph defines the result element by element: in a body without
  reductions (element-wise ops and data movement), the first elements of each float input become
  +inf, -inf and NaN, and the kernel must give the same non-finite values as the body (bodies with a
  GEMM, softmax or norm are left finite: one NaN there makes a whole row NaN, which says little).

    ins = stress_inputs(node, function_body, captured_inputs, seed=0)   # one array (or None) per input
"""
from __future__ import annotations

import numpy as np

SOFTMAX_STD = 8.0
LN_OFFSET = 30.0
MASK_GAP = 1000.0
_REDUCING = {"MatMul", "Gemm", "Softmax", "LogSoftmax", "LayerNormalization", "SimplifiedLayerNormalization",
             "RMSNormalization", "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2",
             "ReduceSumSquare", "ReduceLogSumExp", "Einsum", "Conv", "CumSum", "TopK", "ArgMax", "ArgMin"}
_ADDITIVE = {"Add", "Sub", "Cast", "Identity", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Expand", "Gather",
             "Transpose", "Concat", "Slice"}


def _producers(body) -> dict:
    return {o: n for n in body.node for o in n.output if o}


def _inputs_reaching(body, name: str, additive: bool = False) -> list:
    """Body inputs `name` depends on, in the order found; additive: only through additions and data
    movement (following their data operands)."""
    prod, out, stack, seen = _producers(body), [], [name], set()
    inputs = set(body.input)
    while stack:
        t = stack.pop()
        if t in seen or not t:
            continue
        seen.add(t)
        if t in inputs:
            out.append(t)
            continue
        n = prod.get(t)
        if n is None or (additive and n.op_type not in _ADDITIVE):
            continue
        additive_data = n.input[:1] if n.op_type not in ("Add", "Sub", "Concat") else n.input
        stack.extend(additive_data if additive else n.input)
    return out


def _row_std(x: np.ndarray, axis: int = -1) -> float:
    """Median over rows of the spread of the values within MASK_GAP of the row's maximum (masked entries,
    -1e4, -inf or the float minimum added to a logit, are not part of the spread)."""
    with np.errstate(invalid="ignore"):
        top = np.nanmax(np.where(np.isfinite(x), x, np.nan), axis=axis, keepdims=True)
    v = np.where(np.isfinite(x) & (x > top - MASK_GAP), x, np.nan)
    with np.errstate(invalid="ignore"):
        s = np.nanstd(v, axis=axis)
    s = s[np.isfinite(s)]
    return float(np.median(s)) if s.size else 0.0


def stress_inputs(node, body, captured: list, seed: int = 0) -> list:
    from onnx import helper

    from .bounds import Unsupported, evaluate
    rng = np.random.default_rng(seed)
    out = list(captured)
    names = list(body.input) if body is not None else []
    index = {nm: j for j, nm in enumerate(names)}
    free = []
    for j, a in enumerate(captured):
        if a is None:
            continue
        a = np.asarray(a)
        if a.dtype.kind == "f" and a.size > 1:
            x = rng.standard_normal(a.shape)
            x = np.where(np.abs(x) < 1e-3, 0.5, x)              # never zero
            out[j] = x.astype(a.dtype)
            free.append(j)
    if body is None or not free:
        return out
    if not any(n.op_type in _REDUCING for n in body.node):
        for j in free:
            flat = np.asarray(out[j]).reshape(-1).copy()
            flat[:3] = [np.inf, -np.inf, np.nan][:min(3, flat.size)]
            out[j] = flat.reshape(np.shape(out[j]))
        return out

    def values():
        try:
            return evaluate(body, out).values
        except (Unsupported, ValueError, RuntimeError, TypeError, IndexError, KeyError):
            return None
    for n in body.node:
        if n.op_type not in ("Softmax", "LogSoftmax"):
            continue
        axis = next((helper.get_attribute_value(a) for a in n.attribute if a.name == "axis"), -1)
        deps = [index[t] for t in _inputs_reaching(body, n.input[0]) if t in index and index[t] in free]
        for _ in range(4):
            vals = values()
            if vals is None or not deps:
                break
            std = _row_std(vals[n.input[0]].v, axis)
            if std <= 0 or 0.8 < std / SOFTMAX_STD < 1.25:
                break
            g = (SOFTMAX_STD / std) ** (1.0 / min(2, len(deps)))
            for j in deps:
                out[j] = (np.asarray(out[j], np.float64) * g).astype(captured[j].dtype)
    for n in body.node:
        if n.op_type != "LayerNormalization":
            continue
        cands = [index[t] for t in _inputs_reaching(body, n.input[0], additive=True) if t in index and index[t] in free]
        vals = values()
        if not cands or vals is None:
            continue
        j = max(cands, key=lambda c: np.asarray(out[c]).size)
        spread = _row_std(vals[n.input[0]].v) or 1.0
        out[j] = (np.asarray(out[j], np.float64) + LN_OFFSET * spread).astype(captured[j].dtype)
    return out
