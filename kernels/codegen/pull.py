"""Element expressions: the C code computing one element of a tensor of a fused subgraph.

`Emitter.value(t, idx)` returns a C expression (and its compute type) for element `idx` of tensor
`t`, pulling through the subgraph's ONNX nodes: element-wise ops (through `cexpr.TABLE`), broadcasts,
Transpose, the Reshape family, Expand, Slice, Split, Concat, Gather, Cast, constants. Subgraph inputs
are loads from `args.in[k]`; tensors a template computes itself (the GEMM accumulator, a row's
reduction) are *bound* by the template renderer. Every value becomes a named temporary, so the
generated hooks read like the graph, and repeated reads are shared.
"""
from __future__ import annotations

import numpy as np
import sympy
from onnx import TensorProto

from ...graph_rewrites import ops
from ...graph_rewrites.index import describe_node
from ...limits import LITERAL_ELEMENTS
from . import cexpr, dtypes, symdim
from .cexpr import attr

VIEW_OPS = ops.with_role("alias")        # same elements, same order: pulled through a reshape


class RenderError(ValueError):
    """A subgraph the codegen cannot turn into a kernel; the message names the node and why."""


describe = describe_node        # "Op node 'name'": the one node label (graph_rewrites/index.py)


class SubgraphProducers:
    """tensor -> the node of the subgraph producing it, read from the graph's one index (a tensor
    produced outside the subgraph is not in it). Mapping-like: `in`, `[]`, `get`."""

    def __init__(self, view, nodes):
        self._view, self._members = view, {id(n) for n in nodes}

    def get(self, t, default=None):
        p = self._view.producer.get(t)
        node = self._view.nodes[p] if p is not None else None
        return node if node is not None and id(node) in self._members else default

    def __contains__(self, t) -> bool:
        return self.get(t) is not None

    def __getitem__(self, t):
        node = self.get(t)
        if node is None:
            raise KeyError(t)
        return node


class Emitter:
    def __init__(self, view, nodes, inputs, syms: symdim.Symbols, subs=None, own=None):
        self.view = view
        self.subs = subs or {}
        self.own = own or {}     # input -> (its dims, the axes it broadcasts at run time): codegen/assumed.py
        self.nodes = list(nodes)
        self.producer = SubgraphProducers(view, self.nodes)
        self.inputs = list(inputs)
        self.syms = syms
        self.bound = {}          # tensor -> callable(idx) -> (expr, ctype)
        self.lines: list[str] = []
        self.memo: dict = {}
        self._n = 0
        self.indent = "  "
        self._delin = []         # (index tuple, shape, linear expr) from delinear(), to undo in linear()
        self.guards: list[str] = []   # conditions under which the values being pulled are used (Concat branches,
        #                               Pad's inside test): a read outside them is never used (row_check.py)

    # ---- shapes and types ----------------------------------------------------------------------
    def shape(self, t) -> list:
        try:
            dims = symdim.shape(self.view.shape(t))
            return [sympy.simplify(d.subs(self.subs)) for d in dims] if self.subs else dims
        except symdim.DimError as exc:
            who = self.producer.get(t)
            where = describe(who) if who is not None else f"input '{t}'"
            raise RenderError(f"{where}: shape of '{t}' is not known ({exc})") from None

    def input_shape(self, t) -> list:
        """The dims of input `t` as the launcher binds them: its own symbol on an axis it broadcasts."""
        return list(self.own[t][0]) if t in self.own else self.shape(t)

    def dtype(self, t) -> int:
        dt = self.view.dtypes.get(t)
        if dt is None:
            raise RenderError(f"tensor '{t}' has no known element type")
        return dt

    def c(self, e) -> str:
        return self.syms.c(e)

    # ---- statements ----------------------------------------------------------------------------
    def emit(self, line: str):
        self.lines.append(self.indent + line)

    def tmp(self, expr: str, ctype: str, hint="t") -> str:
        self._n += 1
        name = f"{hint}{self._n}"
        self.emit(f"const {ctype} {name} = {expr};")
        return name

    def reset(self):
        self.lines, self.memo, self.indent = [], {}, "  "

    def take(self) -> str:
        out = "\n".join(self.lines)
        self.reset()
        return out

    # ---- index helpers -------------------------------------------------------------------------
    def linear(self, idx, shape) -> str:
        """Row-major linear offset of `idx` in a tensor of `shape` (C int64 expression)."""
        idx, shape = self._collapse(list(idx), list(shape))
        out = None
        for i, d in zip(idx, shape):
            if out is None:
                out = i
            elif d == 1:
                out = f"({out})" if out != "0" else "0"
            else:
                out = f"({out}) * {self.c(d)} + {i}" if out != "0" else i
        return out if out is not None else "0"

    def _collapse(self, idx, shape):
        """Fold runs of `idx` that came from delinear(lin, dims) over the same dims back into lin."""
        for parts, dims, lin in self._delin:
            n = len(parts)
            for p in range(len(idx) - n + 1):
                if tuple(idx[p:p + n]) == parts and all(
                        sympy.simplify(a - b) == 0 for a, b in zip(shape[p:p + n], dims)):
                    return (idx[:p] + [lin] + idx[p + n:],
                            shape[:p] + [symdim.numel(dims)] + shape[p + n:])
        return idx, shape

    def delinear(self, lin: str, shape) -> list:
        out = self._delinear(lin, shape)
        if len(shape) > 1:
            self._delin.append((tuple(out), list(shape), lin))
        return out

    def _delinear(self, lin: str, shape) -> list:
        out = []
        for k, d in enumerate(shape):
            rest = symdim.numel(shape[k + 1:])
            if d == 1:
                out.append("0")
                continue
            q = lin if rest == 1 else f"({lin}) / {self.c(rest)}"
            out.append(q if k == 0 else f"({q}) % {self.c(d)}")
        return out

    @staticmethod
    def broadcast(idx, in_shape, out_shape) -> list:
        off = len(out_shape) - len(in_shape)
        return ["0" if d == 1 and out_shape[off + k] != 1 else idx[off + k] for k, d in enumerate(in_shape)]

    def reshape(self, idx, out_shape, in_shape) -> list:
        """Index into the source of a reshape: dims are matched in groups of equal product."""
        keep_o = [k for k, d in enumerate(out_shape) if d != 1]
        keep_i = [k for k, d in enumerate(in_shape) if d != 1]
        res = ["0"] * len(in_shape)
        i = j = 0
        while i < len(keep_o) or j < len(keep_i):
            a, b = self._group(out_shape, keep_o, i, in_shape, keep_i, j)
            go, gi = keep_o[i:a], keep_i[j:b]
            if len(go) == 1 and len(gi) == 1:
                res[gi[0]] = idx[go[0]]
            else:
                lin = self.linear([idx[k] for k in go], [out_shape[k] for k in go])
                for k, v in zip(gi, self.delinear(lin, [in_shape[k] for k in gi])):
                    res[k] = v
            i, j = a, b
        return res

    @staticmethod
    def _group(os_, ko, i, is_, ki, j):
        for total in range(2, len(ko) - i + len(ki) - j + 1):
            for a in range(i + 1, len(ko) + 1):
                b = j + total - (a - i)
                if j < b <= len(ki):
                    po = symdim.numel([os_[k] for k in ko[i:a]])
                    pi = symdim.numel([is_[k] for k in ki[j:b]])
                    if sympy.simplify(po - pi) == 0:
                        return a, b
        return len(ko), len(ki)

    # ---- values --------------------------------------------------------------------------------
    def value(self, t: str, idx: list):
        key = (t, tuple(idx))
        if key in self.memo:
            return self.memo[key]
        if t in self.bound:
            out = self.bound[t](idx)
        elif t in self.producer:
            out = self._node_value(self.producer[t], t, idx)
        else:
            out = self._input_value(t, idx)
        self.memo[key] = out
        return out

    def _const(self, t):
        arr = self.view.consts.get(t)
        return None if arr is None else np.asarray(arr)

    def _literal(self, arr, idx, shape):
        ct = dtypes.compute(dtypes_of(arr))
        if arr.size == 1:
            return _lit(arr.reshape(-1)[0], ct), ct
        if arr.size > LITERAL_ELEMENTS:
            return None
        self._n += 1
        name = f"c{self._n}"
        vals = ", ".join(_lit(v, ct) for v in arr.reshape(-1))
        self.emit(f"const {ct} {name}[{arr.size}] = {{{vals}}};")
        return f"{name}[{self.linear(idx, shape)}]", ct

    def _input_value(self, t, idx):
        arr = self._const(t)
        if arr is not None and arr.size == 1:
            return self._literal(arr, idx, [])
        if t not in self.inputs:
            raise RenderError(f"tensor '{t}' is neither a subgraph input nor produced inside it")
        k = self.inputs.index(t)
        lin = self.linear(idx, self.shape(t))
        if t in self.own:        # size 1 at run time on a broadcast axis: stride 0 there (a uniform branch)
            dims, axes = self.own[t]
            shape = self.shape(t)
            same = " && ".join(f"{self.c(dims[a])} == {self.c(shape[a])}" for a in sorted(axes))
            idx = [f"({self.c(dims[a])} == 1LL ? 0LL : {i})" if a in axes and i != "0" else i for a, i in enumerate(idx)]
            lin = f"({same}) ? {lin} : {self.linear(idx, dims)}"
        dt = self.dtype(t)
        return self.tmp(dtypes.load(dt, f"args.in[{k}]", lin), dtypes.compute(dt), "x"), dtypes.compute(dt)

    def _node_value(self, node, t, idx):
        op = node.op_type
        out_shape = self.shape(t)
        arr = self._const(t)
        if arr is not None and (op == "Constant" or not any(i in self.view.data for i in node.input if i)):
            lit = self._literal(arr, idx, out_shape)
            if lit is not None:
                return lit
        if op in VIEW_OPS:
            src = node.input[0]
            return self.value(src, self.reshape(idx, out_shape, self.shape(src)))
        if op == "Transpose":
            perm = attr(node, "perm") or list(reversed(range(len(out_shape))))
            src_idx = ["0"] * len(perm)
            for i, p in enumerate(perm):
                src_idx[p] = idx[i]
            return self.value(node.input[0], src_idx)
        if op == "Expand":
            src = node.input[0]
            return self.value(src, self.broadcast(idx, self.shape(src), out_shape))
        if op in ("Cast", "CastLike"):
            return self._cast(node, idx)
        if op == "Tile":
            return self._tile(node, idx)
        if op == "Trilu":
            return self._trilu(node, t, idx)
        if op == "Slice":
            return self._slice(node, idx)
        if op == "Pad":
            return self._pad(node, idx)
        if op == "Split":
            return self._split(node, t, idx)
        if op == "Concat":
            return self._concat(node, t, idx)
        if op == "Gather":
            return self._gather(node, idx)
        if op == "GatherElements":
            return self._gather_elements(node, idx)
        if op in ("QuantizeLinear", "DequantizeLinear"):
            return self._quant(node, out_shape, idx)
        if cexpr.supported(op):
            return self._elementwise(node, out_shape, idx)
        if op == "Shape":
            return self._shape_value(node, idx)
        if op == "Range":
            return self._range(node, t, idx)
        raise RenderError(f"{describe(node)}: operator {op} has no element expression "
                          f"outside its template")

    def _elementwise(self, node, out_shape, idx):
        args, types = [], []
        exponent = None
        for k, inp in enumerate(node.input):
            if not inp:
                args.append("")
                types.append("float")
                continue
            e, ct = self.value(inp, self.broadcast(idx, self.shape(inp), out_shape))
            args.append(e)
            types.append(ct)
            if node.op_type == "Pow" and k == 1:
                arr = self._const(inp)
                if arr is not None and arr.size == 1:
                    exponent = float(arr.reshape(-1)[0])
        expr, ct = cexpr.emit(node, args, types, exponent)
        return self.tmp(expr, ct), ct

    def _quant(self, node, out_shape, idx):
        """QuantizeLinear/DequantizeLinear: x at idx; the scale and zero point at the same place (per tensor: their
        one element; per axis: idx[axis]; blocked: idx with idx[axis] // block_size)."""
        why = ops.quant_reason(node, self.view)
        if why is not None:
            raise RenderError(f"{describe(node)}: {why}")
        kind, axis, block = ops.quant_layout(node, len(out_shape), self.shape(node.input[1]))
        if kind == "tensor":
            at = ["0"] * len(self.shape(node.input[1]))
        elif kind == "axis":
            at = [idx[axis]]
        else:
            at = [f"({i}) / {block}LL" if j == axis else i for j, i in enumerate(idx)]
        args, types = [], []
        for k, t in enumerate(node.input[:3]):
            if not t:
                continue
            e, ct = self.value(t, idx if k == 0 else at)
            args.append(e)
            types.append(ct)
        qtype = ops.quant_types(node, self.view)[1 if node.op_type == "QuantizeLinear" else 0]
        expr, ct = cexpr.emit(node, args, types, qtype=qtype)
        return self.tmp(expr, ct, "q"), ct

    def _cast(self, node, idx):
        e, ct = self.value(node.input[0], idx)
        to = attr(node, "to") if node.op_type == "Cast" else self.dtype(node.input[1])
        target = dtypes.compute(to)
        if to == TensorProto.FLOAT16 and ct == "float":
            return self.tmp(f"__half2float(__float2half_rn({e}))", "float"), "float"
        if to == TensorProto.BFLOAT16 and ct == "float":
            return self.tmp(f"__bfloat162float(__float2bfloat16_rn({e}))", "float"), "float"
        if to in ops.FLOAT8:
            fn = "plus_e4m3_round" if to == TensorProto.FLOAT8E4M3FN else "plus_e5m2_round"
            sat = "true" if attr(node, "saturate", 1) else "false"
            return self.tmp(f"{fn}({dtypes.convert(e, ct, 'float')}, {sat})", "float"), "float"
        return self.tmp(dtypes.convert(e, ct, target), target), target

    def _tile(self, node, idx):
        """Tile: output index modulo the input's dims (an axis repeated once keeps its index)."""
        src = node.input[0]
        in_shape, out_shape = self.shape(src), self.shape(node.output[0])
        out = [i if sympy.simplify(d - o) == 0 else ("0" if d == 1 else f"({i}) % {self.c(d)}")
               for i, d, o in zip(idx, in_shape, out_shape)]
        return self.value(src, out)

    def _trilu(self, node, t, idx):
        """Trilu: the element where column - row <= k (lower) or >= k (upper), else 0."""
        k = (self._const_ints(node, 1) or [0])[0]
        i, j = idx[-2], idx[-1]
        keep = f"({j}) - ({i}) >= {k}LL" if attr(node, "upper", 1) else f"({j}) - ({i}) <= {k}LL"
        ok = self.tmp(keep, "bool", "tr")
        v, ct = self.value(node.input[0], idx)
        return self.tmp(f"{ok} ? {v} : ({ct})0", ct), ct

    def _const_ints(self, node, k, default=None):
        if len(node.input) <= k or not node.input[k]:
            return default
        arr = self._const(node.input[k])
        if arr is None:
            raise RenderError(f"{describe(node)}: input {k} must be a constant")
        return [int(v) for v in np.asarray(arr).reshape(-1)]

    def _axis(self, a, rank):
        return a + rank if a < 0 else a

    def _int_values(self, node, k):
        """Values of a small int input: constants, or C expressions pulled from shape arithmetic."""
        arr = self._const(node.input[k])
        if arr is not None:
            return [int(v) for v in np.asarray(arr).reshape(-1)]
        n = self.shape(node.input[k])
        if len(n) != 1 or not n[0].is_Integer:
            raise RenderError(f"{describe(node)}: input {k} is not a small 1-D integer tensor")
        return [self.value(node.input[k], [str(j)])[0] for j in range(int(n[0]))]

    def _slice(self, node, idx):
        src = node.input[0]
        shape = self.shape(src)
        starts = self._int_values(node, 1)
        axes = self._const_ints(node, 3, list(range(len(starts))))
        steps = self._const_ints(node, 4, [1] * len(starts))
        out = list(idx)
        for s, ax, st in zip(starts, axes, steps):
            ax = self._axis(ax, len(shape))
            d = shape[ax]
            if isinstance(s, str):      # run-time start: normalise and clamp like ONNX (step 1 only)
                if st != 1:
                    raise RenderError(f"{describe(node)}: a run-time start needs step 1")
                dc = self.c(d)
                s0 = self.tmp(f"({s}) < 0 ? ({s}) + {dc} : ({s})", "long long", "s")
                base = self.tmp(f"{s0} < 0 ? 0LL : ({s0} > {dc} ? {dc} : {s0})", "long long", "s")
                out[ax] = f"{base} + {idx[ax]}"
                continue
            if st > 0:
                start = sympy.Min(sympy.Max(d + s, 0), d) if s < 0 else sympy.Min(s, d)
            else:
                start = sympy.Min(sympy.Max(d + s, -1), d - 1) if s < 0 else sympy.Min(s, d - 1)
            start = _plain(start, d, s, st)
            base = self.c(start) if not isinstance(start, str) else start
            out[ax] = f"{base} + ({idx[ax]}) * {st}" if st != 1 else f"{base} + {idx[ax]}"
        return self.value(src, out)

    def _pad(self, node, idx):
        """Constant-mode Pad: the input element at idx - begin, or the constant outside the input (a
        negative pad crops: the index moves and nothing is outside)."""
        amounts = ops.pad_amounts(node, self.view)
        if amounts is None:
            raise RenderError(f"{describe(node)}: {ops.pad_reason(node, self.view)}")
        src = node.input[0]
        shape = self.shape(src)
        out, inside = list(idx), []
        for ax, (b, e) in enumerate(zip(*amounts)):
            if b:
                out[ax] = f"({idx[ax]}) - {b}LL"
            if b > 0:
                inside.append(f"({out[ax]}) >= 0")
            if b > 0 or e > 0:
                inside.append(f"({out[ax]}) < {self.c(shape[ax])}")
        if not inside:
            return self.value(src, out)
        fill = self._const(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        ct = dtypes.compute(self.dtype(node.output[0]))
        fill = _lit(np.asarray(fill).reshape(-1)[0] if fill is not None else 0, ct)
        ok = self.tmp(" && ".join(inside), "bool", "p")
        # every padded axis reads element 0 where the output is padding: the load stays in bounds
        padded = {ax for ax, (b, e) in enumerate(zip(*amounts)) if b > 0 or e > 0}
        src_idx = [self.tmp(f"{ok} ? {o} : 0LL", "long long", "p") if ax in padded else o
                   for ax, o in enumerate(out)]
        self.guards.append(" && ".join(inside))
        v, vct = self.value(src, src_idx)
        self.guards.pop()
        return self.tmp(f"{ok} ? {dtypes.convert(v, vct, ct)} : {fill}", ct), ct

    def _split(self, node, t, idx):
        src = node.input[0]
        shape = self.shape(src)
        ax = self._axis(attr(node, "axis", 0), len(shape))
        k = list(node.output).index(t)
        sizes = self._const_ints(node, 1) or attr(node, "split")
        if sizes:
            offset = sympy.Integer(sum(sizes[:k]))
        else:
            offset = sum((self.shape(o)[ax] for o in node.output[:k]), sympy.Integer(0))
        out = list(idx)
        out[ax] = f"{self.c(offset)} + {idx[ax]}" if offset != 0 else idx[ax]
        return self.value(src, out)

    def _concat(self, node, t, idx):
        shape = self.shape(t)
        ax = self._axis(attr(node, "axis"), len(shape))
        parts = [(i, self.shape(i)[ax]) for i in node.input if i]
        dt = self.dtype(t)
        ct = dtypes.compute(dt)
        self._n += 1
        name = f"cat{self._n}"
        self.emit(f"{ct} {name};")
        offset = sympy.Integer(0)
        saved_memo, saved_indent = dict(self.memo), self.indent
        for n, (inp, size) in enumerate(parts):
            sub = list(idx)
            sub[ax] = f"({idx[ax]}) - {self.c(offset)}" if offset != 0 else idx[ax]
            end = offset + size
            cond = f"({idx[ax]}) < {self.c(end)}"
            head = "if" if n == 0 else "} else if"
            if n == len(parts) - 1:
                self.emit("} else {" if n else "{")
            else:
                self.emit(f"{head} ({cond}) {{")
            self.indent = saved_indent + "  "
            lo = f"({idx[ax]}) >= {self.c(offset)}" if offset != 0 else None
            hi = cond if n < len(parts) - 1 else None
            self.guards.append(" && ".join(c for c in (lo, hi) if c) or "1")
            e, ect = self.value(inp, sub)
            self.guards.pop()
            self.emit(f"{name} = {dtypes.convert(e, ect, ct)};")
            self.indent = saved_indent
            self.memo = dict(saved_memo)
            offset = end
        self.emit("}")
        return name, ct

    def _range(self, node, t, idx):
        """Range: element i is start + i * delta, each computed on its own (as ORT's CUDA Range; its CPU
        kernel adds delta repeatedly, which differs for floats in the last bits only)."""
        ct = dtypes.compute(self.dtype(t))
        start, _ = self.value(node.input[0], [])
        delta, _ = self.value(node.input[2], [])
        return self.tmp(f"({ct})({start}) + ({ct})({idx[0]}) * ({ct})({delta})", ct), ct

    def _shape_value(self, node, idx):
        dims = self.shape(node.input[0])
        start, end = attr(node, "start", 0), attr(node, "end", len(dims))
        dims = dims[slice(start, end)]
        expr = self.c(dims[-1]) if dims else "0LL"
        for k in range(len(dims) - 2, -1, -1):
            expr = f"(({idx[0]}) == {k} ? {self.c(dims[k])} : {expr})"
        return self.tmp(expr, "long long", "sh"), "long long"

    def _gather(self, node, idx):
        data, indices = node.input[0], node.input[1]
        dshape, ishape = self.shape(data), self.shape(indices)
        ax = self._axis(attr(node, "axis", 0), len(dshape))
        r = len(ishape)
        return self._indexed(data, idx[:ax], self.value(indices, idx[ax:ax + r]), dshape[ax], idx[ax + r:])

    def _gather_elements(self, node, idx):
        """GatherElements: the data element at `idx` with its gathered axis replaced by the index value there."""
        data, indices = node.input[0], node.input[1]
        dshape = self.shape(data)
        ax = self._axis(attr(node, "axis", 0), len(dshape))
        return self._indexed(data, idx[:ax], self.value(indices, idx), dshape[ax], idx[ax + 1:])

    def _indexed(self, data, before, index, dim, after):
        """data[before, index, after] with a run-time index (value, ctype) along an axis of `dim`: negative
        counts from the end; an index outside [-dim, dim) reads nothing: the load uses a clamped index and
        the element is 0, as ORT's CUDA Gather does (a kernel cannot raise ORT's CPU error)."""
        iv, ict = index
        if ict != "long long":
            iv = f"(long long)({iv})"
        dim = self.c(dim)
        j = self.tmp(f"({iv}) < 0 ? ({iv}) + {dim} : ({iv})", "long long", "g")
        ok = self.tmp(f"{j} >= 0 && {j} < {dim}", "bool", "g")
        safe = self.tmp(f"{ok} ? {j} : 0LL", "long long", "g")
        v, ct = self.value(data, list(before) + [safe] + list(after))
        return self.tmp(f"{ok} ? {v} : ({ct})0", ct), ct


def dtypes_of(arr) -> int:
    if arr.dtype == np.bool_:
        return TensorProto.BOOL
    if np.issubdtype(arr.dtype, np.integer):
        return TensorProto.INT64
    return TensorProto.FLOAT


def _lit(v, ct) -> str:
    if ct == "bool":
        return "true" if bool(v) else "false"
    if ct == "long long":
        return f"{int(v)}LL"
    return cexpr.lit(float(v))


def _plain(start, d, s, st):
    """Slice starts with symbolic dims: keep the common exact forms, refuse the rest."""
    if isinstance(start, sympy.Integer) or not start.has(sympy.Min, sympy.Max):
        return start
    if s >= 0 and st > 0:
        return sympy.Integer(s)          # assumes s <= d: true for the exports' slices
    if s < 0 and st > 0:
        return d + s                     # assumes -s <= d
    raise RenderError(f"slice start {s} with step {st} over a symbolic dimension {d}")
