"""Markdown/text rendering of fusion reports (`plus-ep inspect`, `rewrite --report`)."""
from __future__ import annotations

from collections import Counter

import onnx

from .graph_rewrites.fuse import is_fused

TOP_OPS = 15


def is_rewritten(model: onnx.ModelProto) -> bool:
    return any(is_fused(n) for n in model.graph.node)


def _attr(node, name, default=None):
    for a in node.attribute:
        if a.name == name:
            value = onnx.helper.get_attribute_value(a)
            return value.decode() if isinstance(value, bytes) else value
    return default


def fused_report(model: onnx.ModelProto) -> dict:
    """Report of a model that is already rewritten: its Fused nodes by pattern."""
    from .report import data_kernels, op_histogram

    fused = []
    for k, n in enumerate(node for node in model.graph.node if is_fused(node)):
        fused.append({"id": k, "name": n.name, "pattern": _attr(n, "pattern", "?"),
                      "overload": n.overload, "inputs": list(n.input), "outputs": list(n.output),
                      "pgraph": _attr(n, "pgraph", ""), "hash": _attr(n, "pgraph_hash", "")})
    return {
        "rewritten": True, "nodes": len(model.graph.node), "fused_nodes": len(fused),
        "functions": sum(1 for f in model.functions if is_fused(f)),
        "data_kernels": data_kernels(model),
        "patterns": dict(Counter(f["pattern"] for f in fused).most_common()),
        "ops": op_histogram(model), "subgraphs": fused,
    }


def _md(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _ops_table(before: dict, after: dict | None = None) -> list:
    keys = set(before) | set(after or {})
    order = sorted(keys, key=lambda k: (-(before.get(k, 0) + (after or {}).get(k, 0)), k))
    shown, rest = order[:TOP_OPS], order[TOP_OPS:]
    if after is None:
        lines = ["| op | count |", "|---|---:|"]
        lines += [f"| {_md(k)} | {before.get(k, 0)} |" for k in shown]
        if rest:
            lines.append(f"| ({len(rest)} more op types) | {sum(before.get(k, 0) for k in rest)} |")
        return lines
    lines = ["| op | before | after |", "|---|---:|---:|"]
    lines += [f"| {_md(k)} | {before.get(k, 0)} | {after.get(k, 0)} |" for k in shown]
    if rest:
        lines.append(f"| ({len(rest)} more op types) | {sum(before.get(k, 0) for k in rest)} | "
                     f"{sum(after.get(k, 0) for k in rest)} |")
    lines.append(f"| **total** | {sum(before.values())} | {sum(after.values())} |")
    return lines


def format_rewrite_report(rep: dict, name: str, graphs: bool = False) -> str:
    lines = [f"{name}: {rep['nodes_before']} nodes -> {rep['nodes_after']} "
             f"({len(rep['subgraphs'])} fused subgraphs, {rep['functions']} distinct functions), "
             f"rewrite {rep['seconds']:.2f}s",
             f"data kernels: {rep['data_kernels_before']} -> {rep['data_kernels_after']}", ""]
    lines += ["ops (top by count):"] + _ops_table(rep["ops_before"], rep["ops_after"]) + [""]
    if rep["subgraphs"]:
        nodes = Counter()
        for s in rep["subgraphs"]:
            nodes[s["pattern"]] += len(s["nodes"])
        lines += ["| pattern | subgraphs | nodes |", "|---|---:|---:|"]
        lines += [f"| {_md(p)} | {n} | {nodes[p]} |" for p, n in rep["patterns"].items()]
    else:
        lines.append("nothing to fuse")
    lines += _contrib_lines(rep)
    if graphs:
        for s in rep["subgraphs"]:
            lines += ["", f"subgraph {s['id']} ({s['pattern']}, {len(s['nodes'])} nodes: "
                          f"{' '.join(s['ops'])}) -> {', '.join(s['outputs'])}",
                      _indent(s["pgraph"])]
    return "\n".join(lines)


def _contrib_lines(rep: dict) -> list:
    """com.microsoft contrib ops: each expands into the standard-op subgraph it computes, then fuses like a
    raw export (graph_rewrites/contrib); those that do not expand stay as they are, with the reason."""
    if not rep.get("contrib_ops") and not rep.get("contrib_opaque"):
        return []
    lines = ["", "contrib ops (expanded into standard ops before fusion; a node of which nothing fused keeps "
                 "ORT's kernel):", "| op | expanded | fused |", "|---|---:|---:|"]
    lines += [f"| {op} | {c['expanded']} | {c['fused']} |" for op, c in rep.get("contrib_ops", {}).items()]
    for node, why in rep.get("contrib_opaque", {}).items():
        lines.append(f"stays opaque: {node}: {why}")
    return lines


def format_fused_report(rep: dict, name: str, graphs: bool = False) -> str:
    lines = [f"{name}: already rewritten: {rep['nodes']} nodes, {rep['fused_nodes']} ai.plus_ep::Fused "
             f"nodes ({rep['functions']} distinct functions)",
             f"data kernels: {rep['data_kernels']}", "", "ops (top by count):"]
    lines += _ops_table(rep["ops"]) + [""]
    lines += ["| pattern | fused nodes |", "|---|---:|"]
    lines += [f"| {_md(p)} | {n} |" for p, n in rep["patterns"].items()]
    if graphs:
        for s in rep["subgraphs"]:
            lines += ["", f"fused node {s['id']} '{s['name']}' ({s['pattern']}, overload {s['overload']})"
                          f" -> {', '.join(s['outputs'])}",
                      _indent(s["pgraph"] or "(no pgraph attribute)")]
    return "\n".join(lines)


def format_kernel_check(archs, fused: int, failures: list) -> str:
    """What `plus-ep inspect` adds about the kernels: the archs rendered, and each subgraph a build leaves
    unfused with its reason (once; the counts above already leave them out)."""
    if not archs:
        return "kernels: not checked (--arch none): a build may leave some of these subgraphs unfused"
    head = (f"kernels: rendered for {','.join(archs)} (NVRTC not run: a compile failure would still leave a "
            "subgraph unfused)")
    if not failures:
        return f"{head}; all {fused} fused subgraphs get kernels"
    lines = [f"{head}; {len(failures)} subgraphs get no kernels and stay with ONNX Runtime "
             f"(not counted above):"]
    lines += [f"  {f['node']}: {f['reason']}" for f in failures]
    return "\n".join(lines)


def _indent(text: str, pad: str = "    ") -> str:
    return "\n".join(pad + line for line in text.splitlines())


# ------------------------------------------------------------------------------------------------
# explain
# ------------------------------------------------------------------------------------------------
