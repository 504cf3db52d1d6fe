"""Contract fused subgraphs of an ONNX model into ``ai.plus_ep::Fused`` nodes.

Every fused subgraph becomes one node::

    domain="ai.plus_ep", op_type="Fused", overload="<pattern>_<digest[:10]>"

(op_type ``FusedHost<n>`` when the node's first n inputs are shape tensors its launch plan reads on
the host: the launcher declares those inputs CPU-resident, kernels/CONTRACT.md §3), plus a
model-local ``FunctionProto`` with the same ``(domain, name, overload)`` whose body is the original
subgraph (values renamed by position).  Without a custom-op library registered, ONNX Runtime
inlines the function bodies, so the rewritten model computes exactly what the original did on any execution
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import onnx
import onnx.inliner
from onnx import AttributeProto, helper

from ..limits import MAX_SHAPEV
from .index import GraphIndex, topological_order
from .partition import contract_units, describe_position, node_name, order_units, validate_partition

__all__ = [
    "DOMAIN",
    "OP_TYPE",
    "OP_TYPES",
    "fused_op_type",
    "is_fused",
    "FusedSubgraph",
    "fuse",
    "inline_fused",
]

DOMAIN = "ai.plus_ep"
OP_TYPE = "Fused"
MAX_HOST_INPUTS = MAX_SHAPEV  # FusedHost1..FusedHost16: the launcher's limit of `shapev` lines
OP_TYPES = (OP_TYPE,) + tuple(f"FusedHost{n}" for n in range(1, MAX_HOST_INPUTS + 1))


def fused_op_type(host_inputs: int = 0) -> str:
    """The op type of a fused node whose first `host_inputs` inputs are CPU-resident shape tensors."""
    if not 0 <= host_inputs <= MAX_HOST_INPUTS:
        raise ValueError(f"{host_inputs} CPU-resident inputs (at most {MAX_HOST_INPUTS})")
    return OP_TYPES[host_inputs]


def is_fused(node) -> bool:
    """A node (or FunctionProto) of one of the fused op types."""
    return node.domain == DOMAIN and getattr(node, "op_type", getattr(node, "name", None)) in OP_TYPES
DOMAIN_VERSION = 1
MIN_IR_VERSION = 10  # function overloads need IR >= 10

@dataclass(frozen=True)
class FusedSubgraph:
    """One subgraph of the partition to contract into a single fused node."""

    nodes: tuple[int, ...]  # indices into model.graph.node
    pattern: str  # warehouse pattern name, e.g. "gemm_epilogue"
    attrs: Mapping[str, object] = field(default_factory=dict)  # extra node attributes
    inputs: tuple[str, ...] | None = None  # the boundary inputs in the node's order (None: boundary order)
    host_inputs: int = 0  # leading inputs the launcher takes in host memory (op type FusedHost<n>)
    name: str | None = None  # the node's name (None: node_name(pattern, its index in the list given to fuse))
    body: tuple[onnx.NodeProto, ...] | None = None  # the function body's nodes (None: the subgraph's own nodes)


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


def build_functions(
    model: onnx.ModelProto,
    index: GraphIndex,
    subgraphs: Sequence[FusedSubgraph],
    members: Sequence[Sequence[int]],
) -> tuple[list[onnx.NodeProto], dict, set[str]]:
    """One Fused node per subgraph, the model-local functions they call (identical bodies share
    one), and the values that disappear from the graph."""
    types = _value_types(model)
    opset_versions = {o.domain: o.version for o in model.opset_import}
    existing = {(f.domain, f.name, f.overload): f for f in model.functions}
    funcs: dict[tuple[str, str, str], onnx.FunctionProto] = {}
    fused_nodes: list[onnx.NodeProto] = []
    removed: set[str] = set()
    for s, (sg, pos) in enumerate(zip(subgraphs, members)):
        inputs, outputs = index.boundary(pos)
        if sg.inputs is not None:
            if sorted(sg.inputs) != sorted(inputs):
                raise ValueError(f"subgraph {s} ({sg.pattern!r}): its input order {list(sg.inputs)} is not a "
                                 f"permutation of its boundary inputs {list(inputs)}")
            inputs = list(sg.inputs)
        op_type = fused_op_type(sg.host_inputs)
        if not outputs:
            raise ValueError(
                f"subgraph {s} ({sg.pattern!r}) produces no value used outside it (dead code)"
            )
        if sg.body is not None:      # e.g. contrib nodes in place of their expansions (contrib.original_body)
            body, f_in, f_out, canon = _build_body(list(sg.body), range(len(sg.body)), inputs, outputs)
        else:
            body, f_in, f_out, canon = _build_body(index.nodes, pos, inputs, outputs)
        sig = ";".join(_type_sig(types.get(v)) for v in inputs)
        sig += "->" + ";".join(_type_sig(types.get(v)) for v in outputs)
        digest = hashlib.sha256(canon + b"\n" + sig.encode()).hexdigest()
        overload = f"{sg.pattern}_{digest[:10]}"
        fkey = (DOMAIN, op_type, overload)
        if fkey not in funcs:
            domains = sorted({n.domain for n in body})
            func = helper.make_function(
                DOMAIN, op_type, f_in, f_out, body,
                [helper.make_opsetid(d, opset_versions.get(d, 1)) for d in domains],
                doc_string=f"PlusEP fused subgraph, pattern {sg.pattern!r}",
                overload=overload,
            )
            if fkey in existing and existing[fkey].SerializeToString(
                deterministic=True
            ) != func.SerializeToString(deterministic=True):
                raise ValueError(
                    f"model already has a different function {DOMAIN}::{op_type}[{overload}]"
                )
            funcs[fkey] = func
        node = helper.make_node(
            op_type, inputs, outputs, name=sg.name or node_name(sg.pattern, s), domain=DOMAIN, overload=overload
        )
        node.attribute.append(_make_attr("pattern", sg.pattern))
        for k in sorted(sg.attrs):
            if k != "pattern":
                node.attribute.append(_make_attr(k, sg.attrs[k]))
        fused_nodes.append(node)
        kept = set(outputs)
        for p in pos:
            removed.update(o for o in index.nodes[p].output if o and o not in kept)
    return fused_nodes, {k: f for k, f in funcs.items() if k not in existing}, removed


def reassemble(
    out: onnx.ModelProto,
    index: GraphIndex,
    units: Sequence[frozenset[int]],
    unit_order: Sequence[int],
    fused_nodes: Sequence[onnx.NodeProto],
    new_funcs: Mapping,
    removed: set[str],
) -> onnx.ModelProto:
    """Write the contracted graph into ``out`` (a copy of the model) in topological order."""
    graph = out.graph
    n_fused = len(fused_nodes)
    new_nodes = [fused_nodes[u] if u < n_fused else index.nodes[next(iter(units[u]))] for u in unit_order]
    del graph.node[:]
    graph.node.extend(new_nodes)
    kept_vi = [vi for vi in graph.value_info if vi.name not in removed]
    del graph.value_info[:]
    graph.value_info.extend(kept_vi)
    out.functions.extend(new_funcs.values())
    if DOMAIN not in {o.domain for o in out.opset_import}:
        out.opset_import.append(helper.make_opsetid(DOMAIN, DOMAIN_VERSION))
    out.ir_version = max(out.ir_version, MIN_IR_VERSION)
    return out


def fuse(
    model: onnx.ModelProto, subgraphs: Sequence[FusedSubgraph], index: GraphIndex | None = None,
    record_positions: bool = False,
) -> onnx.ModelProto:
    """Return a copy of ``model`` with every subgraph contracted to a Fused node.

    Raises ValueError if the subgraphs overlap, contain nodes with graph
    attributes (If/Loop/Scan), or if contracting them would create a cycle.
    ``index``: the GraphIndex of ``model.graph`` when the caller already has one.
    ``record_positions``: also write metadata POSITIONS (what inline_fused(fused_order=True) reads).
    """
    out = copy.deepcopy(model)
    if not subgraphs:
        return out
    index = index if index is not None else GraphIndex(model.graph)
    members = validate_partition(model, index, subgraphs)
    for s, sg in enumerate(subgraphs):
        if "pattern" in sg.attrs and sg.attrs["pattern"] != sg.pattern:
            raise ValueError(f"subgraph {s}: attrs['pattern']={sg.attrs['pattern']!r} "
                             f"disagrees with pattern={sg.pattern!r}")
    units, preds = contract_units(index, members)

    def describe_unit(u: int) -> str:
        if u < len(subgraphs):
            return f"subgraph {u} ({subgraphs[u].pattern!r})"
        return describe_position(index, next(iter(units[u])))

    unit_order = order_units(units, preds, describe_unit)
    fused_nodes, new_funcs, removed = build_functions(model, index, subgraphs, members)
    out = reassemble(out, index, units, unit_order, fused_nodes, new_funcs, removed)
    if record_positions:
        _record_positions(out, units, unit_order, len(fused_nodes))
    return out


# --------------------------------------------------------------------------- #
# inline
# --------------------------------------------------------------------------- #


POSITIONS = "plus_ep.positions"   # model metadata: per node of a fused graph, its nodes' places before fuse


def _record_positions(out: onnx.ModelProto, units, unit_order, n_fused: int) -> None:
    """Metadata POSITIONS of a fused model: for each node of its graph, in order, the positions (in
    the input graph's topological order) of the nodes it stands for (a fused node: its body's, in
    body order; any other node: its own). inline_fused(fused_order=True) restores that order."""
    import json
    places = [sorted(units[u]) if u < n_fused else [next(iter(units[u]))] for u in unit_order]
    for p in [p for p in out.metadata_props if p.key == POSITIONS]:
        out.metadata_props.remove(p)
    out.metadata_props.append(onnx.StringStringEntryProto(key=POSITIONS, value=json.dumps(places, separators=(",", ":"))))


def _original_order(model: onnx.ModelProto, inlined: onnx.ModelProto) -> None:
    """Reorder ``inlined.graph`` (inline_fused's result for ``model``) in place by POSITIONS."""
    import json
    meta = next((p.value for p in model.metadata_props if p.key == POSITIONS), None)
    try:
        places = json.loads(meta) if meta else None
        keys = [int(k) for node_places in places for k in node_places] if isinstance(places, list) else None
    except (ValueError, TypeError):
        keys = None
    if not keys or len(places) != len(model.graph.node) or len(keys) != len(inlined.graph.node) \
            or sorted(keys) != list(range(len(keys))):
        return                          # no metadata, or not for this graph: keep the inliner's order
    index = GraphIndex(inlined.graph)
    order, leftover = topological_order([index.producers_of([i]) for i in range(len(keys))], key=keys)
    if leftover:
        return
    nodes = [copy.deepcopy(inlined.graph.node[i]) for i in order]
    del inlined.graph.node[:]
    inlined.graph.node.extend(nodes)


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


def inline_fused(model: onnx.ModelProto, fused_order: bool = False) -> onnx.ModelProto:
    """Replace every ``ai.plus_ep::Fused`` node by its function body.

    Uses ``onnx.inliner.inline_selected_functions``, which resolves calls by
    (domain, name, overload) and renames body values uniquely per call.  The
    inlined functions are removed, other model-local functions are kept, and
    the ``ai.plus_ep`` opset import is dropped when nothing uses it anymore.

    ``fused_order``: put the nodes back in the order of the graph fuse() was given (metadata
    ``plus_ep.positions``, written by fuse), so that identifying the result again finds the same
    subgraphs with the same input order (``plus-ep trust`` rebuilds a rewritten model so). The
    contracted graph's own order cannot give that: a fused node that reads another's output (Llama's
    gate GEMM, whose epilogue multiplies by the up projection) comes after it, and a node's boundary
    inputs are numbered in graph order. Without usable metadata the inliner's order stays.
    """
    out = onnx.inliner.inline_selected_functions(model, [(DOMAIN, t) for t in OP_TYPES])
    if fused_order:
        _original_order(model, out)
    still_used = _uses_domain(out.graph, DOMAIN) or any(
        f.domain == DOMAIN or any(n.domain == DOMAIN for n in f.node) for f in out.functions
    )
    if not still_used:
        keep = [o for o in out.opset_import if o.domain != DOMAIN]
        del out.opset_import[:]
        out.opset_import.extend(keep)
    return out
