"""Weight decoders into fused subgraphs: after identification, a subgraph whose family takes decoders
(`Family.decodes`: the GEMM families) and one of whose weights is the dequantisation chain of a MatMulNBits
expansion (quant.py marks the chain's last node) takes that chain in (a gated MLP's GEMM both chains of its
gate and up weights), so its fused node reads the packed weights, scales and zero points, and its kernel
decodes the weight in the mainloop instead of reading a dequantised copy. The chain's nodes read only
initializers (no data kernel of their own); the fused node's function body still computes the same thing
from the same inputs. A kernel decodes all of its weights or none: a group whose weights cannot all be
decoded falls back to its members, each decoding its own."""
from __future__ import annotations

import json

from .quant import DECODER

LAYOUT = ("K", "N", "bits", "block_size")      # what the decoded weights of one kernel share


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


def decoders_of(view, bs):
    """The decoders of the weights `bs` one kernel decodes in its mainloop: None when none is a MatMulNBits
    weight, else their descriptions in order, or the reason one kernel cannot decode them all (only some
    quantised, layouts that differ, a decoded copy read elsewhere)."""
    metas = [decoder_of(view, b) for b in bs]
    if all(m is None for m in metas):
        return None
    if any(m is None for m in metas):
        quantised = [b for b, m in zip(bs, metas) if m is not None]
        some = f"only one weight ('{quantised[0]}')" if len(quantised) == 1 else f"only the weights {quantised}"
        return (f"{some} of {len(bs)} is a MatMulNBits weight; one kernel decodes all of its weights in its "
                "mainloop or none")
    got = [tuple(m[k] for k in LAYOUT) for m in metas]
    if len(set(got)) > 1:
        return (f"the MatMulNBits weights differ in layout ({', '.join(LAYOUT)} = {' vs '.join(map(str, got))}); "
                "one kernel decodes weights of one layout")
    for b in bs:
        if movable(view, b) is None:
            return (f"the dequantised weight '{b}' is also read elsewhere (or computed from data); the kernel "
                    "decodes the packed weights in its mainloop")
    return metas


def _attach(view, sg, taken) -> list:
    """The subgraphs that replace `sg`: itself, with its weights' decoder chains moved in when its family
    decodes them (its roles then carry the descriptions), else itself unchanged, or a group's members when
    the group cannot decode all its weights (each member decoding its own). `taken`: nodes already placed."""
    decodes = sg.pattern.family.decodes if sg.pattern.family is not None else None
    bs = decodes.weights(view, sg.roles) if decodes is not None and sg.roles is not None else []
    metas = decoders_of(view, bs) if bs else None
    if metas is None:
        return [sg]
    chains = None if isinstance(metas, str) else [movable(view, b, taken) for b in bs]
    if chains is None or not all(chains) or any(c & d for i, c in enumerate(chains) for d in chains[i + 1:]):
        if not sg.parts:                  # never a kernel reading a dequantised copy of a weight it decodes
            return [sg]
        return [s for part in sg.parts for s in _attach(view, part, taken)]
    for part in sg.parts:                 # the fallback members, built instead where the group's kernels fail
        _attach(view, part, set(taken))
    sg.nodes = tuple(sorted(set(sg.nodes).union(*chains)))
    sg.roles = decodes.decoded(sg.roles, metas)
    taken.update(*chains)
    return [sg]


def attach(view, subgraphs) -> list:
    """Move each subgraph's weight decoders into it (`_attach`); returns the subgraphs (changed in place; a
    group whose decoders cannot all move in is replaced by its members)."""
    taken = {i for sg in subgraphs for i in sg.nodes}
    return [s for sg in subgraphs for s in _attach(view, sg, taken)]
