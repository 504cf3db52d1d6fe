"""Render a fused subgraph into CUDA sources (one per route variant) and its launch plan.

    rendered = render(view, subgraph, inputs, outputs, Target("sm_90", fp32_math="exact"))
    rendered.plan.text()          # the node's `plus_plan` attribute
    rendered.variants             # [Variant(name, source, entries)], compiled per arch

The template family of the subgraph's pattern renders it (its kernel half: kernels/families/, found
through `Family.kernels`); the hooks are written from the subgraph's nodes by the element-expression
emitter (pull.py, forward.py); everything a template does not compute (side outputs) runs as point-wise
kernels in the same module.
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import sympy

from .codegen import assumed, pointwise, shapevals, symdim
from .compile import sources
from .families import NoKernelHalf, kernel_half
from .target import Target
from .wire.plan import (Launch, Plan, Route, add_assumptions, add_extents, add_zero_meanings, check_bound,
                        checked_composite_dims, input_tokens)
from ..limits import LITERAL_ELEMENTS, MAX_IN, MAX_OUT, MAX_SHAPEV, MAX_SYM
from .codegen.pull import Emitter, RenderError
from .codegen.row import RowProgram
from ..graph_rewrites.ops import SHAPE_OPS

HEADER = '#include "plus_common.cuh"\n'


@dataclass
class Variant:
    name: str
    source: str
    entries: list = field(default_factory=list)


@dataclass
class Rendered:
    plan: Plan
    variants: list
    template: str


class Job:
    """Everything a family's renderer needs about one subgraph."""

    def __init__(self, view, sg, inputs, outputs, target: Target, node_name):
        self.view, self.sg, self.target, self.node_name = view, sg, target, node_name
        self.arch, self.fp32_math = target.arch, target.fp32_math
        self.inputs, self.outputs = list(inputs), list(outputs)
        self.nodes = [view.nodes[i] for i in sg.nodes]
        self.syms = symdim.Symbols()
        self.plan = Plan(node=node_name)
        self.subs, self.own = self._composite_dims(), {}
        self.roles = self._roles()
        self.assumed = assumed.analyse(view, self.nodes, self.inputs, self.outputs, self.emitter().shape)
        self.subs, self.own = self.assumed.apply(self.subs)
        em = self.emitter()
        for t in self.inputs:   # number the symbols the inputs bind first
            self.plan.inputs.append((em.dtype(t), input_tokens(em.input_shape(t), self.syms)))
        self._shape_values()
        checked_composite_dims(self.plan, [em.input_shape(t) for t in self.inputs], self.syms)
        for t in self.outputs:
            self.plan.outputs.append((em.dtype(t), [self.syms.rpn(d) for d in em.shape(t)]))
        add_extents(self.plan, self.syms, self.inputs, self.outputs, self.nodes, em.shape, em.input_shape, self.own)
        add_assumptions(self.plan, self.syms, self.inputs, self.assumed)
        add_zero_meanings(self.plan, self.syms, self.inputs, self.nodes, em.shape, self.assumed.shape_values)

    def _shape_values(self):
        """Symbols no input axis gives, bound from the values of input shape tensors (the plan's
        `shapev` lines): GPT-2's `seq` from the Concat that TorchScript computes for a Reshape."""
        bound = set(self.syms.names)       # so far: the symbols input axes bind
        for i, t in enumerate(self.inputs):
            if not shapevals.is_shape_tensor(self.view, t):
                continue
            for j, e in enumerate(shapevals.values(self.view, t) or []):
                e = sympy.simplify(e.subs(self.subs)) if self.subs else e
                if e.is_Symbol and str(e) not in bound and len(self.plan.shapev) < MAX_SHAPEV:
                    self.plan.shapev.append((self.syms.index(e), i, j))
                    bound.add(str(e))

    def _roles(self):
        """The roles identification found; found here when the subgraph was built without them."""
        roles = getattr(self.sg, "roles", None)
        finder = getattr(self.sg.pattern, "roles", None)
        if roles is None and finder is not None:
            roles = finder(self.view, sorted(self.sg.nodes))
            if isinstance(roles, str):
                raise RenderError(f"{self.node_name}: {roles}")
        return roles

    def emitter(self) -> Emitter:
        return Emitter(self.view, self.nodes, self.inputs, self.syms, self.subs, self.own)

    def _composite_dims(self) -> dict:
        """Input dims like `batch*seq` whose symbols no input gives alone become symbols of their own
        (batch -> batch_seq/seq everywhere), so the launcher can bind them and products cancel."""
        bound, subs = set(), {}
        dims = [symdim.parse(d) for t in self.inputs for d in (self.view.shape(t) or []) if d is not None]
        bound = {d for d in dims if d.is_Symbol}
        for d in dims:
            d = d.subs(subs)
            if d.is_Integer or d.is_Symbol or d.free_symbols <= bound:
                continue
            free = sorted(d.free_symbols - bound, key=str)
            new = sympy.Symbol("_".join(str(s) for s in sorted(d.free_symbols, key=str)),
                               integer=True, positive=True)
            # batch*seq: seq = batch_seq / batch; past+seq (a KV cache's length): past = past_seq - seq
            subs[free[0]] = sympy.simplify(free[0] + new - d if d.is_Add else new * free[0] / d)
            bound.add(new)
        return subs

    def out_ptr(self, t):
        k = self.outputs.index(t)
        return f"args.out[{k}]", self.view.dtypes[t]

    def depends_on(self, roots) -> set:
        """Tensors whose values depend on `roots`' values (a Shape/Size output depends on a shape only: the
        support nodes of a Reshape, e.g. Swin's batch size, are side outputs a point-wise kernel stores)."""
        dep = set(roots)
        for n in self.nodes:
            if n.op_type not in SHAPE_OPS and any(i in dep for i in n.input if i):
                dep.update(o for o in n.output if o)
        return dep

    def side_kernels(self, outputs) -> list:
        """Point-wise kernels for `outputs` (grouped by shape): [(source, entry, launch)]."""
        groups: dict = {}
        shapes = self.emitter()
        for t in outputs:
            groups.setdefault(tuple(str(d) for d in shapes.shape(t)), []).append(t)
        out = []
        for g, names in enumerate(groups.values()):
            em = self.emitter()
            entry = f"plus_pointwise{g}"
            src, n = pointwise.render(em, {t: self.out_ptr(t) for t in names}, entry)
            out.append((src, entry, pointwise.launch(self.syms, n)))
        return out

    def side_device(self, outputs, name: str) -> str:
        """`outputs` (grouped by shape) as a device function `name(args, first, stride)` whose caller's
        threads each compute elements first, first + stride, ... of every group (no launch of its own)."""
        groups: dict = {}
        shapes = self.emitter()
        for t in outputs:
            groups.setdefault(tuple(str(d) for d in shapes.shape(t)), []).append(t)
        loops = [pointwise.device_loop(self.emitter(), {t: self.out_ptr(t) for t in names})
                 for names in groups.values()]
        return (f"PLUS_DEV void {name}(const PlusArgs& args, long long first, long long stride) {{\n"
                + "".join(loops) + "}\n")

    def row_kernel(self, row_nodes, stores, bind=None, entry="plus_row"):
        em = self.emitter()
        if bind:
            bind(em)
        prog = RowProgram(em, row_nodes, entry)
        return prog.body(stores), entry, prog.launch(self.syms), prog

    def row_finish(self, row_nodes, stores, bind) -> str:
        """The row program as the device function row.FINISH_FN(args, lo, hi) (RowProgram.finish)."""
        em = self.emitter()
        bind(em)
        return RowProgram(em, row_nodes).finish(stores)


# ---- the render cache -----------------------------------------------------------------------------
# A subgraph renders to the same plan and sources whatever its tensors and nodes are called, except for the
# node name in the plan and in each source's comment header (kernels/compile/sources.py). So renders are kept by
# the subgraph's canonical form (render_key): the twelve identical layers of a BERT render once, and a warm
# rewrite in the same process renders nothing. The key holds everything a renderer reads: the
# pattern and template, the target, every node's op, domain, attributes and inputs/outputs (tensors numbered
# by first appearance), every tensor's type and shape, the values of integer constants (shapes, axes, indices)
# and of float constants small enough to be folded into code (limits.LITERAL_ELEMENTS elements; larger ones,
# the weights, are read from memory), which boundary tensors are run-time data, the element values of boundary shape tensors (computed from
# the graph outside the subgraph), the roles (node indices as positions, tensors as numbers) and the +Graph.
RENDER_CACHE_SIZE = 512
_RENDERS: OrderedDict = OrderedDict()
_RENDERS_LOCK = threading.Lock()


def render_key(view, sg, inputs, outputs, target: Target) -> str:
    """The canonical form of a render job, as a digest (see above)."""
    h = hashlib.sha256()
    ids: dict = {}
    nodes = sorted(sg.nodes)
    pos = {n: k for k, n in enumerate(nodes)}

    def tid(t):
        if not t:
            return "-"
        if t not in ids:
            ids[t] = len(ids)
            h.update(repr(("tensor", ids[t], view.dtypes.get(t), [str(d) for d in (view.shape(t) or [])])).encode())
            c = view.const(t)
            if c is not None:
                arr = np.asarray(c)
                h.update(repr(("const", arr.dtype.str, arr.shape)).encode())
                if arr.dtype.kind in "biu" or arr.size <= LITERAL_ELEMENTS:
                    h.update(np.ascontiguousarray(arr).tobytes())
        return ids[t]

    def canon(x):
        if isinstance(x, bool) or x is None or isinstance(x, float):
            return x
        if isinstance(x, int):
            return ("node", pos[x]) if x in pos else x
        if isinstance(x, str):
            return ("t", tid(x)) if (x in view.dtypes or x in ids) else x
        if isinstance(x, dict):
            return tuple((k, canon(v)) for k, v in sorted(x.items()))
        if dataclasses.is_dataclass(x) and not isinstance(x, type):        # a family's Roles
            return (type(x).__name__,) + tuple((f.name, canon(getattr(x, f.name))) for f in dataclasses.fields(x))
        if isinstance(x, (list, tuple)):
            return tuple(canon(v) for v in x)
        return repr(x)

    pattern = sg.pattern
    h.update(repr((pattern.name, _family_name(pattern), target.arch, target.fp32_math,
                   sorted(target.excluded))).encode())
    for t in inputs:
        shape_vals = None
        if shapevals.is_shape_tensor(view, t):
            vals = shapevals.values(view, t)
            shape_vals = None if vals is None else [str(v) for v in vals]
        h.update(repr(("in", tid(t), t in view.data, shape_vals)).encode())
    for n in nodes:
        node = view.nodes[n]
        h.update(repr((node.op_type, node.domain, [tid(i) for i in node.input], [tid(o) for o in node.output])).encode())
        for a in node.attribute:
            h.update(a.SerializeToString())
    h.update(repr(("out", [tid(t) for t in outputs], canon(getattr(sg, "roles", None)),
                   canon(getattr(sg, "seed", None)), canon(list(getattr(sg, "outputs", None) or [])))).encode())
    pgraph = getattr(sg, "pgraph", None)
    if pgraph is not None:
        h.update(pgraph.render().encode())
    return h.hexdigest()


def _renamed(rd: Rendered, node_name: str) -> Rendered:
    """A copy of a cached render for node `node_name` (the plan's node and each source's header line)."""
    out = copy.deepcopy(rd)
    old, out.plan.node = out.plan.node, node_name
    for v in out.variants:
        v.source = v.source.replace(f"{sources.COMMENT}node:    {old}\n", f"{sources.COMMENT}node:    {node_name}\n", 1)
    return out


def render(view, sg, inputs, outputs, target: Target, node_name="fused", store=None) -> Rendered:
    """The kernels of subgraph `sg` (its boundary `inputs` and `outputs`, in node order) for `target`;
    a subgraph of the same canonical form as one rendered before in this process comes from the cache,
    else from `store` (a compile.render_store.RenderStore: renders kept on disk by earlier processes)."""
    key = render_key(view, sg, inputs, outputs, target)
    with _RENDERS_LOCK:
        hit = _RENDERS.get(key)
        if hit is not None:
            _RENDERS.move_to_end(key)
    if hit is not None:
        return _renamed(hit, node_name)
    disk_key = store.key(key, sg.pattern) if store is not None else None
    rd = store.get(disk_key) if store is not None else None
    if rd is not None:
        _remember(key, rd)
        return _renamed(rd, node_name)
    rd = _render(view, sg, inputs, outputs, target, node_name)
    _remember(key, rd)
    if store is not None:
        store.put(disk_key, rd)
    return rd


def _remember(key: str, rd: Rendered) -> None:
    with _RENDERS_LOCK:
        _RENDERS[key] = copy.deepcopy(rd)
        while len(_RENDERS) > RENDER_CACHE_SIZE:
            _RENDERS.popitem(last=False)


def clear_render_cache() -> None:
    with _RENDERS_LOCK:
        _RENDERS.clear()


def _family_name(pattern) -> str | None:
    """The name of the family rendering `pattern`'s subgraphs (the `template` a source header names)."""
    family = getattr(pattern, "family", None)
    return family.name if family is not None else None


def _renderer(sg, node_name):
    """The renderer of subgraph `sg`: its pattern's family's kernel half."""
    family = getattr(sg.pattern, "family", None)
    if family is None:
        raise RenderError(f"{node_name}: pattern {sg.pattern.name!r} names no template family")
    try:
        return kernel_half(family).render
    except NoKernelHalf as e:
        raise RenderError(f"{node_name}: pattern {sg.pattern.name!r}: {e}") from None


def _render(view, sg, inputs, outputs, target: Target, node_name="fused") -> Rendered:
    render_variants = _renderer(sg, node_name)
    job = Job(view, sg, inputs, outputs, target, node_name)
    variants = []
    for v, (name, prefix, kernels, cond) in enumerate(render_variants(job)):
        source = HEADER + prefix + "\n" + "\n".join(src for src, _, _ in kernels)
        variants.append(Variant(name, source, [e for _, e, _ in kernels]))
        route = Route(cond=cond, label=name)
        for _, entry, launch in kernels:        # (grid, block, smem) or (grid, block, smem, tensor maps)
            route.launches.append(Launch(v, entry, *launch))
        job.plan.routes.append(route)
    job.plan.syms = list(job.syms.names)
    check_bound(job.plan, node_name, [v.source for v in variants])
    if len(job.plan.syms) > MAX_SYM or len(job.inputs) > MAX_IN or len(job.outputs) > MAX_OUT:
        raise RenderError(f"{node_name}: more inputs/outputs/dimensions than a kernel takes "
                          f"({len(job.inputs)}/{len(job.outputs)}/{len(job.plan.syms)}; "
                          f"limits {MAX_IN}/{MAX_OUT}/{MAX_SYM})")
    _finish_sources(job, variants)
    return Rendered(job.plan, variants, _family_name(sg.pattern))


def _finish_sources(job: Job, variants: list) -> None:
    """Each variant's source gets its comment header and named symbols (kernels/compile/sources.py)."""
    pgraph = getattr(job.sg, "pgraph", None)
    pgraph = pgraph.render() if pgraph is not None else None
    for v, variant in enumerate(variants):
        route = (v, len(variants), job.plan.routes[v].cond)
        variant.source = sources.finish(variant.source, job.plan.syms, job.node_name, job.sg.pattern.name,
                                        _family_name(job.sg.pattern), route, variant.name, pgraph)
