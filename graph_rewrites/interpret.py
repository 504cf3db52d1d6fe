"""A reference interpreter for +Graphs: executes the loop tree in program order with numpy.

The +Graph claims that pre-order over loop bodies is a valid program order (primitives.py merges only
into the last loop of a body for that reason). This module checks that claim by running it:

* Walk the tree in pre-order; every Stmt runs its ONNX node with whole-tensor semantics through
  ``onnx.reference`` (a contrib op through its expansion, graph_rewrites/contrib, which computes what
  ONNX Runtime's kernel for it does; one single-node ReferenceEvaluator per distinct node, cached by identity,
  built for the model's default-domain opset so e.g. ReduceSum's ``axes`` input/attribute form is
  interpreted the way the original model means it).
* Before a Stmt runs, every tensor its node reads must exist: a feed, a constant, the output of an
  earlier Stmt, or the output of a *support* node (below). Otherwise ``InterpreterError`` names the
  statement and the missing tensor. A Stmt that rewrites a tensor that already exists, or a
  +Graph output nobody produced, is an error as well.
* Loop sizes are checked against the runtime shapes. Symbols of the model's symbolic shapes
  (``shapes``: tensor -> [int | str | None]) are bound from the first runtime array whose
  symbolic dim is exactly that symbol; a later array that contradicts a binding is an error. When
  the walk enters a Loop its size (an int, or a "*"-product of ints and symbols such as
  "batch*seq" or "4*seq") is evaluated as soon as all its symbols are bound and must be a
  positive int (or a static 0: a zero-extent dim); every tensor that a Stmt inside the loop
  reads or writes whose symbolic dim string equals the loop's size string must have exactly that
  runtime extent. Dims starting with "?", expressions that are not plain products ("seq+1"), and
  symbols that never get bound are not checked: the check may miss things but never rejects a
  valid model.
* Iteration spaces: the loops enclosing a placed (non-absorbed, non-view) statement are exactly
  its nest's loops after merging (Primitives 1/2 need equal sizes, reshape groups and chains
  equal products), so the product of their evaluated sizes must equal the statement's iteration
  count from runtime shapes: numel(output) for element-wise/injective ops, numel(input) for
  reductions and Split, numel(output) * K for MatMul/Gemm. This also checks int sizes and
  catches a statement nested under a loop it does not iterate. Skipped when any enclosing size
  cannot be evaluated.

Support nodes: a fused subgraph may contain shape-only nodes (Shape -> Gather -> Concat feeding a
Reshape) that were moved into it so contraction stays acyclic but that have no nest and hence no
Stmt. They are passed as ``support`` and run *lazily*: when a Stmt (or another support node)
needs one of their outputs, the node runs then, provided its own inputs are available at that
point (recursively through other support nodes). Running them lazily rather than up front keeps
the program-order check meaningful for support nodes that read tensors produced inside the tree.
One exception: a Shape node of an intermediate needs only its dims, which the kernel knows from the
symbolic shapes, so a statement may come before the intermediate's producer (Expand(b, Shape(t)) placed
ahead of t). Such a Shape reads ``shapes[t]`` under the bound symbols; when t's statement runs later,
its run-time shape must equal what was read, and t must be produced by the end.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from . import dims, ops
from .index import describe_node
from .lowering import default_opset
from .ir import Loop, PGraph, Stmt

__all__ = ["InterpreterError", "run_pgraph", "run_subgraph", "subgraph_program", "model_program", "eval_size"]

_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class InterpreterError(RuntimeError):
    """The +Graph is not a valid program for the given feeds (order or loop-size violation)."""


# ---- single-node execution -------------------------------------------------------------------
_CACHE: dict = {}          # (id(node), opset) -> (node, evaluator); the node ref pins the id
_CACHE_MAX = 8192


class _ContribEvaluator:
    """A com.microsoft contrib node (or ORT's SimplifiedLayerNormalization) run by its expansion
    (graph_rewrites/contrib), built for the dtypes and shapes of each call's inputs."""

    def __init__(self, node: onnx.NodeProto, opset: int):
        self.node, self.opset = node, opset

    def run(self, _names, feeds):
        from .contrib import run_node
        res = run_node(self.node, feeds, self.opset)
        return [res[t] for t in self.node.output if t]


def _evaluator(node: onnx.NodeProto, opset: int):
    key = (id(node), opset)
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is node:
        return hit[1]
    from .contrib import contrib_op
    if contrib_op(node) is not None:
        _CACHE[key] = (node, _ContribEvaluator(node, opset))
        return _CACHE[key][1]
    from onnx.reference import ReferenceEvaluator
    ins = list(dict.fromkeys(t for t in node.input if t))
    outs = [t for t in node.output if t]
    graph = helper.make_graph([node], "stmt", [onnx.ValueInfoProto(name=t) for t in ins],
                              [onnx.ValueInfoProto(name=t) for t in outs])
    opsets = [helper.make_opsetid("", opset)]
    if node.domain not in ("", "ai.onnx"):
        opsets.append(helper.make_opsetid(node.domain, 1))
    model = helper.make_model(graph, opset_imports=opsets)
    ev = ReferenceEvaluator(model)
    if len(_CACHE) >= _CACHE_MAX:
        _CACHE.clear()
    _CACHE[key] = (node, ev)
    return ev


def _run_node(node: onnx.NodeProto, values: dict, opset: int) -> dict:
    ev = _evaluator(node, opset)
    feeds = {t: values[t] for t in dict.fromkeys(t for t in node.input if t)}
    res = ev.run(None, feeds)
    outs = [t for t in node.output if t]
    return {t: np.asarray(v) for t, v in zip(outs, res)}


_label = describe_node


def _is_shape(node) -> bool:
    return node.op_type == "Shape" and node.domain in ("", "ai.onnx") and bool(node.input and node.input[0])


# ---- symbolic sizes ----------------------------------------------------------------------------
def _factors(size):
    """(int coefficient, symbols) of a size, or None when it is not a plain product."""
    return dims.factor(size, strict=True)


def eval_size(size, bindings: Mapping[str, int]):
    """The int value of a loop size under ``bindings``, or None while it cannot be evaluated."""
    f = _factors(size)
    if f is None:
        return None
    coef, syms = f
    for s in syms:
        if s not in bindings:
            return None
        coef *= bindings[s]
    return coef


class _Checker:
    def __init__(self, shapes: Mapping | None):
        self.stats: dict = {"loops_evaluated": 0, "dims_checked": 0}
        self.shapes = shapes or {}
        self.bound: dict = {}          # symbol -> int
        self.source: dict = {}         # symbol -> "tensor[axis]" it was bound from

    def sym_shape(self, name, arr):
        s = self.shapes.get(name)
        if s is None or len(s) != np.ndim(arr):
            return None
        return s

    def bind(self, name, arr, where):
        s = self.sym_shape(name, arr)
        if s is None:
            return
        for a, (d, r) in enumerate(zip(s, np.shape(arr))):
            if not isinstance(d, str) or d.startswith("?") or not _SYMBOL.fullmatch(d):
                continue
            if d not in self.bound:
                self.bound[d] = int(r)
                self.source[d] = f"{name}[{a}]"
            elif self.bound[d] != r:
                raise InterpreterError(
                    f"{where}: tensor '{name}' axis {a} is {r} at run time but its symbolic dim "
                    f"'{d}' was bound to {self.bound[d]} by {self.source[d]}")

    def check_loop(self, frame, names, values, where):
        """frame = [loop, value|None]; evaluate lazily, then check tensors against it."""
        loop = frame[0]
        if frame[1] is None:
            v = eval_size(loop.size, self.bound)
            if v is None:
                return
            # a static 0 is a valid zero-extent dim (Trilu of a 3x0x5 tensor); a symbolic size
            # that evaluates to 0 or less is not
            if v < 0 or (v == 0 and not isinstance(loop.size, (int, np.integer))):
                raise InterpreterError(f"{where}: loop of size {loop.size} evaluates to {v} "
                                       f"with {self._bindings_of(loop.size)}")
            frame[1] = v
            self.stats["loops_evaluated"] += 1
        size_str = str(loop.size).replace(" ", "")
        if isinstance(loop.size, (int, np.integer)):
            return
        for t in names:
            arr = values.get(t)
            if arr is None:
                continue
            s = self.sym_shape(t, arr)
            if s is None:
                continue
            for a, d in enumerate(s):
                if not (isinstance(d, str) and d.replace(" ", "") == size_str):
                    continue
                self.stats["dims_checked"] += 1
                if np.shape(arr)[a] != frame[1]:
                    raise InterpreterError(
                        f"{where}: loop size {loop.size} = {frame[1]} ({self._bindings_of(loop.size)}) "
                        f"but tensor '{t}' axis {a} ('{d}') is {np.shape(arr)[a]} at run time")

    def _bindings_of(self, size):
        f = _factors(size)
        syms = f[1] if f else []
        return ", ".join(f"{s}={self.bound[s]} from {self.source[s]}" for s in syms if s in self.bound) \
            or "no symbols"


# ---- iteration spaces --------------------------------------------------------------------------
_VIEW_OPS = ops.of_kind("view")
_REDUCE_OPS = ops.of_kind("reduce")


def _iteration_space(node, values):
    """Number of loop iterations a placed (non-absorbed) statement's nest has, from runtime shapes
    (unit axes have no loop, so this is a plain element count), or None for views and ops whose
    nest is not known here. The enclosing loops of such a statement are exactly its nest's loops
    (merged ones included), so their sizes must multiply to this."""
    from .lowering import known_ops
    op = node.op_type
    if node.domain not in ("", "ai.onnx") or op in _VIEW_OPS or op not in known_ops():
        return None
    try:
        if op in ("MatMul", "MatMulInteger"):      # output elements x the contracted dim
            a = values[node.input[0]]
            return int(np.size(values[node.output[0]])) * int(np.shape(a)[-1])
        if op == "Gemm":
            a = np.shape(values[node.input[0]])
            trans_a = next((x.i for x in node.attribute if x.name == "transA"), 0)
            return int(np.size(values[node.output[0]])) * int(a[0] if trans_a else a[1])
        if op in _REDUCE_OPS or op == "Split":
            return int(np.size(values[node.input[0]]))
        return int(np.size(values[node.output[0]]))
    except (KeyError, IndexError):
        return None


# ---- the walk ----------------------------------------------------------------------------------
def run_pgraph(pgraph: PGraph, feeds: Mapping[str, np.ndarray], consts: Mapping[str, np.ndarray] = {},
               opset: int = 17, shapes: Mapping[str, list] | None = None,
               support: Iterable[onnx.NodeProto] = (), stats: dict | None = None) -> dict:
    """Execute ``pgraph`` in program order; return every tensor produced (Stmts and support nodes).

    ``feeds``: boundary inputs; ``consts``: synthetic constants of decomposed nodes (and any other
    constant); ``opset``: the original model's default-domain opset; ``shapes``: symbolic shapes
    (GraphView.shapes plus the nests' synthetic shapes) used by the loop-size check;
    ``support``: nodes outside the loop tree run lazily when their outputs are needed;
    ``stats``: when given, filled with counts (statements, support nodes run, loops, loops whose
    size was evaluated, tensor dims checked against a loop size, sizes never evaluated).
    Raises InterpreterError on a program-order or loop-size violation.
    """
    values: dict = {}
    values.update({k: np.asarray(v) for k, v in consts.items()})
    values.update({k: np.asarray(v) for k, v in feeds.items()})
    produced: dict = {}
    checker = _Checker(shapes)
    st = stats if stats is not None else {}
    for k in ("statements", "support", "loops", "loops_evaluated", "dims_checked", "spaces_checked"):
        st.setdefault(k, 0)
    st.setdefault("unevaluated", [])
    checker.stats = st
    for k, v in values.items():
        checker.bind(k, v, "feeds")
    support = list(support)
    support_of = {t: n for n in support for t in n.output if t}
    done_support: set = set()
    counter = [0]
    shapes_known = shapes or {}
    promised: dict = {}        # tensor -> (dims a Shape node read before its statement ran, who read them)

    def unavailable(t, where):
        return InterpreterError(
            f"{where} reads '{t}', which is not available at this point in program order "
            f"(not a feed, a constant, or the output of an earlier statement)")

    def shape_read(node, sw):
        """A Shape node's output from its input's symbolic dims, when the input is a later statement's."""
        t = node.input[0]
        if t not in shapes_known:
            raise unavailable(t, sw)
        sizes = [d if isinstance(d, (int, np.integer)) else eval_size(d, checker.bound) if isinstance(d, str)
                 else None for d in shapes_known[t]]
        if any(d is None for d in sizes):
            raise InterpreterError(f"{sw} reads '{t}' before a statement produces it, and its dims "
                                   f"{shapes_known[t]} are not known from the feeds")
        promised[t] = (tuple(int(d) for d in sizes), sw)
        start, end = ops.attr(node, "start", 0), ops.attr(node, "end")
        return {node.output[0]: np.array(sizes[start:end], np.int64)}

    def need(t, where, stack=()):
        """Make tensor t available (running support nodes lazily) or raise."""
        if t in values:
            return
        node = support_of.get(t)
        if node is None or id(node) in done_support or id(node) in stack:
            raise unavailable(t, where)
        sw = f"support {_label(node)} (needed by {where})"
        if _is_shape(node) and node.input[0] not in values and node.input[0] not in support_of:
            out = shape_read(node, sw)
        else:
            for u in dict.fromkeys(x for x in node.input if x):
                need(u, sw, stack + (id(node),))
            out = _run_node(node, values, opset)
        done_support.add(id(node))
        st["support"] += 1
        for o, v in out.items():
            values[o] = produced[o] = v
            checker.bind(o, v, sw)

    def stmt(s: Stmt, frames):
        counter[0] += 1
        st["statements"] += 1
        where = f"statement #{counter[0]} ({s.op}, {_label(s.node)})"
        for t in dict.fromkeys(x for x in s.node.input if x):
            need(t, where)
        for frame in frames:
            checker.check_loop(frame, [t for t in s.node.input if t], values, where)
        out = _run_node(s.node, values, opset)
        for o, v in out.items():
            if o in values:
                raise InterpreterError(f"{where} writes '{o}', which already exists "
                                       f"(a statement placed twice, or a feed overwritten)")
            values[o] = produced[o] = v
            checker.bind(o, v, where)
            if o in promised and np.shape(v) != promised[o][0]:
                raise InterpreterError(f"{where} produces '{o}' of shape {np.shape(v)}, but {promised[o][1]} "
                                       f"read its shape as {promised[o][0]} from its symbolic dims")
        for frame in frames:
            checker.check_loop(frame, list(out), values, where)
        evaluated = {id(f[0]): f[1] for f in frames if f[1] is not None}
        for t, per_axis in s.axes.items():
            arr = values.get(t)
            for a, loop in per_axis.items():
                size = evaluated.get(id(loop))
                if arr is None or size is None or a >= np.ndim(arr):
                    continue
                st["axes_checked"] = st.get("axes_checked", 0) + 1
                if np.shape(arr)[a] != size:
                    raise InterpreterError(
                        f"{where}: axis {a} of '{t}' is iterated by loop [{loop.size}]={size}, "
                        f"but it has {np.shape(arr)[a]} elements at run time")
        # a roll's Concat lowers to a view nest (lowering.roll_groups): no loops of its own, like any view
        if not s.absorbed and s.op != "roll":
            space = _iteration_space(s.node, values)
            if space is not None and all(f[1] is not None for f in frames):
                loops = int(np.prod([f[1] for f in frames], dtype=np.int64)) if frames else 1
                st["spaces_checked"] += 1
                if loops != space:
                    sizes = " x ".join(f"{f[0].size}={f[1]}" for f in frames) or "no loop"
                    raise InterpreterError(
                        f"{where}: the loops around it ({sizes}) cover {loops} iterations but the "
                        f"statement's iteration space at run time is {space}")

    def walk(body, frames):
        for item in body:
            if isinstance(item, Loop):
                frame = [item, None]
                st["loops"] += 1
                checker.check_loop(frame, [], values, f"loop [{item.size}]")
                walk(item.body, frames + [frame])
                checker.check_loop(frame, [], values, f"end of loop [{item.size}]")
                if frame[1] is None:
                    st["unevaluated"].append(item.size)
            elif isinstance(item, Stmt):
                stmt(item, frames)
            else:
                raise InterpreterError(f"unexpected item {type(item).__name__} in a +Graph body")

    walk(pgraph.body, [])
    for t in pgraph.outputs:
        need(t, f"+Graph output '{t}'")
    for t, (_, who) in promised.items():
        if t not in values:
            raise InterpreterError(f"{who} read the shape of '{t}', which no statement produces")
    return produced


# ---- fused subgraphs of a rewrite --------------------------------------------------------------
def subgraph_program(result, sub):
    """(pgraph, consts, shapes, support nodes, opset) of one fused subgraph of a RewriteResult."""
    ident, view = result.identifier, result.view
    pg = ident.pgraph(sub.nodes)
    consts, shapes = {}, dict(view.shapes)
    for i in sub.nodes:
        for n in ident.nests.get(i, ()):
            consts.update(n.consts)
            shapes.update(n.shapes)
    support = [view.nodes[i] for i in sub.nodes if i not in ident.nests]
    return pg, consts, shapes, support, default_opset(view.model)


def model_program(model: onnx.ModelProto):
    """(consts, shapes, opset) that ``run_pgraph`` needs for ``primitives.pgraph_of_model(model)``:
    the model's initializers, the synthetic constants and shapes of decomposed nodes (lowering is
    deterministic, so re-lowering names them exactly as the +Graph does), and its opset."""
    from .graph import GraphView
    from .lowering import lower_all
    view = GraphView.build(model)
    consts = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    shapes = dict(view.shapes)
    for nests in lower_all(view).values():
        for n in nests:
            consts.update(n.consts)
            shapes.update(n.shapes)
    return consts, shapes, default_opset(model)


def run_subgraph(result, sub, feeds: Mapping[str, np.ndarray], stats: dict | None = None) -> dict:
    """Run one fused subgraph (partition.Subgraph of ``result``, a plus_ep.rewrite.RewriteResult).

    Builds the uncollapsed +Graph with ``identifier.pgraph(sub.nodes)``, adds the synthetic
    constants/shapes of its nests, and runs the shape-support nodes lazily (see module doc).
    Boundary inputs missing from ``feeds`` are taken from the original model's initializers and
    small constants when possible."""
    pg, consts, shapes, support, opset = subgraph_program(result, sub)
    view = result.view
    feeds = dict(feeds)
    needed = {t for i in sub.nodes for t in view.nodes[i].input if t}
    missing = needed - set(feeds) - set(consts) - {t for i in sub.nodes for t in view.nodes[i].output}
    if missing:
        inits = {i.name: i for i in view.model.graph.initializer if i.name in missing}
        for t in missing:
            if t in inits:
                feeds[t] = numpy_helper.to_array(inits[t])
            elif t in view.consts:
                feeds[t] = view.consts[t]
    return run_pgraph(pg, feeds, consts, opset=opset, shapes=shapes, support=support, stats=stats)
