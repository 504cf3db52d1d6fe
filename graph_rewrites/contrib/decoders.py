"""Weight decoders into GEMM subgraphs: after identification, a GEMM subgraph whose B is the
dequantisation chain of a MatMulNBits expansion (quant.py marks the chain's last node) takes that chain
in, so its fused node reads the packed weights, scales and zero points, and its kernel decodes B in the
mainloop (kernels/gemm/nbits.py) instead of reading a dequantised copy. The chain's nodes read only
initializers (no data kernel of their own); the fused node's function body still computes the same
thing from the same inputs."""
from __future__ import annotations

import json

from .quant import DECODER

GEMM_TEMPLATES = ("gemm", "gemm_rownorm")


def decoder_of(view, t):
    """The decoder description of tensor `t` (a MatMulNBits weight as a dense [K, N] matrix), or None."""
    p = view.producer.get(t)
    if p is None:
        return None
    doc = view.nodes[p].doc_string
    return json.loads(doc[len(DECODER):]) if doc.startswith(DECODER) else None


def chain_of(view, t, taken) -> set | None:
    """Positions of the nodes computing `t` from initializers only, when nothing else reads them."""
    found, stack = set(), [t]
    while stack:
        x = stack.pop()
        p = view.producer.get(x)
        if p is None:
            continue
        if p in taken or view.is_data_node(p):
            return None
        if p not in found:
            found.add(p)
            stack.extend(i for i in view.nodes[p].input if i)
    for p in found:
        for o in view.nodes[p].output:
            if o in view.outputs or (o != t and any(c not in found for c in view.consumers.get(o, ()))):
                return None
    return found


def attach(view, subgraphs) -> list:
    """Move each single-GEMM subgraph's weight decoder into it (roles["nbits"]: the description); returns
    the subgraphs (changed in place)."""
    taken = {i for sg in subgraphs for i in sg.nodes}
    for sg in subgraphs:
        roles = sg.roles or {}
        if sg.parts or "gemm" not in roles or getattr(sg.pattern, "template", None) not in GEMM_TEMPLATES:
            continue
        seed = view.nodes[roles["gemm"]]
        b = roles.get("b")
        meta = decoder_of(view, b) if seed.op_type == "MatMul" else None
        if meta is None or len(view.consumers.get(b, ())) != 1:
            continue
        chain = chain_of(view, b, taken)
        if not chain:
            continue
        sg.nodes = tuple(sorted(set(sg.nodes) | chain))
        sg.roles = dict(roles, nbits=meta)
        taken |= chain
    return subgraphs
