"""Row programs: softmax, LayerNorm, RMSNorm, reductions and their element-wise neighbours.

One thread block owns one row (the outer, non-reduced index); it runs the subgraph's reductions in
program order, each a strided pass over the row followed by a block reduction, then stores the
row-shaped outputs. Element values are pulled (pull.py), so any element-wise prologue and epilogue
and any layout of the reduced axes work; reduction results are per-row scalars bound in the emitter.
"""
from __future__ import annotations

import sympy

from ..graph_rewrites import ops
from . import dtypes, symdim
from .cexpr import attr, lit
from .pull import Emitter, RenderError, describe

REDUCE_OPS = {name: op.reduce for name, op in ops.OPS.items() if op.reduce}   # op -> combine kind
ROW_OPS = set(REDUCE_OPS) | ops.with_role("row")
_COMBINE = {"sum": ("0.0f", "{a} + {v}", "plus_block_sum"), "max": ("-CUDART_INF_F", "fmaxf({a}, {v})", "plus_block_max"),
            "min": ("CUDART_INF_F", "fminf({a}, {v})", "plus_block_min"), "prod": ("1.0f", "{a} * {v}", "plus_block_prod")}
THREADS = 256


def reduced_axes(em: Emitter, node) -> list:
    rank = len(em.shape(node.input[0]))
    if node.op_type in REDUCE_OPS:
        axes = attr(node, "axes")
        if axes is None and len(node.input) > 1 and node.input[1]:
            axes = em._const_ints(node, 1)
        if not axes:
            if attr(node, "noop_with_empty_axes", 0):
                raise RenderError(f"{describe(node)}: empty axes with noop_with_empty_axes")
            axes = list(range(rank))
    elif node.op_type in ("Softmax", "LogSoftmax"):
        axes = [attr(node, "axis", -1)]
    else:
        a = attr(node, "axis", -1)
        a = a + rank if a < 0 else a
        axes = list(range(a, rank))
    return sorted(a + rank if a < 0 else a for a in axes)


class RowProgram:
    """Renders the row kernel `entry` for the row-op nodes of a subgraph."""

    def __init__(self, em: Emitter, row_nodes: list, entry="plus_row"):
        self.em, self.nodes, self.entry = em, row_nodes, entry
        first = row_nodes[0]
        self.x_shape = em.shape(first.input[0])
        self.axes = reduced_axes(em, first)
        for n in row_nodes[1:]:
            shp, ax = em.shape(n.input[0]), reduced_axes(em, n)
            if len(shp) != len(self.x_shape) or ax != self.axes or any(
                    sympy.simplify(a - b) != 0 for a, b in zip(shp, self.x_shape)):
                raise RenderError(f"{describe(n)}: reduces a different row than {describe(first)}")
        self.outer = [d for k, d in enumerate(self.x_shape) if k not in self.axes]
        self.inner = [d for k, d in enumerate(self.x_shape) if k in self.axes]
        self.rows = symdim.numel(self.outer)
        self.length = symdim.numel(self.inner)
        self.trailing = self.axes == list(range(len(self.x_shape) - len(self.axes), len(self.x_shape)))

    # ---- indices -----------------------------------------------------------------------------
    def x_index(self, row="row", j="j") -> list:
        o = iter(self.em.delinear(row, self.outer))
        i = iter(self.em.delinear(j, self.inner))
        return [next(i) if k in self.axes else next(o) for k in range(len(self.x_shape))]

    def index_of(self, t, row="row", j="j") -> list:
        """Index of a row-shaped tensor `t` at (row, j)."""
        shp = self.em.shape(t)
        if len(shp) == len(self.x_shape) and all(sympy.simplify(a - b) == 0 for a, b in zip(shp, self.x_shape)):
            return self.x_index(row, j)
        if self.trailing and sympy.simplify(symdim.numel(shp) - self.rows * self.length) == 0:
            return self.em.delinear(f"{row} * {self.em.c(self.length)} + {j}", shp)
        raise RenderError(f"output '{t}' of shape {shp} is not laid out like the rows {self.x_shape}")

    # ---- code --------------------------------------------------------------------------------
    def _pass(self, name, kind, value_fn):
        """One reduction pass: `name` = reduce(kind) over j of value_fn(idx)."""
        em = self.em
        ident, comb, block = _COMBINE[kind]
        em.emit(f"float {name}_acc = {ident};")
        em.emit("for (long long j = threadIdx.x; j < L; j += blockDim.x) {")
        saved_memo, saved_indent = dict(em.memo), em.indent
        em.indent += "  "
        v = value_fn(self.x_index())
        em.emit(f"{name}_acc = {comb.format(a=name + '_acc', v=v)};")
        em.indent, em.memo = saved_indent, saved_memo
        em.emit("}")
        em.emit(f"const float {name} = {block}({name}_acc, red);")
        return name

    def _x(self, node, idx):
        e, ct = self.em.value(node.input[0], idx)
        return e if ct == "float" else f"((float)({e}))"

    def _bind_reduce(self, node, k):
        em, kind = self.em, REDUCE_OPS[node.op_type]
        L = "(float)L"
        if kind in ("sum", "mean"):
            r = self._pass(f"r{k}", "sum", lambda idx: self._x(node, idx))
            val = f"{r} / {L}" if kind == "mean" else r
        elif kind in ("max", "min", "prod"):
            val = self._pass(f"r{k}", kind, lambda idx: self._x(node, idx))
        elif kind in ("sumsq", "l2"):
            r = self._pass(f"r{k}", "sum", lambda idx: f"({self._x(node, idx)}) * ({self._x(node, idx)})")
            val = f"sqrtf({r})" if kind == "l2" else r
        elif kind == "l1":
            val = self._pass(f"r{k}", "sum", lambda idx: f"fabsf({self._x(node, idx)})")
        else:  # lse
            mx = self._pass(f"r{k}m", "max", lambda idx: self._x(node, idx))
            s = self._pass(f"r{k}", "sum", lambda idx: f"expf({self._x(node, idx)} - {mx})")
            val = f"{mx} + logf({s})"
        em.emit(f"const float red{k} = {val};")
        em.bound[node.output[0]] = lambda idx, k=k: (f"red{k}", "float")

    def _bind_softmax(self, node, k):
        mx = self._pass(f"r{k}m", "max", lambda idx: self._x(node, idx))
        s = self._pass(f"r{k}s", "sum", lambda idx: f"expf({self._x(node, idx)} - {mx})")
        log = node.op_type == "LogSoftmax"

        def at(idx):
            x = self._x(node, idx)
            expr = f"{x} - {mx} - logf({s})" if log else f"expf({x} - {mx}) / {s}"
            return self.em.tmp(expr, "float"), "float"
        self.em.bound[node.output[0]] = at

    def _bind_norm(self, node, k):
        em = self.em
        eps = lit(attr(node, "epsilon", 1e-5))
        rms = node.op_type == "RMSNormalization"
        if rms:
            ms = self._pass(f"r{k}q", "sum", lambda idx: f"({self._x(node, idx)}) * ({self._x(node, idx)})")
            em.emit(f"const float rstd{k} = rsqrtf({ms} / (float)L + {eps});")
        else:
            s = self._pass(f"r{k}s", "sum", lambda idx: self._x(node, idx))
            em.emit(f"const float mean{k} = {s} / (float)L;")
            q = self._pass(f"r{k}q", "sum", lambda idx: f"({self._x(node, idx)} - mean{k}) * "
                                                         f"({self._x(node, idx)} - mean{k})")
            em.emit(f"const float rstd{k} = rsqrtf({q} / (float)L + {eps});")
        out_shape = em.shape(node.output[0])

        def at(idx):
            x = self._x(node, idx)
            centred = x if rms else f"({x} - mean{k})"
            y = f"{centred} * rstd{k}"
            for w, op in ((1, "*"), (2, "+")):
                if len(node.input) > w and node.input[w]:
                    g, ct = em.value(node.input[w], em.broadcast(idx, em.shape(node.input[w]), out_shape))
                    y = f"({y}) {op} {g}"
            return em.tmp(y, "float"), "float"
        em.bound[node.output[0]] = at
        if len(node.output) > 1 and node.output[1] and not rms:
            em.bound[node.output[1]] = lambda idx, k=k: (f"mean{k}", "float")
        if len(node.output) > 2 and node.output[2]:
            em.bound[node.output[2]] = lambda idx, k=k: (f"rstd{k}", "float")

    def body(self, stores: dict) -> str:
        """The kernel; `stores` maps output tensor -> (pointer expr, dtype)."""
        em = self.em
        em.reset()
        em.indent = "    "
        for k, node in enumerate(self.nodes):
            if node.op_type in REDUCE_OPS:
                self._bind_reduce(node, k)
            elif node.op_type in ("Softmax", "LogSoftmax"):
                self._bind_softmax(node, k)
            else:
                self._bind_norm(node, k)
        em.emit("for (long long j = threadIdx.x; j < L; j += blockDim.x) {")
        saved_indent = em.indent
        em.indent += "  "
        for t, (ptr, dt) in stores.items():
            idx = self.index_of(t)
            val, ct = em.value(t, idx)
            em.emit(dtypes.store(dt, ptr, em.linear(idx, em.shape(t)),
                                 dtypes.convert(val, ct, dtypes.compute(dt))))
        em.indent = saved_indent
        em.emit("}")
        inner = em.take()
        return (f'extern "C" __global__ void __launch_bounds__({THREADS}) {self.entry}(const PlusArgs args) {{\n'
                f"  __shared__ float red[33];\n"
                f"  const long long rows = {em.c(self.rows)};\n"
                f"  const long long L = {em.c(self.length)};\n"
                f"  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {{\n"
                f"{inner}\n"
                f"    __syncthreads();\n"
                f"  }}\n}}\n")

    def launch(self, syms):
        rows = syms.rpn(self.rows)
        return (f"{rows},65535,min", "1", "1"), (str(THREADS), "1", "1"), "0"
