"""The axis_softmax family's graph half: Softmax / LogSoftmax over an axis that is not the innermost (a channel
softmax over [N, C, H, W] axis 1, the distribution-focal-loss softmax of a detection head over [N, 4, 16, A]
axis 2), with element-wise neighbours; one thread per column of the tensor viewed as [outer, R, inner].

A softmax over the last axis is a row program's, refused here with that reason; an opset-12 softmax over a
middle axis (it flattens the trailing axes) does not lower to a reduction over one axis and never gets here.
"""
from __future__ import annotations

from dataclasses import dataclass

from onnx import TensorProto

from ...graph_rewrites import ops
from ...graph_rewrites.family import Family, Roles
from ...graph_rewrites.index import describe_node
from ..registry import pattern

_SOFTMAX = ("Softmax", "LogSoftmax")
_FLOATS = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16)
_MOVES = {"elementwise", "view", "injective"}       # op kinds the hooks pull or push through


@dataclass(frozen=True)
class AxisSoftmaxRoles(Roles):
    """The Softmax / LogSoftmax node (a GraphView position), the axis it normalises (non-negative, not the
    last) and whether it is a LogSoftmax."""
    softmax: int
    axis: int
    log: bool


def axis_softmax_roles(view, members):
    """The softmax node and its axis, or why the subgraph is not one softmax over a middle axis with
    element-wise and index-only neighbours."""
    found = [p for p in members if view.nodes[p].op_type in _SOFTMAX]
    if len(found) != 1:
        return f"an axis softmax has exactly one Softmax or LogSoftmax (found {len(found)})"
    node = view.nodes[found[0]]
    shape = view.shape(node.input[0])
    if shape is None:
        return f"{describe_node(node)}: the rank of its input is unknown"
    if not any(a.name == "axis" for a in node.attribute):
        return f"{describe_node(node)}: no axis attribute (the last axis, a row program's)"
    axis = ops.attr(node, "axis") % len(shape)
    if axis == len(shape) - 1:
        return f"{describe_node(node)}: softmax over the last axis, a row program's"
    for t in (node.input[0], node.output[0]):
        if view.dtypes.get(t) not in _FLOATS:
            return f"{describe_node(node)}: '{t}' is not float, float16 or bfloat16"
    for p in members:
        o = ops.get(view.nodes[p].op_type, view.nodes[p].domain)
        if p != found[0] and (o is None or o.kind not in _MOVES):
            return (f"{describe_node(view.nodes[p])}: the axis softmax's hooks take element-wise and index "
                    "ops only")
    return AxisSoftmaxRoles(found[0], axis, node.op_type == "LogSoftmax")


AXIS_SOFTMAX = Family("axis_softmax", "softmax or log-softmax over a middle or the first axis, one thread per column",
                      roles=AxisSoftmaxRoles, find_roles=axis_softmax_roles)


@pattern("axis_softmax", allow_prologue=True, family=AXIS_SOFTMAX)
def axis_softmax(b):
    """Softmax over the middle axis of [A, R, I]: the columns (a, i) are parallel, R is reduced (a LogSoftmax
    has the same +Graph)."""
    return b.Softmax(b.input("x", ["A", "R", "I"]), axis=1)


@pattern("leading_axis_softmax", allow_prologue=True, family=AXIS_SOFTMAX)
def leading_axis_softmax(b):
    """Softmax over the first axis of [R, I] (no outer axes)."""
    return b.Softmax(b.input("x", ["R", "I"]), axis=0)
