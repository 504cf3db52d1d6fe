"""Role finding: which node and tensor of a matched subgraph plays which part of its family's template.

A pattern's ``roles`` function (by default its family's ``find_roles``) runs at identification on the
candidate that matched exactly: ``roles(view, members) -> Roles | str`` with ``members`` the GraphView
positions of the subgraph (topological order). The family's Roles dataclass is stored on the subgraph
(``Subgraph.roles``) and read by the family's renderer; a string is the reason the match is refused
(shown by ``plus-ep explain``). A role finder refuses whatever its template would not read: every node
of the subgraph is consumed by the renderer, or the match is refused.

Each family's finder sits in its family's file (warehouse/families/<family>.py); this module holds the
walks they share.
"""
from __future__ import annotations


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
