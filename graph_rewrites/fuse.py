"""Contract fused subgraphs of an ONNX model into ``ai.plus_ep::Fused`` nodes.

Every fused subgraph becomes one node::

    domain="ai.plus_ep", op_type="Fused", overload="<pattern>_<digest[:10]>"

plus a model-local ``FunctionProto`` with the same ``(domain, name, overload)``
whose body is the original subgraph (values renamed by position).  Without a
custom-op library registered, ONNX Runtime inlines the function bodies, so the
rewritten model computes exactly what the original did on any execution
provider.  Identical subgraphs (same ops, attributes, wiring and boundary
dtypes/ranks) share one function and one overload.

Checked against onnx 1.23 / onnxruntime 1.31:

* ORT resolves model-local functions by ``(domain, name, overload)``; two
  ``Fused`` nodes with different overloads each run their own body.
* ``onnx.checker.check_model(full_check=True)`` and ORT both accept extra node
  attributes that the called function does not declare, so the caller's
  metadata (``pattern``, ``pgraph``...) is stored as plain node attributes.
* ``onnx.inliner`` respects overloads (used by :func:`inline_fused`).
* ``onnx.reference`` ignores overloads: never use it as an oracle here.
"""

from __future__ import annotations

import copy
import hashlib
import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import onnx
import onnx.inliner
from onnx import AttributeProto, helper

__all__ = [
    "DOMAIN",
    "OP_TYPE",
    "FusedSubgraph",
    "boundary",
    "fuse",
    "inline_fused",
]

DOMAIN = "ai.plus_ep"
OP_TYPE = "Fused"
DOMAIN_VERSION = 1
MIN_IR_VERSION = 10  # function overloads need IR >= 10

_GRAPH_ATTR_TYPES = (AttributeProto.GRAPH, AttributeProto.GRAPHS)


@dataclass(frozen=True)
class FusedSubgraph:
    """One subgraph of the partition to contract into a single fused node."""

    nodes: tuple[int, ...]  # indices into model.graph.node
    pattern: str  # warehouse pattern name, e.g. "gemm_epilogue"
    attrs: Mapping[str, object] = field(default_factory=dict)  # extra node attributes


# --------------------------------------------------------------------------- #
# Graph helpers
# --------------------------------------------------------------------------- #


def _has_graph_attr(node: onnx.NodeProto) -> bool:
    return any(a.type in _GRAPH_ATTR_TYPES for a in node.attribute)


def _node_graphs(node: onnx.NodeProto):
    """The graphs held by a node's attributes (If branches, Loop/Scan bodies)."""
    for a in node.attribute:
        if a.type == AttributeProto.GRAPH:
            yield a.g
        elif a.type == AttributeProto.GRAPHS:
            yield from a.graphs


def _subgraph_refs(graph: onnx.GraphProto, out: set[str]) -> None:
    """Names a nested graph uses (conservatively: every name it consumes)."""
    for n in graph.node:
        out.update(i for i in n.input if i)
        for g in _node_graphs(n):
            _subgraph_refs(g, out)
    out.update(o.name for o in graph.output)


def _consumed(node: onnx.NodeProto) -> list[str]:
    """Values a node reads, including outer-scope values used by its subgraphs.

    Ordered: explicit inputs first (in order), then implicit ones (sorted).
    """
    names = [i for i in node.input if i]
    if _has_graph_attr(node):
        implicit: set[str] = set()
        for g in _node_graphs(node):
            _subgraph_refs(g, implicit)
        seen = set(names)
        names += sorted(implicit - seen)
    return names


def _producers(nodes: Sequence[onnx.NodeProto]) -> dict[str, int]:
    prod: dict[str, int] = {}
    for idx, n in enumerate(nodes):
        for o in n.output:
            if o:
                prod[o] = idx
    return prod


def _topo_order(nodes: Sequence[onnx.NodeProto]) -> list[int]:
    """Stable topological order of node indices (ties broken by index)."""
    prod = _producers(nodes)
    succ: list[set[int]] = [set() for _ in nodes]
    indeg = [0] * len(nodes)
    for idx, n in enumerate(nodes):
        preds = {prod[v] for v in _consumed(n) if v in prod and prod[v] != idx}
        indeg[idx] = len(preds)
        for p in preds:
            succ[p].add(idx)
    heap = [i for i, d in enumerate(indeg) if d == 0]
    heapq.heapify(heap)
    order: list[int] = []
    while heap:
        i = heapq.heappop(heap)
        order.append(i)
        for s in succ[i]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(heap, s)
    if len(order) != len(nodes):
        raise ValueError("the input graph contains a cycle")
    return order


def _check_indices(model: onnx.ModelProto, node_indices: Iterable[int]) -> list[int]:
    n_nodes = len(model.graph.node)
    idx = sorted(set(int(i) for i in node_indices))
    if not idx:
        raise ValueError("empty subgraph")
    for i in idx:
        if not 0 <= i < n_nodes:
            raise ValueError(f"node index {i} out of range (graph has {n_nodes} nodes)")
    return idx


def _boundary(
    nodes: Sequence[onnx.NodeProto],
    members: Sequence[int],
    graph_outputs: set[str],
    consumers: Mapping[str, Sequence[int]],
) -> tuple[list[str], list[str]]:
    """``members`` must be in topological order."""
    member_set = set(members)
    produced: set[str] = set()
    for i in members:
        produced.update(o for o in nodes[i].output if o)
    inputs: list[str] = []
    seen_in: set[str] = set()
    outputs: list[str] = []
    for i in members:
        for v in _consumed(nodes[i]):
            if v not in produced and v not in seen_in:
                seen_in.add(v)
                inputs.append(v)
    for i in members:
        for o in nodes[i].output:
            if not o:
                continue
            if o in graph_outputs or any(c not in member_set for c in consumers.get(o, ())):
                outputs.append(o)
    return inputs, outputs


def _consumer_map(nodes: Sequence[onnx.NodeProto]) -> dict[str, list[int]]:
    cons: dict[str, list[int]] = {}
    for idx, n in enumerate(nodes):
        for v in _consumed(n):
            cons.setdefault(v, []).append(idx)
    return cons


def boundary(model: onnx.ModelProto, node_indices: Iterable[int]) -> tuple[list[str], list[str]]:
    """Boundary values ``(inputs, outputs)`` of a subgraph of ``model.graph``.

    inputs: values consumed by the subgraph and produced outside it (graph
    inputs, initializers, outputs of other nodes), in order of first use in the
    subgraph's topological order; empty optional inputs are skipped.
    outputs: values produced inside that are graph outputs or used by a node
    outside the subgraph, in production order.
    """
    idx = set(_check_indices(model, node_indices))
    nodes = list(model.graph.node)
    order = [i for i in _topo_order(nodes) if i in idx]
    return _boundary(nodes, order, {o.name for o in model.graph.output}, _consumer_map(nodes))


# --------------------------------------------------------------------------- #
# Canonical body + digest
# --------------------------------------------------------------------------- #


def _type_sig(tp: onnx.TypeProto | None) -> str:
    """dtype/rank signature of a type (dims themselves are ignored)."""
    if tp is None:
        return "?"
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        t = tp.tensor_type
        rank = len(t.shape.dim) if t.HasField("shape") else "?"
        return f"T{t.elem_type}r{rank}"
    if kind == "sparse_tensor_type":
        t = tp.sparse_tensor_type
        rank = len(t.shape.dim) if t.HasField("shape") else "?"
        return f"S{t.elem_type}r{rank}"
    if kind == "sequence_type":
        return f"seq({_type_sig(tp.sequence_type.elem_type)})"
    if kind == "optional_type":
        return f"opt({_type_sig(tp.optional_type.elem_type)})"
    if kind == "map_type":
        return f"map({tp.map_type.key_type},{_type_sig(tp.map_type.value_type)})"
    return "?"


def _value_types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    """Best-effort types of the top-level values (shape inference on a copy)."""
    from .graph import _strip_weights   # weights as typed inputs: no 400 MB serialisation
    try:
        inferred = onnx.shape_inference.infer_shapes(_strip_weights(model))
    except Exception:  # custom ops, broken models... fall back to what is declared
        inferred = model
    types: dict[str, onnx.TypeProto] = {}
    g = inferred.graph
    for vi in list(g.value_info) + list(g.input) + list(g.output):
        if vi.HasField("type"):
            types[vi.name] = vi.type
    for init in g.initializer:
        tp = onnx.TypeProto()
        tp.tensor_type.elem_type = init.data_type
        shape = tp.tensor_type.shape
        for d in init.dims:
            shape.dim.add().dim_value = d
        types[init.name] = tp
    return types


def _canonical_attr(a: AttributeProto) -> bytes:
    a = copy.deepcopy(a)
    a.ClearField("doc_string")
    if a.HasField("t"):
        a.t.ClearField("name")
        a.t.ClearField("doc_string")
    for t in a.tensors:
        t.ClearField("name")
        t.ClearField("doc_string")
    return a.SerializeToString(deterministic=True)


def _build_body(
    nodes: Sequence[onnx.NodeProto],
    members: Sequence[int],
    inputs: Sequence[str],
    outputs: Sequence[str],
) -> tuple[list[onnx.NodeProto], list[str], list[str], bytes]:
    """Renamed body nodes, formal inputs/outputs and canonical serialization."""
    rename: dict[str, str] = {"": ""}
    for k, v in enumerate(inputs):
        rename[v] = f"x{k}"
    for k, v in enumerate(outputs):
        rename[v] = f"y{k}"
    n_tmp = 0
    body: list[onnx.NodeProto] = []
    canon: list[bytes] = [f"in={len(inputs)};out={len(outputs)}\n".encode()]
    for j, i in enumerate(members):
        src = nodes[i]
        for o in src.output:
            if o and o not in rename:
                rename[o] = f"t{n_tmp}"
                n_tmp += 1
        new = onnx.NodeProto()
        new.op_type = src.op_type
        new.domain = src.domain
        if src.overload:
            new.overload = src.overload
        new.name = f"n{j}"
        new.doc_string = src.doc_string
        new.input.extend(rename[v] for v in src.input)
        new.output.extend(rename[v] for v in src.output)
        new.attribute.extend(src.attribute)
        body.append(new)
        canon.append(
            "|".join(
                [
                    new.domain,
                    new.op_type,
                    new.overload,
                    ",".join(new.input),
                    ",".join(new.output),
                ]
            ).encode()
        )
        for a in sorted(src.attribute, key=lambda a: a.name):
            canon.append(b"@" + _canonical_attr(a))
        canon.append(b"\n")
    return body, [rename[v] for v in inputs], [rename[v] for v in outputs], b"".join(canon)


# --------------------------------------------------------------------------- #
# Node attributes
# --------------------------------------------------------------------------- #


def _make_attr(name: str, value: object) -> AttributeProto:
    if isinstance(value, AttributeProto):
        a = copy.deepcopy(value)
        a.name = name
        return a
    if isinstance(value, bool):
        return helper.make_attribute(name, int(value))
    if isinstance(value, (list, tuple)):
        if not value:
            return helper.make_attribute(name, [], attr_type=AttributeProto.INTS)
        value = [int(v) if isinstance(v, bool) else v for v in value]
        return helper.make_attribute(name, value)
    return helper.make_attribute(name, value)


# --------------------------------------------------------------------------- #
# fuse
# --------------------------------------------------------------------------- #


def _describe(nodes: Sequence[onnx.NodeProto], i: int) -> str:
    n = nodes[i]
    return f"node {i} ({n.op_type} {n.name!r})" if n.name else f"node {i} ({n.op_type})"


def _find_cycle(
    units: Sequence[frozenset[int]], preds: Sequence[set[int]], leftover: set[int]
) -> list[int]:
    """A cycle among ``leftover`` units (each has a predecessor in leftover)."""
    u = min(leftover)
    path: list[int] = []
    pos: dict[int, int] = {}
    while u not in pos:
        pos[u] = len(path)
        path.append(u)
        u = min(p for p in preds[u] if p in leftover)
    return path[pos[u] :]


def _check_convex(
    nodes: Sequence[onnx.NodeProto],
    members: set[int],
    rank: Mapping[int, int],
    consumers: Mapping[str, Sequence[int]],
    sg_index: int,
    pattern: str,
) -> None:
    """Raise if contracting ``members`` alone creates a cycle (path out and back in)."""
    hi = max(rank[i] for i in members)
    stack = []
    seen: set[int] = set()
    for i in members:
        for o in nodes[i].output:
            for c in consumers.get(o, ()) if o else ():
                if c not in members and c not in seen and rank[c] < hi:
                    seen.add(c)
                    stack.append((c, i))
    while stack:
        u, origin = stack.pop()
        for o in nodes[u].output:
            for c in consumers.get(o, ()) if o else ():
                if c in members:
                    raise ValueError(
                        f"contracting subgraph {sg_index} ({pattern!r}) would create a cycle: "
                        f"{_describe(nodes, u)} lies outside it on a path from "
                        f"{_describe(nodes, origin)} back into {_describe(nodes, c)}"
                    )
                if c not in seen and rank[c] < hi:
                    seen.add(c)
                    stack.append((c, origin))


def fuse(model: onnx.ModelProto, subgraphs: Sequence[FusedSubgraph]) -> onnx.ModelProto:
    """Return a copy of ``model`` with every subgraph contracted to a Fused node.

    Raises ValueError if the subgraphs overlap, contain nodes with graph
    attributes (If/Loop/Scan), or if contracting them would create a cycle.
    """
    out = copy.deepcopy(model)
    if not subgraphs:
        return out

    graph = out.graph
    nodes = list(graph.node)
    topo = _topo_order(nodes)
    rank = {i: r for r, i in enumerate(topo)}
    consumers = _consumer_map(nodes)
    producers = _producers(nodes)
    graph_outputs = {o.name for o in graph.output}

    # ---- validation -------------------------------------------------------
    owner: dict[int, int] = {}
    member_lists: list[list[int]] = []
    for s, sg in enumerate(subgraphs):
        if not isinstance(sg.pattern, str) or not sg.pattern:
            raise ValueError(f"subgraph {s} has an empty pattern name")
        try:
            idx = _check_indices(model, sg.nodes)
        except ValueError as e:
            raise ValueError(f"subgraph {s} ({sg.pattern!r}): {e}") from None
        for i in idx:
            if _has_graph_attr(nodes[i]):
                raise ValueError(
                    f"subgraph {s} ({sg.pattern!r}): {_describe(nodes, i)} has a graph "
                    "attribute (If/Loop/Scan) and cannot be fused"
                )
            if i in owner:
                t = owner[i]
                raise ValueError(
                    f"subgraphs are not disjoint: {_describe(nodes, i)} is in subgraph {t} "
                    f"({subgraphs[t].pattern!r}) and subgraph {s} ({sg.pattern!r})"
                )
            owner[i] = s
        if "pattern" in sg.attrs and sg.attrs["pattern"] != sg.pattern:
            raise ValueError(
                f"subgraph {s}: attrs['pattern']={sg.attrs['pattern']!r} "
                f"disagrees with pattern={sg.pattern!r}"
            )
        member_lists.append(sorted(idx, key=rank.__getitem__))

    for s, members in enumerate(member_lists):
        _check_convex(nodes, set(members), rank, consumers, s, subgraphs[s].pattern)

    # ---- contracted graph: units = fused subgraphs + remaining nodes -------
    units: list[frozenset[int]] = [frozenset(m) for m in member_lists]
    unit_of: dict[int, int] = {}
    for u, m in enumerate(units):
        for i in m:
            unit_of[i] = u
    for i in range(len(nodes)):
        if i not in unit_of:
            unit_of[i] = len(units)
            units.append(frozenset((i,)))
    preds: list[set[int]] = [set() for _ in units]
    for u, m in enumerate(units):
        for i in m:
            for v in _consumed(nodes[i]):
                p = producers.get(v)
                if p is not None and unit_of[p] != u:
                    preds[u].add(unit_of[p])
    succs: list[set[int]] = [set() for _ in units]
    for u, ps in enumerate(preds):
        for p in ps:
            succs[p].add(u)
    indeg = [len(p) for p in preds]
    key = [min(rank[i] for i in m) for m in units]
    heap = [(key[u], u) for u in range(len(units)) if indeg[u] == 0]
    heapq.heapify(heap)
    unit_order: list[int] = []
    while heap:
        _, u = heapq.heappop(heap)
        unit_order.append(u)
        for v in succs[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                heapq.heappush(heap, (key[v], v))
    if len(unit_order) != len(units):
        leftover = set(range(len(units))) - set(unit_order)
        cyc = _find_cycle(units, preds, leftover)
        names = [
            f"subgraph {u} ({subgraphs[u].pattern!r})"
            if u < len(subgraphs)
            else _describe(nodes, next(iter(units[u])))
            for u in cyc
        ]
        raise ValueError(
            "contracting the subgraphs would create a cycle: " + " -> ".join(names + names[:1])
        )

    # ---- build fused nodes and functions ----------------------------------
    types = _value_types(model)
    opset_versions = {o.domain: o.version for o in out.opset_import}
    existing_funcs = {(f.domain, f.name, f.overload): f for f in out.functions}
    new_funcs: dict[tuple[str, str, str], onnx.FunctionProto] = {}
    fused_nodes: list[onnx.NodeProto] = []
    removed_values: set[str] = set()

    for s, (sg, members) in enumerate(zip(subgraphs, member_lists)):
        inputs, outputs = _boundary(nodes, members, graph_outputs, consumers)
        if not outputs:
            raise ValueError(
                f"subgraph {s} ({sg.pattern!r}) produces no value used outside it (dead code)"
            )
        body, f_in, f_out, canon = _build_body(nodes, members, inputs, outputs)
        sig = ";".join(_type_sig(types.get(v)) for v in inputs)
        sig += "->" + ";".join(_type_sig(types.get(v)) for v in outputs)
        digest = hashlib.sha256(canon + b"\n" + sig.encode()).hexdigest()
        overload = f"{sg.pattern}_{digest[:10]}"
        fkey = (DOMAIN, OP_TYPE, overload)

        if fkey not in new_funcs:
            domains = sorted({n.domain for n in body})
            func = helper.make_function(
                DOMAIN,
                OP_TYPE,
                f_in,
                f_out,
                body,
                [helper.make_opsetid(d, opset_versions.get(d, 1)) for d in domains],
                doc_string=f"PlusEP fused subgraph, pattern {sg.pattern!r}",
                overload=overload,
            )
            if fkey in existing_funcs:
                if existing_funcs[fkey].SerializeToString(deterministic=True) != func.SerializeToString(
                    deterministic=True
                ):
                    raise ValueError(
                        f"model already has a different function {DOMAIN}::{OP_TYPE}[{overload}]"
                    )
            new_funcs[fkey] = func

        node = helper.make_node(
            OP_TYPE, inputs, outputs, name=f"plus_ep/{sg.pattern}/{s}", domain=DOMAIN, overload=overload
        )
        node.attribute.append(_make_attr("pattern", sg.pattern))
        for k in sorted(sg.attrs):
            if k == "pattern":
                continue
            node.attribute.append(_make_attr(k, sg.attrs[k]))
        fused_nodes.append(node)

        kept = set(outputs)
        for i in members:
            removed_values.update(o for o in nodes[i].output if o and o not in kept)

    # ---- reassemble the graph in topological order ------------------------
    new_nodes = []
    for u in unit_order:
        if u < len(subgraphs):
            new_nodes.append(fused_nodes[u])
        else:
            new_nodes.append(nodes[next(iter(units[u]))])
    del graph.node[:]
    graph.node.extend(new_nodes)

    kept_vi = [vi for vi in graph.value_info if vi.name not in removed_values]
    del graph.value_info[:]
    graph.value_info.extend(kept_vi)

    for fkey, func in new_funcs.items():
        if fkey not in existing_funcs:
            out.functions.append(func)
    if DOMAIN not in opset_versions:
        out.opset_import.append(helper.make_opsetid(DOMAIN, DOMAIN_VERSION))
    out.ir_version = max(out.ir_version, MIN_IR_VERSION)
    return out


# --------------------------------------------------------------------------- #
# inline
# --------------------------------------------------------------------------- #


def _uses_domain(graph: onnx.GraphProto, domain: str) -> bool:
    for n in graph.node:
        if n.domain == domain:
            return True
        for a in n.attribute:
            if a.type == AttributeProto.GRAPH and _uses_domain(a.g, domain):
                return True
            if a.type == AttributeProto.GRAPHS and any(_uses_domain(g, domain) for g in a.graphs):
                return True
    return False


def inline_fused(model: onnx.ModelProto) -> onnx.ModelProto:
    """Replace every ``ai.plus_ep::Fused`` node by its function body.

    Uses ``onnx.inliner.inline_selected_functions``, which resolves calls by
    (domain, name, overload) and renames body values uniquely per call.  The
    inlined functions are removed, other model-local functions are kept, and
    the ``ai.plus_ep`` opset import is dropped when nothing uses it anymore.
    """
    out = onnx.inliner.inline_selected_functions(model, [(DOMAIN, OP_TYPE)])
    still_used = _uses_domain(out.graph, DOMAIN) or any(
        f.domain == DOMAIN or any(n.domain == DOMAIN for n in f.node) for f in out.functions
    )
    if not still_used:
        keep = [o for o in out.opset_import if o.domain != DOMAIN]
        del out.opset_import[:]
        out.opset_import.extend(keep)
    return out
