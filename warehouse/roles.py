"""Role finding: which node and tensor of a matched subgraph plays which part of its template.

A pattern's ``roles`` function runs at identification on the candidate that matched exactly:
``roles(view, members) -> dict | str`` with ``members`` the GraphView positions of the subgraph
(topological order). A dict is stored on the subgraph (``Subgraph.roles``) and read by the
template's renderer; a string is the reason the match is refused (shown by ``plus-ep explain``).
A role finder refuses whatever its template would not read: every node of the subgraph is consumed
by the renderer, or the match is refused.
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

from ..graph_rewrites.index import describe_node
from ..graph_rewrites.ops import attr

_FLOATS = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE)


_attr = attr


def _inside_producer(view, members: set, t: str):
    p = view.producer.get(t)
    return p if p in members else None


def _ancestors(view, members: set, tensors, stop=()) -> set:
    """Member positions the values ``tensors`` are computed from (inside the subgraph), not
    walking through the outputs of ``stop`` positions."""
    found, stack = set(), list(tensors)
    while stack:
        p = _inside_producer(view, members, stack.pop())
        if p is None or p in found or p in stop:
            continue
        found.add(p)
        stack.extend(t for t in view.graph_index.reads[p])
    return found


def _descendants(view, members: set, p: int) -> set:
    desc = view.graph_index.descendants[p]
    return {q for q in members if desc >> q & 1}


def _constant_zero(view, t: str) -> bool:
    v = view.const(t)
    return v is not None and np.size(v) >= 1 and not np.any(np.asarray(v))


def _dropout_training(view, node) -> str | None:
    """Why this Dropout may be in training mode (None: it is the identity at inference)."""
    if len(node.input) < 3 or not node.input[2]:
        return None
    v = view.const(node.input[2])
    if v is not None and np.size(v) == 1 and not bool(np.asarray(v).reshape(-1)[0]):
        return None
    return (f"{describe_node(node)} has a training_mode input that is not a constant false: it may drop "
            "elements at random, which the kernel would not")


def _probability_chain(view, members: set, sm: int, pv: int):
    """Walk back from the PV MatMul's left operand to the Softmax output. Returns (chain positions,
    NaN guard found) or the reason the chain is not one the attention template implements."""
    target = view.nodes[sm].output[0]
    t, chain, guard = view.nodes[pv].input[0], [], False
    while t != target:
        p = _inside_producer(view, members, t)
        if p is None:
            return f"the PV MatMul's left operand '{t}' does not come from the Softmax inside the subgraph"
        node, label = view.nodes[p], describe_node(view.nodes[p])
        op = node.op_type
        if op == "Identity":
            t = node.input[0]
        elif op == "Dropout":
            why = _dropout_training(view, node)
            if why:
                return why
            t = node.input[0]
        elif op == "Cast":
            if _attr(node, "to") not in _FLOATS:
                return f"{label} casts the probabilities to a non-float type"
            t = node.input[0]
        elif op == "Where":
            cond, zero, x = node.input[0], node.input[1], node.input[2]
            q = _inside_producer(view, members, cond)
            if q is None or view.nodes[q].op_type != "IsNaN" or view.nodes[q].input[0] != x \
                    or not _constant_zero(view, zero):
                return (f"{label} between Softmax and the PV MatMul is not the NaN guard "
                        "Where(IsNaN(p), 0, p): the attention template cannot apply it")
            chain.append(q)
            guard = True
            t = x
        else:
            return (f"{label}: {op} between Softmax and the PV MatMul (only Identity, Cast, Dropout at "
                    "inference and the NaN guard Where(IsNaN(p), 0, p) may sit there)")
        chain.append(p)
    return chain, guard


def attention_roles(view, members):
    """Q, K (as the QKᵀ MatMul reads it), V, the mask inputs, the QK/Softmax/PV nodes, the probability
    chain and whether the graph guards fully masked rows (NaN -> 0)."""
    ms = set(members)
    nodes = {p: view.nodes[p] for p in members}
    mms = [p for p in members if nodes[p].op_type == "MatMul"]
    sms = [p for p in members if nodes[p].op_type == "Softmax"]
    if not sms and any(n.op_type == "Exp" for n in nodes.values()):
        return ("the softmax is spelled out (Exp, ReduceSum, Div) instead of a Softmax node; the attention "
                "template needs the Softmax node")
    if len(mms) != 2 or len(sms) != 1:
        return f"attention needs exactly two MatMul and one Softmax (found {len(mms)} and {len(sms)})"
    desc = view.graph_index.descendants
    sm = sms[0]
    qk = next((p for p in mms if desc[p] >> sm & 1), None)
    pv = next((p for p in mms if desc[sm] >> p & 1), None)
    if qk is None or pv is None or qk == pv:
        return "the MatMuls and the Softmax do not form QKᵀ -> softmax -> PV"
    mm1, smn, mm2 = nodes[qk], nodes[sm], nodes[pv]
    if any(p in _ancestors(view, ms, [mm2.input[1]]) for p in (qk, sm)):
        return f"{describe_node(mm2)}: V is computed from the scores"
    rank = len(view.shape(mm1.output[0]) or [])
    if rank not in (3, 4):
        return f"{describe_node(mm1)}: scores of rank {rank} (the template takes 3 or 4)"
    axis = _attr(smn, "axis", -1)
    if axis not in (-1, rank - 1):
        return f"{describe_node(smn)}: softmax over axis {axis}, not the key axis"
    got = _probability_chain(view, ms, sm, pv)
    if isinstance(got, str):
        return got
    chain, guard = got
    # what the renderer reads: the Q/K/V hooks, the score hook (QKᵀ bound), the output hook
    # (pushed forward from O, operands pulled) and side outputs that do not depend on the scores
    q, k, v = mm1.input[0], mm1.input[1], mm2.input[1]
    consumed = {qk, sm, pv, *chain}
    consumed |= _ancestors(view, ms, [q, k, v])
    consumed |= _ancestors(view, ms, [smn.input[0]], stop={qk})
    after = _descendants(view, ms, pv)
    consumed |= after
    for p in after:
        consumed |= _ancestors(view, ms, view.graph_index.reads[p], stop={pv})
    scores = {qk} | _descendants(view, ms, qk)
    outputs = view.graph_index.outputs(members)
    for t in outputs:
        p = view.producer[t]
        if p in scores and p not in after and p != pv:
            return (f"{describe_node(view.nodes[p])}: its output '{t}' is read outside the subgraph, but the "
                    "attention template only stores the attention output and what follows it")
        if p not in scores:
            consumed |= {p} | _ancestors(view, ms, view.graph_index.reads[p])
    left = sorted(ms - consumed)
    if left:
        return (f"{describe_node(view.nodes[left[0]])} is not read by the attention template "
                f"({len(left)} node{'s' if len(left) > 1 else ''} of the subgraph would be ignored)")
    inputs = view.graph_index.boundary(members)[0]
    score_side = _ancestors(view, ms, [smn.input[0]], stop={qk})
    mask = [t for t in inputs if any(t in view.graph_index.reads[p] for p in score_side)
            and t not in (q, k) and view.const(t) is None]
    return {"q": q, "k": k, "v": v, "scores": mm1.output[0], "logits": smn.input[0], "probs": smn.output[0],
            "out": mm2.output[0], "qk": qk, "softmax": sm, "pv": pv, "p_chain": chain, "nan_guard": guard,
            "mask": mask}


def gemm_roles(view, members):
    """The GEMM node, its operands A and B (read from memory: subgraph inputs) and the epilogue's
    other inputs."""
    dots = [p for p in members if view.nodes[p].op_type in ("MatMul", "Gemm")]
    if len(dots) != 1:
        return f"a gemm subgraph has exactly one MatMul or Gemm (found {len(dots)})"
    node = view.nodes[dots[0]]
    inputs = view.graph_index.boundary(members)[0]
    a, b = node.input[0], node.input[1]
    for role, t in (("A", a), ("B", b)):
        if t not in inputs:
            return (f"{describe_node(node)}: operand {role} '{t}' is computed inside the subgraph; the gemm "
                    "template reads its operands from memory")
    return {"gemm": dots[0], "a": a, "b": b, "epilogue_inputs": [t for t in inputs if t not in (a, b)]}


def gemm_group_roles(view, members):
    """A horizontal GEMM group: the shared A and, per member GEMM (topological order), its node and
    operands; each member's epilogue is what follows its GEMM inside the group."""
    dots = [p for p in members if view.nodes[p].op_type in ("MatMul", "Gemm")]
    if len(dots) < 2:
        return f"a gemm group has at least two MatMul or Gemm nodes (found {len(dots)})"
    ms = set(members)
    inputs = view.graph_index.boundary(members)[0]
    parts, seen = [], set()
    for d in dots:
        own = _descendants(view, ms, d)
        if own & seen:
            return (f"{describe_node(view.nodes[min(own & seen)])} reads the results of two GEMMs of the group; "
                    "each member's epilogue reads only its own")
        seen |= own
        node = view.nodes[d]
        if any(q != d and q in _descendants(view, ms, d) for q in dots):
            return f"{describe_node(node)} feeds another GEMM of the group; group members are siblings"
        a, b = node.input[0], node.input[1]
        for role, t in (("A", a), ("B", b)):
            if t not in inputs:
                return (f"{describe_node(node)}: operand {role} '{t}' is computed inside the group; the gemm "
                        "template reads its operands from memory")
        parts.append({"gemm": d, "a": a, "b": b})
    if len({p["a"] for p in parts}) != 1:
        return f"the GEMMs read different A tensors ({sorted({p['a'] for p in parts})})"
    return {"a": parts[0]["a"], "members": parts}
