"""The horizontal step of identification: after the greedy vertical growth, sibling subgraphs of one family
that read the same tensor with one signature class (the family's `Joins`: a GEMM's A, equal K, dtype and B
layout; a layer's Q, K and V projections, N may differ) merge into one subgraph of a horizontal warehouse
pattern (its family's `Groups` names the member family) when the union matches it member by member, stays
convex, fits one kernel's inputs and outputs and keeps the partition acyclic. ``ident.groups`` records every
group formed and every sibling refused, with the reason (`plus-ep explain`).
"""
from __future__ import annotations

from . import match
from .partition import Subgraph, contract_units, order_units
from ..limits import MAX_IN, MAX_OUT


def group_horizontal(ident, subgraphs: list) -> list:
    """Merge sibling subgraphs reading the same tensor into the warehouse's horizontal patterns (first
    pattern that accepts wins). Groups replace their members at the first member's place."""
    patterns = [p for p in ident.warehouse if p.horizontal]
    if not patterns:
        return subgraphs
    subgraphs = _merge(ident, subgraphs, patterns, _by_operand)
    return _merge(ident, subgraphs, patterns, _by_producer, batched=True)


def _joins(sg, member):
    """The `Joins` of subgraph `sg` when it is a subgraph of family `member` with roles, else None."""
    family = sg.pattern.family
    return member.joins if family is member and sg.roles is not None else None


def _by_operand(ident, subgraphs, member) -> dict:
    """First pass: subgraphs of family `member`, keyed by the tensor they share (a GEMM's A)."""
    by: dict = {}
    for k, sg in enumerate(subgraphs):
        joins = _joins(sg, member)
        if joins is not None:
            by.setdefault(joins.operand(sg.roles), []).append(k)
    return by


def _by_producer(ident, subgraphs, member) -> dict:
    """Second pass: subgraphs whose shared operands differ but come out of one subgraph (a DeBERTa layer's
    c2p = q·pos_keyᵀ and p2c = k·pos_queryᵀ, q and k both from the Q/K/V group), keyed by that subgraph;
    same-shape members there run as one launch too (each member with its own operand)."""
    home = {p: k for k, sg in enumerate(subgraphs) for p in sg.nodes}
    by: dict = {}
    for k, sg in enumerate(subgraphs):
        joins = _joins(sg, member)
        if joins is not None:
            src = home.get(ident.view.producer.get(joins.operand(sg.roles)))
            if src is not None and src != k:
                by.setdefault(f"outputs of {subgraphs[src].pattern.name} subgraph {src}", []).append(k)
    return {key: ks for key, ks in by.items()
            if len({member.joins.operand(subgraphs[k].roles) for k in ks}) > 1}


def _merge(ident, subgraphs, patterns, candidates_of, batched=False) -> list:
    merged: dict = {}                # first member's index -> group Subgraph
    gone: set = set()
    members = list(dict.fromkeys(p.family.groups.member for p in patterns))
    for member in members:
        for a, ks in candidates_of(ident, subgraphs, member).items():
            if len(ks) < 2:
                continue
            for p in patterns:
                groups = p.family.groups
                if groups.member is not member:
                    continue
                ks = [k for k in ks if k not in gone]
                # e.g. a gated MLP's products meet: only siblings one of which reads the other's result
                cand = groups.candidates(ident.view, subgraphs, ks) if groups.candidates is not None else ks
                for group in _groups_of(ident, p, a, cand, subgraphs, merged, gone, batched):
                    merged[group[0]] = group[1]
                    gone.update(group[2])
    out = []
    for k, sg in enumerate(subgraphs):
        if k in merged:
            out.append(merged[k])
        elif k not in gone:
            out.append(sg)
    return out


def _groups_of(ident, p, a, ks, subgraphs, merged, gone, batched=False):
    """Greedy groups of pattern `p` among subgraphs `ks` sharing operand `a` (or, second pass, operands from
    one subgraph); yields (first k, group, members)."""
    joins = p.family.groups.member.joins
    label = lambda k: ident.view.node_label(joins.anchor(subgraphs[k].roles))   # noqa: E731
    sigs = {k: joins.signature(ident.view, subgraphs[k].roles, batched) for k in ks}
    classes: dict = {}
    for k in ks:
        if isinstance(sigs[k], str):
            ident.groups.append({"pattern": p.name, "a": a, "members": [label(k)], "status": "refused",
                                "reason": sigs[k]})
        else:        # one class per signature (K, dtype, B layout): members may differ in the free part (N)
            classes.setdefault(sigs[k][1], []).append(k)
    if len(classes) > 1:
        for sig, members in classes.items():
            if len(members) == 1:
                others = [s for s in classes if s != sig]
                ident.groups.append({"pattern": p.name, "a": a, "members": [label(members[0])],
                                    "status": "refused", "reason": f"no sibling with the same {joins.what} "
                                    f"({joins.describe(sig)}; others: {'; '.join(joins.describe(o) for o in others)})"})
    for members in classes.values():
        rest = list(members)
        while len(rest) >= 2:
            group, left = [rest[0]], []
            for k in rest[1:]:
                why = _try_group(ident, p, [subgraphs[j] for j in group + [k]], subgraphs, merged, gone,
                                 group + [k], MAX_IN, MAX_OUT)
                if why is None:
                    group.append(k)
                else:
                    left.append(k)
                    ident.groups.append({"pattern": p.name, "a": a, "members": [label(j) for j in group + [k]],
                                        "status": "refused", "reason": f"{label(k)} not added: {why}"})
            if len(group) >= 2:
                sg = _group_subgraph(ident, p, [subgraphs[j] for j in group])
                ident.groups.append({"pattern": p.name, "a": a, "members": [label(j) for j in group],
                                    "status": "grouped", "reason": None})
                yield group[0], sg, group
            rest = left if len(group) >= 2 else rest[1:]


def _try_group(ident, p, sgs, subgraphs, merged, gone, ks, max_in, max_out) -> str | None:
    nodes = sorted(set().union(*(sg.nodes for sg in sgs)))
    if not ident.acyclic_with(nodes):
        w = ident.index.convexity_witness(nodes)
        return (f"not convex: {ident.view.node_label(w[0])} lies on a path from "
                f"{ident.view.node_label(w[1])} back into the group")
    ins, outs = ident.index.boundary(nodes)
    if len(ins) > max_in or len(outs) > max_out:
        return f"too many inputs/outputs for one kernel ({len(ins)}/{len(outs)}; limits {max_in}/{max_out})"
    g = ident.pgraph(nodes).canonical(strict=False)
    why = _match_members(p, g)
    if why is not None:
        return f"+Graph does not match '{p.name}' member by member: {why}"
    if p.roles is not None:
        got = p.roles(ident.view, nodes)
        if isinstance(got, str):
            return got
    units = [sorted(nodes)] + [sorted(s.nodes) for k, s in enumerate(subgraphs)
                               if k not in ks and k not in gone]
    units += [sorted(s.nodes) for s in merged.values()]
    cu, preds = contract_units(ident.index, units)
    try:
        order_units(cu, preds, lambda u: str(u))
    except ValueError:
        return "merging would put a cycle between fused subgraphs"
    return None


def _group_subgraph(ident, p, sgs) -> Subgraph:
    nodes = tuple(sorted(set().union(*(sg.nodes for sg in sgs))))
    roles = p.roles(ident.view, list(nodes)) if p.roles is not None else None
    return Subgraph(nodes, p, ident.pgraph(nodes).canonical(), sgs[0].seed, outputs=ident.outputs_of(nodes),
                    roles=roles, parts=list(sgs))


def _match_members(p, g) -> str | None:
    """Exact match of every top-level loop of `g` that holds a key operation against the first member of the
    horizontal pattern `p`. Top-level loops of parallel element-wise work
    only are where members' epilogues meet (a gated MLP's act(g) * u); the pattern's role finder decides
    whether they may."""
    first = p.match_graph.loops()[:1]
    loops = [lp for lp in g.loops() if not _elementwise_only(lp)]
    if len(loops) < 2:
        return f"{len(loops)} top-level loop (a group has at least two)"

    class _Loops:
        def __init__(self, items):
            self.items = items

        def loops(self):
            return self.items
    for lp in loops:      # each member with its own binding: a group's members may differ in N (K, dtype and
        why = match.exact(_Loops(first), _Loops([lp]))      # B layout are equal by their signature class)
        if why:
            return why
    return None


def _elementwise_only(loop) -> bool:
    return loop.para and not loop.key_ops and all(_elementwise_only(c) for c in loop.loops())
