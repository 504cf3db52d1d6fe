"""Push a template's result element forward to the subgraph outputs (epilogue stores).

A template computes one element of a tensor C at index `idx` (the GEMM accumulator at (b, m, n), an
attention output at (b, h, i, d)). The nodes after C in the subgraph are followed forward while each
element of C feeds exactly one element downstream: element-wise ops whose other operands broadcast,
the Reshape family, Transpose, Cast, Slice and Split (a condition on the index). Every tensor so
reached gets its index (and conditions) as a function of C's; its value is then pulled at exactly
that index, so the other operands (bias, residual) are read with the simple forward index.
"""
from __future__ import annotations

import sympy

from ...graph_rewrites import ops
from . import cexpr, dtypes
from .cexpr import attr
from .pull import VIEW_OPS, Emitter, RenderError, describe

PASS_OPS = {"Cast", "CastLike"} | VIEW_OPS


def forward_map(em: Emitter, src: str, idx: list, barriers=()) -> dict:
    """tensor -> (index list, condition list) for every tensor element-wise reachable from `src`."""
    fwd = {src: (list(idx), [])}
    barriers = set(barriers)
    for node in em.nodes:
        mapped = [i for i in node.input if i in fwd]
        if not mapped or node.op_type in barriers or id(node) in barriers:
            continue
        first = fwd[mapped[0]]
        if any(fwd[m] != first for m in mapped[1:]) and node.op_type != "Concat":
            continue        # two differently indexed copies of the result meet: not element-wise
        in_idx, conds = first
        in_shape = em.shape(mapped[0])
        op = node.op_type
        if op in PASS_OPS:
            out = node.output[0]
            fwd[out] = (em.reshape(in_idx, in_shape, em.shape(out)) if op in VIEW_OPS else in_idx, conds)
        elif op == "Transpose":
            perm = attr(node, "perm") or list(reversed(range(len(in_shape))))
            fwd[node.output[0]] = ([in_idx[p] for p in perm], conds)
        elif op == "Slice":
            got = _slice(em, node, in_idx, in_shape)
            if got is not None:
                fwd[node.output[0]] = (got[0], conds + got[1])
        elif op == "Pad":
            got = _pad(em, node, in_idx, in_shape)
            if got is not None:
                fwd[node.output[0]] = (got[0], conds + got[1])
        elif op == "Concat":
            got = _concat_of_slices(em, node, fwd)
            if got is not None:
                fwd[node.output[0]] = got
        elif op == "Split":
            ax = em._axis(attr(node, "axis", 0), len(in_shape))
            offset = sympy.Integer(0)
            for out in node.output:
                size = em.shape(out)[ax]
                j = list(in_idx)
                j[ax] = f"({in_idx[ax]}) - {em.c(offset)}" if offset != 0 else in_idx[ax]
                lo = f"({in_idx[ax]}) >= {em.c(offset)}"
                hi = f"({in_idx[ax]}) < {em.c(offset + size)}"
                fwd[out] = (j, conds + [c for c in (lo if offset != 0 else None, hi) if c])
                offset += size
        elif cexpr.supported(op):
            out = node.output[0]
            out_shape = em.shape(out)
            if len(out_shape) != len(in_shape) or any(
                    sympy.simplify(a - b) != 0 for a, b in zip(out_shape, in_shape)):
                continue    # the result is broadcast by this op: one element feeds many
            fwd[out] = (in_idx, conds)
    return fwd


def _slice(em, node, idx, shape):
    try:
        starts, ends = em._const_ints(node, 1), em._const_ints(node, 2)
    except RenderError:
        return None         # run-time bounds: not followed forward
    axes = em._const_ints(node, 3, list(range(len(starts))))
    steps = em._const_ints(node, 4, [1] * len(starts))
    out, conds = list(idx), []
    for s, e, ax, st in zip(starts, ends, axes, steps):
        if st != 1:
            return None
        ax = em._axis(ax, len(shape))
        d = shape[ax]
        lo = d + s if s < 0 else sympy.Integer(s)
        hi = d + e if e < 0 else (d if e >= 2**62 else sympy.Integer(e))
        if lo != 0:
            conds.append(f"({idx[ax]}) >= {em.c(lo)}")
            out[ax] = f"({idx[ax]}) - {em.c(lo)}"
        if sympy.simplify(hi - d) != 0:
            conds.append(f"({idx[ax]}) < {em.c(hi)}")
    return out, conds


def _pad(em, node, idx, shape):
    """A Pad whose pads are all <= 0 (none, or a crop): each element lands at idx + begin, where it is
    inside. Padding would leave output elements nobody computes: not followed."""
    amounts = ops.pad_amounts(node, em.view)
    if amounts is None or any(b > 0 or e > 0 for b, e in zip(*amounts)):
        return None
    out, conds = list(idx), []
    for ax, (b, e) in enumerate(zip(*amounts)):
        if b < 0:
            conds.append(f"({idx[ax]}) >= {-b}LL")
            out[ax] = f"({idx[ax]}) - {-b}LL"
        if e < 0:
            conds.append(f"({idx[ax]}) < {em.c(shape[ax] + e)}")
    return out, conds


def _concat_of_slices(em, node, fwd):
    """Concat of step-1 Slices of one forward-reached tensor that tile its axis (a torch.roll: x[s:], x[:s]):
    each element lands in exactly one part, at its offset. The index along the axis is a sum over the
    parts of (the slice's range condition) * (the position in the output); the other axes must agree.
    None for anything else."""
    ax = attr(node, "axis")
    parts = [t for t in node.input if t]
    if ax is None or not parts:
        return None
    ax = em._axis(ax, len(em.shape(node.output[0])))
    srcs, ranges, terms, offset = set(), [], [], sympy.Integer(0)
    for t in parts:
        sl = em.producer.get(t)
        if t not in fwd or sl is None or sl.op_type != "Slice" or sl.input[0] not in fwd:
            return None
        got = _slice_range(em, sl, ax)
        if got is None:
            return None
        srcs.add(sl.input[0])
        ranges.append(got)
        idx, conds = fwd[t]
        terms.append((idx, conds, offset))
        offset += got[1] - got[0]
    if len(srcs) != 1:
        return None
    d = em.shape(srcs.pop())[ax]
    at, left = sympy.Integer(0), list(ranges)       # the ranges must chain from 0 to d without overlap
    while left:
        nxt = next((r for r in left if sympy.simplify(r[0] - at) == 0), None)
        if nxt is None:
            return None
        left.remove(nxt)
        at = nxt[1]
    if sympy.simplify(at - d) != 0:
        return None
    base = terms[0][0]
    if any(any(a != b for k, (a, b) in enumerate(zip(idx, base)) if k != ax) for idx, _, _ in terms):
        return None
    pos = " + ".join(f"({' && '.join(c) or '1'}) * (({idx[ax]}) + {em.c(off)})" for idx, c, off in terms)
    out = list(base)
    out[ax] = f"({pos})"
    return out, []


def _slice_range(em, node, ax):
    """[lo, hi) along `ax` of a step-1 Slice with constant starts/ends (other axes untouched), else None."""
    try:
        starts, ends = em._const_ints(node, 1), em._const_ints(node, 2)
    except RenderError:
        return None
    shape = em.shape(node.input[0])
    axes = em._const_ints(node, 3, list(range(len(starts))))
    steps = em._const_ints(node, 4, [1] * len(starts))
    lo, hi = sympy.Integer(0), shape[ax]
    for s_, e_, a, st in zip(starts, ends, axes, steps):
        a = em._axis(a, len(shape))
        d = shape[a]
        if a != ax:
            if st != 1 or s_ not in (0,) or not (e_ >= 2**62 or sympy.simplify(e_ - d) == 0):
                return None
            continue
        if st != 1:
            return None
        lo = d + s_ if s_ < 0 else sympy.Integer(s_)
        hi = d + e_ if e_ < 0 else (d if e_ >= 2**62 else sympy.Integer(e_))
    return lo, hi


def bind_forward(em: Emitter, fwd: dict, src: str):
    """Make every forward-reached tensor (but `src`) evaluate at its forward index. Values land in
    the emitter's memo, so they follow its scoping (conditional stores do not leak temporaries)."""
    for t in fwd:
        if t == src or t not in em.producer:
            continue

        def at(idx, t=t):
            saved = em.bound.pop(t)
            try:
                return em.value(t, fwd[t][0])
            finally:
                em.bound[t] = saved
        em.bound[t] = at


def emit_stores(em: Emitter, fwd: dict, targets: dict):
    """Store each target tensor (name -> (pointer expr, dtype, shape)) at its forward index."""
    for t, (ptr, dt, shape) in targets.items():
        if t not in fwd:
            who = em.producer.get(t)
            raise RenderError(f"{describe(who) if who is not None else t}: output '{t}' is not an "
                              "element-wise function of the template's result")
        idx, conds = fwd[t]
        saved_memo, saved_indent = dict(em.memo), em.indent
        if conds:
            em.emit(f"if ({' && '.join(conds)}) {{")
            em.indent = saved_indent + "  "
        val, ct = em.value(t, idx)
        st = dtypes.compute(dt)
        em.emit(dtypes.store(dt, ptr, em.linear(idx, shape), dtypes.convert(val, ct, st)))
        if conds:
            em.indent = saved_indent
            em.emit("}")
            em.memo = saved_memo
