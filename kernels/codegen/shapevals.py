"""Symbolic values of shape tensors: what the Shape→Gather→Unsqueeze→Concat chains of TorchScript
exports compute, as sympy expressions over the model's dim symbols.

    values(view, "/model/h.0/attn/c_attn/Concat_1_output_0")   # [batch, seq, 192] or None

A fused node whose dims the inputs' axes do not give (GPT-2's `seq` when its only data input is
`[batch*seq, C]`) binds them from such a tensor's values instead: the launch plan's `shapev` lines
(kernels/CONTRACT.md §3). Only int32/int64 tensors of rank 0 or 1 with at most MAX_ELEMS elements are
followed; anything not understood gives None (the binding then falls back to input axes).
"""
from __future__ import annotations

import numpy as np
import sympy
from onnx import TensorProto

from . import symdim

MAX_ELEMS = 16
MAX_DEPTH = 64
INT_TYPES = (TensorProto.INT64, TensorProto.INT32)


def is_shape_tensor(view, t) -> bool:
    shape = view.shape(t)
    return (view.dtypes.get(t) in INT_TYPES and shape is not None and len(shape) <= 1
            and all(isinstance(d, int) for d in shape) and (not shape or shape[0] <= MAX_ELEMS))


def values(view, t, _depth=0):
    """The elements of int tensor `t` (rank 0: one element) as sympy expressions, or None."""
    if _depth > MAX_DEPTH or not t:
        return None
    c = view.const(t)
    if c is not None:
        arr = np.asarray(c)
        if arr.dtype.kind not in "iu" or arr.ndim > 1 or arr.size > MAX_ELEMS:
            return None
        return [sympy.Integer(int(x)) for x in arr.reshape(-1)]
    p = view.producer.get(t)
    if p is None:
        return None
    node = view.nodes[p]
    try:
        return _RULES[node.op_type](view, node, _depth + 1) if node.op_type in _RULES else None
    except (symdim.DimError, IndexError, ValueError, TypeError):
        return None


def _attr(node, name, default=None):
    for a in node.attribute:
        if a.name == name:
            if a.type == a.INT:
                return int(a.i)
            if a.type == a.INTS:
                return [int(x) for x in a.ints]
    return default


def _in(view, node, k, depth):
    return values(view, node.input[k], depth) if len(node.input) > k and node.input[k] else None


def _shape(view, node, depth):
    dims = view.shape(node.input[0])
    if dims is None or any(d is None for d in dims):
        return None
    r = len(dims)
    start, end = _attr(node, "start", 0), _attr(node, "end", r)
    start, end = max(0, start + r if start < 0 else start), min(r, end + r if end < 0 else end)
    return [symdim.parse(d) for d in dims[start:end]]


def _gather(view, node, depth):
    data, idx = _in(view, node, 0, depth), view.const(node.input[1])
    if data is None or idx is None or _attr(node, "axis", 0) != 0:
        return None
    idx = np.asarray(idx).reshape(-1)
    return [data[int(i) + len(data) if int(i) < 0 else int(i)] for i in idx]


def _same(view, node, depth):            # Unsqueeze, Squeeze, Cast, Identity, Reshape, Flatten
    return _in(view, node, 0, depth)


def _concat(view, node, depth):
    out = []
    for k in range(len(node.input)):
        part = _in(view, node, k, depth)
        if part is None:
            return None
        out += part
    return out if len(out) <= MAX_ELEMS else None


def _slice(view, node, depth):
    data = _in(view, node, 0, depth)
    starts, ends = view.const(node.input[1]), view.const(node.input[2])
    if data is None or starts is None or ends is None:
        return None
    for k in (3, 4):
        if len(node.input) > k and node.input[k] and view.const(node.input[k]) is None:
            return None
    axes = view.const(node.input[3]) if len(node.input) > 3 and node.input[3] else [0]
    steps = view.const(node.input[4]) if len(node.input) > 4 and node.input[4] else [1]
    if [int(a) for a in np.asarray(axes).reshape(-1)] not in ([0], [-1]):
        return None
    s, e, st = (int(np.asarray(x).reshape(-1)[0]) for x in (starts, ends, steps))
    return data[slice(s, e, st)] if st != 0 else None


def _binary(fn):
    def rule(view, node, depth):
        a, b = _in(view, node, 0, depth), _in(view, node, 1, depth)
        if a is None or b is None:
            return None
        if len(a) == 1 and len(b) > 1:
            a = a * len(b)
        if len(b) == 1 and len(a) > 1:
            b = b * len(a)
        if len(a) != len(b):
            return None
        return [fn(x, y) for x, y in zip(a, b)]
    return rule


def _div(x, y):
    if y == 0:
        raise ValueError("division by zero")
    q = sympy.simplify(x / y)
    return q if q.is_integer or (q.is_Integer) else sympy.floor(q)


_RULES = {
    "Shape": _shape, "Gather": _gather, "Concat": _concat, "Slice": _slice,
    "Unsqueeze": _same, "Squeeze": _same, "Cast": _same, "Identity": _same, "Reshape": _same,
    "Flatten": _same,
    "Add": _binary(lambda x, y: x + y), "Sub": _binary(lambda x, y: x - y),
    "Mul": _binary(lambda x, y: x * y), "Div": _binary(_div),
}


POSITIONAL = ("Cast", "Identity", "Squeeze", "Unsqueeze")   # readers that keep each element where it is


def zero_meaning(nodes, t, j, shape, values=()):
    """What a 0 at element `j` of shape tensor `t` (elements `values`, where known) means to the `nodes`
    (a fused subgraph) that read it: ONNX Reshape with allowzero 0 copies its data input's dim `j` there
    (`shape(x)[j]`, sympy), any other reader takes the 0 as is (sympy 0). None where that is not one dim:
    the readers disagree, the Reshape's input has no dim `j` (ONNX Runtime refuses such a 0), a Reshape
    with allowzero 1 also reads a -1 (ONNX: invalid), or the elements reach a Reshape's shape through a
    node that moves them. E.g. Reshape(x [rows, 96], t) with t = [batch, seq, 96]:
    zero_meaning(nodes, "t", 0, shape) == rows; j=1: 96; j=2: None."""
    readers = [(n, k) for n in nodes for k, x in enumerate(n.input) if x == t]
    means = []
    for n, k in readers:
        if n.op_type == "Reshape" and k == 1:
            allowzero = next((a.i for a in n.attribute if a.name == "allowzero"), 0)
            dims = shape(n.input[0])
            if allowzero:
                means.append(None if any(v == -1 for v in values) else sympy.Integer(0))
            else:
                means.append(dims[j] if j < len(dims) else None)
        elif n.op_type in POSITIONAL and k == 0 and n.output and n.output[0]:
            means.append(zero_meaning(nodes, n.output[0], j, shape, values))
        else:
            means.append(None if any(_reaches_reshape(nodes, o) for o in n.output if o) else sympy.Integer(0))
    if any(m is None for m in means):
        return None
    firsts = means[:1] or [sympy.Integer(0)]
    return firsts[0] if all(sympy.simplify(m - firsts[0]) == 0 for m in means) else None


def _reaches_reshape(nodes, t, _seen=None) -> bool:
    """Whether tensor `t`'s values reach the shape input of a Reshape among `nodes`."""
    seen = _seen if _seen is not None else set()
    if t in seen:
        return False
    seen.add(t)
    for n in nodes:
        for k, x in enumerate(n.input):
            if x == t and ((n.op_type == "Reshape" and k == 1) or any(_reaches_reshape(nodes, o, seen)
                                                                     for o in n.output if o)):
                return True
    return False
