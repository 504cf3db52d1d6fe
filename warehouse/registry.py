"""The pattern warehouse: an ordered registry of +Graph patterns (position = priority).

A pattern is a small Python function written in ONNX-op vocabulary; the compiler lowers it with the
same lowering as models into its +Graph. Experts add patterns without touching the compiler, from
their own package (entry-point group ``plus_ep.warehouse``) or a folder (``PLUS_EP_WAREHOUSE``)::

    from plus_ep.warehouse import pattern

    @pattern("gemm_softmax", allow_epilogue=True, template="gemm_rownorm")
    def gemm_softmax(b):
        x, w = b.input("x", ["M", "K"]), b.input("w", ["K", "N"])
        return b.Softmax(b.MatMul(x, w), axis=-1)

``template`` must name one of ``TEMPLATES`` (a pattern naming another is rejected when it is
added); ``roles`` finds, on each exact match, the node and tensor of each template role or
refuses the match with a reason (see roles.py).
"""
from __future__ import annotations

import hashlib
import inspect
import pathlib
import weakref
from dataclasses import dataclass, field
from typing import Callable

import onnx
from onnx import TensorProto, helper



class PatternBuilder:
    """Writes a pattern as ONNX nodes: ``b.input(name, dims)``, ``b.Add(x, y)``, ``b.const([..])``."""

    def __init__(self, opset: int = 18):
        self.opset, self.nodes, self.inputs, self.inits = opset, [], [], []

    def input(self, name: str, dims, dtype=TensorProto.FLOAT) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, dtype, list(dims)))
        return name

    def const(self, values, dtype=TensorProto.INT64) -> str:
        name = f"c{len(self.inits)}"
        vals = values if isinstance(values, (list, tuple)) else [values]
        dims = [len(vals)] if isinstance(values, (list, tuple)) else []
        self.inits.append(helper.make_tensor(name, dtype, dims, vals))
        return name

    def __getattr__(self, op_type: str):
        if not op_type[:1].isupper():
            raise AttributeError(op_type)

        def make(*inputs, **attrs):
            out = f"t{len(self.nodes)}"
            self.nodes.append(helper.make_node(op_type, list(inputs), [out], **attrs))
            return out
        return make

    def model(self, outputs) -> onnx.ModelProto:
        outs = [outputs] if isinstance(outputs, str) else list(outputs)
        graph = helper.make_graph(self.nodes, "pattern", self.inputs,
                                  [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs],
                                  self.inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])


@dataclass
class Pattern:
    name: str
    define: Callable | None = None          # fn(PatternBuilder) -> output name(s)
    allow_prologue: bool = False
    allow_epilogue: bool = True
    template: str | None = None             # the template rendering it: a name in TEMPLATES
    any_parallel: bool = False              # wildcard: any nest of parallel loops, no key ops
    check: Callable | None = None           # fn(candidate +Graph) -> reason str | None
    doc: str = ""
    roles: Callable | None = None           # fn(view, members) -> roles dict | refusal reason (roles.py)
    horizontal: bool = False                # groups sibling subgraphs after growth (identify.py), never grown
    _graph: object = field(default=None, repr=False)
    _match: object = field(default=None, repr=False)

    @property
    def graph(self):
        """The canonical +Graph of the definition (lowered once, lazily)."""
        if self._graph is None and self.define is not None:
            from ..graph_rewrites.primitives import pgraph_of_model
            b = PatternBuilder()
            raw = pgraph_of_model(b.model(self.define(b)))
            self._graph, self._match = raw.canonical(), raw.canonical(strict=False)
        return self._graph

    @property
    def match_graph(self):
        """The form matching compares: perfectly nested parallel chains collapsed."""
        if self._match is None:
            _ = self.graph
        return self._match


# The pattern -> template contract: the templates a pattern may name, each rendered by the kernels
# renderer registered under the same name (kernels/render.py; a test checks both sides agree).
TEMPLATES = {
    "elementwise": "point-wise kernels over the subgraph's outputs",
    "row_reduce": "one block per row: softmax, LayerNorm, RMSNorm and their element-wise neighbours",
    "reduce": "one block per row: plain reductions over trailing axes",
    "gemm": "MatMul/Gemm with an element-wise epilogue (roles: gemm, a, b, epilogue_inputs)",
    "gemm_rownorm": "GEMM whose epilogue feeds a row normalisation (roles as gemm)",
    "gemm_group": "sibling GEMMs reading one A, one launch with the group index as an outer batch index "
                  "(roles: a, members: [{gemm, a, b}])",
    "gemm_gated": "a gated MLP's two products of one A in one GEMM, the epilogue gets both sums (roles: a, form, "
                  "parts, meet; members: [{gemm, a, b}] or gemm, b, half)",
    "flash_attention": "softmax(QKᵀ + mask)·V in the FlashAttention style (roles: q, k, v, mask, qk, "
                       "softmax, pv, p_chain, nan_guard)",
}


class Warehouse:
    """Ordered patterns; the first exact match wins."""

    def __init__(self, patterns=()):
        self.patterns: list[Pattern] = list(patterns)

    def add(self, p: Pattern, before: str | None = None):
        if any(q.name == p.name for q in self.patterns):
            raise ValueError(f"warehouse already has a pattern named {p.name!r}")
        if p.template is not None and p.template not in TEMPLATES:
            raise ValueError(f"pattern {p.name!r} names template {p.template!r}, which has no renderer "
                             f"(known: {sorted(TEMPLATES)})")
        if before is None:
            self.patterns.append(p)
        else:
            names = [q.name for q in self.patterns]
            if before not in names:
                raise ValueError(f"no pattern {before!r} to insert {p.name!r} before; have {names}")
            self.patterns.insert(names.index(before), p)
        for fn in (p.define, p.check, p.roles):   # the source as loaded, not as a later edit leaves it
            _source_digest(fn)
        return p

    def without(self, names) -> "Warehouse":
        names = set(names)
        unknown = names - {p.name for p in self.patterns}
        if unknown:
            raise ValueError(f"unknown pattern(s) {sorted(unknown)}; have {[p.name for p in self.patterns]}")
        return Warehouse(p for p in self.patterns if p.name not in names)

    def get(self, name: str) -> Pattern:
        for p in self.patterns:
            if p.name == name:
                return p
        raise KeyError(f"no pattern {name!r}; have {[p.name for p in self.patterns]}")

    def __iter__(self):
        return iter(self.patterns)

    def __len__(self):
        return len(self.patterns)

    def digest(self) -> str:
        """sha256 of what the warehouse matches with: each pattern's name, position, options, and the
        source of the files its definition and check live in (user patterns included, so editing one
        changes the digest). Part of the rewritten-model cache key (plus_ep/model_cache.py)."""
        h = hashlib.sha256()
        for p in self.patterns:
            h.update(pattern_digest(p))
        return h.hexdigest()


def pattern_digest(p) -> bytes:
    """What one pattern matches and renders with: its name and options, and the source digest of its
    definition, check and roles finder (Warehouse.digest; the render store's key, kernels/compile/render_store.py)."""
    h = hashlib.sha256(repr((p.name, p.allow_prologue, p.allow_epilogue, p.template, p.any_parallel,
                             p.horizontal)).encode())
    for fn in (p.define, p.check, p.roles):
        h.update(b"\0" + _source_digest(fn))
    return h.digest()


_DIGESTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # function -> its source digest


def _source_digest(fn) -> bytes:
    """Digest of the file `fn` is defined in (its whole module: helpers count), else of its code. Taken
    once per function, when its pattern is added: editing the file later in the same process must not
    change the key of a warehouse that still runs the old code."""
    if fn is None:
        return b"-"
    try:
        return _DIGESTS[fn]
    except (KeyError, TypeError):
        pass
    try:
        digest = hashlib.sha256(pathlib.Path(inspect.getsourcefile(fn)).read_bytes()).digest() + \
            fn.__qualname__.encode()
    except (TypeError, OSError):  # built in C, made by exec(), or its file is gone: hash the code itself
        code = getattr(fn, "__code__", None)
        blob = repr((code.co_code, code.co_consts, code.co_names)) if code else repr(fn)
        digest = hashlib.sha256(blob.encode()).digest()
    try:
        _DIGESTS[fn] = digest
    except TypeError:             # not weak-referenceable: recomputed each time
        pass
    return digest


_BUILTIN = Warehouse()
_TARGET = [_BUILTIN]          # where @pattern registers: built-ins, or the warehouse being loaded


def pattern(name: str, *, allow_prologue=False, allow_epilogue=True, template=None,
            any_parallel=False, check=None, roles=None, before=None, warehouse: Warehouse | None = None,
            horizontal=False):
    """Decorator registering a pattern definition (in the warehouse being loaded). ``horizontal``: the
    pattern is not grown from a seed; after growth it merges sibling subgraphs whose union matches it
    (its definition lists two members; a group may hold more, each matching the first)."""
    def deco(fn):
        (warehouse or _TARGET[-1]).add(Pattern(name, fn, allow_prologue, allow_epilogue, template,
                                               any_parallel, check, (fn.__doc__ or "").strip(), roles,
                                               horizontal),
                                       before)
        return fn
    return deco
