"""The flash_attention family's graph half. Attention: softmax(Q·Kᵀ·scale + mask)·V with the surrounding
transposes/reshapes, rendered FlashAttention-style.

The mask (key padding [B,1,1,T], causal [1,1,S,T], combined [B,1,S,T], a position bias, IsNaN/Where
guards) only adds element-wise work to the score loop: one +Graph for every variant. GQA's shared
K/V heads arrive through Expand/Reshape prologues, which fold into the loads.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import TensorProto, numpy_helper

from ...graph_rewrites.family import Family, Roles
from ...graph_rewrites.index import describe_node
from ...graph_rewrites.ops import attr
from ..registry import pattern
from ..roles import ancestors, descendants, inside_producer

_FLOATS = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE)


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
    NaN guard found, a per-tensor QuantizeLinear/DequantizeLinear found) or the reason the chain is not one the
    attention template implements."""
    target = view.nodes[sm].output[0]
    t, chain, guard, quantized, viewed = view.nodes[pv].input[0], [], False, False, False
    while t != target:
        p = inside_producer(view, members, t)
        if p is None:
            return f"the PV MatMul's left operand '{t}' does not come from the Softmax inside the subgraph"
        node, label = view.nodes[p], describe_node(view.nodes[p])
        op = node.op_type
        if op == "Identity":
            t = node.input[0]
        elif op in ("Reshape", "Squeeze", "Unsqueeze", "Flatten"):
            # DeBERTa's [B, H, S, T] softmax viewed as [B*H, S, T] for a batched PV: only the leading (batch,
            # head) axes may be merged or split, the query and key axes stay the last two
            si, so = view.shape(node.input[0]) or [], view.shape(node.output[0]) or []
            if len(si) < 2 or len(so) < 2 or [str(d) for d in si[-2:]] != [str(d) for d in so[-2:]]:
                return (f"{label} between Softmax and the PV MatMul changes the query/key axes "
                        f"({si} -> {so}): the attention template cannot apply it")
            viewed = True
            t = node.input[0]
        elif op == "Dropout":
            why = _dropout_training(view, node)
            if why:
                return why
            t = node.input[0]
        elif op == "Cast":
            if attr(node, "to") not in _FLOATS:
                return f"{label} casts the probabilities to a non-float type"
            t = node.input[0]
        elif op in ("QuantizeLinear", "DequantizeLinear"):
            # fake quantization of the probabilities (ORT's QDQ attention): the template applies it to each
            # normalised probability (a second pass over the keys, attention.cuh PLUS_HAS_PROB)
            if node.domain not in ("", "ai.onnx"):
                return f"{label}: {node.domain}::{op} between Softmax and the PV MatMul"
            for x in node.input[1:]:
                v = view.const(x) if x else np.zeros(1)
                if v is None or np.size(v) != 1:
                    return (f"{label} quantizes the probabilities with a scale or zero point that is not one "
                            "constant (the attention template takes a per-tensor quantization of them)")
            quantized = True
            t = node.input[0]
        elif op == "Where":
            cond, zero, x = node.input[0], node.input[1], node.input[2]
            q = inside_producer(view, members, cond)
            if q is None or view.nodes[q].op_type != "IsNaN" or view.nodes[q].input[0] != x \
                    or not _constant_zero(view, zero):
                return (f"{label} between Softmax and the PV MatMul is not the NaN guard "
                        "Where(IsNaN(p), 0, p): the attention template cannot apply it")
            chain.append(q)
            guard = True
            t = x
        else:
            return (f"{label}: {op} between Softmax and the PV MatMul (only Identity, Cast, Dropout at "
                    "inference, a reshape of the batch/head axes, a per-tensor QuantizeLinear/DequantizeLinear and "
                    "the NaN guard Where(IsNaN(p), 0, p) may sit there)")
        chain.append(p)
    if quantized and (guard or viewed):
        return ("the probabilities are quantized and also " + ("guarded by Where(IsNaN(p), 0, p)" if guard else
                "reshaped") + " between Softmax and the PV MatMul: the attention template applies a quantization "
                "of the probabilities only alone")
    return chain, guard, quantized


_SHAPE_ONLY = ("Identity", "Unsqueeze", "Expand")


def causal_offset(view, logits: str, scores: str | None = None) -> int | None:
    """c when the graph provably sets `logits` (the Softmax's input) to -inf for every pair with key j > query
    i + c, whatever the inputs: a term on its path (through Add, Cast to a float type, Identity and Mul / Div by a
    positive constant) is Where(C, x, -inf) with C false there, or Where(E, -inf, x) with E true there, C / E
    built (inside the subgraph or before it) from a lower Trilu with a constant k over the query and key axes:
    Trilu(X, k) cast to bool, its Equal to 0 (torch.onnx's `is_causal` mask), Not, And / Or, and Identity /
    Unsqueeze / Expand that keep those two axes; or a constant [.., Sq, Skv] float term whose entries past some
    diagonal are all -inf (the dynamo exporter folds the mask of static shapes: c from its values), or all at most
    -1e30 (the float's lowest, as that exporter fills) when the logits are just the `scores` (QKᵀ, or it times a
    constant) plus that term and every row keeps a key (c >= 0): each row's maximum is then a real logit, and a
    masked key's exp(lowest - max) is exactly 0 in fp32, whether its tile runs or not. None
    otherwise: a mask tensor the graph receives, another finite fill
    (the float's lowest value: a fully masked row then averages every key), a sliced mask table, a Trilu
    broadcast along the queries.

        # Add(scores, Where(Equal(Trilu(Expand(1.0, [Sq, Skv]), k=0, upper=0), 0), -inf, 0)) -> 0"""
    qk = [str(d) for d in (view.shape(logits) or [])[-2:]]
    if len(qk) != 2:
        return None

    def node(t):
        p = view.producer.get(t) if t else None
        return view.nodes[p] if p is not None else None

    def keeps(t) -> bool:          # the last two axes are exactly (query, key): no broadcast along them
        sh = view.shape(t) or []
        return len(sh) >= 2 and [str(d) for d in sh[-2:]] == qk

    def const(t, test) -> bool:
        v = view.const(t) if t else None
        return v is not None and np.size(v) >= 1 and bool(np.all(test(np.asarray(v, np.float64))))

    def positive(v):
        return v.size == 1 and np.isfinite(v).all() and v.reshape(-1)[0] > 0

    def first(*cs):
        cs = [c for c in cs if c is not None]
        return min(cs) if cs else None

    def zero_above(t, depth):      # t[.., i, j] == 0 (false) for j > i + c
        n = node(t)
        if n is None or depth > 12 or not keeps(t):
            return None
        if n.op_type == "Trilu":
            kv = view.const(n.input[1]) if len(n.input) > 1 and n.input[1] else np.zeros(1, np.int64)
            if attr(n, "upper", 1) or kv is None or np.size(kv) != 1 or not keeps(n.input[0]):
                return None
            return int(np.asarray(kv).reshape(-1)[0])
        if n.op_type in _SHAPE_ONLY or n.op_type == "Cast":
            return zero_above(n.input[0], depth + 1)
        if n.op_type in ("Mul", "And"):
            return first(*(zero_above(x, depth + 1) for x in n.input[:2]))
        if n.op_type == "Not":
            return nonzero_above(n.input[0], depth + 1)
        return None

    def nonzero_above(t, depth):   # t[.., i, j] != 0 (true) for j > i + c
        n = node(t)
        if n is None or depth > 12 or not keeps(t):
            return None
        if n.op_type == "Equal":
            x, y = n.input[:2]
            if const(y, lambda v: v == 0):
                return zero_above(x, depth + 1)
            return zero_above(y, depth + 1) if const(x, lambda v: v == 0) else None
        if n.op_type == "Not":
            return zero_above(n.input[0], depth + 1)
        if n.op_type == "Or":
            return first(*(nonzero_above(x, depth + 1) for x in n.input[:2]))
        if n.op_type in _SHAPE_ONLY or (n.op_type == "Cast" and attr(n, "to") == TensorProto.BOOL):
            return nonzero_above(n.input[0], depth + 1)
        return None

    def const_above(t, alone: bool):  # a constant [.., Sq, Skv] term (torch.onnx's dynamo export folds its mask)
        v = view.const(t)
        if v is None and t in view.initializers and keeps(t):      # larger than the view keeps
            init = next(i for i in view.model.graph.initializer if i.name == t)
            v = None if init.external_data else numpy_helper.to_array(init)
        if v is None or np.ndim(v) < 2 or not keeps(t) or np.asarray(v).dtype.kind != "f":
            return None
        v = np.asarray(v, np.float64).reshape(-1, *np.shape(v)[-2:])
        masked = np.isneginf(v) | (v <= -1e30) if alone else np.isneginf(v)
        i, j = np.nonzero((~masked).any(axis=0))
        c = int(np.max(j - i)) if i.size else -v.shape[-2]
        if alone and not np.isneginf(v[masked]).all() and (c < 0 or (~masked).sum(-1).min() == 0):
            return None        # a finite fill needs a visible key in every row
        return c if c < v.shape[-1] - 1 else None

    def only_scores(t) -> bool:    # t is the QKᵀ product, or it times / over a positive constant
        n = node(t)
        if t == scores:
            return True
        return n is not None and n.op_type in ("Mul", "Div") and (
            (n.input[0] == scores and const(n.input[1], lambda v: np.full(v.shape, positive(v)))) or
            (n.op_type == "Mul" and n.input[1] == scores and const(n.input[0], lambda v: np.full(v.shape, positive(v)))))

    def neg_inf_above(t, depth):   # t[.., i, j] == -inf for j > i + c
        n = node(t)
        if n is None:
            return const_above(t, False) if depth else None
        if depth > 16:
            return None
        if n.op_type == "Where":
            c, x, y = n.input[:3]
            if not keeps(t):
                return None
            return first(zero_above(c, 0) if const(y, np.isneginf) else None,
                         nonzero_above(c, 0) if const(x, np.isneginf) else None,
                         neg_inf_above(x, depth + 1) if const(y, np.isneginf) else None,
                         neg_inf_above(y, depth + 1) if const(x, np.isneginf) else None)
        if n.op_type == "Add":
            x, y = n.input[:2]
            if depth == 0 and scores is not None and node(y) is None and only_scores(x):
                return const_above(y, True)
            if depth == 0 and scores is not None and node(x) is None and only_scores(y):
                return const_above(x, True)
            return first(*(neg_inf_above(x, depth + 1) for x in n.input[:2]))
        if n.op_type in ("Mul", "Div"):
            x, y = n.input[:2]
            if const(y, lambda v: np.full(v.shape, positive(v))):
                return neg_inf_above(x, depth + 1)
            if n.op_type == "Mul" and const(x, lambda v: np.full(v.shape, positive(v))):
                return neg_inf_above(y, depth + 1)
            return None
        if n.op_type == "Identity" or (n.op_type == "Cast" and attr(n, "to") in _FLOATS):
            return neg_inf_above(n.input[0], depth + 1)
        return None

    return neg_inf_above(logits, 0)


@dataclass(frozen=True)
class AttentionRoles(Roles):
    """Q, K (as the QKᵀ MatMul reads it) and V; the scores (QKᵀ), logits (the Softmax's input), probabilities
    and output tensors; the QKᵀ, Softmax and PV nodes; the probability chain between Softmax and PV; whether
    the graph guards fully masked rows (Where(IsNaN(p), 0, p): 0, else NaN); the mask inputs; whether the chain
    quantizes the probabilities (QuantizeLinear/DequantizeLinear, per tensor: the normalised values are needed);
    `causal`: c when the logits are provably -inf for every key j > query i + c (`causal_offset`), else None."""
    q: str
    k: str
    v: str
    scores: str
    logits: str
    probs: str
    out: str
    qk: int
    softmax: int
    pv: int
    p_chain: tuple
    nan_guard: bool
    mask: tuple
    quantized_probs: bool = False
    causal: int | None = None


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
    if any(p in ancestors(view, ms, [mm2.input[1]]) for p in (qk, sm)):
        return f"{describe_node(mm2)}: V is computed from the scores"
    rank = len(view.shape(mm1.output[0]) or [])
    if rank not in (3, 4):
        return f"{describe_node(mm1)}: scores of rank {rank} (the template takes 3 or 4)"
    axis = attr(smn, "axis", -1)
    if axis not in (-1, rank - 1):
        return f"{describe_node(smn)}: softmax over axis {axis}, not the key axis"
    got = _probability_chain(view, ms, sm, pv)
    if isinstance(got, str):
        return got
    chain, guard, quantized = got
    # what the renderer reads: the Q/K/V hooks, the score hook (QKᵀ bound), the output hook
    # (pushed forward from O, operands pulled) and side outputs that do not depend on the scores
    q, k, v = mm1.input[0], mm1.input[1], mm2.input[1]
    consumed = {qk, sm, pv, *chain}
    for p in chain:          # a reshape's target shape (TorchScript computes it from Shape nodes)
        consumed |= ancestors(view, ms, [t for t in view.nodes[p].input[1:] if t])
    consumed |= ancestors(view, ms, [q, k, v])
    consumed |= ancestors(view, ms, [smn.input[0]], stop={qk})
    after = descendants(view, ms, pv)
    consumed |= after
    for p in after:
        consumed |= ancestors(view, ms, view.graph_index.reads[p], stop={pv})
    scores = {qk} | descendants(view, ms, qk)
    outputs = view.graph_index.outputs(members)
    for t in outputs:
        p = view.producer[t]
        if p in scores and p not in after and p != pv:
            return (f"{describe_node(view.nodes[p])}: its output '{t}' is read outside the subgraph, but the "
                    "attention template only stores the attention output and what follows it")
        if p not in scores:
            consumed |= {p} | ancestors(view, ms, view.graph_index.reads[p])
    left = sorted(ms - consumed)
    if left:
        return (f"{describe_node(view.nodes[left[0]])} is not read by the attention template "
                f"({len(left)} node{'s' if len(left) > 1 else ''} of the subgraph would be ignored)")
    inputs = view.graph_index.boundary(members)[0]
    score_side = ancestors(view, ms, [smn.input[0]], stop={qk})
    mask = [t for t in inputs if any(t in view.graph_index.reads[p] for p in score_side)
            and t not in (q, k) and view.const(t) is None]
    return AttentionRoles(q, k, v, mm1.output[0], smn.input[0], smn.output[0], mm2.output[0], qk, sm, pv,
                          tuple(chain), guard, tuple(mask), quantized, causal_offset(view, smn.input[0], mm1.output[0]))



def _attention(b, mask_dims):
    q = b.input("q", ["B", "H", "S", "D"])
    k = b.input("k", ["B", "H", "T", "D"])
    v = b.input("v", ["B", "H", "T", "D"])
    s = b.Mul(b.MatMul(q, b.Transpose(k, perm=[0, 1, 3, 2])), b.const(0.125, 1))
    if mask_dims:
        s = b.Add(s, b.input("mask", mask_dims))
    o = b.MatMul(b.Softmax(s, axis=-1), v)
    return b.Transpose(o, perm=[0, 2, 1, 3])


def head_dim_known(g):
    """Templates are specialised per head dimension: it must be a compile-time integer."""
    dot = next(loop for _, loop in g.walk() if "dot" in loop.key_ops)
    return None if isinstance(dot.size, int) else f"head dim {dot.size} is not a compile-time integer"


FLASH_ATTENTION = Family("flash_attention", "softmax(QKᵀ + mask)·V in the FlashAttention style",
                         roles=AttentionRoles, find_roles=attention_roles)


@pattern("attention", allow_prologue=True, family=FLASH_ATTENTION, check=head_dim_known)
def attention(b):
    """QKᵀ, scale, mask, softmax, ·V, output transpose."""
    return _attention(b, ["B", 1, 1, "T"])

