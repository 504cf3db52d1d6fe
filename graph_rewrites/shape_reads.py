"""Shape nodes read through copies: `Shape(Identity(x))` becomes `Shape(x)`, and so for the other ops
whose output is its input's shape by definition (a Concat of one input, Cast, Dropout's first output).

Why: a Shape node only needs its input's shape, yet ONNX orders it after its input's producer. An
exporter's copy inside a fusable chain then ties the Shape's readers to that chain: transformers'
KV cache concatenates layer 0's past key with an empty tensor (TorchScript: a Concat of one input) and
its causal mask reads the Shape of that copy, so the attention could not take the copy (its past
concat) without closing a cycle through the mask. Reading the Shape of the copy's source removes the
false dependency; nothing else changes (the copy itself stays, to be fused or run as it was).

    model, n = read_shapes_through_copies(model)      # a copy of `model` when n > 0
"""
from __future__ import annotations

import onnx

_COPIES = {"Identity", "Cast", "CastLike", "Dropout"}


def _source(node) -> str | None:
    """The input whose shape `node`'s first output has by definition, if any."""
    if node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type == "Concat" and len([i for i in node.input if i]) == 1:
        return next(i for i in node.input if i)
    if node.op_type in _COPIES and node.input and node.input[0]:
        return node.input[0]
    return None


def read_shapes_through_copies(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """`model` with every default-domain Shape node reading the source of the copies before it
    (a new ModelProto when anything changed), and the number of Shape nodes changed."""
    producer = {t: n for n in model.graph.node for t in n.output[:1] if t}
    todo = []
    for k, n in enumerate(model.graph.node):
        if n.op_type != "Shape" or n.domain not in ("", "ai.onnx") or not n.input:
            continue
        t, seen = n.input[0], set()
        while t in producer and t not in seen:
            seen.add(t)
            src = _source(producer[t])
            if src is None:
                break
            t = src
        if t != n.input[0]:
            todo.append((k, t))
    if not todo:
        return model, 0
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for k, t in todo:
        out.graph.node[k].input[0] = t
    return out, len(todo)
