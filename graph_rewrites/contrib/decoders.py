"""Weight decoders into GEMM subgraphs: after identification, a GEMM subgraph whose B is the
dequantisation chain of a MatMulNBits expansion (quant.py marks the chain's last node) takes that chain
in (a gated MLP's GEMM both chains of its gate and up weights, decoded by plus_b_chunk /
plus_b1_chunk), so its fused node reads the packed weights, scales and zero points, and its kernel decodes B in the
mainloop (kernels/families/gemm/nbits.py) instead of reading a dequantised copy. The chain's nodes read only
initializers (no data kernel of their own); the fused node's function body still computes the same
thing from the same inputs."""
from __future__ import annotations

import json

from .quant import DECODER

GEMM_TEMPLATES = ("gemm", "gemm_rownorm")
LAYOUT = ("K", "N", "bits", "block_size")      # what the two decoded weights of one gated GEMM share


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


def movable(view, b, taken=frozenset()) -> set | None:
    """The decoder chain of weight `b` when it can move into the subgraph of `b`'s only reader, else None."""
    if len(view.consumers.get(b, ())) != 1:
        return None
    return chain_of(view, b, taken) or None


def gated_pair(view, bs):
    """The decoders of a gated GEMM's two weights `bs` (B0's, B1's: its members' order), which one kernel decodes
    in its mainloop: None when neither is a MatMulNBits weight, else [B0's, B1's] descriptions or the reason
    one kernel cannot decode them (one weight quantised, layouts that differ, a decoded copy read elsewhere)."""
    metas = [decoder_of(view, b) for b in bs]
    if all(m is None for m in metas):
        return None
    if any(m is None for m in metas):
        q = bs[0] if metas[0] is not None else bs[1]
        return (f"only one weight ('{q}') is a MatMulNBits weight; the gated template decodes both weights "
                "in its mainloop or neither")
    got = [tuple(m[k] for k in LAYOUT) for m in metas]
    if got[0] != got[1]:
        return (f"the MatMulNBits weights differ in layout ({', '.join(LAYOUT)} = {got[0]} vs {got[1]}); "
                "the gated template decodes two weights of one layout")
    for b in bs:
        if movable(view, b) is None:
            return (f"the dequantised weight '{b}' is also read elsewhere (or computed from data); the gated "
                    "template decodes the packed weights in its mainloop")
    return metas


def _attach_one(view, sg, taken) -> None:
    roles = sg.roles or {}
    if "gemm" not in roles:
        return
    seed = view.nodes[roles["gemm"]]
    b = roles.get("b")
    meta = decoder_of(view, b) if seed.op_type == "MatMul" else None
    chain = movable(view, b, taken) if meta is not None else None
    if chain:
        sg.nodes = tuple(sorted(set(sg.nodes) | chain))
        sg.roles = dict(roles, nbits=meta)
        taken |= chain


def attach(view, subgraphs) -> list:
    """Move each single-GEMM subgraph's weight decoder into it (roles["nbits"]: the description), and both
    decoders of a gated pair (roles["nbits"]: [B0's, B1's], in its members' order; its parts, built instead where the gated
    kernels fail, each take their own); returns the subgraphs (changed in place; a gated pair whose decoders
    cannot both move in is replaced by its parts)."""
    taken = {i for sg in subgraphs for i in sg.nodes}
    out = []
    for sg in subgraphs:
        roles = sg.roles or {}
        template = getattr(sg.pattern, "template", None)
        if template == "gemm_gated" and roles.get("form") == "pair":
            bs = [m["b"] for m in roles["members"]]
            metas = gated_pair(view, bs)
            if metas is None:
                out.append(sg)
                continue
            chains = [None, None] if isinstance(metas, str) else [movable(view, b, taken) for b in bs]
            if not all(chains) or chains[0] & chains[1]:      # never a gated kernel reading a dequantised copy
                for part in sg.parts:
                    _attach_one(view, part, taken)
                out.extend(sg.parts)
                continue
            for part in sg.parts:          # the fallback members, each decoding its own weight
                _attach_one(view, part, set(taken))
            sg.nodes = tuple(sorted(set(sg.nodes).union(*chains)))
            sg.roles = dict(roles, nbits=metas)
            taken.update(*chains)
        elif not sg.parts and "gemm" in roles and template in GEMM_TEMPLATES:
            _attach_one(view, sg, taken)
        out.append(sg)
    return out
