"""The partition of a graph into fused subgraphs and unfused nodes: its members, their names and
boundaries, and the checks that contracting every subgraph to one node leaves a DAG.

A partition's *units* are its subgraphs (first, in order) then every other node alone; contracting
the units must keep the graph acyclic (each subgraph convex, and no cycle between units).
Identification (identify.py, horizontal.py) grows and groups subgraphs under these checks and
fuse.py writes the contracted model; both read the graph through one GraphIndex.

    units, preds = contract_units(index, [[0, 1], [3, 4]])
    order = order_units(units, preds, lambda u: f"unit {u}")    # ValueError naming a cycle
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import onnx

from .family import PatternLike, Roles
from .index import GraphIndex, has_subgraph, topological_order
from .ir import PGraph


@dataclass
class Subgraph:
    """A fused subgraph as identification finds it (identify.py) and the horizontal step groups it
    (horizontal.py)."""
    nodes: tuple                         # indices into GraphView.nodes, topological order
    pattern: PatternLike                 # the warehouse Pattern it matched (its family renders it)
    pgraph: PGraph                       # canonical +Graph
    seed: int                            # the skeleton / root node it grew from
    outputs: list = field(default_factory=list)
    roles: Roles | None = None           # what the family's template reads where (the pattern's roles())
    parts: list = field(default_factory=list)   # a horizontal group's member Subgraphs (else empty)


def node_name(pattern: str, k: int) -> str:
    """The name of the fused node of subgraph k (of every subgraph found, fused or not): the rewriter
    decides it once and hands it to the kernel build (plan, warnings) and to fuse()."""
    return f"plus_ep/{pattern}/{k}"


def _check_indices(model: onnx.ModelProto, node_indices: Iterable[int]) -> list[int]:
    n_nodes = len(model.graph.node)
    idx = sorted(set(int(i) for i in node_indices))
    if not idx:
        raise ValueError("empty subgraph")
    for i in idx:
        if not 0 <= i < n_nodes:
            raise ValueError(f"node index {i} out of range (graph has {n_nodes} nodes)")
    return idx


def boundary(
    model: onnx.ModelProto, node_indices: Iterable[int], index: GraphIndex | None = None
) -> tuple[list[str], list[str]]:
    """Boundary values ``(inputs, outputs)`` of a subgraph of ``model.graph``.

    inputs: values consumed by the subgraph and produced outside it (graph
    inputs, initializers, outputs of other nodes), in order of first use in the
    subgraph's topological order; empty optional inputs are skipped.
    outputs: values produced inside that are graph outputs or used by a node
    outside the subgraph, in production order.
    ``index``: the graph's GraphIndex when the caller has one (built otherwise).
    """
    idx = _check_indices(model, node_indices)
    index = index if index is not None else GraphIndex(model.graph)
    return index.boundary(index.positions(idx))


def describe_position(index: GraphIndex, p: int) -> str:
    """``node 3 (Add 'add_1')``: the node at position p, by its graph.node index, op type and name."""
    n, i = index.nodes[p], index.order[p]
    return f"node {i} ({n.op_type} {n.name!r})" if n.name else f"node {i} ({n.op_type})"


def validate_partition(model: onnx.ModelProto, index: GraphIndex, subgraphs: Sequence) -> list[list[int]]:
    """Each subgraph's member positions (topological order); raises ValueError if a subgraph is
    empty, names an unknown node, holds an If/Loop/Scan, overlaps another, or is not convex.
    A subgraph is anything with ``nodes`` (graph.node indices) and ``pattern`` (a name)."""
    owner: dict[int, int] = {}
    members: list[list[int]] = []
    for s, sg in enumerate(subgraphs):
        if not isinstance(sg.pattern, str) or not sg.pattern:
            raise ValueError(f"subgraph {s} has an empty pattern name")
        try:
            idx = _check_indices(model, sg.nodes)
        except ValueError as e:
            raise ValueError(f"subgraph {s} ({sg.pattern!r}): {e}") from None
        pos = index.positions(idx)
        for p in pos:
            if has_subgraph(index.nodes[p]):
                raise ValueError(
                    f"subgraph {s} ({sg.pattern!r}): {describe_position(index, p)} has a graph "
                    "attribute (If/Loop/Scan) and cannot be fused"
                )
            if p in owner:
                t = owner[p]
                raise ValueError(
                    f"subgraphs are not disjoint: {describe_position(index, p)} is in subgraph {t} "
                    f"({subgraphs[t].pattern!r}) and subgraph {s} ({sg.pattern!r})"
                )
            owner[p] = s
        members.append(pos)
    for s, pos in enumerate(members):
        witness = index.convexity_witness(pos)
        if witness is not None:
            u, origin, c = witness
            raise ValueError(
                f"contracting subgraph {s} ({subgraphs[s].pattern!r}) would create a cycle: "
                f"{describe_position(index, u)} lies outside it on a path from "
                f"{describe_position(index, origin)} back into {describe_position(index, c)}"
            )
    return members


def contract_units(index: GraphIndex, members: Sequence[Sequence[int]]) -> tuple[list, list]:
    """The contracted graph: units are the subgraphs (first, in order) then every other node
    alone; returns (units as position sets, predecessor units of each unit)."""
    units: list[frozenset[int]] = [frozenset(m) for m in members]
    unit_of = {p: u for u, m in enumerate(units) for p in m}
    for p in range(len(index.nodes)):
        if p not in unit_of:
            unit_of[p] = len(units)
            units.append(frozenset((p,)))
    preds = [{unit_of[q] for q in index.producers_of(m)} for m in units]
    return units, preds


def order_units(
    units: Sequence[frozenset[int]], preds: Sequence[set[int]], describe_unit
) -> list[int]:
    """Units in topological order (ties: the unit whose first node comes first); a cycle raises
    ValueError naming the units on it."""
    order, leftover = topological_order(preds, key=[min(m) for m in units])
    if leftover:
        u, path, pos = min(leftover), [], {}
        while u not in pos:
            pos[u] = len(path)
            path.append(u)
            u = min(p for p in preds[u] if p in leftover)
        names = [describe_unit(v) for v in path[pos[u]:]]
        raise ValueError(
            "contracting the subgraphs would create a cycle: " + " -> ".join(names + names[:1])
        )
    return order


def check_partition(index: GraphIndex, subgraphs: Sequence[Subgraph], label) -> None:
    """Post-condition of identification: subgraphs are disjoint, each is convex, and contracting
    them keeps the graph acyclic; else AssertionError. ``label(i)`` names node i (GraphView.node_label)."""
    seen = {}
    for k, sg in enumerate(subgraphs):
        for i in sg.nodes:
            if i in seen:
                raise AssertionError(f"node {label(i)} is in subgraphs {seen[i]} and {k}")
            seen[i] = k
        if not index.is_convex(sg.nodes):
            raise AssertionError(f"subgraph {k} ({sg.pattern.name}) is not convex")
    units, preds = contract_units(index, [sorted(sg.nodes) for sg in subgraphs])
    try:
        order_units(units, preds, lambda u: f"subgraph {u}" if u < len(subgraphs) else label(min(units[u])))
    except ValueError as exc:
        raise AssertionError(f"fused subgraphs form a cycle: {exc}") from None
