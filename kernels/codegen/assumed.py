"""What a rewrite assumed of a fused subgraph's run-time dims, made explicit for the launcher.

Shape inference unifies dims the run may keep apart: ONNX Runtime's symbolic inference merges `n+m`
(a Concat of [b, n, 64] and [b, m, 64]) into `t` where the Concat meets z [b, t, 64] in an Add, and two
graph inputs declared [b, s, 64] and [b, t, 64] become one symbol. The kernels index by the unified
dims, so this module returns what the plan must say about them (kernels/CONTRACT.md §3):

    a = analyse(view, nodes, inputs, outputs, em.shape, tight={...})
    a.subs       # {t: n + m}, {s: Max(s_0, s_1)*Min(1, s_0, s_1)}: dims the kernels use, over bound symbols
    a.own        # {"z": [b, t_2, 64]}: inputs the kernels broadcast, each broadcast axis a symbol of its own
    a.bcast      # [("z", 1, t_2, n + m)]: the plan's `bcast in` records (that axis is 1 or the dim it meets)
    a.equal      # [(t, n + m, "Concat node 'cat' axis 1")]: the plan's `equal` records
    a.shape_values   # {"shape": [batch, seq, 96]}: what each element of a shape-tensor input must be

* **Equations.** For each node, the dims its ONNX shape rule gives from its inputs' dims beside the
  dims the rewrite has for its outputs, where the two differ symbolically (`t` against `n + m`): the
  launcher checks them before any launch, else a kernel indexing the Concat by `t` reads q past its end.
* **Shape tensors.** Each element of a shape-tensor input the launcher reads (a `shapev` record binds one
  of its elements: TorchScript's Concat(Shape(mask), [96]) for a Reshape) whose value the rewrite knows
  as an expression of bound dims is checked too (`batch = batch_seq / seq`; wire/plan.add_assumptions):
  else the kernels would give the Reshape's output the dims the rewrite assumed, not those it asks for.
* **Run-time broadcasting.** An input axis whose dim is a plain symbol, read only through element-wise
  ops (and Transpose, Unsqueeze, Squeeze, Identity) until it meets another operand's axis of the same
  dim in a broadcasting op, may be 1 at run time while the other is N: ONNX broadcasts, so the kernels
  read that input with stride 0 along the axis (`(t_2 == 1 ? 0 : i1)`, pull.Emitter) and the plan
  checks the axis is 1 or N. Where no input axis gives N any more, N is an equation's other side
  (`t = n + m`) or what broadcasting the axes gives (`broadcast_dim`: the largest, 0 where one is 0).
  An axis that reaches any other use on its own (a GEMM operand, a Reshape, a subgraph output, a
  reduction) stays a dim the launcher binds and checks as before.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import sympy

from ...graph_rewrites import ops
from ...graph_rewrites.index import describe_node
from ...limits import MAX_SYM
from . import shapevals, symdim
from .pull import RenderError

VIEW_LIKE = ("Identity", "Dropout", "Transpose", "Unsqueeze", "Squeeze")
BIG = 2**31          # a Slice bound at least this large means "to the end"


@dataclass
class Assumed:
    subs: dict = field(default_factory=dict)      # symbol -> what the kernels use for it
    own: dict = field(default_factory=dict)       # input tensor -> its dims, broadcast axes as own symbols
    bcast: list = field(default_factory=list)     # (input tensor, axis, own symbol, the dim it meets)
    equal: list = field(default_factory=list)     # (dim, dim, where): equal for every run the kernels serve
    shape_values: dict = field(default_factory=dict)  # shape-tensor input -> its elements' values as the kernels use them

    def axes(self, t) -> set:
        """The broadcast axes of input `t` (empty when the kernels read it as declared)."""
        return {a for x, a, _, _ in self.bcast if x == t}

    def apply(self, subs: dict) -> tuple:
        """(`subs` followed by these substitutions, {input: (own dims, broadcast axes)}) for the Emitter."""
        out = {k: sympy.simplify(v.subs(self.subs)) for k, v in subs.items()}
        out.update(self.subs)
        self.shape_values = {t: [sympy.simplify(e.subs(out)) for e in vals] for t, vals in self.shape_values.items()}
        return out, {t: (dims, self.axes(t)) for t, dims in self.own.items()}


@dataclass(frozen=True)
class _Feed:
    occ: frozenset = frozenset()   # candidate input axes (input index, axis) feeding an axis
    tight: bool = False            # also fed by a dim the launcher binds or a dim a node computes


def analyse(view, nodes, inputs, outputs, shape) -> Assumed:
    """The subgraph's assumptions (module docstring). `shape(t)`: a tensor's sympy dims as the kernels
    use them."""
    order = _topological(nodes)
    tight_symbols, values = set(), {}   # what shape tensors' values may bind (`shapev`): never broadcast axes
    for t in inputs:
        if shapevals.is_shape_tensor(view, t) and shapevals.values(view, t) is not None:
            values[t] = shapevals.values(view, t)
            tight_symbols |= {f for v in values[t] for f in v.free_symbols}
    eqs = equations(view, order, shape)
    try:
        out = _broadcasts(view, order, inputs, outputs, shape, eqs, set(map(str, tight_symbols)))
    except (symdim.DimError, RenderError):     # a dim the analysis cannot read: every axis bound as declared
        out = Assumed()
    out.shape_values = values
    for a, b, where in eqs:
        a2, b2 = sympy.simplify(a.subs(out.subs)), sympy.simplify(b.subs(out.subs))
        if sympy.simplify(a2 - b2) != 0:
            out.equal.append((a2, b2, where))
    return out


def _topological(nodes):
    produced = {o: n for n in nodes for o in n.output if o}
    seen, order = set(), []

    def visit(n):
        if id(n) in seen:
            return
        seen.add(id(n))
        for i in n.input:
            if i in produced:
                visit(produced[i])
        order.append(n)
    for n in nodes:
        visit(n)
    return order


# ---- run-time broadcasting ----------------------------------------------------------------------------------
def _is_one(d) -> bool:
    return d.is_Integer and int(d) == 1


def _operands(node) -> list:
    """The inputs an element-wise node broadcasts against each other."""
    if node.op_type == "CastLike":
        return [node.input[0]]
    if node.op_type == "PRelu":          # the slope broadcasts one way only: a use of its own
        return [node.input[0]]
    return [i for i in node.input if i]


def _axis_map(node, rank_in: int, rank_out: int, const):
    """{input axis: output axis} of a view-like node, or None when it is not known."""
    op = node.op_type
    if op in ("Identity", "Dropout"):
        return {a: a for a in range(rank_in)}
    if op == "Transpose":
        perm = ops.attr(node, "perm") or list(reversed(range(rank_in)))
        return {p: k for k, p in enumerate(perm)}
    axes = ops.attr(node, "axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        c = const(node.input[1])
        axes = None if c is None else [int(x) for x in np.asarray(c).reshape(-1)]
    if op == "Unsqueeze":
        if axes is None:
            return None
        new = {a % rank_out for a in axes}
        kept = [k for k in range(rank_out) if k not in new]
        return dict(enumerate(kept)) if len(kept) == rank_in else None
    if op == "Squeeze":
        if axes is None:
            return None       # squeezes every 1: the symbolic axes stay, but say nothing
        gone = {a % rank_in for a in axes}
        kept = [k for k in range(rank_in) if k not in gone]
        return {a: k for k, a in enumerate(kept)}
    return None


def _broadcasts(view, order, inputs, outputs, shape, eqs, tight_symbols) -> Assumed:
    ins = {t: k for k, t in enumerate(inputs)}
    dims = {t: shape(t) for t in inputs}
    occ_dim = {}                                       # (input, axis) -> its symbol (candidates only)
    for t, k in ins.items():
        seen = {}
        for a, d in enumerate(dims[t]):
            if d.is_Symbol and str(d) not in tight_symbols:
                seen.setdefault(d, []).append(a)
        for d, axes in seen.items():
            if len(axes) == 1:                         # a symbol twice in one input ([s, s]): bound as declared
                occ_dim[(k, axes[0])] = d
    candidates = set(occ_dim)
    if not candidates:
        return Assumed()
    while True:
        feeds, uses, met = _propagate(view, order, inputs, outputs, shape, candidates, dims)
        cand = candidates & met
        feeds, uses, _ = _propagate(view, order, inputs, outputs, shape, cand, dims)
        defined = _definitions(eqs, occ_dim, cand, dims, inputs)
        by_sym: dict = {}
        for o in cand:
            by_sym.setdefault(occ_dim[o], set()).add(o)
        bound = _bound_symbols(dims, inputs, occ_dim, cand) | tight_symbols
        drop = set()
        for _t, _a, f, d in uses:
            if f.tight or not f.occ:
                continue
            s = d if d.is_Symbol else None
            whole = s is not None and by_sym.get(s, set()) == set(f.occ)
            if len(f.occ) == 1 or not whole or str(s) in bound or s in defined:
                drop |= set(f.occ)
        if not drop and cand == candidates:
            break
        candidates = cand - drop
        if not candidates:
            return Assumed()
    out = Assumed()
    names = {str(f) for t in inputs for d in dims[t] for f in d.free_symbols}
    if len(names) + len(candidates) > MAX_SYM:     # no room for a symbol per broadcast axis: bound as declared
        return out
    fresh = {}
    for (k, a) in sorted(candidates):
        s = occ_dim[(k, a)]
        name, n = f"{s}_{k}", 0
        while name in names:
            n += 1
            name = f"{s}_{k}_{n}"
        names.add(name)
        fresh[(k, a)] = sympy.Symbol(name, integer=True, nonnegative=True)
    bound = _bound_symbols(dims, inputs, occ_dim, candidates) | tight_symbols
    for s in sorted({occ_dim[o] for o in candidates}, key=str):
        if str(s) in bound:
            continue
        if s in defined:
            out.subs[s] = defined[s]
        else:
            out.subs[s] = broadcast_dim([fresh[o] for o in sorted(candidates) if occ_dim[o] == s])
    for (k, a) in sorted(candidates):
        t = inputs[k]
        own = out.own.setdefault(t, list(dims[t]))
        own[a] = fresh[(k, a)]
        s = occ_dim[(k, a)]
        out.bcast.append((t, a, fresh[(k, a)], out.subs.get(s, s)))
    return out


def broadcast_dim(dims: list):
    """The dim ONNX broadcasting gives axes of `dims` (each 1 or the result; the plan's `bcast` records
    check that): the largest, but 0 where one is 0 (`[0] + [1]` is `[0]`, not `[1]`).

        broadcast_dim([s_0, s_1])   # Max(s_0, s_1)*Min(1, s_0, s_1): 3 for (3, 1), 0 for (0, 1)
    """
    return sympy.Max(*dims) * sympy.Min(1, *dims)


def _bound_symbols(dims, inputs, occ_dim, cand) -> set:
    """Names of the symbols an input axis binds when the axes `cand` are broadcast axes of their own."""
    out = set()
    for k, t in enumerate(inputs):
        for a, d in enumerate(dims[t]):
            if (k, a) not in cand:
                out |= {str(f) for f in d.free_symbols} if d.is_Symbol else set()
    return out


def _definitions(eqs, occ_dim, cand, dims, inputs) -> dict:
    """{symbol: expression} from equations `symbol == expression` whose other side reads only symbols an
    input axis still binds (a Concat's `t = n + m`)."""
    bound = _bound_symbols(dims, inputs, occ_dim, cand)
    syms = {occ_dim[o] for o in cand}
    out = {}
    for a, b, _ in eqs:
        for lhs, rhs in ((a, b), (b, a)):
            if lhs in syms and lhs not in out and rhs.free_symbols and {str(f) for f in rhs.free_symbols} <= bound:
                out[lhs] = rhs
    return out


def _propagate(view, order, inputs, outputs, shape, cand, dims):
    """(feeds per tensor axis, opaque uses [(tensor, axis, feed, dim)], met candidates)."""
    feeds = {}
    for k, t in enumerate(inputs):
        feeds[t] = [None if _is_one(d) else _Feed(frozenset({(k, a)}), False) if (k, a) in cand
                    else _Feed(frozenset(), True) for a, d in enumerate(dims[t])]
    uses, met = [], set()

    def use(t):
        if t in feeds:
            for a, f in enumerate(feeds[t]):
                if f is not None:
                    uses.append((t, a, f, shape(t)[a]))

    for node in order:
        od = ops.get(node.op_type, node.domain)
        outs = [o for o in node.output if o]
        if od is not None and od.kind == "elementwise" and len(outs) == 1 and node.op_type != "IsNaN":
            o = outs[0]
            oshape = shape(o)
            r = len(oshape)
            row = []
            operands = _operands(node)
            for t in node.input:
                if t and t not in operands:
                    use(t)
            for a in range(r):
                parts, ds = [], []
                for t in operands:
                    if t not in feeds:
                        continue
                    ts = shape(t)
                    j = a - (r - len(ts))
                    if j < 0 or feeds[t][j] is None:
                        continue
                    parts.append(feeds[t][j])
                    ds.append(ts[j])
                if not parts:
                    row.append(None if _is_one(oshape[a]) else _Feed(frozenset(), True))
                    continue
                f = _Feed(frozenset().union(*(p.occ for p in parts)), any(p.tight for p in parts))
                if len(set(parts)) >= 2 and all(sympy.simplify(d - ds[0]) == 0 for d in ds):
                    for p in parts:
                        met |= p.occ
                row.append(f)
            feeds[o] = row
            continue
        if node.op_type in VIEW_LIKE and node.input and node.input[0] in feeds and len(outs) >= 1:
            src, o = node.input[0], outs[0]
            m = _axis_map(node, len(shape(src)), len(shape(o)), view.const)
            if m is not None:
                row = [None if _is_one(d) else _Feed(frozenset(), True) for d in shape(o)]
                for a, b in m.items():
                    if a < len(feeds[src]) and b < len(row):
                        row[b] = feeds[src][a]
                feeds[o] = row
                for t in node.input[1:]:
                    if t:
                        use(t)
                continue
        for t in node.input:
            if t:
                use(t)
        for o in outs:
            try:
                feeds[o] = [None if _is_one(d) else _Feed(frozenset(), True) for d in shape(o)]
            except symdim.DimError:
                feeds[o] = []
    for t in outputs:
        use(t)
    return feeds, uses, met


# ---- equations ------------------------------------------------------------------------------------------
def equations(view, order, shape) -> list:
    """[(dim the rewrite has, dim the node's ONNX rule gives, where)] for every node of `order` whose rule
    and the rewrite's dims differ symbolically. Nodes whose rule needs a value the rewrite does not know
    (a run-time Slice start) give none."""
    out = []
    for node in order:
        try:
            pairs = _RULES[node.op_type](view, node, shape) if node.op_type in _RULES else []
        except (symdim.DimError, RenderError, TypeError, ValueError, IndexError, KeyError, AttributeError):
            continue
        where = " ".join(describe_node(node).split())
        for have, rule, what in pairs:
            have, rule = sympy.sympify(have), sympy.sympify(rule)
            if sympy.simplify(have - rule) != 0:
                out.append((have, rule, f"{where} {what}".strip()))
    return out


def _ints(view, node, k, attr_name=None):
    if attr_name is not None:
        v = ops.attr(node, attr_name)
        if v is not None:
            return [int(x) for x in (v if isinstance(v, (list, tuple)) else [v])]
    if len(node.input) > k and node.input[k]:
        c = view.const(node.input[k])
        if c is None:
            raise ValueError("not a constant")
        return [int(x) for x in np.asarray(c).reshape(-1)]
    return None


def _same(view, node, shape):
    a, o = shape(node.input[0]), shape(node.output[0])
    return [(o[k], a[k], f"dim {k}") for k in range(min(len(a), len(o)))]


def _elementwise(view, node, shape):
    o = shape(node.output[0])
    r = len(o)
    out = []
    for t in _operands(node):
        ts = shape(t)
        for j, d in enumerate(ts):
            if not _is_one(d):
                out.append((o[j + r - len(ts)], d, f"dim {j + r - len(ts)}"))
    return out


def _concat(view, node, shape):
    o = shape(node.output[0])
    ax = ops.attr(node, "axis") % len(o)
    parts = [shape(t) for t in node.input if t]
    out = [(o[ax], sum((p[ax] for p in parts), sympy.Integer(0)), f"axis {ax}")]
    for p in parts:
        out += [(o[k], p[k], f"dim {k}") for k in range(len(o)) if k != ax]
    return out


def _split(view, node, shape):
    x = shape(node.input[0])
    ax = (ops.attr(node, "axis") or 0) % len(x)
    outs = [shape(t) for t in node.output if t]
    if len(outs) != len(node.output):
        return []
    out = [(x[ax], sum((p[ax] for p in outs), sympy.Integer(0)), f"axis {ax}")]
    sizes = _ints(view, node, 1, "split")
    if sizes:
        out += [(p[ax], s, f"output {k} axis {ax}") for k, (p, s) in enumerate(zip(outs, sizes))]
    for p in outs:
        out += [(p[k], x[k], f"dim {k}") for k in range(len(x)) if k != ax]
    return out


def _clamp(v, lo, hi):
    return sympy.Min(sympy.Max(v, lo), hi)


def _slice(view, node, shape):
    x, o = shape(node.input[0]), shape(node.output[0])
    if len(node.input) < 3:        # opset < 10: attributes
        starts, ends = ops.attr(node, "starts"), ops.attr(node, "ends")
        axes, steps = ops.attr(node, "axes"), None
    else:
        starts, ends = _ints(view, node, 1), _ints(view, node, 2)
        axes, steps = _ints(view, node, 3), _ints(view, node, 4)
    axes = [a % len(x) for a in (axes if axes is not None else range(len(starts)))]
    steps = steps or [1] * len(starts)
    out, sliced = [], set()
    for s, e, a, st in zip(starts, ends, axes, steps):
        d = x[a]
        sliced.add(a)
        if st > 0:
            b = _clamp(d + s if s < 0 else sympy.Integer(s), 0, d)
            f = d if e >= BIG else _clamp(d + e if e < 0 else sympy.Integer(e), 0, d)
            n = sympy.Max(0, sympy.ceiling((f - b) / st)) if st != 1 else sympy.Max(0, f - b)
        else:
            b = _clamp(d + s if s < 0 else sympy.Integer(s), -1, d - 1)
            f = sympy.Integer(-1) if e <= -BIG else _clamp(d + e if e < 0 else sympy.Integer(e), -1, d - 1)
            n = sympy.Max(0, sympy.ceiling((b - f) / -st))
        out.append((o[a], n, f"axis {a}"))
    out += [(o[k], x[k], f"dim {k}") for k in range(len(x)) if k not in sliced]
    return out


def _pad(view, node, shape):
    amounts = ops.pad_amounts(node, view)
    if amounts is None:
        return []
    x, o = shape(node.input[0]), shape(node.output[0])
    return [(o[k], x[k] + b + e, f"dim {k}") for k, (b, e) in enumerate(zip(*amounts))]


def _tile(view, node, shape):
    x, o = shape(node.input[0]), shape(node.output[0])
    reps = _ints(view, node, 1)
    return [(o[k], x[k] * r, f"dim {k}") for k, r in enumerate(reps)]


def _gather(view, node, shape):
    x, i, o = shape(node.input[0]), shape(node.input[1]), shape(node.output[0])
    ax = (ops.attr(node, "axis") or 0) % len(x)
    want = list(x[:ax]) + list(i) + list(x[ax + 1:])
    return [(o[k], w, f"dim {k}") for k, w in enumerate(want)]


def _gather_elements(view, node, shape):
    i, o = shape(node.input[1]), shape(node.output[0])
    return [(o[k], w, f"dim {k}") for k, w in enumerate(i)]


def _transpose(view, node, shape):
    x, o = shape(node.input[0]), shape(node.output[0])
    perm = ops.attr(node, "perm") or list(reversed(range(len(x))))
    return [(o[k], x[p], f"dim {k}") for k, p in enumerate(perm)]


def _numel(view, node, shape):
    x, o = shape(node.input[0]), shape(node.output[0])
    return [(symdim.numel(o), symdim.numel(x), "element count")]


def _matmul(view, node, shape):
    a, b, o = shape(node.input[0]), shape(node.input[1]), shape(node.output[0])
    out = []
    if node.op_type == "Gemm":
        ta, tb = ops.attr(node, "transA") or 0, ops.attr(node, "transB") or 0
        m, k = (a[1], a[0]) if ta else (a[0], a[1])
        k2, n = (b[1], b[0]) if tb else (b[0], b[1])
        out += [(k, k2, "K"), (o[0], m, "M"), (o[1], n, "N")]
        return out
    ka = a[-1]
    kb = b[0] if len(b) == 1 else b[-2]
    out.append((ka, kb, "K"))
    if len(a) >= 2:
        out.append((o[len(o) - (1 if len(b) == 1 else 2)], a[-2], "M"))
    if len(b) >= 2:
        out.append((o[-1], b[-1], "N"))
    ba, bb = list(a[:-2]), list(b[:-2])
    r = len(o) - (len(a) >= 2) - (len(b) >= 2)
    for j in range(r):
        for side in (ba, bb):
            k = j - (r - len(side))
            if k >= 0 and not _is_one(side[k]):
                out.append((o[j], side[k], f"batch dim {j}"))
    return out


def _reduce(view, node, shape):
    x, o = shape(node.input[0]), shape(node.output[0])
    axes = ops.attr(node, "axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        axes = _ints(view, node, 1)
    keep = ops.attr(node, "keepdims", 1)
    if not axes:
        if ops.attr(node, "noop_with_empty_axes", 0):
            return _same(view, node, shape)
        axes = list(range(len(x)))
    axes = {a % len(x) for a in axes}
    want = [sympy.Integer(1) if k in axes else d for k, d in enumerate(x)] if keep else \
        [d for k, d in enumerate(x) if k not in axes]
    return [(o[k], w, f"dim {k}") for k, w in enumerate(want)]


def _row(view, node, shape):
    out = _same(view, node, shape)
    if node.op_type in ("LayerNormalization", "RMSNormalization"):
        x = shape(node.input[0])
        for t in node.input[1:3]:
            if t:
                p = shape(t)
                out += [(x[len(x) - len(p) + j], d, f"normalised dim {j}") for j, d in enumerate(p) if not _is_one(d)]
    return out


_RULES = {"Concat": _concat, "Split": _split, "Slice": _slice, "Pad": _pad, "Tile": _tile, "Gather": _gather,
          "GatherElements": _gather_elements, "Transpose": _transpose, "MatMul": _matmul, "Gemm": _matmul,
          "Reshape": _numel, "Flatten": _numel, "Squeeze": _numel, "Unsqueeze": _numel,
          "Identity": _same, "Dropout": _same, "Trilu": _same, "Softmax": _row, "LogSoftmax": _row,
          "LayerNormalization": _row, "RMSNormalization": _row}
for _n, _o in ops.OPS.items():
    if _o.kind == "elementwise" and _n not in ("Cast", "CastLike", "IsNaN"):
        _RULES[_n] = _elementwise
_RULES["Cast"] = _RULES["CastLike"] = _RULES["IsNaN"] = _same
for _n, _o in ops.OPS.items():
    if _o.kind == "reduce":
        _RULES[_n] = _reduce
