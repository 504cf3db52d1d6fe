"""The fusion report behind `plus-ep inspect`: ops, data kernels before/after, patterns, +Graphs."""
from __future__ import annotations

from collections import Counter

import onnx

from .graph_rewrites.fuse import is_fused
from .graph_rewrites.graph import GraphView
from .graph_rewrites.ops import ALIAS_OPS, SHAPE_OPS


def data_kernels(model: onnx.ModelProto, view: GraphView | None = None) -> int:
    """Nodes that compute on graph-input data, excluding Shape/Size and the pure aliases
    (Reshape, Squeeze, Unsqueeze, Flatten, Identity, Dropout); a fused node counts as one."""
    view = view or GraphView.build(model, infer=False)
    count = 0
    for i, n in enumerate(view.nodes):
        if is_fused(n):
            count += 1
        elif n.op_type not in ALIAS_OPS and n.op_type not in SHAPE_OPS and view.is_data_node(i):
            count += 1
    return count


def op_histogram(model: onnx.ModelProto) -> dict:
    return dict(Counter(n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}"
                        for n in model.graph.node).most_common())


def report(result) -> dict:
    """A JSON-able report of a `RewriteResult`."""
    before, after = getattr(result, "source", None) or result.view.model, result.model
    subgraphs = []
    for k, sg in enumerate(result.subgraphs):
        subgraphs.append({
            "id": k, "pattern": sg.pattern.name,
            "nodes": [result.view.nodes[i].name or result.view.nodes[i].output[0] for i in sg.nodes],
            "ops": [result.view.nodes[i].op_type for i in sg.nodes],
            "outputs": list(sg.outputs), "pgraph": sg.pgraph.render(),
            "hash": sg.pgraph.structural_hash(),
        })
    return {
        "nodes_before": len(before.graph.node), "nodes_after": len(after.graph.node),
        "data_kernels_before": data_kernels(before, result.view if before is result.view.model else None),
        "data_kernels_after": data_kernels(after),
        "patterns": dict(Counter(s["pattern"] for s in subgraphs).most_common()),
        "ops_before": op_histogram(before), "ops_after": op_histogram(after),
        "functions": len(after.functions), "seconds": round(result.seconds, 3),
        "fp32_math": result.fp32_math,
        "subgraphs": subgraphs,
        **contrib_report(result),
    }


def contrib_report(result) -> dict:
    """The contrib ops (com.microsoft) of the model: how many expanded into standard-op subgraphs, how
    many of those fused (at least one of their nodes in a fused node) and why the others stay opaque."""
    ex = getattr(result, "contrib", None)
    if ex is None or not (ex.groups or ex.refused):
        return {}
    fused_nodes = {result.view.nodes[i].name for sg in result.subgraphs for i in sg.nodes}
    ops = Counter(g.node.op_type for g in ex.groups)
    fused = Counter(g.node.op_type for g in ex.groups if any(n in fused_nodes for n in g.names))
    return {"contrib_ops": {op: {"expanded": k, "fused": fused.get(op, 0)} for op, k in sorted(ops.items())},
            "contrib_opaque": dict(ex.refused)}

