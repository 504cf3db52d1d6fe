"""Row-ownership check of a row program: every element it stores uses its own row's statistics.

A row kernel binds each reduction result (mean, rstd, a softmax's max and sum, a ReduceSum) to the row
its thread block owns. A value pulled through a Transpose or a broadcast can reach a row-bound tensor
at an element of *another* row (a LayerNorm output also returned transposed; a ReduceMean with
keepdims=0 broadcast along the wrong axis of a square tensor); the kernel would then normalise that
element with this row's statistics: a wrong answer no shape check notices.

`check(prog, stores)` replays the program's element pulls on a copy of the subgraph whose symbolic
dims are replaced by distinct sample sizes (primes larger than every static dim, so no two dims that
differ symbolically coincide), records the index of every read of a row-bound tensor (and, for the
GEMM row tile, of the GEMM-side tensor, which the tile holds for its own rows only), evaluates those C
index expressions at sampled (row, j) and raises RenderError naming the output and the read when one
belongs to another row, or cannot be evaluated (a data-dependent index).
"""
from __future__ import annotations

import ast
import re

import numpy as np
import sympy

from . import symdim
from .pull import Emitter, RenderError, describe

MAX_POINTS = 4096          # (row, j) pairs evaluated; all of them when the rows are this small


class _Unprovable(Exception):
    pass


class _Recording(dict):
    """Emitter.bound that records the index of every read of a bound tensor."""

    def __init__(self, reads: list, ctx: list, em):
        super().__init__()
        self._reads, self._ctx, self._em = reads, ctx, em

    def __setitem__(self, t, fn):
        def rec(idx, t=t, fn=fn):
            where, conds = self._ctx[0]
            self._reads.append((t, list(idx), (where, conds + list(self._em.guards))))
            return fn(idx)
        super().__setitem__(t, rec)


def sample_dims(em: Emitter) -> dict:
    """symbol -> a sample size: distinct primes above every static dim of the subgraph."""
    syms, top = set(), 8
    for n in em.nodes:
        for t in list(n.input) + list(n.output):
            try:
                dims = symdim.shape(em.view.shape(t)) if t else []
            except symdim.DimError:
                continue
            for d in dims:
                if d.is_Integer:
                    top = max(top, int(d))
                syms |= d.free_symbols
    out, p = {}, top
    for s in sorted(syms, key=str):
        p = int(sympy.nextprime(p))
        out[s] = sympy.Integer(p)
    return out


def _c_eval(expr: str, env: dict):
    """Evaluate a C integer index expression (int64 literals, + - * / %, comparisons, &&) over arrays."""
    text = re.sub(r"\b(\d+)LL\b", r"\1", expr).replace("&&", " and ").replace("||", " or ")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise _Unprovable(expr) from None

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return np.int64(node.value)
        if isinstance(node, ast.Name):
            if node.id not in env:
                raise _Unprovable(expr)
            return env[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.BinOp):
            a, b = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Add):
                return a + b
            if isinstance(node.op, ast.Sub):
                return a - b
            if isinstance(node.op, ast.Mult):
                return a * b
            if isinstance(node.op, (ast.Div, ast.Mod)):      # C: truncation toward zero
                q = (np.abs(a) // np.abs(b)) * np.sign(a) * np.sign(b)
                return q if isinstance(node.op, ast.Div) else a - b * q
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            a, b = ev(node.left), ev(node.comparators[0])
            fn = {ast.Lt: np.less, ast.LtE: np.less_equal, ast.Gt: np.greater, ast.GtE: np.greater_equal,
                  ast.Eq: np.equal, ast.NotEq: np.not_equal}.get(type(node.ops[0]))
            if fn is not None:
                return fn(a, b)
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
            out = ev(node.values[0])
            for v in node.values[1:]:
                out = np.logical_and(out, ev(v))
            return out
        raise _Unprovable(expr)
    return ev(tree)


def _points(rows: int, length: int):
    if rows * length <= MAX_POINTS:
        r, j = np.meshgrid(np.arange(rows), np.arange(length), indexing="ij")
        return r.reshape(-1).astype(np.int64), j.reshape(-1).astype(np.int64)
    rng = np.random.default_rng(0)
    n_r, n_j = 48, MAX_POINTS // 48
    rs = np.unique(np.concatenate([[0, 1, rows // 2, rows - 1], rng.integers(0, rows, n_r - 4)]).clip(0, rows - 1))
    js = np.unique(np.concatenate([[0, 1, length // 2, length - 1],
                                   rng.integers(0, length, n_j - 4)]).clip(0, length - 1))
    r, j = np.meshgrid(rs, js, indexing="ij")
    return r.reshape(-1).astype(np.int64), j.reshape(-1).astype(np.int64)


def _linear(vals, dims):
    out = np.zeros_like(vals[0]) if vals else np.int64(0)
    for v, d in zip(vals, dims):
        out = out * int(d) + v
    return out


def check(prog, stores: dict, tile: bool = False) -> None:
    """Raise RenderError unless every element `prog` stores for `stores` (output -> (ptr, dtype)) reads
    row-bound tensors of its own row only; `tile`: the GEMM row tile, whose GEMM-side tensor (bound by
    the caller) holds the CTA's own rows only."""
    em = prog.em
    subs = sample_dims(em)
    probe = Emitter(em.view, em.nodes, em.inputs, symdim.Symbols(), subs=subs)
    reads, ctx = [], [("the row reductions", [])]
    probe.bound = _Recording(reads, ctx, probe)
    external = set(prog.external)
    for t in external:
        probe.bound[t] = lambda idx: ("xin", "float")
    p = type(prog)(probe, prog.nodes, prog.entry)       # a RowProgram over the probe (no import: row.py imports us)
    p.external = external
    p._bind_all()
    per_row, row_shaped = p.split_stores(stores)
    for t in per_row:
        ctx[0] = (f"output '{t}'", [])
        probe.value(t, p.per_row_index(t))
    for t in row_shaped:
        idx, conds = p.store_index(t)
        ctx[0] = (f"output '{t}'", conds)
        probe.value(t, idx)
    rows, length = int(p.rows), int(p.length)
    if rows == 0 or length == 0:
        return
    r, j = _points(rows, length)
    env = {"row": r, "j": j}
    x_dims = [int(d) for d in p.x_shape]
    outer_pos = [k for k in range(len(x_dims)) if k not in p.axes]
    outer_dims = [x_dims[k] for k in outer_pos]
    for t, idx, (where, conds) in reads:
        if t in external and not tile:
            continue             # a GEMM-side tensor in global scratch: any row may read any element
        shape = [int(d) for d in probe.shape(t)]
        try:
            vals = [np.broadcast_to(_c_eval(str(i), env), r.shape) for i in idx]
            live = np.ones(r.shape, bool)
            for c in conds:      # a conditional store, a Concat branch, Pad's inside: reads only where used
                live &= np.broadcast_to(_c_eval(c, env), r.shape).astype(bool)
        except _Unprovable as exc:
            raise RenderError(f"{_who(prog, t)}: {where} reads '{t}' at an index the row kernel cannot "
                              f"prove to lie in its own row ({exc}); not fused") from None
        if t in external:
            owner = _linear(vals, shape) // length
        elif shape == x_dims:
            owner = _linear([vals[k] for k in outer_pos], outer_dims)
        else:
            mine = [k for k, d in enumerate(shape) if d != 1]
            if [shape[k] for k in mine] != [d for d in outer_dims if d != 1]:
                raise RenderError(f"{_who(prog, t)}: {where} reads the per-row tensor '{t}' of shape "
                                  f"{shape} against rows of shape {x_dims}; not fused")
            owner = _linear([vals[k] for k in mine], [shape[k] for k in mine])
        bad = np.nonzero((owner != r) & live)[0]
        if len(bad):
            k = int(bad[0])
            where_in = [int(v[k]) for v in vals]
            raise RenderError(
                f"{_who(prog, t)}: {where} needs '{t}' of another row (element ({int(r[k])}, {int(j[k])}) of "
                f"the rows reads '{t}'{where_in}, which belongs to row {int(owner[k])}{_dims(subs)}): a row "
                "kernel has one row's statistics; not fused")


def _dims(subs) -> str:
    return "; at " + ", ".join(f"{s}={v}" for s, v in subs.items()) if subs else ""


def _who(prog, t) -> str:
    node = prog.em.producer.get(t)
    return describe(node) if node is not None else describe(prog.nodes[0])
