"""The pattern warehouse: an ordered registry of +Graph patterns (position = priority).

A pattern is a small Python function written in ONNX-op vocabulary; the compiler lowers it with the
same lowering as models into its +Graph. Experts add patterns without touching the compiler, from
their own package (entry-point group ``plus_ep.warehouse``) or a folder (``PLUS_EP_WAREHOUSE``)::

    from plus_ep.warehouse import pattern

    @pattern("gemm_softmax", allow_epilogue=True, family="gemm_rownorm")
    def gemm_softmax(b):
        x, w = b.input("x", ["M", "K"]), b.input("w", ["K", "N"])
        return b.Softmax(b.MatMul(x, w), axis=-1)

``family`` is the template family rendering the pattern's subgraphs (graph_rewrites/family.py): a
`Family` object, or the name of one a loaded pattern declared (`FAMILIES`; another name is rejected
when the pattern is added). ``roles`` finds, on each exact match, the node and tensor of each role of
the family's template or refuses the match with a reason (default: the family's finder, see roles.py).
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

from ..graph_rewrites.family import Family


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
    family: Family | None = None            # the template family rendering it (None: DEFAULT_FAMILY's)
    any_parallel: bool = False              # wildcard: any nest of parallel loops, no key ops
    check: Callable | None = None           # fn(candidate +Graph) -> reason str | None
    doc: str = ""
    roles: Callable | None = None           # fn(view, members) -> the family's Roles | refusal reason (roles.py)
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


FAMILIES: dict = {}     # family name -> Family, as the patterns added so far declare them (built-ins first)
DEFAULT_FAMILY = "pointwise"    # the family of a pattern that names none: point-wise kernels over its outputs


def family_named(name: str) -> Family:
    """The declared family called `name` (a pattern names it by name from a user's pattern file)."""
    if name not in FAMILIES:
        raise ValueError(f"no template family {name!r} (known: {sorted(FAMILIES)})")
    return FAMILIES[name]


def _declare(family: Family, pattern_name: str) -> None:
    known = FAMILIES.setdefault(family.name, family)
    if known is not family:
        raise ValueError(f"pattern {pattern_name!r} declares a second template family named {family.name!r}")


class Warehouse:
    """Ordered patterns; the first exact match wins."""

    def __init__(self, patterns=()):
        self.patterns: list[Pattern] = list(patterns)

    def add(self, p: Pattern, before: str | Family | None = None):
        """Add `p` last, or before the pattern named `before`, or before the first pattern of family `before`."""
        if any(q.name == p.name for q in self.patterns):
            raise ValueError(f"warehouse already has a pattern named {p.name!r}")
        if isinstance(p.family, str):
            p.family = family_named(p.family)
        elif p.family is None:
            p.family = FAMILIES.get(DEFAULT_FAMILY)
        if p.family is not None:
            if not isinstance(p.family, Family):
                raise ValueError(f"pattern {p.name!r}: family {p.family!r} is not a Family")
            if p.horizontal and (p.family.groups is None or p.family.groups.member.joins is None):
                raise ValueError(f"pattern {p.name!r} is horizontal, but family {p.family.name!r} declares no "
                                 "groups of a family whose subgraphs join them")
            _declare(p.family, p.name)
            if p.roles is None:
                p.roles = p.family.find_roles
        if before is None:
            self.patterns.append(p)
        else:
            at = [k for k, q in enumerate(self.patterns)
                  if (q.family is before if isinstance(before, Family) else q.name == before)]
            if not at:
                raise ValueError(f"no pattern {before!r} to insert {p.name!r} before; "
                                 f"have {[q.name for q in self.patterns]}")
            self.patterns.insert(at[0], p)
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
    family = p.family.name if p.family is not None else None
    h = hashlib.sha256(repr((p.name, p.allow_prologue, p.allow_epilogue, family, p.any_parallel,
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


def pattern(name: str, *, allow_prologue=False, allow_epilogue=True, family: Family | str | None = None,
            any_parallel=False, check=None, roles=None, before=None, warehouse: Warehouse | None = None,
            horizontal=False):
    """Decorator registering a pattern definition (in the warehouse being loaded). ``horizontal``: the
    pattern is not grown from a seed; after growth it merges sibling subgraphs whose union matches it
    (its definition lists two members; a group may hold more, each matching the first; its family
    declares the groups). ``before``: a pattern name, or a Family whose patterns this one precedes."""
    def deco(fn):
        (warehouse or _TARGET[-1]).add(Pattern(name, fn, allow_prologue, allow_epilogue, family,
                                               any_parallel, check, (fn.__doc__ or "").strip(), roles,
                                               horizontal),
                                       before)
        return fn
    return deco
