"""The dynamic_range family's graph half: the per-tensor range of a dynamic quantization (ONNX
DynamicQuantizeLinear as graph_rewrites/contrib/quant.py expands it), lo = min(0, min x) and hi = max(0, max x)
over every element of a float32 tensor, with the scalar ops that make the scale and zero point from them.

One launch for what ORT runs as a ReduceMin, a ReduceMax and the scalars: a grid-stride min/max over all of x,
each CTA's partial to scratch, and the last CTA to arrive (gemm_hooks.cuh's arrival word) combines the partials
and stores the scalar outputs. Min and max are exact in any order, so the result does not depend on the grid.
"""
from __future__ import annotations

from dataclasses import dataclass

from onnx import TensorProto

from ...graph_rewrites import ops
from ...graph_rewrites.family import Family, Roles
from ...graph_rewrites.index import describe_node
from ..registry import pattern

_MOVES = {"elementwise"}          # what follows the two reductions: scalar ops on lo and hi


@dataclass(frozen=True)
class DynamicRangeRoles(Roles):
    """The ReduceMin and ReduceMax nodes (GraphView positions) over all of one float32 tensor `x`."""
    reduce_min: int
    reduce_max: int
    x: str


def dynamic_range_roles(view, members):
    """The two full reductions of one float32 tensor and their scalar epilogue, or why the subgraph is not that."""
    mins = [p for p in members if view.nodes[p].op_type == "ReduceMin"]
    maxs = [p for p in members if view.nodes[p].op_type == "ReduceMax"]
    if len(mins) != 1 or len(maxs) != 1:
        return f"a dynamic range has one ReduceMin and one ReduceMax (found {len(mins)} and {len(maxs)})"
    nmin, nmax = view.nodes[mins[0]], view.nodes[maxs[0]]
    x = nmin.input[0]
    if nmax.input[0] != x:
        return f"{describe_node(nmax)}: reduces '{nmax.input[0]}', not the ReduceMin's '{x}'"
    if view.dtypes.get(x) != TensorProto.FLOAT:
        return f"{describe_node(nmin)}: '{x}' is not float32"
    inputs = view.graph_index.boundary(members)[0]
    if x not in inputs:
        return f"{describe_node(nmin)}: '{x}' is computed inside the subgraph; the kernel reads it from memory"
    for n in (nmin, nmax):
        shape = view.shape(n.output[0])
        if shape is None or len(shape) != 0:
            return f"{describe_node(n)}: does not reduce '{x}' to one value (output shape {shape})"
    for p in members:
        if p in (mins[0], maxs[0]):
            continue
        node = view.nodes[p]
        o = ops.get(node.op_type, node.domain)
        if o is None or o.kind not in _MOVES:
            return f"{describe_node(node)}: a dynamic range's epilogue takes element-wise ops only"
        if any(view.shape(t) not in ([], None) for t in node.output):
            return f"{describe_node(node)}: not a scalar (the epilogue computes the scale and zero point)"
    return DynamicRangeRoles(mins[0], maxs[0], x)


DYNAMIC_RANGE = Family("dynamic_range", "min and max of a whole float32 tensor in one launch, with the scalars of "
                       "its dynamic quantization", roles=DynamicRangeRoles, find_roles=dynamic_range_roles)


@pattern("dynamic_range", allow_prologue=True, family=DYNAMIC_RANGE)
def dynamic_range(b):
    """lo = min(0, min x), hi = max(0, max x) of a flattened tensor: hi - lo is the span that makes the scale."""
    x = b.input("x", ["N"])
    zero = b.const(0.0, 1)
    lo = b.Min(b.ReduceMin(x, b.const([0]), keepdims=0), zero)
    hi = b.Max(b.ReduceMax(x, b.const([0]), keepdims=0), zero)
    return b.Sub(hi, lo)
