"""Lowering: one ONNX node -> its +Loop nest(s) (PluS Fig. 4).

A `Nest` lists the node's loops outermost first (size, parallelism), which loop each axis of each
input/output tensor is iterated by, and the operation tag. Views (Transpose, Reshape, Squeeze, ...)
have no loops: they re-index their input. Composite ops (Softmax, LayerNormalization, ...) lower to
the nests of their decomposition into primitive ONNX nodes, merged later by the same primitives.
`lower()` returns None for anything it does not know: such a node stays untouched, never a crash.

Contrib ops (com.microsoft Attention, SkipLayerNormalization, GroupQueryAttention, MatMulNBits, ...) lower
through their expansion into standard ops (graph_rewrites/contrib): rewrite replaces them by those
subgraphs before lowering, at graph level, because one of them can become several kernels (Attention:
the Q/K/V projections and the attention core), so `lower()` only ever sees their standard ops.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper

from . import dims, ops
from .graph import GraphView

Axes = tuple  # loop indices (into Nest.loops) iterating one tensor axis; () = broadcast / indirect

ELEMENTWISE = ops.of_kind("elementwise")      # the kinds come from the one op vocabulary (ops.py)
VIEWS = ops.of_kind("view")
REDUCES = ops.of_kind("reduce")
INJECTIVE = ops.of_kind("injective")
COMPOSITE = ops.of_kind("composite")


@dataclass(eq=False)
class Nest:
    node: onnx.NodeProto
    op: str                                   # tag of the statement
    kind: str                                 # elementwise | injective | view | reduce | dot
    loops: list = field(default_factory=list)  # [(size, para)], outermost first
    ins: dict = field(default_factory=dict)    # tensor -> [Axes per tensor axis]
    outs: dict = field(default_factory=dict)   # tensor -> [Axes per tensor axis]
    view: dict = field(default_factory=dict)   # views only: out tensor -> [input axes per out axis]
    tags: list = field(default_factory=list)   # extra (loop index, tag), e.g. Gemm's bias add
    consts: dict = field(default_factory=dict)  # synthetic constants a decomposed node reads
    shapes: dict = field(default_factory=dict)  # shapes of synthetic tensors

    @property
    def skeleton(self) -> bool:
        return any(not para for _, para in self.loops)

    @property
    def depth(self) -> int:
        return len(self.loops) - 1


tag_of = ops.tag_of


def known_ops() -> frozenset:
    """Every op lowering accepts."""
    return ops.of_kind("elementwise", "view", "injective", "reduce", "dot", "composite")


# ----------------------------------------------------------------------------------------------
class _Ctx:
    """Shapes and constants, with room for the synthetic tensors of a decomposition."""

    def __init__(self, view: GraphView):
        self.view, self.extra_shapes, self.extra_consts = view, {}, {}
        self.opset = default_opset(view.model)

    def shape(self, t):
        s = self.extra_shapes.get(t)
        if s is None:
            s = self.view.shape(t)
        if s is None:
            return None
        return [d if d is not None else f"?{t}[{a}]" for a, d in enumerate(s)]

    def const(self, t):
        v = self.extra_consts.get(t)
        return v if v is not None else self.view.const(t)


def default_opset(model) -> int:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return o.version
    return 17


_attr = ops.attr


def lower_all(view: GraphView, strict: bool = False) -> dict:
    """Node index -> nests for every data node of the graph that lowers. Nodes holding subgraphs
    (If/Loop/Scan) stay out. strict=True raises on a data node the lowering does not know."""
    nests = {}
    rolls = roll_groups(view)
    parts = {p for ps in rolls.values() for p in ps}
    for i, node in enumerate(view.nodes):
        if not view.is_data_node(i) or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                                           for a in node.attribute):
            continue
        if i in parts:          # a roll's Slices: the Concat's view nest stands for them (roll_groups)
            continue
        if i in rolls:
            src = view.nodes[rolls[i][0]].input[0]
            shape = view.shape(src)
            nests[i] = [Nest(node, "roll", "view", [], {src: [()] * len(shape)}, {node.output[0]: []},
                             view={node.output[0]: [(j,) for j in range(len(shape))]})]
            continue
        lowered = lower(view, node)
        if lowered is not None:
            nests[i] = lowered
        elif strict:
            raise ValueError(f"pattern uses {view.node_label(i)}, which the lowering does not know")
    return nests


def roll_groups(view: GraphView) -> dict:
    """Concat node -> its Slice nodes, for every Concat of step-1 Slices of one tensor along one axis whose
    ranges tile that axis (torch.roll as the exporters write it: Concat(x[s:], x[:s])), each Slice read by
    that Concat only. Such a group is a permutation of x's elements along the axis: it lowers to one view
    nest (identity axes) and fuses as a unit (identify.py takes the Slices with the Concat)."""
    out = {}
    for i, node in enumerate(view.nodes):
        if node.op_type != "Concat" or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
            continue
        got = _roll_parts(view, node)
        if got is not None:
            out[i] = got
    return out


def _roll_parts(view, node):
    shape = view.shape(node.output[0])
    ax = _attr(node, "axis")
    if shape is None or ax is None:
        return None
    ax %= len(shape)
    parts, srcs, ranges = [], set(), []
    for t in node.input:
        p = view.producer.get(t)
        sl = view.nodes[p] if p is not None else None
        if sl is None or sl.op_type != "Slice" or len(view.consumers.get(t, ())) != 1 or t in view.outputs:
            return None
        rng = _slice_range(view, sl, ax)
        if rng is None:
            return None
        parts.append(p)
        srcs.add(sl.input[0])
        ranges.append(rng)
    if len(srcs) != 1:
        return None
    src_shape = view.shape(next(iter(srcs)))
    if src_shape is None or [str(d) for d in src_shape] != [str(d) for d in shape] or not isinstance(shape[ax], int):
        return None
    at, left = 0, sorted(ranges)
    for lo, hi in left:
        if lo != at:
            return None
        at = hi
    return parts if at == shape[ax] else None


def _slice_range(view, node, ax):
    """[lo, hi) along `ax` of a step-1 Slice with constant starts/ends that leaves its other axes whole."""
    import numpy as np
    shape = view.shape(node.input[0])

    def arg(k):
        return view.const(node.input[k]) if len(node.input) > k and node.input[k] else None
    starts, ends, axes, steps = arg(1), arg(2), arg(3), arg(4)
    if any(len(node.input) > k and node.input[k] and arg(k) is None for k in (3, 4)):
        return None
    if shape is None or starts is None or ends is None or not isinstance(shape[ax], int):
        return None
    starts, ends = [int(v) for v in np.asarray(starts).reshape(-1)], [int(v) for v in np.asarray(ends).reshape(-1)]
    axes = [int(v) % len(shape) for v in np.asarray(axes).reshape(-1)] if axes is not None else list(range(len(starts)))
    steps = [int(v) for v in np.asarray(steps).reshape(-1)] if steps is not None else [1] * len(starts)
    lo, hi = 0, shape[ax]
    for s_, e_, a, st in zip(starts, ends, axes, steps):
        if st != 1:
            return None
        d = shape[a]
        if not isinstance(d, int):
            return None
        b = max(0, min(d, s_ + d if s_ < 0 else s_))
        e = max(0, min(d, e_ + d if e_ < 0 else e_))
        if a != ax:
            if (b, e) != (0, d):
                return None
            continue
        lo, hi = b, e
    return (lo, hi) if lo < hi else None


def lower(view: GraphView, node: onnx.NodeProto) -> list | None:
    """The nests of one node, or None when the node stays outside fusion."""
    if node.domain not in ("", "ai.onnx") or node.op_type not in known_ops():
        return None
    ctx = _Ctx(view)
    try:
        if node.op_type in COMPOSITE:
            return _composite(ctx, node)
        nest = _lower_one(ctx, node)
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return [nest] if nest is not None else None


def _lower_one(ctx: _Ctx, node) -> Nest | None:
    op = node.op_type
    if any(t and ctx.shape(t) is None for t in node.input) and op not in ("Reshape", "Expand", "Slice", "Tile", "Split", "Squeeze", "Unsqueeze"):
        return None
    outs = [t for t in node.output if t]
    if not outs or any(ctx.shape(t) is None for t in outs[:1]):
        return None
    if op in ("QuantizeLinear", "DequantizeLinear"):
        return _quant(ctx, node)
    if op in ELEMENTWISE:
        return _elementwise(ctx, node, tag_of(op))
    if op in VIEWS:
        return _view(ctx, node)
    if op in REDUCES:
        return _reduce(ctx, node)
    if op == "MatMul":
        return _matmul(ctx, node)
    if op == "MatMulInteger":
        return _matmul_integer(ctx, node)
    if op == "Gemm":
        return _gemm(ctx, node)
    if op == "Gather":
        return _gather(ctx, node)
    if op == "Pad" and ops.pad_reason(node, ctx.view) is not None:
        return None                 # only constant pads (and value) are fused: the loops depend on them
    if op == "Pad":
        return _injective(ctx, node)
    if op == "GatherElements":
        return _gather_elements(ctx, node)
    if op == "Split":
        return _split(ctx, node)
    if op in INJECTIVE:
        return _injective(ctx, node)
    return None


def _out_loops(shape):
    """Loops over a tensor's non-unit axes; returns (loops, axes map)."""
    loops, axes = [], []
    for d in shape:
        if d == 1:
            axes.append(())
        else:
            axes.append((len(loops),))
            loops.append((d, True))
    return loops, axes


def _broadcast_map(in_shape, out_shape, out_axes):
    """Each input axis iterates the output's loop at its position, or nothing where it is 1. An
    axis that is neither 1 nor the output's dim (a symbol such as onnx's 'unk__1' that may be 1 at
    run time and broadcast) cannot be mapped: ValueError, and the node stays unfused."""
    off = len(out_shape) - len(in_shape)
    res = []
    for j, d in enumerate(in_shape):
        k = j + off
        if d != 1 and k >= 0 and str(d).replace(" ", "") != str(out_shape[k]).replace(" ", ""):
            raise ValueError(f"input dim {d} neither 1 nor the output's {out_shape[k]}")
        res.append(() if d == 1 or k < 0 else out_axes[k])
    return res


def _elementwise(ctx, node, tag) -> Nest:
    out = node.output[0]
    loops, axes = _out_loops(ctx.shape(out))
    like = node.input[1] if node.op_type == "CastLike" and node.input[1] != node.input[0] else None
    ins = {t: _broadcast_map(ctx.shape(t), ctx.shape(out), axes) for t in node.input if t and t != like}
    if like:
        ins[like] = [()] * len(ctx.shape(like))       # CastLike's `like` lends its dtype only
    return Nest(node, tag, "elementwise", loops, ins, {out: axes})


def _quant(ctx, node) -> Nest:
    """QuantizeLinear/DequantizeLinear: element-wise over x; the scale and zero point follow the output's loop
    of the quantization axis (per axis), broadcast (per tensor), or every axis but the blocked one, whose
    index k // block_size is indirect."""
    x, out = node.input[0], node.output[0]
    loops, axes = _out_loops(ctx.shape(out))
    kind, axis, _ = ops.quant_layout(node, len(ctx.shape(x)), ctx.shape(node.input[1]))
    ins = {x: list(axes)}
    for t in node.input[1:3]:
        if not t:
            continue
        rank = len(ctx.shape(t))
        if kind == "tensor":
            ins[t] = [()] * rank
        elif kind == "axis":
            ins[t] = [axes[axis]]
        else:
            ins[t] = [() if j == axis else axes[j] for j in range(rank)]
    return Nest(node, tag_of(node.op_type), "elementwise", loops, ins, {out: axes})


def _injective(ctx, node) -> Nest:
    """Own loops over the output; inputs map axis-to-axis where ranks agree (Slice, Concat, Tile,
    Trilu) or by broadcasting (Expand)."""
    out = node.output[0]
    oshape = ctx.shape(out)
    loops, axes = _out_loops(oshape)
    data = node.input[0]
    ishape = ctx.shape(data)
    if ishape is None:
        return None
    if node.op_type == "Expand":
        ins = {data: _broadcast_map(ishape, oshape, axes)}
    else:
        ins = {t: [axes[j] if j < len(axes) else () for j in range(len(ctx.shape(t) or []))]
               for t in (node.input if node.op_type == "Concat" else [data]) if t}
    return Nest(node, tag_of(node.op_type), "injective", loops, ins, {out: axes})


def _gather(ctx, node) -> Nest:
    data, idx, out = node.input[0], node.input[1], node.output[0]
    dshape, ishape = ctx.shape(data), ctx.shape(idx)
    axis = _attr(node, "axis", 0) % len(dshape)
    loops, axes = _out_loops(ctx.shape(out))
    r = len(ishape)
    dmap = [axes[j] if j < axis else () if j == axis else axes[j + r - 1] for j in range(len(dshape))]
    imap = [axes[axis + j] for j in range(r)]
    return Nest(node, "gather", "injective", loops, {data: dmap, idx: imap}, {out: axes})


def _gather_elements(ctx, node) -> Nest:
    """out[.., i, ..] = data[.., indices[.., i, ..], ..] along `axis`: loops over the output (the indices'
    shape); data's other axes follow the output's, its gathered axis is indirect."""
    data, idx, out = node.input[0], node.input[1], node.output[0]
    rank = len(ctx.shape(data))
    axis = _attr(node, "axis", 0) % rank
    loops, axes = _out_loops(ctx.shape(out))
    dmap = [() if j == axis else axes[j] for j in range(rank)]
    return Nest(node, "gatherElements", "injective", loops, {data: dmap, idx: list(axes)}, {out: axes})


def _split(ctx, node) -> Nest:
    data = node.input[0]
    ishape = ctx.shape(data)          # loops over the input; each output maps axis to axis
    loops, axes = _out_loops(ishape)
    outs = {t: [axes[j] for j in range(len(ishape))] for t in node.output if t}
    return Nest(node, "split", "injective", loops, {data: list(axes)}, outs)


def _reduce(ctx, node) -> Nest | None:
    data, out = node.input[0], node.output[0]
    shape = ctx.shape(data)
    rank = len(shape)
    if node.op_type in ("ArgMax", "ArgMin"):
        axes = [_attr(node, "axis", 0)]
    else:
        axes = _attr(node, "axes")
        if axes is None and len(node.input) > 1 and node.input[1]:
            val = ctx.const(node.input[1])
            if val is None:
                return None
            axes = [int(a) for a in np.asarray(val).reshape(-1)]
        if not axes:
            if _attr(node, "noop_with_empty_axes", 0):
                return _elementwise(ctx, node, "identity")
            axes = list(range(rank))
    axes = sorted(a % rank for a in axes)
    keep = _attr(node, "keepdims", 1)
    loops, in_axes = [], [()] * rank
    for j in range(rank):
        if j not in axes and shape[j] != 1:
            in_axes[j] = (len(loops),)
            loops.append((shape[j], True))
    out_axes = []
    for j in range(rank):
        if j in axes:
            if keep:
                out_axes.append(())
        else:
            out_axes.append(in_axes[j])
    red = [j for j in axes if shape[j] != 1]
    for j in red:
        in_axes[j] = (len(loops),)
        loops.append((shape[j], False))
    tag = tag_of(node.op_type)
    if not red:  # reducing unit axes only: an element-wise copy
        return Nest(node, tag, "elementwise", loops, {data: in_axes}, {out: out_axes})
    return Nest(node, tag, "reduce", loops, {data: in_axes}, {out: out_axes})


def _matmul(ctx, node) -> Nest:
    a, b, out = node.input[0], node.input[1], node.output[0]
    ash, bsh, osh = ctx.shape(a), ctx.shape(b), ctx.shape(out)
    a2 = ash if len(ash) > 1 else [1] + ash
    b2 = bsh if len(bsh) > 1 else bsh + [1]
    batch = osh[:len(osh) - (len(ash) > 1) - (len(bsh) > 1)]
    loops, baxes = _out_loops(batch)
    m, n, k = a2[-2], b2[-1], a2[-1]
    mi = (len(loops),) if m != 1 else ()
    loops += [(m, True)] if m != 1 else []
    ni = (len(loops),) if n != 1 else ()
    loops += [(n, True)] if n != 1 else []
    ki = (len(loops),)
    loops.append((k, False))
    amap = _broadcast_map(a2[:-2], batch, baxes) + [mi, ki]
    bmap = _broadcast_map(b2[:-2], batch, baxes) + [ki, ni]
    if len(ash) == 1:
        amap = [ki]
    if len(bsh) == 1:
        bmap = bmap[:-2] + [ki]
    omap = list(baxes) + ([mi] if len(ash) > 1 else []) + ([ni] if len(bsh) > 1 else [])
    return Nest(node, "dot", "dot", loops, {a: amap, b: bmap}, {out: omap})


def _matmul_integer(ctx, node) -> Nest:
    """MatMulInteger: MatMul's loops; a per-row A zero point ([M]) follows the M loop, a per-column B zero
    point ([N]) the N loop, a scalar one is broadcast."""
    nest = _matmul(ctx, node)
    a, b = node.input[0], node.input[1]
    m_axes = nest.ins[a][-2] if len(ctx.shape(a)) > 1 else ()
    n_axes = nest.ins[b][-1] if len(ctx.shape(b)) > 1 else ()
    for k, along in ((2, m_axes), (3, n_axes)):
        if len(node.input) > k and node.input[k]:
            zs = ctx.shape(node.input[k])
            if len(zs) > 1:
                raise ValueError("MatMulInteger zero point of rank > 1")
            nest.ins[node.input[k]] = [along if d != 1 else () for d in zs]
    return nest


def _gemm(ctx, node) -> Nest:
    a, b, out = node.input[0], node.input[1], node.output[0]
    ash, bsh = ctx.shape(a), ctx.shape(b)
    ta, tb = _attr(node, "transA", 0), _attr(node, "transB", 0)
    m, k = (ash[1], ash[0]) if ta else (ash[0], ash[1])
    n = bsh[0] if tb else bsh[1]
    loops = [(m, True), (n, True), (k, False)]
    amap = [(2,), (0,)] if ta else [(0,), (2,)]
    bmap = [(1,), (2,)] if tb else [(2,), (1,)]
    ins, tags = {a: amap, b: bmap}, []
    if len(node.input) > 2 and node.input[2]:
        ins[node.input[2]] = _broadcast_map(ctx.shape(node.input[2]), [m, n], [(0,), (1,)])
        tags.append((1, "add"))
    return Nest(node, "dot", "dot", loops, ins, {out: [(0,), (1,)]}, tags=tags)


# ---- views -----------------------------------------------------------------------------------
def _view(ctx, node) -> Nest | None:
    data, out = node.input[0], node.output[0]
    ishape, oshape = ctx.shape(data), ctx.shape(out)
    if ishape is None or oshape is None:
        return None
    if node.op_type == "Transpose":
        perm = _attr(node, "perm") or list(reversed(range(len(ishape))))
        vmap = [(p,) for p in perm]
    elif node.op_type in ("Identity", "Dropout"):
        vmap = [(j,) for j in range(len(ishape))]
    else:
        vmap = reshape_map(ishape, oshape)
    outs = {out: []}
    return Nest(node, tag_of(node.op_type), "view", [], {data: [()] * len(ishape)}, outs, view={out: vmap})


_factor, _fmul = dims.factor, dims.factor_mul


def reshape_map(ishape, oshape) -> list:
    """For each output axis, the input axes it is made of (reshape = merge/split of axis groups).
    Falls back to 'every input axis' for an axis it cannot pair."""
    res = [None] * len(oshape)
    i = j = 0
    ni, no = len(ishape), len(oshape)
    while i < ni or j < no:
        if j < no and oshape[j] == 1:
            res[j] = ()
            j += 1
            continue
        if i < ni and ishape[i] == 1:
            i += 1
            continue
        if i >= ni or j >= no:
            break
        gi, gj = [i], [j]
        pi, pj = _factor(ishape[i]), _factor(oshape[j])
        i += 1
        j += 1
        while pi != pj:
            if (pi[1] and not pj[1]) or (len(pi[1]) <= len(pj[1]) and pi[0] < pj[0] and i < ni) or (len(pi[1]) < len(pj[1]) and i < ni):
                if i >= ni:
                    break
                pi = _fmul(pi, _factor(ishape[i]))
                gi.append(i)
                i += 1
            elif j < no:
                pj = _fmul(pj, _factor(oshape[j]))
                gj.append(j)
                j += 1
            else:
                break
        if pi != pj:
            return [tuple(range(ni))] * no
        for k in gj:
            res[k] = tuple(gi)
    return [r if r is not None else tuple(range(ni)) for r in res]


# ---- composites ------------------------------------------------------------------------------
def _composite(ctx: _Ctx, node) -> list | None:
    x = node.input[0]
    shape = ctx.shape(x)
    if shape is None:
        return None
    rank = len(shape)
    out = node.output[0]
    mk = _Decomp(ctx, node, shape)
    if node.op_type in ("Softmax", "LogSoftmax"):
        axis = _attr(node, "axis", -1 if ctx.opset >= 13 else 1) % rank
        if ctx.opset < 13 and axis != rank - 1:
            return None
        m = mk.reduce("ReduceMax", x, [axis])
        s = mk.op("Sub", [x, m])
        if node.op_type == "Softmax":
            e = mk.op("Exp", [s])
            z = mk.reduce("ReduceSum", e, [axis])
            mk.op("Div", [e, z], out)
        else:
            e = mk.op("Exp", [s])
            z = mk.reduce("ReduceSum", e, [axis])
            lz = mk.op("Log", [z], shape=mk.shapes[z])
            mk.op("Sub", [s, lz], out)
    else:  # LayerNormalization / RMSNormalization over axes [axis, rank)
        if any(t for t in node.output[1:]):
            return None
        axis = _attr(node, "axis", -1) % rank
        axes = list(range(axis, rank))
        eps = mk.scalar(_attr(node, "epsilon", 1e-5), ctx.view.dtypes.get(x, 1))
        if node.op_type == "LayerNormalization":
            mean = mk.reduce("ReduceMean", x, axes)
            d = mk.op("Sub", [x, mean])
        else:
            d = x
        sq = mk.op("Mul", [d, d])
        var = mk.reduce("ReduceMean", sq, axes)
        ve = mk.op("Add", [var, eps], shape=mk.shapes[var])
        sd = mk.op("Sqrt", [ve], shape=mk.shapes[var])
        n = mk.op("Div", [d, sd])
        scaled = mk.op("Mul", [n, node.input[1]], None if len(node.input) > 2 and node.input[2] else out)
        if len(node.input) > 2 and node.input[2]:
            mk.op("Add", [scaled, node.input[2]], out)
    nests = []
    for sub in mk.nodes:
        ctx.extra_shapes.update(mk.shapes)
        ctx.extra_consts.update(mk.consts)
        nest = _lower_one(ctx, sub)
        if nest is None:
            return None
        nest.consts, nest.shapes = dict(mk.consts), dict(mk.shapes)
        nests.append(nest)
    return nests


class _Decomp:
    """Builds the primitive nodes of a composite op, with synthetic names under the output's."""

    def __init__(self, ctx, node, shape):
        self.ctx, self.node, self.shape = ctx, node, shape
        self.nodes, self.shapes, self.consts = [], {}, {}
        self.base = node.output[0]

    def _name(self, what):
        return f"{self.base}::{len(self.nodes)}_{what}"

    def scalar(self, value, dtype):
        name = f"{self.base}::eps"
        np_dtype = onnx.helper.tensor_dtype_to_np_dtype(dtype) if dtype else np.float32
        self.consts[name] = np.array(value, dtype=np_dtype)
        self.shapes[name] = []
        return name

    def reduce(self, op, x, axes):
        out = self._name(op)
        if self.ctx.opset >= 18 or (op == "ReduceSum" and self.ctx.opset >= 13):
            ax = f"{out}::axes"
            self.consts[ax] = np.array(axes, dtype=np.int64)
            self.shapes[ax] = [len(axes)]
            n = helper.make_node(op, [x, ax], [out], keepdims=1)
        else:
            n = helper.make_node(op, [x], [out], axes=axes, keepdims=1)
        self.nodes.append(n)
        self.shapes[out] = [1 if j in axes else d for j, d in enumerate(self.shape)]
        return out

    def op(self, op, inputs, out=None, shape=None):
        out = out or self._name(op)
        self.nodes.append(helper.make_node(op, inputs, [out]))
        self.shapes[out] = list(shape if shape is not None else self.shape)
        return out

