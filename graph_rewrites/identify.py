"""Subgraph identification: PluS Algorithms 1 and 2 with the match conditions of Fig. 7.

Algorithm 1 takes skeleton operators (a non-parallelizable loop: MatMul, Reduce, Softmax, ...)
first in topological order, then root operators. Algorithm 2 grows a subgraph from it: prologue
producers while a pattern that allows prologues still matches, then epilogue consumers, each followed
by the producers of its other inputs. After every step the +Graph is checked: an exact match is
archived, a partial match lets growth continue, anything else rejects that candidate. When nothing
can be added, the subgraph rolls back to the last exact match. The result is checked to be a
disjoint, acyclic partition.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from . import match
from .build import build
from .graph import GraphView
from .lowering import lower_all
from .ploop import PGraph

log = logging.getLogger("plus_ep.identify")


@dataclass
class Verdict:
    exact: object = None                 # the Pattern matched exactly, or None
    partial: list = field(default_factory=list)
    reasons: dict = field(default_factory=dict)   # pattern name -> why it refused
    raw: object = None                            # the +Graph before Primitive 4

    @property
    def graph(self):
        """The canonical +Graph of the candidate subgraph."""
        return self.raw.canonical() if self.raw is not None else None

    @property
    def ok(self):
        return self.exact is not None or bool(self.partial)


@dataclass
class Subgraph:
    nodes: tuple                         # indices into GraphView.nodes, topological order
    pattern: object                      # warehouse Pattern
    pgraph: PGraph                       # canonical +Graph
    seed: int                            # the skeleton / root node it grew from
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)


@dataclass
class Step:
    node: int
    role: str                            # seed | prologue | epilogue | producer
    accepted: bool
    verdict: Verdict


class Identifier:
    def __init__(self, view: GraphView, warehouse):
        self.view, self.warehouse = view, list(warehouse)
        self.nests = lower_all(view)
        self._reach()
        self.steps: dict = {}            # seed -> [Step]
        self.support: set = set()        # shape-only nodes already moved into a subgraph
        self._verdicts: dict = {}

    # ---- reachability bitsets ----------------------------------------------------------------
    def _reach(self):
        v, n = self.view, len(self.view.nodes)
        users = [sorted({u for t in node.output if t for u in v.consumers.get(t, [])}) for node in v.nodes]
        self.desc = [0] * n
        for i in range(n - 1, -1, -1):
            bits = 0
            for u in users[i]:
                bits |= (1 << u) | self.desc[u]
            self.desc[i] = bits
        self.anc = [0] * n
        for i in range(n):
            for u in users[i]:
                self.anc[u] |= (1 << i) | self.anc[i]

    def acyclic_with(self, nodes) -> bool:
        mask = D = A = 0
        for s in nodes:
            mask |= 1 << s
            D |= self.desc[s]
            A |= self.anc[s]
        return not (D & A & ~mask)

    # ---- matching ----------------------------------------------------------------------------
    def outputs_of(self, nodes) -> list:
        v, members = self.view, set(nodes)
        outs = []
        for i in sorted(members):
            for t in v.nodes[i].output:
                if t and (t in v.outputs or any(u not in members for u in v.consumers.get(t, []))):
                    outs.append(t)
        return outs

    def pgraph(self, nodes) -> PGraph:
        return build(self.nests, [i for i in nodes if i in self.nests], self.outputs_of(nodes))

    def shape_support(self, c, members) -> set:
        """Shape-only nodes (Shape -> Gather -> Concat ...) feeding `c` that read the subgraph:
        they move into the subgraph with `c`, else contracting it would make a cycle."""
        below = 0
        for m in members:
            below |= self.desc[m]
        found, stack = set(), [c]
        while stack:
            x = stack.pop()
            for t in self.view.nodes[x].input:
                p = self.view.producer.get(t)
                if p is None or p in members or p in found or p in self.nests or p in self.support:
                    continue
                if not self.view.is_data_node(p) and below >> p & 1:
                    found.add(p)
                    stack.append(p)
        return found

    def evaluate(self, nodes, seed) -> Verdict:
        full = self.pgraph(nodes)
        g = full.canonical(strict=False)
        data = [i for i in nodes if i in self.nests and i != seed]
        prologue = any(self.desc[i] >> seed & 1 for i in data)
        epilogue = any(self.anc[i] >> seed & 1 for i in data)
        key = (g.skeleton(sizes=True), prologue, epilogue)
        cached = self._verdicts.get(key)
        if cached is None:
            cached = self._verdicts[key] = self._match(g, prologue, epilogue)
        verdict = Verdict(cached.exact, list(cached.partial), dict(cached.reasons))
        verdict.raw = full
        return verdict

    def _match(self, g, prologue, epilogue) -> Verdict:
        """Match conditions against every pattern (memoised by skeleton: repeated layers hit)."""
        verdict = Verdict()
        for p in self.warehouse:
            if prologue and not p.allow_prologue:
                verdict.reasons[p.name] = "pattern does not allow prologue fusion"
                continue
            if epilogue and not p.allow_epilogue:
                verdict.reasons[p.name] = "pattern does not allow epilogue fusion"
                continue
            if p.any_parallel:
                bad = [l for _, l in g.walk() if not l.para or l.key_ops]
                why = f"has non-parallel loop {bad[0].size} {bad[0].key_ops}" if bad else None
                if why is None and verdict.exact is None:
                    verdict.exact = p
                verdict.reasons.setdefault(p.name, why)
                continue
            why = match.exact(p.match_graph, g)
            if why is None and p.check is not None:
                why = p.check(g)
            if why is None:
                if verdict.exact is None:
                    verdict.exact = p
                continue
            partial_why = match.partial(p.match_graph, g)
            if partial_why is None:
                verdict.partial.append(p)
            verdict.reasons[p.name] = f"not exact ({why}); " + (
                "partial state" if partial_why is None else f"not partial ({partial_why})")
        return verdict

    # ---- Algorithm 2 -------------------------------------------------------------------------
    def grow(self, seed, unfused: set):
        """Algorithm 2. When prologue growth took anything, the subgraph is also grown without it
        and the larger exact match wins (ties go to epilogue fusion, the paper's priority)."""
        with_pro = self._grow(seed, unfused, prologue=True)
        if with_pro is None or not self._took_prologue:
            return with_pro
        steps = self.steps[seed]
        without = self._grow(seed, unfused, prologue=False)
        size = lambda sg: -1 if sg is None else sum(1 for i in sg.nodes if i in self.nests)  # noqa: E731
        if size(with_pro) > size(without):
            self.steps[seed] = steps
            return with_pro
        return without

    def _grow(self, seed, unfused: set, prologue: bool):
        self._took_prologue = False
        members = [seed]
        steps = []
        v0 = self.evaluate(members, seed)
        steps.append(Step(seed, "seed", v0.ok, v0))
        last = (tuple(members), v0) if v0.exact else None
        if not v0.ok:
            self.steps[seed] = steps
            return None
        rejected = set()

        def attempt(c, role):
            nonlocal last
            if c in members or c not in unfused or c in rejected:
                return False
            trial = sorted(set(members) | {c} | self.shape_support(c, members))
            if not self.acyclic_with(trial):
                steps.append(Step(c, role, False, Verdict(reasons={"*": "would create a cycle"})))
                rejected.add(c)
                return False
            verdict = self.evaluate(trial, seed)
            steps.append(Step(c, role, verdict.ok, verdict))
            if not verdict.ok:
                rejected.add(c)
                return False
            members[:] = trial
            if verdict.exact:
                last = (tuple(members), verdict)
            return True

        if prologue and any(p.allow_prologue for p in self.warehouse):
            grew = True
            while grew:
                grew = False
                for c in sorted(self._producers(members), reverse=True):
                    if self.anc[seed] >> c & 1 and attempt(c, "prologue"):
                        grew = self._took_prologue = True
                        break
        grew = True
        while grew:
            grew = False
            for c in sorted(self._consumers(members)):
                if attempt(c, "epilogue"):
                    grew = True
                    frontier = [c]
                    while frontier:
                        node = frontier.pop()
                        for p in sorted(self._producers([node]), reverse=True):
                            if not (self.anc[seed] >> p & 1) and attempt(p, "producer"):
                                frontier.append(p)
                    break
        self.steps[seed] = steps
        if last is None:
            return None
        nodes, verdict = last
        return Subgraph(nodes, verdict.exact, verdict.graph, seed,
                        outputs=self.outputs_of(nodes))

    def _producers(self, members):
        v, ms = self.view, set(members)
        out = set()
        for i in ms:
            for t in v.nodes[i].input:
                p = v.producer.get(t)
                if p is not None and p not in ms and p in self.nests:
                    out.add(p)
        return out

    def _consumers(self, members):
        v, ms = self.view, set(members)
        out = set()
        for i in ms:
            for t in v.nodes[i].output:
                for u in v.consumers.get(t, []):
                    if u not in ms and u in self.nests:
                        out.add(u)
        return out

    # ---- Algorithm 1 -------------------------------------------------------------------------
    def run(self) -> list:
        unfused = set(self.nests)
        result = []
        while unfused:
            seed = next((i for i in sorted(unfused) if any(n.skeleton for n in self.nests[i])), None)
            if seed is None:
                seed = next(i for i in sorted(unfused) if not (self._producers([i]) & unfused))
            sub = self.grow(seed, unfused)
            if sub is None or all(self.nests[i][0].kind == "view" for i in sub.nodes if i in self.nests) \
                    or not sub.outputs:      # dead code (nothing reads it): leave it to ORT
                unfused.discard(seed)
                continue
            unfused.difference_update(sub.nodes)
            self.support.update(i for i in sub.nodes if i not in self.nests)
            result.append(sub)
        check_partition(self, result)
        return result


def check_partition(ident: Identifier, subgraphs) -> None:
    """Post-condition: subgraphs are disjoint and contracting each keeps the graph acyclic."""
    seen = {}
    for k, sg in enumerate(subgraphs):
        for i in sg.nodes:
            if i in seen:
                raise AssertionError(f"node {ident.view.node_label(i)} is in subgraphs {seen[i]} and {k}")
            seen[i] = k
        if not ident.acyclic_with(sg.nodes):
            raise AssertionError(f"subgraph {k} ({sg.pattern.name}) is not convex")
    # contracted graph: edges between subgraphs (and unfused nodes) must not form a cycle
    group = {i: ("s", seen[i]) if i in seen else ("n", i) for i in range(len(ident.view.nodes))}
    edges = {}
    for i, node in enumerate(ident.view.nodes):
        for t in node.output:
            for u in ident.view.consumers.get(t, []):
                if group[u] != group[i]:
                    edges.setdefault(group[i], set()).add(group[u])
    state = {}
    for start in set(group.values()):
        if state.get(start):
            continue
        stack = [(start, iter(edges.get(start, ())))]
        state[start] = 1
        while stack:
            n, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[n] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                raise AssertionError(f"fused subgraphs form a cycle through {nxt}")
            elif not state.get(nxt):
                state[nxt] = 1
                stack.append((nxt, iter(edges.get(nxt, ()))))


def identify(view: GraphView, warehouse):
    ident = Identifier(view, warehouse)
    return ident.run(), ident
