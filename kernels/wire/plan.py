"""The launch plan: the text the native launcher evaluates per run (format: CONTRACT.md §3).

This module is the one Python writer and reader of that text (the launcher's own reader is
plus_ep/native/plan.c):

    text = plan.text()              # write
    plan = parse(text)              # read back: parse(p.text()).text() == p.text()
    problem(text)                   # why no input could make it right (int64 overflow, negative dims)
"""
from __future__ import annotations

import copy
import dataclasses
import re
from dataclasses import dataclass, field

import sympy

from ..codegen import symdim
from ..codegen.pull import RenderError
from ...limits import MAX_EQUAL, MAX_SHAPEV, MAX_SYM

VERSION = 1
MAX_RECORDS = min(MAX_EQUAL, MAX_SYM)   # `bcast` and `equal` lines each (plan.h: PLUS_MAX_BCAST, PLUS_MAX_EQUAL)


@dataclass
class Launch:
    image: int
    entry: str
    grid: tuple
    block: tuple
    smem: str
    tmaps: tuple = ()      # the launch's tensor maps, each a tmap() tuple (its `tmap` records)


TMAP_BUFS = ("in", "out", "scratch")
MAX_TMAPS_PER_KERNEL = 8          # plus_ep/native/tmap.h PLUS_TMAPS_PER_KERNEL


def tmap(dtype: int, buf: str, index: int, dims, strides, box, swizzle: int = 0, offset: str = "0") -> tuple:
    """One tensor map of a launch (a `tmap` record, CONTRACT.md §3): ONNX `dtype`; the tensor `buf` ("in", "out",
    "scratch") `index`, from element `offset` (RPN); `dims` (RPN, elements, innermost first) and `strides` (RPN,
    elements between consecutive indices of dims 1..); `box` (elements, 1..256); `swizzle` in bytes (0, 32, 64,
    128). E.g. a [M, K] f16 A operand read as 64 x 128 boxes under the 128-byte swizzle:
    tmap(10, "in", 0, ("s1", "s0"), ("s1",), (64, 128), 128)."""
    if buf not in TMAP_BUFS or not 1 <= len(dims) <= 5 or len(strides) != len(dims) - 1 or len(box) != len(dims):
        raise ValueError(f"tensor map {buf} {index}: rank {len(dims)}, {len(strides)} strides, {len(box)} box dims")
    return (int(dtype), buf, int(index), str(offset), tuple(str(d) for d in dims), tuple(str(s) for s in strides),
            tuple(int(b) for b in box), int(swizzle))


def tmap_line(t) -> str:
    dtype, buf, index, offset, dims, strides, box, swizzle = t
    return " ".join(["tmap", str(dtype), str(len(dims)), buf, str(index), offset, *dims, *strides,
                     *(str(b) for b in box), str(swizzle)])


@dataclass
class Route:
    cond: str
    launches: list = field(default_factory=list)
    label: str = ""
    archs: tuple = ()      # the packs this route serves (its `arch` record); () = every pack


@dataclass
class Plan:
    node: str
    inputs: list = field(default_factory=list)    # (dtype, [tokens])
    outputs: list = field(default_factory=list)   # (dtype, [rpn])
    syms: list = field(default_factory=list)      # symbol names, index = K of sK / args.v[K]
    scratch: list = field(default_factory=list)   # rpn byte counts
    routes: list = field(default_factory=list)
    archs: list = field(default_factory=list)
    shapev: list = field(default_factory=list)    # (K, input i, element j): symbol K from a shape tensor
    shapev_zero: list = field(default_factory=list)   # (i, j, `shapev` fields after j): what a 0 there binds
    vals: list | None = None                      # `val` expressions; None: v[K] = sK for bound symbols
    extents: list = field(default_factory=list)   # ("in"|"out", index, rpn): elements the kernels touch
    exact: list = field(default_factory=list)     # ("in"|"out", index, dim): a quotient dim that must divide
    optional: list = field(default_factory=list)  # ("in"|"out", index): may be wired ""
    bcast: list = field(default_factory=list)     # (input, dim, rpn): that dim is 1 (read with stride 0) or rpn
    equal: list = field(default_factory=list)     # (rpn, rpn, what): dims the rewrite took as equal

    def text(self) -> str:
        lines = [f"plusplan {VERSION}", f"node {self.node}"]
        if self.archs:
            lines.append("archs " + " ".join(self.archs))
        lines += [f"sym {k} {name}" for k, name in enumerate(self.syms)]
        for i, (dt, dims) in enumerate(self.inputs):
            lines.append(" ".join(["in", str(i), str(dt), str(len(dims)), *dims]))
        # after the `in` lines (their inputs must be declared), before anything reading the symbols
        zero = {(i, j): z for i, j, z in self.shapev_zero}
        lines += [f"shapev s{k} {i} {j}" + (f" {zero[i, j]}" if (i, j) in zero else "") for k, i, j in self.shapev]
        for i, (dt, dims) in enumerate(self.outputs):
            lines.append(" ".join(["out", str(i), str(dt), str(len(dims)), *dims]))
        lines += [f"extent {kind} {i} {e}" for kind, i, e in self.extents]
        lines += [f"exact {kind} {i} {d}" for kind, i, d in self.exact]
        lines += [f"optional {kind} {i}" for kind, i in self.optional]
        lines += [f"bcast in {i} {d} {e}" for i, d, e in self.bcast]
        lines += [f"equal {a} {b} {what}" for a, b, what in self.equal]
        if self.vals is not None:
            lines += [f"val {k} {e}" for k, e in enumerate(self.vals)]
        else:
            bound = bound_symbols(self)
            lines += [f"val {k} s{k}" if f"s{k}" in bound else f"val {k} 0" for k in range(len(self.syms))]
        lines += [f"scratch {k} {e}" for k, e in enumerate(self.scratch)]
        for r, route in enumerate(self.routes):
            if route.archs and (r == 0 or route.archs != self.routes[r - 1].archs):
                lines.append("arch " + " ".join(route.archs))     # a route group per arch (plan.c)
            lines.append(f"route {r} {route.cond}")
            for ln in route.launches:
                lines.append(" ".join(["kernel", str(r), str(ln.image), ln.entry, *ln.grid, *ln.block, ln.smem]))
                lines += [tmap_line(t) for t in ln.tmaps]
        lines.append("end")
        return "\n".join(lines) + "\n"


def bound_symbols(plan: Plan) -> set:
    """The symbols (`s<k>`) the launcher binds: an input dim that is a bare symbol, or a shape
    tensor's value (`shapev`). A composite dim (`s1,s2,+`, written by checked_composite_dims) binds
    nothing: it is checked once the others are bound. E.g. inputs [["s0", "0,s1,*"]] bind {"s0"}."""
    bound = {tok for _, dims in plan.inputs for tok in dims if re.fullmatch(r"s\d+", tok)}
    return bound | {f"s{k}" for k, _, _ in plan.shapev}


def max_expr(exprs) -> str:
    """The RPN expression of the largest of `exprs` (RPN expressions; duplicates count once)."""
    exprs = sorted(set(exprs))
    out = exprs[0]
    for e in exprs[1:]:
        out = f"{out},{e},max"
    return out


def merge(parts, archs) -> Plan:
    """One plan for every arch from the plans of arch groups, `parts` = [(archs of the group, its plan)]
    with the archs whose renders came out alike in one group: the first plan's inputs, outputs and
    symbols; the routes of every group behind its `arch` record (none when there is one group);
    each scratch size the largest of the groups' (0 where a group has no such buffer). Raises
    RenderError when the groups disagree on the node's inputs, outputs or symbols."""
    (first_archs, base), rest = parts[0], parts[1:]
    for group_archs, p in rest:
        if (p.inputs, p.outputs, p.syms, p.shapev, p.shapev_zero) != (base.inputs, base.outputs, base.syms, base.shapev,
                                                                      base.shapev_zero):
            raise RenderError(f"{base.node}: the renders for {group_archs[0]} and {first_archs[0]} disagree on "
                              "the node's inputs, outputs or symbols")
    plan = copy.copy(base)
    plan.archs = list(archs)
    n_scratch = max(len(p.scratch) for _, p in parts)
    plan.scratch = [max_expr(p.scratch[s] if s < len(p.scratch) else "0" for _, p in parts) for s in range(n_scratch)]
    plan.routes = [dataclasses.replace(r, archs=tuple(group_archs)) if len(parts) > 1 else r
                   for group_archs, p in parts for r in p.routes]
    return plan


def input_tokens(shape, syms: symdim.Symbols) -> list:
    """Plan tokens of an input's dims: literals, symbols that the input binds, `*` otherwise."""
    out = []
    for d in shape:
        e = symdim.parse(d)
        if e.is_Integer:
            out.append(str(int(e)))
        elif e.is_Symbol:
            out.append(f"s{syms.index(e)}")
        else:
            out.append("*")
    return out


def checked_composite_dims(plan: Plan, shapes, syms: symdim.Symbols) -> None:
    """Each `*` dim of an `in` line whose expression (a [batch*seq, C] input's first dim) reads only
    symbols the plan binds (input axes, `shapev`) becomes that expression, which the launcher checks
    against the tensor ONNX Runtime hands over once every symbol is bound: a kernel never indexes an
    input by sizes its actual shape does not have. `shapes[i]` are input i's dims. Numbering is
    unchanged: only symbols already numbered are read."""
    bound = bound_symbols(plan)
    for i, (dt, dims) in enumerate(plan.inputs):
        for d, tok in enumerate(dims):
            if tok != "*" or shapes[i] is None or d >= len(shapes[i]):
                continue
            e = symdim.parse(shapes[i][d])
            names = {str(f) for f in e.free_symbols}
            if not names or not names <= set(syms.names) or not {f"s{syms.names.index(n)}" for n in names} <= bound:
                continue
            try:
                dims[d] = syms.rpn(e)
            except symdim.DimError:
                continue


VIEW_OPS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Cast")   # same elements, new shape


def add_extents(plan: Plan, syms: symdim.Symbols, inputs, outputs, nodes, shape, input_shape=None, own=()) -> None:
    """The plan's bounds records (CONTRACT.md §3) from the shapes the kernels were rendered for:
    `extent in|out` = the element count of each input and output, and of each view (Reshape chain in
    `nodes`) the kernels index it through: an input's consumers' views, the tensor an output is a view
    of (the GEMM result a Reshape stores), wherever the count reads only bound symbols; `exact` for
    each dim the rewrite took as an exact quotient (batch = batch_seq/seq). `shape(t)` gives a tensor's
    sympy dims. E.g. Y = Reshape(X2 @ W + B, [batch, seq, 96]) with X2 [n, 32] gets `extent out 0
    96,s0,*` beside Y's own `96,s1,*,s2,*`, so the launcher refuses n != batch*seq instead of writing n
    rows into batch*seq. `input_shape(t)`: an input's dims as the launcher binds them (default `shape`);
    inputs in `own` (broadcast at run time) get their own count only: their views carry the broadcast dims.
    Raises RenderError for a tensor whose count cannot be written: the launcher refuses a plan without
    an extent for every input and output. Numbering is unchanged."""
    input_shape = input_shape or shape
    bound = bound_symbols(plan)
    bound_names = {syms.names[int(t[1:])] for t in bound}
    producer = {o: n for n in nodes for o in n.output if o}
    consumers: dict = {}
    for n in nodes:
        if n.op_type in VIEW_OPS and n.input and n.input[0]:
            consumers.setdefault(n.input[0], []).append(n)

    def count(t, dims_of=shape):
        try:
            n = symdim.numel(dims_of(t))
        except (symdim.DimError, RenderError, KeyError, TypeError):
            return None
        ok = {str(f) for f in n.free_symbols} <= bound_names and not n.has(sympy.floor)
        return n if ok else None

    def views_of(t, seen):   # an input's views inside the subgraph
        for n in consumers.get(t, []):
            for o in n.output:
                if o and o not in seen:
                    seen.add(o)
                    yield o
                    yield from views_of(o, seen)

    def sources_of(t):       # what an output is a view of
        while t in producer and producer[t].op_type in VIEW_OPS and producer[t].input[0]:
            t = producer[t].input[0]
            yield t

    plan.extents, plan.exact = [], []
    for kind, tensors, related in (("in", inputs, lambda t: () if t in own else views_of(t, {t})),
                                   ("out", outputs, sources_of)):
        dims_of = input_shape if kind == "in" else shape
        for i, t in enumerate(tensors):
            counts = []
            for u in (t, *related(t)):
                n = count(u, dims_of if u == t else shape)
                if n is not None and not any(sympy.simplify(n - c) == 0 for c in counts):
                    counts.append(n)
            written = 0
            for n in counts:
                try:
                    plan.extents.append((kind, i, syms.rpn(n)))
                    written += 1
                except symdim.DimError:
                    pass
            if not written:
                raise RenderError(f"{plan.node}: the element count of {'input' if kind == 'in' else 'output'} {i} "
                                  f"'{t}' is not an expression of the dims the launcher binds, so it could not prove "
                                  "the kernels stay inside it")
            try:
                dims = dims_of(t)
            except (symdim.DimError, RenderError, KeyError, TypeError):
                continue
            for d, e in enumerate(dims):
                tok = (plan.outputs if kind == "out" else plan.inputs)[i][1][d]
                if e.as_numer_denom()[1] != 1 and {str(f) for f in e.free_symbols} <= bound_names and tok.endswith(",/"):
                    plan.exact.append((kind, i, d))


def add_assumptions(plan: Plan, syms: symdim.Symbols, inputs, assumed) -> None:
    """The plan's `bcast` and `equal` records from a kernels/codegen/assumed.Assumed: each broadcast axis
    of an input (1, or the dim it meets), each pair of dims the rewrite took as equal, and for a shape
    tensor the launcher reads (`shapev`) every other element it knows: a `shapev` check against a bound
    symbol, or a symbol of its own tied to its value (`equal s2 s0,s1,/`: GPT-2's Concat(Shape(mask),
    [96]) element 0 is batch_seq / seq, or the Reshape gives other dims than the kernels). An equation
    over a symbol no input or shape tensor binds is left out (no kernel reads such a dim: check_bound).
    Symbols are only added, after those the inputs bind."""
    bound = bound_symbols(plan)
    names = {syms.names[int(t[1:])] for t in bound}
    plan.bcast = [(inputs.index(t), a, syms.rpn(meets)) for t, a, _, meets in assumed.bcast]
    plan.equal = []
    read = {(i, j) for _, i, j in plan.shapev}
    for t, vals in assumed.shape_values.items():    # every element of a shape tensor the launcher reads
        i = inputs.index(t)
        if not any(k == i for _, k, _ in plan.shapev):
            continue             # none: its values never reach a kernel (the node stays `Fused`, no host copy)
        for j, e in enumerate(vals):
            if (i, j) in read or e.is_Integer or not {str(f) for f in e.free_symbols} <= names:
                continue         # a constant of the graph, or a value no kernel reads
            if len(plan.shapev) >= MAX_SHAPEV or (not e.is_Symbol and len(syms.names) >= MAX_SYM):
                raise RenderError(f"{plan.node}: shape tensor '{t}' has more elements than the launcher can check")
            if e.is_Symbol:      # a dim an input axis binds: the `shapev` line checks the element against it
                plan.shapev.append((syms.index(e), i, j))
                continue
            name, n = f"shape{i}_{j}", 0
            while name in syms.names:
                n += 1
                name = f"shape{i}_{j}_{n}"
            k = syms.index(name)
            plan.shapev.append((k, i, j))
            plan.equal.append((f"s{k}", syms.rpn(e), f"element {j} of shape tensor {i}"))
    for a, b, where in assumed.equal:
        if not {str(f) for f in (a.free_symbols | b.free_symbols)} <= names:
            continue
        try:
            plan.equal.append((syms.rpn(a), syms.rpn(b), " ".join(where.split()[:12])[:200] or "-"))
        except symdim.DimError:
            continue
    if len(plan.bcast) > MAX_RECORDS or len(plan.equal) > MAX_RECORDS:
        raise RenderError(f"{plan.node}: more than {MAX_RECORDS} broadcast axes or assumed dims (plan.c's limit)")


def add_zero_meanings(plan: Plan, syms: symdim.Symbols, inputs, nodes, shape, values=None) -> None:
    """The `zero` field of each `shapev` line (CONTRACT.md §3): what the subgraph's `nodes` make of a 0 at
    that element (kernels/codegen/shapevals.zero_meaning: a Reshape with allowzero 0 copies its input's
    dim there), as an expression over the symbols bound before the line (input axes, earlier `shapev`
    lines), else `-` (the launcher refuses the 0); `infer` after it where the tensor also holds a -1 the
    Reshape infers (a copied 0 leaves it nothing to divide by: refused). E.g. GPT-2's Reshape(X2 @ W + B
    [s0, 96], [batch, seq, 96]): `shapev s1 0 0 s0`, `shapev s2 0 1 96`. `shape(t)`: tensor t's sympy
    dims; `values`: {shape tensor: its elements} where known (codegen/assumed.Assumed.shape_values)."""
    from ..codegen import shapevals
    bound = {syms.names[int(t[1:])] for t in bound_symbols(dataclasses.replace(plan, shapev=[]))}   # input axes
    plan.shapev_zero = []
    for k, i, j in plan.shapev:
        vals = (values or {}).get(inputs[i], ())
        e = shapevals.zero_meaning(nodes, inputs[i], j, shape, vals)
        try:
            z = syms.rpn(e) if e is not None and {str(f) for f in e.free_symbols} <= bound else "-"
        except symdim.DimError:
            z = "-"
        if z != "-" and not e.is_Integer and any(v == -1 for v in vals):
            z += " infer"        # a Reshape that also infers a -1 refuses a 0 it copies
        plan.shapev_zero.append((i, j, z))
        bound.add(syms.names[k])


def check_bound(plan: Plan, node_name: str, sources=()):
    """Every symbol the plan's expressions or the kernels use must be bound by an input dim or a
    shape tensor's value (`shapev`)."""
    bound = bound_symbols(plan)
    text = plan.text()
    used_plan = set(re.findall(r"(?<![A-Za-z_])s(\d+)(?![0-9])", " ".join(
        ln for ln in text.splitlines() if not ln.startswith(("in ", "sym ", "val ", "node ", "shapev ")))))
    used_src = {m for s in sources for m in re.findall(r"args\.v\[(\d+)\]", s)}
    for k, name in enumerate(plan.syms):
        if str(k) in (used_plan | used_src) and f"s{k}" not in bound:
            raise RenderError(f"{node_name}: dimension '{name}' is neither the size of an input axis nor an "
                              "element of an input shape tensor, so the launcher cannot bind it")


# ------------------------------------------------------------------------------------------ reading
INT64_MAX = 2**63 - 1          # the launcher evaluates every expression in int64


class PlanSyntaxError(ValueError):
    """The text is not a launch plan (header, record shape, numbering). `line` is 1-based, 0 for the text."""

    def __init__(self, line: int, text: str, why: str):
        self.line = line
        super().__init__(f"plan line {line} `{text[:120]}`: {why}" if line else f"plan: {why}")


def records(text: str) -> list:
    """[(line number, record kind, tokens after the kind, the line)] of a plan, `plusplan` header
    and `end` checked; the records' meaning is parse's (here) and plan.c's business."""
    lines = text.split("\n")
    if not text.endswith("\n") or lines[-1] != "":
        raise PlanSyntaxError(0, text, "the text must end with one newline after `end`")
    lines = lines[:-1]
    if not lines or lines[0] != f"plusplan {VERSION}":
        raise PlanSyntaxError(1, lines[0] if lines else "", f"the first line must be `plusplan {VERSION}`")
    if lines[-1] != "end":
        raise PlanSyntaxError(len(lines), lines[-1], "the last line must be `end`")
    out = []
    for no, line in enumerate(lines[1:-1], 2):
        kind, _, rest = line.partition(" ")
        if not kind:
            raise PlanSyntaxError(no, line, "empty record")
        out.append((no, kind, rest.split(" ") if rest else [], line))
    return out


def parse(text: str) -> Plan:
    """The Plan a launch-plan text describes; PlanSyntaxError names the line that is not one."""
    plan = Plan(node="")
    vals: list = []
    group: tuple = ()
    last = None                  # the last kernel line's Launch (a `tmap` record belongs to it)
    for no, kind, tok, line in records(text):
        def need(n, form):
            if len(tok) < n:
                raise PlanSyntaxError(no, line, f"expected `{form}`")
        try:
            if kind == "node":
                need(1, "node <name>")
                plan.node = line[len("node "):]
            elif kind == "archs":
                need(1, "archs <arch> ...")
                plan.archs = list(tok)
            elif kind == "sym":
                need(2, "sym <k> <name>")
                _expect_index(no, line, int(tok[0]), len(plan.syms))
                plan.syms.append(" ".join(tok[1:]))
            elif kind in ("in", "out"):
                need(3, f"{kind} <i> <dtype> <rank> <dims>...")
                table = plan.inputs if kind == "in" else plan.outputs
                _expect_index(no, line, int(tok[0]), len(table))
                if len(tok) != 3 + int(tok[2]):
                    raise PlanSyntaxError(no, line, f"rank {tok[2]} but {len(tok) - 3} dims")
                table.append((int(tok[1]), list(tok[3:])))
            elif kind == "shapev":
                need(3, "shapev <sK> <i> <j> [<zero>]")
                if not re.fullmatch(r"s\d+", tok[0]) or len(tok) > 5 or tok[4:] not in ([], ["infer"]):
                    raise PlanSyntaxError(no, line, "expected `shapev <sK> <i> <j> [<zero> [infer]]`")
                plan.shapev.append((int(tok[0][1:]), int(tok[1]), int(tok[2])))
                if len(tok) >= 4:
                    plan.shapev_zero.append((int(tok[1]), int(tok[2]), " ".join(tok[3:])))
            elif kind in ("val", "scratch"):
                need(2, f"{kind} <k> <expr>")
                table = vals if kind == "val" else plan.scratch
                _expect_index(no, line, int(tok[0]), len(table))
                table.append(tok[1])
            elif kind in ("extent", "exact", "optional"):
                need(2 if kind == "optional" else 3, f"{kind} in|out <i>" + ("" if kind == "optional" else " <x>"))
                if tok[0] not in ("in", "out"):
                    raise PlanSyntaxError(no, line, f"expected `{kind} in|out ...`")
                if kind == "extent":
                    plan.extents.append((tok[0], int(tok[1]), tok[2]))
                elif kind == "exact":
                    plan.exact.append((tok[0], int(tok[1]), int(tok[2])))
                else:
                    plan.optional.append((tok[0], int(tok[1])))
            elif kind == "bcast":
                need(4, "bcast in <i> <d> <expr>")
                if tok[0] != "in":
                    raise PlanSyntaxError(no, line, "expected `bcast in <i> <d> <expr>`")
                plan.bcast.append((int(tok[1]), int(tok[2]), tok[3]))
            elif kind == "equal":
                need(3, "equal <expr> <expr> <what>")
                plan.equal.append((tok[0], tok[1], " ".join(tok[2:])))
            elif kind == "arch":
                need(1, "arch <arch> ...")
                group = tuple(tok)
            elif kind == "route":
                need(2, "route <r> <expr>")
                _expect_index(no, line, int(tok[0]), len(plan.routes))
                plan.routes.append(Route(cond=tok[1], archs=group))
            elif kind == "kernel":
                need(10, "kernel <r> <image> <entry> <gx> <gy> <gz> <bx> <by> <bz> <smem>")
                r = int(tok[0])
                if not 0 <= r < len(plan.routes):
                    raise PlanSyntaxError(no, line, f"route {r} is not declared above")
                plan.routes[r].launches.append(Launch(int(tok[1]), tok[2], tuple(tok[3:6]), tuple(tok[6:9]), tok[9]))
                last = plan.routes[r].launches[-1]
            elif kind == "tmap":
                need(5, "tmap <dtype> <rank> in|out|scratch <i> <offset> <dims> <strides> <box> <swizzle>")
                n = int(tok[1])
                if last is None or len(tok) != 5 + 3 * n:
                    raise PlanSyntaxError(no, line, "a `tmap` record of rank r has 5 + 3r fields and follows a `kernel`")
                last.tmaps += (tmap(int(tok[0]), tok[2], int(tok[3]), tok[5:5 + n], tok[5 + n:4 + 2 * n],
                                    [int(b) for b in tok[4 + 2 * n:4 + 3 * n]], int(tok[-1]), tok[4]),)
            else:
                raise PlanSyntaxError(no, line, f"unknown record `{kind}`")
        except ValueError as exc:
            if isinstance(exc, PlanSyntaxError):
                raise
            raise PlanSyntaxError(no, line, f"not a number where one belongs ({exc})") from None
    plan.vals = vals
    if plan.text() != text:
        raise PlanSyntaxError(0, text, "records out of the writer's order (Plan.text() writes another text)")
    return plan


def _expect_index(no: int, line: str, got: int, want: int) -> None:
    if got != want:
        raise PlanSyntaxError(no, line, f"index {got} out of order (expected {want})")


def problem(text: str) -> str | None:
    """Why a launch plan cannot be right for any input: an integer beyond int64 (the launcher's
    arithmetic), or a negative literal dim on an `in`/`out` line. None when it is fine."""
    for no, kind, tok, line in records(text):
        if kind in ("node", "sym", "archs"):
            continue
        for t in tok:
            for item in t.split(","):
                if item.lstrip("-").isdigit() and abs(int(item)) > INT64_MAX:
                    return f"plan line {no} `{line[:120]}`: {item} does not fit in int64"
        if kind in ("in", "out"):
            bad = [t for t in tok[3:] if t.startswith("-") and t[1:].isdigit()]
            if bad:
                return f"plan line {no} `{line[:120]}`: negative dim {bad[0]}"
    return None


def node_of(text: str) -> str:
    """The node a plan belongs to (its `node` record)."""
    return parse(text).node
