"""Placement next to kernels PlusEP does not have: what ONNX Runtime fuses better stays with it.

PlusEP has no Conv or pooling template. ONNX Runtime's CUDA EP folds the element-wise tail of a Conv into
the Conv kernel itself (its FusedConv: Conv + Relu, and Conv + Add + Relu with the Add's other operand as
the residual input Z; BatchNormalization is folded into the Conv's weights before that). A PlusEP kernel
holding only such a tail (a lone Relu, an Add + Relu of a residual block) cuts the chain: ORT then runs the
Conv alone and PlusEP the tail, two kernels where ORT alone runs one, and a model like ResNet-18 gets
slower than with the CUDA EP alone.

Rule (`conv_tail_reason`): a point-wise subgraph (no family, or a `pointwise` one) made only of the tail ORT fuses into the
Conv producing its first node's input (Relu; Add; Add then Relu), where that Conv's output (through an
optional BatchNormalization) feeds nothing else, stays with ONNX Runtime. Identification applies it to
every grown subgraph (identify.py) and `plus-ep explain` shows the reason.
"""
from __future__ import annotations

ORT_CONV_ACTIVATIONS = frozenset({"Relu"})     # what the CUDA EP's FusedConv applies (cuDNN's activation)
CONV_OPS = frozenset({"Conv"})


def _conv_feeding(view, t):
    """The Conv node producing `t` directly or through one BatchNormalization (which ORT folds into it),
    when every tensor on the way has one reader; else None."""
    for _ in range(2):
        p = view.producer.get(t)
        if p is None or len(view.consumers.get(t, ())) != 1 or t in view.outputs:
            return None
        node = view.nodes[p]
        if node.op_type in CONV_OPS:
            return node
        if node.op_type != "BatchNormalization":
            return None
        t = node.input[0]
    return None


def conv_tail_reason(view, sg) -> str | None:
    """Why ONNX Runtime should keep element-wise subgraph `sg` (its Conv fuses it), else None."""
    family = sg.pattern.family
    if family is not None and not family.pointwise:
        return None
    nodes = [view.nodes[i] for i in sorted(sg.nodes)]
    ops_ = [n.op_type for n in nodes]
    if ops_ not in (["Relu"], ["Add"], ["Add", "Relu"]):
        return None
    first = nodes[0]
    if len(nodes) == 2 and (list(nodes[1].input) != [first.output[0]]
                            or len(view.consumers.get(first.output[0], ())) != 1):
        return None
    conv = next((c for c in (_conv_feeding(view, t) for t in first.input if t) if c is not None), None)
    if conv is None:
        return None
    chain = " + ".join(["Conv"] + ops_)
    return (f"left to ONNX Runtime: {chain} after Conv '{conv.name or conv.output[0]}' is one FusedConv kernel of "
            "its CUDA EP; PlusEP has no Conv template, so fusing the tail alone would add a kernel")
