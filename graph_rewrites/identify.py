"""Subgraph identification: PluS Algorithms 1 and 2 with the match conditions of Fig. 7.

Algorithm 1 takes skeleton operators (a non-parallelizable loop: MatMul, Reduce, Softmax, ...)
first in topological order, then root operators. Algorithm 2 grows a subgraph from it: prologue
producers while a pattern that allows prologues still matches, then epilogue consumers, each followed
by the producers of its other inputs. After every step the +Graph is checked: an exact match is
archived, a partial match lets growth continue, anything else rejects that candidate. When nothing
can be added, the subgraph rolls back to the last exact match. The result is checked to be a
disjoint, acyclic partition.

A horizontal step follows (graph_rewrites/horizontal.py): sibling subgraphs of the same kind that read one
tensor (Q, K and V projections of one input) merge into one subgraph of a horizontal pattern when their
union matches it member by member, stays convex and keeps the partition acyclic; ``groups`` records
every group formed and every sibling refused, with the reason (``plus-ep explain``).
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

from onnx import TensorProto

from . import match, ops
from .primitives import build
from .graph import GraphView
from .lowering import lower_all, roll_groups
from .horizontal import group_horizontal
from ..limits import LITERAL_ELEMENTS
from .placement import conv_tail_reason
from .ir import PGraph
from .partition import Subgraph, check_partition

log = logging.getLogger("plus_ep.identify")


@dataclass
class Verdict:
    exact: object = None                 # the Pattern matched exactly, or None
    exacts: list = field(default_factory=list)    # every exact match, in warehouse priority order
    partial: list = field(default_factory=list)
    reasons: dict = field(default_factory=dict)   # pattern name -> why it refused
    raw: object = None                            # the +Graph before Primitive 4
    roles: object = None                          # the exact pattern's roles on these nodes (its family's Roles)

    @property
    def graph(self):
        """The canonical +Graph of the candidate subgraph."""
        return self.raw.canonical() if self.raw is not None else None

    @property
    def ok(self):
        return self.exact is not None or bool(self.partial)


@dataclass
class Step:
    node: int
    role: str                            # seed | prologue | epilogue | producer
    accepted: bool
    verdict: Verdict


class Identifier:
    """Algorithms 1 and 2 over one GraphView. ``kernels=True`` (kernels will be built): nodes the
    codegen cannot render (ops.unrenderable_reason) stay out of every subgraph, listed in
    ``refused`` with the reason, instead of being identified and dropped at kernel build."""

    def __init__(self, view: GraphView, warehouse, kernels: bool = False):
        self.view, self.warehouse = view, list(warehouse)
        self.index = view.graph_index
        self.nests = lower_all(view)
        self.rolls = roll_groups(view)    # roll Concat -> its Slices (no nests): they join with the Concat
        self.refused: dict = {}          # node -> why the codegen cannot render it (kernels=True)
        if kernels:
            for i in list(self.nests):
                why = ops.unrenderable_reason(view.nodes[i], view)
                if why is not None:
                    self.refused[i] = why
                    del self.nests[i]
        self.desc, self.anc = self.index.descendants, self.index.ancestors
        self.steps: dict = {}            # seed -> [Step]
        self.groups: list = []           # horizontal step: {pattern, a, members, status, reason}
        self.support: set = set()        # shape-only nodes already moved into a subgraph
        self.placed: dict = {}           # seed -> (nodes, reason): grown, then left to ORT (placement.py)
        self._verdicts: dict = {}

    def acyclic_with(self, nodes) -> bool:
        return self.index.is_convex(nodes)

    # ---- matching ----------------------------------------------------------------------------
    def outputs_of(self, nodes) -> list:
        return self.index.outputs(nodes)

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
        verdict = Verdict(cached.exact, list(cached.exacts), list(cached.partial), dict(cached.reasons))
        verdict.raw = full
        self._find_roles(verdict, nodes)
        return verdict

    def _find_roles(self, verdict: Verdict, nodes):
        """Role finding on the nodes of an exact match, pattern by pattern in priority order: the first
        exact pattern without a role finder, or whose role finder accepts, wins (its roles go to the
        verdict); each one refused before it is neither exact nor partial, with the finder's reason."""
        verdict.exact = None
        for p in verdict.exacts:
            if getattr(p, "roles", None) is None:
                verdict.exact = p
                return
            got = p.roles(self.view, sorted(nodes))
            if not isinstance(got, str):
                want = p.family.roles if p.family is not None else None
                if want is not None and not isinstance(got, want):
                    raise TypeError(f"pattern {p.name!r}: its role finder returned a {type(got).__name__}, not "
                                    f"its family's {want.__name__}")
                verdict.exact, verdict.roles = p, got
                return
            verdict.partial = [q for q in verdict.partial if q is not p]
            verdict.reasons[p.name] = f"matched, but refused: {got}"

    def _match(self, g, prologue, epilogue) -> Verdict:
        """Match conditions against every pattern (memoised by skeleton: repeated layers hit)."""
        verdict = Verdict()
        for p in self.warehouse:
            if p.horizontal:             # never grown from a seed: group_horizontal() applies it
                continue
            if prologue and not p.allow_prologue:
                verdict.reasons[p.name] = "pattern does not allow prologue fusion"
                continue
            if epilogue and not p.allow_epilogue:
                verdict.reasons[p.name] = "pattern does not allow epilogue fusion"
                continue
            if p.any_parallel:
                bad = [l for _, l in g.walk() if not l.para or l.key_ops]
                why = f"has non-parallel loop {bad[0].size} {bad[0].key_ops}" if bad else None
                if why is None:
                    verdict.exacts.append(p)
                    verdict.exact = verdict.exact or p
                verdict.reasons.setdefault(p.name, why)
                continue
            why = match.exact(p.match_graph, g)
            if why is None and p.check is not None:
                why = p.check(g)
            if why is None:
                verdict.exacts.append(p)
                verdict.exact = verdict.exact or p
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
            trial = sorted(set(members) | {c} | set(self.rolls.get(c, ())) | self.shape_support(c, members))
            if not self.acyclic_with(trial):
                hull = self.hull(trial, unfused)
                if hull is None:
                    steps.append(Step(c, role, False, Verdict(reasons={"*": "would create a cycle"})))
                    rejected.add(c)
                    return False
                trial = hull
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
                        outputs=self.outputs_of(nodes), roles=verdict.roles)

    def hull(self, nodes, unfused) -> list | None:
        """The convex hull of `nodes`: with every node on a path that leaves them and comes back (and the
        shape-only nodes those read from the set), when each of them is an unfused data node or shape
        arithmetic no subgraph holds (`_shape_chain`); else None. A candidate that would make the subgraph
        non-convex joins together with what lies between, e.g. K's RoPE (Mul(k, cos), Mul(rotate_half(k),
        sin), Add) when the attention already holds the cos/sin shared with Q's RoPE."""
        mask = d = a = 0
        for p in nodes:
            mask |= 1 << p
            d |= self.desc[p]
            a |= self.anc[p]
        between = d & a & ~mask
        add = {p for p in range(between.bit_length()) if between >> p & 1}
        if not add or any((p not in unfused if p in self.nests else not self._shape_chain(p)) for p in add):
            return None
        out = set(nodes) | add
        for p in add:
            out |= self.shape_support(p, out)
        out = sorted(out)
        return out if self.acyclic_with(out) else None

    def _shape_chain(self, p) -> bool:
        """A node of shape arithmetic that no other subgraph holds (Shape -> Gather -> Unsqueeze -> Concat, the
        sizes a Reshape or Expand reads: every output a small 1-D integer tensor): it may move into a subgraph
        with its consumers (the codegen reads such tensors as shape values), unlike data-free computations of
        whole tensors such as a Range-built mask."""
        if p in self.support or self.view.is_data_node(p):
            return False
        for t in self.view.nodes[p].output:
            shape = self.view.shape(t) if t else []
            if t and (self.view.dtypes.get(t) not in (TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL)
                      or shape is None
                      or len(shape) > 1 or not all(isinstance(d, int) and d <= 16 for d in shape)):
                return False
        return True

    def _producers(self, members):
        return {p for p in self.index.producers_of(members) if p in self.nests}

    def _consumers(self, members):
        """Consumers with nests; a roll's Slices stand for their Concat (its view nest reads their source)."""
        out = set()
        for u in self.index.consumers_of(members):
            if u in self.nests:
                out.add(u)
            else:
                out.update(c for c, parts in self.rolls.items() if u in parts and c in self.nests)
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
            why = conv_tail_reason(self.view, sub)
            if why is not None:              # placement.py: ORT's Conv kernel takes this tail
                self.placed[seed] = (sub.nodes, why)
                unfused.difference_update(sub.nodes)
                continue
            unfused.difference_update(sub.nodes)
            self.support.update(i for i in sub.nodes if i not in self.nests)
            result.append(sub)
        result = self.group_horizontal(result)
        self.take_constants(result)
        check_partition(self.index, result, self.view.node_label)
        return result

    def take_constants(self, subgraphs) -> None:
        """Constant nodes read only inside one subgraph move into it: their values stay in the fused
        node's function body instead of becoming inputs of the node and its kernels (TorchScript writes a
        Constant per Slice bound and Unsqueeze axis; a RoPE'd Q, K and V sliced from one projection would
        otherwise pass the launcher's input limit). Only a constant a kernel can hold as a literal moves
        (`LITERAL_ELEMENTS`: a larger one, such as a causal-mask table, stays an input)."""
        where = {p: k for k, sg in enumerate(subgraphs) for p in sg.nodes}
        extra: dict = {}
        for p, node in enumerate(self.view.nodes):
            if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or p in where \
                    or _constant_size(node) > LITERAL_ELEMENTS:
                continue
            users = self.index.users(p)
            homes = {where.get(u) for u in users}
            if users and len(homes) == 1 and None not in homes and not any(
                    o in self.view.outputs for o in node.output):
                extra.setdefault(homes.pop(), []).append(p)
        for k, ps in extra.items():
            subgraphs[k].nodes = tuple(sorted(set(subgraphs[k].nodes) | set(ps)))

    def group_horizontal(self, subgraphs: list) -> list:
        """The horizontal step (graph_rewrites/horizontal.py)."""
        return group_horizontal(self, subgraphs)


def _constant_size(node) -> int:
    """Elements of a Constant node's value."""
    for a in node.attribute:
        if a.name == "value":
            return math.prod(a.t.dims)
        if a.name == "sparse_value":
            return math.prod(a.sparse_tensor.dims)
        if a.name in ("value_ints", "value_floats", "value_strings"):
            return len(a.ints) + len(a.floats) + len(a.strings)
    return 1          # value_int, value_float, value_string


def identify(view: GraphView, warehouse, kernels: bool = False):
    ident = Identifier(view, warehouse, kernels)
    return ident.run(), ident
