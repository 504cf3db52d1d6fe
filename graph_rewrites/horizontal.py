"""The horizontal step of identification: after the greedy vertical growth, sibling gemm subgraphs that read
the same A tensor with equal K, dtype and B layout (a layer's Q, K and V projections, N may differ) merge into one
subgraph of a horizontal warehouse pattern (warehouse/families/gemm_group.py) when the union matches it
member by member, stays convex, fits one kernel's inputs and outputs and keeps the partition acyclic.
``ident.groups`` records every group formed and every sibling refused, with the reason (`plus-ep explain`).
"""
from __future__ import annotations

from onnx import TensorProto

from . import match, ops
from .partition import Subgraph, contract_units, order_units
from ..limits import MAX_IN, MAX_OUT


def group_horizontal(ident, subgraphs: list) -> list:
    """Merge sibling gemm subgraphs reading the same A into the warehouse's horizontal patterns
    (first pattern that accepts wins). Groups replace their members at the first member's place."""
    patterns = [p for p in ident.warehouse if p.horizontal]
    if not patterns:
        return subgraphs
    by_a: dict = {}
    for k, sg in enumerate(subgraphs):
        if sg.pattern.template == "gemm" and sg.roles and "a" in sg.roles:
            by_a.setdefault(sg.roles["a"], []).append(k)
    subgraphs = _merge(ident, subgraphs, patterns, by_a)
    return _merge(ident, subgraphs, patterns, _by_producer(ident, subgraphs), batched=True)


def _by_producer(ident, subgraphs) -> dict:
    """Second pass: gemm subgraphs whose A tensors differ but come out of one subgraph (a DeBERTa layer's
    c2p = q·pos_keyᵀ and p2c = k·pos_queryᵀ, q and k both from the Q/K/V group), keyed by that subgraph;
    same-shape GEMMs there run as one launch too (each member with its own A)."""
    home = {p: k for k, sg in enumerate(subgraphs) for p in sg.nodes}
    by: dict = {}
    for k, sg in enumerate(subgraphs):
        if sg.pattern.template == "gemm" and sg.roles and "a" in sg.roles:
            src = home.get(ident.view.producer.get(sg.roles["a"]))
            if src is not None and src != k:
                by.setdefault(f"outputs of {subgraphs[src].pattern.name} subgraph {src}", []).append(k)
    return {key: ks for key, ks in by.items() if len({subgraphs[k].roles["a"] for k in ks}) > 1}


def _merge(ident, subgraphs, patterns, candidates, batched=False) -> list:
    merged: dict = {}                # first member's index -> group Subgraph
    gone: set = set()
    for a, ks in candidates.items():
        if len(ks) < 2:
            continue
        for p in patterns:
            ks = [k for k in ks if k not in gone]
            # a gated MLP's products meet: only siblings one of which reads the other's result are candidates
            cand = _meeting(ident, subgraphs, ks) if p.template == "gemm_gated" else ks
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


def _meeting(ident, subgraphs, ks) -> list:
    """The subgraphs of `ks` that read a result of another one of `ks` or are read by one."""
    outs = {k: set(subgraphs[k].outputs) for k in ks}
    reads = {k: {t for p in subgraphs[k].nodes for t in ident.view.graph_index.reads[p]} for k in ks}
    return [k for k in ks if any(j != k and (outs[j] & reads[k] or outs[k] & reads[j]) for j in ks)]


def _signature(ident, sg, batched=False):
    """(N, K, dtype, trans_b) of a gemm subgraph, or the reason it cannot join a group. `batched`: B may be a
    batched operand ([.., K, N]); its batch dims and N then join K in the class key (one shape for all)."""
    node = ident.view.nodes[sg.roles["gemm"]]
    sb = ident.view.shape(sg.roles["b"])
    if batched and sb is not None and len(sb) > 2 and node.op_type == "MatMul":
        dts = {ident.view.dtypes.get(sg.roles["a"]), ident.view.dtypes.get(sg.roles["b"])}
        dt = "/".join(sorted(TensorProto.DataType.Name(d) if d else "?" for d in dts))
        sa = ident.view.shape(sg.roles["a"]) or []
        return (str(sb[-1]), f"{sb[-2]} (A {sa}, B {sb})", dt, False)
    if sb is None or len(sb) != 2:
        return f"B '{sg.roles['b']}' is not a 2-D weight (shape {sb})"
    tb = node.op_type == "Gemm" and bool(ops.attr(node, "transB", 0))
    if node.op_type == "Gemm" and ops.attr(node, "transA", 0):
        return "transA=1"
    n, k = (sb[0], sb[1]) if tb else (sb[1], sb[0])
    dts = {ident.view.dtypes.get(sg.roles["a"]), ident.view.dtypes.get(sg.roles["b"])}
    dt = "/".join(sorted(TensorProto.DataType.Name(d) if d else "?" for d in dts))
    return (str(n), str(k), dt, tb)


def _groups_of(ident, p, a, ks, subgraphs, merged, gone, batched=False):
    """Greedy groups of pattern `p` among subgraphs `ks` reading A (or, second pass, A's from one
    subgraph); yields (first k, group, members)."""
    label = lambda k: ident.view.node_label(subgraphs[k].roles["gemm"])   # noqa: E731
    sigs = {k: _signature(ident, subgraphs[k], batched) for k in ks}
    classes: dict = {}
    for k in ks:
        if isinstance(sigs[k], str):
            ident.groups.append({"pattern": p.name, "a": a, "members": [label(k)], "status": "refused",
                                "reason": sigs[k]})
        else:        # one class per K, dtype and B layout: members may differ in N (a GQA layer's Q and K/V)
            classes.setdefault(sigs[k][1:], []).append(k)
    if len(classes) > 1:
        for sig, members in classes.items():
            if len(members) == 1:
                others = [s for s in classes if s != sig]
                ident.groups.append({"pattern": p.name, "a": a, "members": [label(members[0])],
                                    "status": "refused", "reason": "no sibling with the same K, dtype "
                                    f"and B layout (K={sig[0]}, dtype {sig[1]}, trans_b {sig[2]}; "
                                    f"others: {', '.join(f'K={o[0]} dtype {o[1]} trans_b {o[2]}' for o in others)})"})
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
