"""Model-level expansion of contrib ops and its undo for what fusion did not take; the single-node
reference run the +Graph interpreter and the tests use."""
from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..index import GraphIndex, describe_node, implicit_inputs
from . import quant
from .quant import redundant_fake_quant
from .table import contrib_op, expand_node, fold_op
from .emit import Facts, Refused

log = logging.getLogger("plus_ep.contrib")

MIN_OPSET = 13           # Unsqueeze/ReduceSum axes as inputs, Range, LessOrEqual: every expansion's ops


@dataclass
class Group:
    """What one contrib node became."""
    node: onnx.NodeProto                 # the original node
    names: list                          # its expansion's own nodes (node names)
    inits: list                          # initializers the expansion added
    reads_shared: set = field(default_factory=set)   # tensors made by an earlier expansion, shared
    also: list = field(default_factory=list)         # a fold's: original nodes it left unread (put back with it)


@dataclass
class Expanded:
    source: onnx.ModelProto              # the model as given
    model: onnx.ModelProto               # contrib nodes replaced by their expansions
    groups: list = field(default_factory=list)
    refused: dict = field(default_factory=dict)      # "Op node 'name'" -> why it stays opaque
    contained: list | None = field(default=None, repr=False)   # per group: original_body may put it back

    def group_of_node(self, name: str):
        for g in self.groups:
            if name in g.names:
                return g
        return None


class _Initializers(Mapping):
    """Initializer and Constant values by name, converted on first use (weights are split or read only
    when an expansion asks)."""

    def __init__(self, model: onnx.ModelProto, small: dict):
        self._protos = {t.name: t for t in model.graph.initializer}
        self._values = dict(small)

    def __getitem__(self, name):
        if name not in self._values:
            proto = self._protos[name]            # KeyError: not a constant
            if proto.data_location == onnx.TensorProto.EXTERNAL and not proto.raw_data:
                raise KeyError(name)
            self._values[name] = numpy_helper.to_array(proto)
        return self._values[name]

    def __setitem__(self, name, value):
        self._values[name] = value

    def __iter__(self):
        return iter(set(self._protos) | set(self._values))

    def __len__(self):
        return len(set(self._protos) | set(self._values))


def default_opset(model) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def expand_model(model: onnx.ModelProto) -> Expanded:
    """Replace every contrib node that expands by its standard-op subgraph (same outputs, new internal
    names under ``<node>/plus_ep/``). A model without contrib nodes comes back as it is, but for the exact
    identities quant.redundant_fake_quant drops (QuantizeLinear -> DequantizeLinear pairs re-quantizing values
    already on their grid)."""
    model, _ = redundant_fake_quant(model)
    producer = {o: n for n in model.graph.node for o in n.output if o}
    probe = Facts(producer=producer)
    if not any(contrib_op(n) is not None or (n.op_type in ("MatMul", "MatMulInteger") and quant.folds(n, probe))
               for n in model.graph.node):
        return Expanded(model, model)
    label = describe_node
    opset = default_opset(model)
    if opset < MIN_OPSET:
        refused = {label(n): f"the model's opset {opset} is below {MIN_OPSET}, the lowest the expansions "
                             "are written for" for n in model.graph.node if contrib_op(n) is not None}
        return Expanded(model, model, refused=refused)
    from ..graph import GraphView
    view = GraphView.build(model)
    declared = {}
    for vi in list(model.graph.input) + list(model.graph.output):
        if vi.type.tensor_type.HasField("shape"):
            declared[vi.name] = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                                 for d in vi.type.tensor_type.shape.dim]
    facts = Facts(dtype=dict(view.dtypes), shape=dict(view.shapes), const=_Initializers(model, view.consts),
                  opset=opset, declared=declared, producer=producer)
    nodes, inits, groups, refused = [], [], [], {}
    for node in model.graph.node:
        fold = contrib_op(node) is None and fold_op(node, facts) is not None
        if contrib_op(node) is None and not fold:
            nodes.append(node)
            continue
        try:
            e = expand_node(node, facts)
        except Refused as why:
            if fold:                # a standard op that does not fold is simply itself
                nodes.append(node)
                continue
            refused[label(node)] = str(why)
            log.info("%s stays opaque: %s", label(node), why)
            nodes.append(node)
            continue
        nodes.extend(e.nodes)
        inits.extend(e.inits)
        groups.append(Group(node, [n.name for n in e.nodes], [t.name for t in e.inits], set(e.uses_shared)))
    _drop_unread(nodes, groups, {o.name for o in model.graph.output})
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    out.graph.initializer.extend(inits)
    return Expanded(model, out, groups, refused)


def _drop_unread(nodes: list, groups: list, outputs: set) -> None:
    """A fold reads the integers under the DequantizeLinear (and views) its original node read: those nodes, now
    unread, leave the graph with the fold (restore puts them back with the original)."""
    for g in groups:
        if not quant.folds_kind(g.node):
            continue
        while True:
            read = {t for n in nodes for t in list(n.input) + implicit_inputs(n)} | outputs
            gone = [n for n in nodes if n.op_type in quant.UNREAD_AFTER_FOLD and n.output and
                    not any(o in read for o in n.output if o) and n.name not in g.names]
            gone = [n for n in gone if any(o in g.node.input or o in {i for a in g.also for i in a.input}
                                           for o in n.output)]
            if not gone:
                break
            g.also.extend(gone)
            ids = {id(n) for n in gone}
            nodes[:] = [n for n in nodes if id(n) not in ids]


def restore(model: onnx.ModelProto, ex: Expanded) -> onnx.ModelProto:
    """Put back the contrib nodes of `ex` none of whose expansion nodes was fused (all still in
    `model.graph`); drop expansion nodes nothing reads any more and initializers nobody uses; keep the
    graph topologically sorted. `model`: the result of fusing ``ex.model``."""
    if not ex.groups:
        return model
    present = {n.name for n in model.graph.node}
    back = [g for g in ex.groups if all(name in present for name in g.names)]
    first = {g.names[0]: g.node for g in back}            # the original goes where its expansion began
    drop = {name for g in back for name in g.names}
    nodes = [first.get(n.name, n) for n in model.graph.node if n.name not in drop or n.name in first]
    spare = [n for g in ex.groups for n in g.also]      # nodes folds left unread: back where something reads them
    while spare:
        made = {o for n in nodes for o in n.output}
        read = {t for n in nodes for t in n.input}
        need = [n for n in spare if any(o in read and o not in made for o in n.output)]
        if not need:
            break
        nodes += need
        spare = [n for n in spare if all(n is not m for m in need)]
    expansion = {name for g in ex.groups for name in g.names}
    outputs = {o.name for o in model.graph.output}
    while True:                                   # dead expansion nodes (shared ones others stopped using)
        read = {t for n in nodes for t in list(n.input) + implicit_inputs(n)} | outputs
        dead = {id(n) for n in nodes if (n.name in expansion or n.op_type == "DequantizeLinear")
                and not any(o in read for o in n.output if o)}
        if not dead:
            break
        nodes = [n for n in nodes if id(n) not in dead]
    read = {t for n in nodes for t in list(n.input) + implicit_inputs(n)} | outputs
    candidates = {t for g in ex.groups for t in g.inits} | {t for g in ex.groups for t in g.node.input}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    keep = [t for t in out.graph.initializer if t.name not in candidates or t.name in read]
    del out.graph.initializer[:]
    out.graph.initializer.extend(keep)
    order = GraphIndex(out.graph).order
    sorted_nodes = [out.graph.node[i] for i in order]
    del out.graph.node[:]
    out.graph.node.extend(sorted_nodes)
    if back:
        log.info("%d contrib node(s) kept as they were (nothing of them fused)", len(back))
    return out


def original_body(ex: Expanded, nodes) -> list | None:
    """The function body of a fused subgraph of ``ex.model`` (its `nodes`, in graph order) with every contrib
    node whose whole expansion it holds back in place of that expansion, so that ONNX Runtime runs its own
    kernel for it where the fused node is inlined (MatMulNBits keeps its accuracy_level numerics). A group
    stays expanded when it reads a tensor another expansion made, when a tensor of its expansion other
    than the contrib node's outputs is read outside it, or when an input of the contrib node does not reach
    the body (a weight its expansion turned into a new constant). None when nothing is put back.

    >>> original_body(expand_model(model), [ex_model.graph.node[i] for i in subgraph_indices])
    """
    if not ex.groups:
        return None
    names = {n.name for n in nodes}
    if ex.contained is None:
        readers: dict = {}
        for n in ex.model.graph.node:
            for t in list(n.input) + implicit_inputs(n):
                readers.setdefault(t, set()).add(n.name)
        outputs = {o.name for o in ex.model.graph.output}
        by_name = {n.name: n for n in ex.model.graph.node}
        contained = []
        for g in ex.groups:
            own = set(g.names)
            made = {o for nm in g.names for o in by_name[nm].output if o} - set(g.node.output)
            contained.append(not g.reads_shared and not (made & outputs)
                             and all(readers.get(t, set()) <= own for t in made))
        ex.contained = contained
    produced = {o for n in nodes for o in n.output if o}
    available = {t for n in nodes for t in list(n.input) + implicit_inputs(n) if t and t not in produced}
    first = {}
    drop = set()
    for g, ok in zip(ex.groups, ex.contained):
        if ok and set(g.names) <= names:
            first[g.names[0]] = g.node
            drop.update(g.names)
    changed = True
    while changed:      # every put-back node's inputs must reach the body (a weight its expansion re-typed does not)
        changed = False
        made = {o for n in nodes if n.name not in drop for o in n.output if o}
        made |= {o for node in first.values() for o in node.output if o}
        for g in [g for g in ex.groups if g.names[0] in first]:
            if not {t for t in g.node.input if t} <= available | made:
                del first[g.names[0]]
                drop.difference_update(g.names)
                changed = True
    if not first:
        return None
    body = [first.get(n.name, n) for n in nodes if n.name not in drop or n.name in first]
    made_by = {o: k for k, n in enumerate(body) for o in n.output if o}
    done, order = set(), []
    while len(order) < len(body):      # stable topological order (a put-back node may read a later node)
        k = next(k for k in range(len(body)) if k not in done and all(
            made_by.get(t, k) in done | {k} for t in list(body[k].input) + implicit_inputs(body[k])))
        done.add(k)
        order.append(body[k])
    return order


# ---- single-node reference run ----------------------------------------------------------------------
_ELEM = {np.dtype(helper.tensor_dtype_to_np_dtype(t)): t for t in
         (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.INT32,
          onnx.TensorProto.INT64, onnx.TensorProto.UINT8, onnx.TensorProto.INT8, onnx.TensorProto.BOOL)}


def expansion_model(node: onnx.NodeProto, feeds: Mapping[str, np.ndarray], opset: int) -> onnx.ModelProto:
    """A model computing `node` by its expansion, for inputs of the feeds' dtypes and shapes (every feed
    is also known as a constant, so weights split as they would in a model file)."""
    facts = Facts(dtype={k: _ELEM[np.asarray(v).dtype] for k, v in feeds.items()},
                  shape={k: list(np.shape(v)) for k, v in feeds.items()},
                  const={k: np.asarray(v) for k, v in feeds.items()}, opset=max(opset, MIN_OPSET))
    e = expand_node(node, facts)
    ins = [helper.make_tensor_value_info(k, facts.dtype[k], facts.shape[k]) for k in dict.fromkeys(
        t for t in node.input if t)]
    outs = [onnx.ValueInfoProto(name=o) for o in node.output if o]
    graph = helper.make_graph(e.nodes, f"{node.op_type}_expansion", ins, outs, e.inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", facts.opset)], ir_version=10)


def run_node(node: onnx.NodeProto, feeds: Mapping[str, np.ndarray], opset: int = 17) -> dict:
    """Run one contrib node by its expansion on onnx.reference (the +Graph interpreter's way of running
    it); outputs by name."""
    from onnx.reference import ReferenceEvaluator
    model = expansion_model(node, feeds, opset)
    names = [o for o in node.output if o]
    res = ReferenceEvaluator(model).run(None, {k: np.asarray(feeds[k]) for k in dict.fromkeys(
        t for t in node.input if t)})
    return dict(zip(names, (np.asarray(r) for r in res)))
