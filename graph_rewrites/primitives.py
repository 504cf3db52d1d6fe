"""Build the +Graph of a set of nodes with the transformation primitives of PluS §4.1.

Nodes are merged in topological order; each node B is merged across its hub tensors with the loops
that produced them (prev_loop) level by level:

* Primitive 1 — prev_loop and cur_loop have the same size and are both parallelizable: merge.
* Primitive 2 — same size, prev_loop parallelizable, cur_loop not: merge, the loop becomes
  non-parallelizable.
* Primitive 3 — prev_loop non-parallelizable: cur_loop and everything inside it form a new loop.

A merge only targets the last loop of the current body, so pre-order stays a valid program order.
Prologue ops (element-wise/injective ops whose data come from outside the subgraph) fold into the
loads of their first consumer in a subgraph that has a skeleton: their loops coincide with the
consumer's, which is what Primitives 1/2 give when a producer is merged into its consumer.
Primitive 4 (collapsing) is `PGraph.canonical()`. `pgraph_of_model` lowers a whole (small) model into
its +Graph: the warehouse's patterns and the tests read models that way.

    g = pgraph_of_model(model).canonical()
"""
from __future__ import annotations

from typing import Iterable

import onnx

from . import dims
from .graph import GraphView
from .ir import Loop, PGraph, Stmt
from .lowering import Nest, lower_all


same_size, _product = dims.same, dims.product


def _chain(target, cands):
    """`cands` as a perfectly nested chain starting at `target` (outermost first), or None."""
    chain, loop = [target], target
    while len(chain) < len(cands):
        inner = loop.loops()
        if not inner or inner[-1] not in cands:
            return None
        loop = inner[-1]
        chain.append(loop)
    return chain if set(chain) == cands else None


class Builder:
    def __init__(self, nests_by_node: dict, order: Iterable[int]):
        self.order = sorted(order)
        self.nests = [n for i in self.order for n in nests_by_node[i]]
        self.graph = PGraph()
        self.axis_loops: dict = {}     # tensor -> [tuple(Loop) per axis]
        self.pending: dict = {}        # tensor -> Nest (prologue op waiting for a consumer)
        self.produced: set = set()
        self.home: dict = {}           # tensor -> the body (Loop or PGraph) of its statement
        self.consts = {k for n in self.nests for k in n.consts}
        self.absorb = any(n.skeleton for n in self.nests)

    # ------------------------------------------------------------------------------------------
    def run(self, outputs=None) -> PGraph:
        for nest in self.nests:
            self._add(nest)
        for t, nest in list(self.pending.items()):      # prologue ops nobody consumed here
            if t in self.pending:
                self.pending.pop(t)
                self._place(nest)
        stmts = self.graph.statements()
        made = {t for s in stmts for t in s.outputs}
        ins = []
        for s in stmts:
            for t in s.inputs:
                if t not in made and t not in self.consts and t not in ins:
                    ins.append(t)
        used = {t for s in stmts for t in s.inputs}
        self.graph.inputs = ins
        self.graph.outputs = list(outputs) if outputs is not None else \
            [t for s in stmts for t in s.outputs if t not in used]
        return self.graph

    def _hubs(self, nest: Nest):
        return [t for t in nest.ins if t in self.axis_loops]

    def _add(self, nest: Nest):
        external = all(t not in self.produced for t in nest.ins)
        if self.absorb and nest.kind in ("elementwise", "injective", "view") and external:
            for t in nest.outs:
                self.pending[t] = nest
            return
        if nest.kind == "view":
            self._view(nest)
            return
        self._place(nest)

    # ------------------------------------------------------------------------------------------
    def _view(self, nest: Nest):
        src = next(iter(nest.ins))
        src_loops = self.axis_loops.get(src)
        for out, vmap in nest.view.items():
            if src_loops is None:
                self.axis_loops[out] = [()] * len(vmap)
            else:
                self.axis_loops[out] = [tuple(dict.fromkeys(l for j in axes for l in src_loops[j]))
                                        for axes in vmap]
            self.produced.add(out)
        self._append(self.home.get(src, self.graph), Stmt(nest.node, nest.op, data_inputs=tuple(nest.ins)))

    def _append(self, owner, stmt: Stmt, tag: bool = True):
        """Put a statement at the end of a body and remember where its outputs live."""
        if tag and isinstance(owner, Loop):
            owner.add_op(stmt.op)
        owner.body.append(stmt)
        for t in stmt.outputs:
            self.home[t] = owner

    def _place(self, nest: Nest):
        hubs = self._hubs(nest)
        reads = set(nest.ins)
        parent, objs = self.graph, []
        loops = nest.loops
        while len(objs) < len(loops):
            d = len(objs)
            size, para = loops[d]
            cands = self._cands(nest, hubs, d)
            target, after = _last_loop(parent)
            if target is None or not target.para or any(set(s.outputs) & reads for s in after):
                break                                   # Primitive 3 / nothing to merge with
            if cands == {target} and same_size(target.size, size):
                target.para = para                      # Primitive 1 (para) or 2 (non-para)
                objs.append(target)
                parent = target
                continue
            # a reshape between producer and consumer: several consumer loops over one producer
            # loop, or one consumer loop over a nested chain of producer loops
            group = d
            while group + 1 < len(loops) and self._cands(nest, hubs, group + 1) == {target} \
                    and loops[group + 1][1] == para:
                group += 1
            if cands == {target} and group > d and para and \
                    _product([target.size]) == _product([sz for sz, _ in loops[d:group + 1]]):
                objs += [target] * (group + 1 - d)
                parent = target
                continue
            chain = _chain(target, cands) if len(cands) > 1 else None
            if chain and para and all(c.para for c in chain) and \
                    _product([c.size for c in chain]) == _product([size]):
                objs.append(chain[-1])
                parent = chain[-1]
                continue
            break                                       # Primitive 3 / no correspondence
        for size, para in nest.loops[len(objs):]:
            loop = Loop(size, para)
            parent.body.append(loop)
            objs.append(loop)
            parent = loop
        for t, axes in nest.ins.items():
            for ks in axes:
                for k in ks:
                    objs[k].tensors.add(t)
        for t in nest.ins:
            if t in self.pending:
                self._absorb(t, [tuple(objs[k] for k in ks) for ks in nest.ins[t]], parent)
        if isinstance(parent, Loop):
            parent.add_op(nest.op)
        for k, tag in nest.tags:
            objs[k].add_op(tag)
        self._append(parent, Stmt(nest.node, nest.op, data_inputs=tuple(nest.ins),
                                  axes=self._exact_axes(nest, objs)), tag=False)
        for t, axes in nest.outs.items():
            self.axis_loops[t] = [tuple(objs[k] for k in ks) for ks in axes]
            self.produced.add(t)

    @staticmethod
    def _exact_axes(nest, objs) -> dict:
        """Tensor axes iterated by exactly one loop of the same size (what the interpreter checks
        against runtime shapes); reshape-merged loops and injective ops are left out."""
        if nest.kind not in ("elementwise", "reduce", "dot"):
            return {}
        uses = {}
        for o in objs:
            uses[id(o)] = uses.get(id(o), 0) + 1
        found = {}
        for t, axes in list(nest.ins.items()) + list(nest.outs.items()):
            for a, ks in enumerate(axes):
                if len(ks) == 1 and uses[id(objs[ks[0]])] == 1 and \
                        same_size(objs[ks[0]].size, nest.loops[ks[0]][0]):
                    found.setdefault(t, {})[a] = objs[ks[0]]
        return found

    def _cands(self, nest, hubs, d) -> set:
        """prev_loops: the loops that produced the hub-tensor axes iterated by loop d."""
        cands = set()
        for t in hubs:
            for a, ks in enumerate(nest.ins[t]):
                if d in ks and a < len(self.axis_loops[t]):
                    cands.update(self.axis_loops[t][a])
        return cands

    def _absorb(self, t, loops_per_axis, home):
        """Fold the pending producer of `t` (and its pending producers) into `home`."""
        nest = self.pending.get(t)
        if nest is None:
            return
        for o in nest.outs:
            self.pending.pop(o, None)
        if nest.kind == "view":
            src = next(iter(nest.ins))
            vmap = nest.view[t]
            src_loops = [()] * len(nest.ins[src])
            for a, axes in enumerate(vmap):
                for j in axes:
                    src_loops[j] = tuple(dict.fromkeys(src_loops[j] + loops_per_axis[a]))
            in_loops = {src: src_loops}
        else:
            by_k: dict = {}
            for a, ks in enumerate(nest.outs[t]):
                for k in ks:
                    by_k[k] = loops_per_axis[a]
            in_loops = {s: [tuple(dict.fromkeys(l for k in ks for l in by_k.get(k, ()))) for ks in axes]
                        for s, axes in nest.ins.items()}
            for o, axes in nest.outs.items():
                self.axis_loops[o] = [tuple(l for k in ks for l in by_k.get(k, ())) for ks in axes]
                self.produced.add(o)
        for s, per_axis in in_loops.items():
            if s in self.pending:
                self._absorb(s, per_axis, home)
            else:
                for loops in per_axis:
                    for loop in loops:
                        loop.tensors.add(s)
        self.axis_loops[t] = list(loops_per_axis)
        self.produced.add(t)
        self._append(home, Stmt(nest.node, nest.op, absorbed=True, data_inputs=tuple(nest.ins)))


def _last_loop(parent):
    """The last loop of a body and the statements after it."""
    for i in range(len(parent.body) - 1, -1, -1):
        if isinstance(parent.body[i], Loop):
            return parent.body[i], parent.body[i + 1:]
    return None, parent.body


def build(nests_by_node: dict, nodes: Iterable[int], outputs=None) -> PGraph:
    """The (uncollapsed) +Graph of `nodes`; `nests_by_node` maps node index -> lowered nests."""
    return Builder(nests_by_node, nodes).run(outputs)


def pgraph_of_model(model: onnx.ModelProto) -> PGraph:
    """+Graph of every data node of `model` (uncollapsed; call .canonical() for Primitive 4)."""
    nests = lower_all(GraphView.build(model), strict=True)
    return build(nests, nests, outputs=[o.name for o in model.graph.output])
