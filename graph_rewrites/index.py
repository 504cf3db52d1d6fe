"""The one index of an ONNX graph: topological order, producers, consumers, implicit inputs,
subgraph boundaries and convexity, computed once per graph and shared by identification, fuse, the
kernel build and the tests.

Nodes are addressed by *position*: their place in the stable topological order (ties broken by
their index in ``graph.node``). ``order[p]`` is the ``graph.node`` index of position ``p`` and
``position[i]`` the reverse. A node's reads are its explicit inputs (in order) followed by the
outer-scope names its subgraph attributes (If branches, Loop/Scan bodies) use, sorted; the consumer
map and the topological order count both, so a value an If branch reads is never contracted away.
"""
from __future__ import annotations

import heapq
from collections.abc import Iterable

import onnx

__all__ = ["ModelError", "GraphIndex", "topological_order", "implicit_inputs", "has_subgraph", "describe_node"]

_GRAPH_ATTRS = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)


class ModelError(ValueError):
    """A model the compiler cannot read; the message names the node or value and the fix.

        raise ModelError("node 3 (Add 'add_1'): input 'x' is never produced; add it to graph.input")
    """


def has_subgraph(node: onnx.NodeProto) -> bool:
    """The node holds a graph attribute (If/Loop/Scan): it never joins a fused subgraph."""
    return any(a.type in _GRAPH_ATTRS for a in node.attribute)


def _graphs_of(node: onnx.NodeProto):
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            yield a.g
        elif a.type == onnx.AttributeProto.GRAPHS:
            yield from a.graphs


def implicit_inputs(node: onnx.NodeProto) -> list[str]:
    """Sorted outer-scope names a node's subgraph attributes read (node inputs and graph outputs
    of the nested graphs that the nested graph does not define itself, recursively)."""
    names: set[str] = set()

    def walk(g: onnx.GraphProto, outer_local: frozenset):
        local = set(outer_local) | {i.name for i in g.input} | {i.name for i in g.initializer}
        local |= {t for n in g.node for t in n.output if t}
        for n in g.node:
            names.update(t for t in n.input if t and t not in local)
            for sub in _graphs_of(n):
                walk(sub, frozenset(local))
        names.update(o.name for o in g.output if o.name and o.name not in local)

    for g in _graphs_of(node):
        walk(g, frozenset())
    return sorted(names)


def describe_node(node: onnx.NodeProto) -> str:
    """`Op node 'name'` (the first output when the node has no name)."""
    return f"{node.op_type} node '{node.name or (node.output[0] if node.output else '?')}'"


def topological_order(preds, key=None) -> tuple[list[int], set[int]]:
    """Stable topological order of items 0..n-1 given each item's predecessors (ties: smallest
    ``key``, default the item itself). Returns (order, items left on or behind a cycle)."""
    n = len(preds)
    key = key if key is not None else list(range(n))
    succs: list[list[int]] = [[] for _ in range(n)]
    indeg = [len(p) for p in preds]
    for u, ps in enumerate(preds):
        for p in ps:
            succs[p].append(u)
    ready = [(key[u], u) for u in range(n) if indeg[u] == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        _, u = heapq.heappop(ready)
        order.append(u)
        for v in succs[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                heapq.heappush(ready, (key[v], v))
    return order, set(range(n)) - set(order)


class GraphIndex:
    """Use-def facts of one ``GraphProto``; read-only once built."""

    def __init__(self, graph: onnx.GraphProto):
        self.graph = graph
        raw = list(graph.node)
        self.graph_outputs: set[str] = {o.name for o in graph.output}
        self.graph_inputs: set[str] = {i.name for i in graph.input} | {i.name for i in graph.initializer}
        reads = [[t for t in n.input if t] + [t for t in implicit_inputs(n) if t not in n.input]
                 if has_subgraph(n) else [t for t in n.input if t] for n in raw]
        made_by = {t: i for i, n in enumerate(raw) for t in n.output if t}     # graph.node indices
        preds = [{made_by[t] for t in rs if t in made_by and t not in self.graph_inputs}
                 for rs in reads]
        self.order, stuck = topological_order(preds)
        if stuck:
            raise ModelError(f"graph has a cycle through {describe_node(raw[min(stuck)])}; an ONNX graph "
                             "must be acyclic (re-export the model)")
        self.position: dict[int, int] = {i: p for p, i in enumerate(self.order)}
        self.nodes: list[onnx.NodeProto] = [raw[i] for i in self.order]
        self.reads: list[list[str]] = [reads[i] for i in self.order]
        self.producer: dict[str, int] = {t: self.position[i] for t, i in made_by.items()}
        self.consumers: dict[str, list[int]] = {}
        for p, rs in enumerate(self.reads):
            for t in dict.fromkeys(rs):
                self.consumers.setdefault(t, []).append(p)
        self._desc = self._anc = None

    def positions(self, node_indices: Iterable[int]) -> list[int]:
        """Positions of ``graph.node`` indices, ascending (topological order)."""
        return sorted(self.position[i] for i in node_indices)

    def label(self, p: int) -> str:
        return describe_node(self.nodes[p])

    # ---- neighbours ----------------------------------------------------------------------------
    def users(self, p: int) -> set[int]:
        """Positions reading any output of position ``p``."""
        return {u for t in self.nodes[p].output if t for u in self.consumers.get(t, ())}

    def producers_of(self, members: Iterable[int]) -> set[int]:
        """Positions outside ``members`` producing a value some member reads."""
        ms = set(members)
        return {q for p in ms for t in self.reads[p] if (q := self.producer.get(t)) is not None and q not in ms}

    def consumers_of(self, members: Iterable[int]) -> set[int]:
        """Positions outside ``members`` reading a value some member produces."""
        ms = set(members)
        return {u for p in ms for u in self.users(p) if u not in ms}

    # ---- boundary ------------------------------------------------------------------------------
    def boundary(self, members: Iterable[int]) -> tuple[list[str], list[str]]:
        """``(inputs, outputs)`` of the subgraph made of positions ``members``.

        inputs: values read inside and produced outside (graph inputs, initializers, other nodes'
        outputs), in order of first read in topological order; empty optional inputs skipped.
        outputs: values produced inside that are graph outputs or read outside, in production order.
        """
        ms = sorted(set(members))
        inside = set(ms)
        produced = {t for p in ms for t in self.nodes[p].output if t}
        inputs = list(dict.fromkeys(t for p in ms for t in self.reads[p] if t not in produced))
        outputs = [t for p in ms for t in self.nodes[p].output if t and (
            t in self.graph_outputs or any(u not in inside for u in self.consumers.get(t, ())))]
        return inputs, outputs

    def outputs(self, members: Iterable[int]) -> list[str]:
        return self.boundary(members)[1]

    # ---- convexity -----------------------------------------------------------------------------
    def _reach(self):
        if self._desc is None:
            n = len(self.nodes)
            users = [sorted(self.users(p)) for p in range(n)]
            desc, anc = [0] * n, [0] * n
            for p in range(n - 1, -1, -1):
                bits = 0
                for u in users[p]:
                    bits |= (1 << u) | desc[u]
                desc[p] = bits
            for p in range(n):
                for u in users[p]:
                    anc[u] |= (1 << p) | anc[p]
            self._desc, self._anc = desc, anc
        return self._desc, self._anc

    @property
    def descendants(self) -> list[int]:
        """Bitset per position: every position reachable from it."""
        return self._reach()[0]

    @property
    def ancestors(self) -> list[int]:
        """Bitset per position: every position it is reachable from."""
        return self._reach()[1]

    def is_convex(self, members: Iterable[int]) -> bool:
        """No path leaves ``members`` and comes back: contracting them keeps the graph acyclic."""
        desc, anc = self._reach()
        mask = d = a = 0
        for p in members:
            mask |= 1 << p
            d |= desc[p]
            a |= anc[p]
        return not (d & a & ~mask)

    def convexity_witness(self, members: Iterable[int]):
        """None when ``members`` is convex, else ``(outside, origin, back_in)`` positions: a node
        outside on a path from member ``origin`` back into member ``back_in``."""
        ms = set(members)
        if self.is_convex(ms):
            return None
        hi = max(ms)
        stack, seen = [], set()
        for p in sorted(ms):
            for c in sorted(self.users(p)):
                if c not in ms and c not in seen and c < hi:
                    seen.add(c)
                    stack.append((c, p))
        while stack:
            u, origin = stack.pop()
            for c in sorted(self.users(u)):
                if c in ms:
                    return u, origin, c
                if c not in seen and c < hi:
                    seen.add(c)
                    stack.append((c, origin))
        raise AssertionError("reachability bitsets and the path search disagree")
