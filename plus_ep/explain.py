"""`plus-ep explain`: the best partial match of a pattern and the reason growth stopped."""
from __future__ import annotations

from .graph_rewrites.ops import unrenderable_reason
from .report_text import _indent, _md


def unrenderable(view, nodes) -> list:
    """[{node, op, reason}] for the nodes the codegen cannot render: with kernels requested
    (`--arch`), identification leaves them out of every subgraph."""
    out = []
    for i in nodes:
        why = unrenderable_reason(view.nodes[i], view)
        if why is not None:
            out.append({"node": view.nodes[i].name or view.nodes[i].output[0], "op": view.nodes[i].op_type,
                        "reason": why})
    return out


def contrib_status(result) -> list:
    """[{node, op, status, detail}] for the model's contrib ops: 'expanded' (into which standard ops; which
    fused subgraphs took them) or 'opaque' (why it does not expand)."""
    ex = getattr(result, "contrib", None)
    if ex is None:
        return []
    from .graph_rewrites.contrib import contrib_op
    from .graph_rewrites.contrib.table import FOLDS
    where = {}
    for k, sg in enumerate(result.subgraphs):
        for i in sg.nodes:
            where[result.view.nodes[i].name] = (k, sg.pattern.name)
    out = []
    for g in ex.groups:
        took = sorted({where[n] for n in g.names if n in where})
        fused = ", ".join(f"{p} (subgraph {k})" for k, p in took) or "nothing fused: the node stays as it was"
        out.append({"node": g.node.name or g.node.output[0], "op": g.node.op_type, "status": "expanded",
                    "detail": f"{len(g.names)} standard nodes ({(contrib_op(g.node) or FOLDS[g.node.op_type]).becomes}); fused into {fused}"})
    for label, why in ex.refused.items():
        out.append({"node": label, "op": "", "status": "opaque", "detail": why})
    return out


def pattern_status(verdict, name: str):
    """('exact' | 'partial' | 'no', reason) of pattern `name` in one identification verdict."""
    reasons = verdict.reasons
    if "*" in reasons and getattr(verdict, "graph", None) is None:
        return "no", reasons["*"]
    if verdict.exact is not None and verdict.exact.name == name:
        return "exact", None
    if any(p.name == name for p in verdict.partial):
        return "partial", reasons.get(name)
    if name in reasons and reasons[name] is not None:
        return "no", reasons[name]
    if getattr(verdict, "graph", None) is not None:
        return "exact", "matched exactly; a higher-priority pattern also matched"  # shadowed
    return "no", "not evaluated"


def explain(result, name: str, pattern) -> dict:
    """The largest growth where pattern `name` matched exactly or partially, as a JSON-able dict."""
    ident, view = result.identifier, result.view
    if getattr(pattern, "horizontal", False):
        return _explain_groups(ident, name, pattern)
    label = lambda i: view.nodes[i].name or view.nodes[i].output[0]   # noqa: E731
    fused_as = {}
    for k, sg in enumerate(result.subgraphs):
        fused_as[sg.seed] = (k, sg)

    best = None
    for seed, steps in ident.steps.items():
        status = [pattern_status(s.verdict, name) for s in steps]
        matched = [i for i, (st, _) in enumerate(status) if st != "no" and steps[i].accepted]
        if not matched:
            continue
        key = (len(matched), status[matched[-1]][0] == "exact")
        if best is None or key > best[0]:
            best = (key, seed, steps, status, matched)

    placed = getattr(ident, "placed", {})
    out = {"pattern": name, "pattern_graph": pattern.graph.render() if pattern.graph is not None else None,
           "pattern_doc": pattern.doc, "seeds": len(ident.steps),
           "unrenderable": unrenderable(view, sorted(set(ident.nests) | set(ident.refused))),
           "contrib": contrib_status(result),
           "placed": [{"seed": label(s), "nodes": [label(i) for i in nodes], "reason": why}
                      for s, (nodes, why) in sorted(placed.items())]}
    if best is None:
        closest = []
        for seed, steps in list(ident.steps.items())[:5]:
            st, why = pattern_status(steps[0].verdict, name)
            closest.append({"seed": label(seed), "op": view.nodes[seed].op_type, "reason": why})
        out.update(found=False, closest=closest)
        return out

    _, seed, steps, status, matched = best
    last = matched[-1]
    rows = []
    for i, (s, (st, why)) in enumerate(zip(steps, status)):
        rows.append({"step": i, "node": label(s.node), "op": view.nodes[s.node].op_type, "role": s.role,
                     "accepted": s.accepted, "status": st, "reason": why})
    stop = next((i for i in range(last + 1, len(steps)) if status[i][0] == "no"), None)
    if stop is not None:
        stopped = {"step": stop, "node": rows[stop]["node"], "op": rows[stop]["op"],
                   "reason": status[stop][1], "after_exact": status[last][0] == "exact"}
    elif status[last][0] == "exact":
        stopped = {"step": None, "reason": "matched exactly", "after_exact": True}
    else:
        stopped = {"step": None, "reason": "no more candidates (still only a partial match)",
                   "after_exact": False}
    graph = getattr(steps[last].verdict, "graph", None)
    fused = fused_as.get(seed)
    out.update(found=True, seed=label(seed), seed_op=view.nodes[seed].op_type, matched_steps=len(matched),
               last_match={"step": last, "status": status[last][0],
                           "graph": graph.render() if graph is not None else None},
               steps=rows, stopped=stopped,
               fused_as=None if fused is None else {"subgraph": fused[0], "pattern": fused[1].pattern.name,
                                                     "nodes": [label(i) for i in fused[1].nodes]},
               left_to_ort=placed[seed][1] if seed in placed else None)
    return out


def _explain_groups(ident, name: str, pattern) -> dict:
    """A horizontal pattern is applied after growth (identify.py, group_horizontal): every sibling group
    it formed and every sibling it refused, with the reason."""
    groups = [g for g in getattr(ident, "groups", []) if g["pattern"] == name]
    return {"pattern": name, "horizontal": True, "pattern_doc": pattern.doc, "groups": groups,
            "pattern_graph": pattern.graph.render() if pattern.graph is not None else None,
            "seeds": len(ident.steps), "found": any(g["status"] == "grouped" for g in groups)}


def _format_groups(ex: dict, model_name: str) -> str:
    name = ex["pattern"]
    lines = [f"explain horizontal pattern '{name}' on {model_name}: sibling subgraphs reading one tensor"]
    if not ex["groups"]:
        lines.append("no sibling subgraphs of its kind read a common tensor")
    for g in ex["groups"]:
        members = ", ".join(g["members"])
        if g["status"] == "grouped":
            lines.append(f"grouped ({len(g['members'])} members, A '{g['a']}'): {members}")
        else:
            lines.append(f"refused (A '{g['a']}'): {g['reason']}")
    lines += ["", f"pattern '{name}' +Graph (a group matches its first member once per member):",
              _indent(ex["pattern_graph"] or "")]
    return "\n".join(lines)


def format_explanation(ex: dict, model_name: str) -> str:
    name = ex["pattern"]
    if ex.get("horizontal"):
        return _format_groups(ex, model_name)
    lines = [f"explain pattern '{name}' on {model_name} ({ex['seeds']} seeds grown)"]
    for c in ex.get("contrib", []):
        if c["status"] == "opaque":
            lines.append(f"contrib op {c['node']} stays opaque (ORT runs it): {c['detail']}")
        else:
            lines.append(f"contrib op {c['op']} '{c['node']}' expanded into {c['detail']}")
    for u in ex.get("unrenderable", []):
        lines.append(f"with kernels (--arch) {u['op']} '{u['node']}' stays out of every subgraph: {u['reason']}")
    if ex.get("placed"):
        lines.append(f"placement: {len(ex['placed'])} grown subgraphs left to ONNX Runtime (graph_rewrites/placement.py), "
                     f"e.g. {', '.join(ex['placed'][0]['nodes'])}: {ex['placed'][0]['reason']}")
    if not ex["found"]:
        lines += [f"'{name}' never matched, even partially, any grown subgraph.",
                  "closest refusals (first seeds):"]
        lines += [f"  - {c['op']} '{c['seed']}': {c['reason']}" for c in ex["closest"]]
        lines += ["", f"pattern '{name}' +Graph:", _indent(ex["pattern_graph"] or "(any parallel nest)")]
        return "\n".join(lines)
    fused = ex["fused_as"]
    lines.append(f"best match: grown from {ex['seed_op']} '{ex['seed']}', {ex['matched_steps']} accepted "
                 f"step{'s' if ex['matched_steps'] != 1 else ''} with '{name}' exact or partial")
    if ex.get("left_to_ort"):
        lines.append(f"final result: {ex['left_to_ort']}")
    elif fused is None:
        lines.append("final result: this seed's growth was not fused")
    else:
        lines.append(f"final result: fused as '{fused['pattern']}' (subgraph {fused['subgraph']}, "
                     f"{len(fused['nodes'])} nodes)")
    lines += ["", f"| # | node | op | role | accepted | {_md(name)} |", "|---:|---|---|---|---|---|"]
    for r in ex["steps"]:
        verdict = r["status"] if r["reason"] is None else f"{r['status']}: {r['reason']}"
        lines.append(f"| {r['step']} | {_md(r['node'])} | {r['op']} | {r['role']} | "
                     f"{'yes' if r['accepted'] else 'no'} | {_md(verdict)} |")
    lm = ex["last_match"]
    lines += ["", f"+Graph at the last state where '{name}' matched (step {lm['step']}, {lm['status']}):",
              _indent(lm["graph"] or "(none)"),
              "", f"pattern '{name}' +Graph:", _indent(ex["pattern_graph"] or "(any parallel nest)"), ""]
    st = ex["stopped"]
    if st["step"] is None:
        lines.append(f"stopped: {st['reason']}")
    else:
        prefix = "matched exactly, then " if st["after_exact"] else ""
        lines.append(f"stopped: {prefix}step {st['step']} ({st['op']} '{st['node']}') refused: {st['reason']}")
    return "\n".join(lines)


def format_pattern_list(wh) -> str:
    lines = []
    for k, p in enumerate(wh):
        flags = [f for f, on in (("prologue", p.allow_prologue), ("epilogue", p.allow_epilogue)) if on]
        head = f"{k}. {p.name}  [{', '.join(flags) or 'no growth'}]"
        if p.family is not None:
            head += f"  family={p.family.name}"
        if getattr(p, "horizontal", False):
            head += "  horizontal (groups sibling subgraphs after growth)"
        lines.append(head)
        if p.doc:
            lines.append(_indent(p.doc.splitlines()[0]))
        graph = p.graph if p.define is not None else None
        lines.append(_indent(graph.render() if graph is not None else "(any nest of parallel loops, no key ops)"))
        lines.append("")
    return "\n".join(lines).rstrip()
