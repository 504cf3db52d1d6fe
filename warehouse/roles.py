"""Role finding: which node and tensor of a matched subgraph plays which part of its template.

A pattern's ``roles`` function runs at identification on the candidate that matched exactly:
``roles(view, members) -> dict | str`` with ``members`` the GraphView positions of the subgraph
(topological order). A dict is stored on the subgraph (``Subgraph.roles``) and read by the
template's renderer; a string is the reason the match is refused (shown by ``plus-ep explain``).
A role finder refuses whatever its template would not read: every node of the subgraph is consumed
by the renderer, or the match is refused.

Each pattern's finder sits in its pattern file (patterns/attention.py: attention_roles,
patterns/gemm_group.py: gemm_group_roles); this module holds the walks they share and gemm_roles,
which the gemm and gemm_norm pattern files both use.
"""
from __future__ import annotations

from ..graph_rewrites.index import describe_node


def inside_producer(view, members: set, t: str):
    p = view.producer.get(t)
    return p if p in members else None


def ancestors(view, members: set, tensors, stop=()) -> set:
    """Member positions the values ``tensors`` are computed from (inside the subgraph), not
    walking through the outputs of ``stop`` positions."""
    found, stack = set(), list(tensors)
    while stack:
        p = inside_producer(view, members, stack.pop())
        if p is None or p in found or p in stop:
            continue
        found.add(p)
        stack.extend(t for t in view.graph_index.reads[p])
    return found


def descendants(view, members: set, p: int) -> set:
    desc = view.graph_index.descendants[p]
    return {q for q in members if desc >> q & 1}


def gemm_roles(view, members):
    """The GEMM node, its operands A and B (read from memory: subgraph inputs) and the epilogue's
    other inputs."""
    dots = [p for p in members if view.nodes[p].op_type in ("MatMul", "Gemm")]
    if len(dots) != 1:
        return f"a gemm subgraph has exactly one MatMul or Gemm (found {len(dots)})"
    node = view.nodes[dots[0]]
    inputs = view.graph_index.boundary(members)[0]
    a, b = node.input[0], node.input[1]
    for role, t in (("A", a), ("B", b)):
        if t not in inputs:
            return (f"{describe_node(node)}: operand {role} '{t}' is computed inside the subgraph; the gemm "
                    "template reads its operands from memory")
    return {"gemm": dots[0], "a": a, "b": b, "epilogue_inputs": [t for t in inputs if t not in (a, b)]}
