"""`plus_ep.rewrite(model)`: identify fused subgraphs and rewrite them into ai.plus_ep::Fused nodes."""
from __future__ import annotations

import gc
import json
import logging
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import onnx

from .graph_rewrites import contrib
from .graph_rewrites.contrib import decoders
from .graph_rewrites.fuse import FusedSubgraph, fuse
from .graph_rewrites.graph import GraphView
from .graph_rewrites.identify import Identifier
from .graph_rewrites.index import ModelError
from .graph_rewrites.partition import node_name
from .graph_rewrites.shape_reads import read_shapes_through_copies
from .kernels.target import FP32_MATH_DEFAULT
from .warehouse import default_warehouse

from .validate import check_model, for_runtime, fusable_opset, load_model, runtime_limits  # noqa: F401

log = logging.getLogger("plus_ep")


@dataclass
class RewriteResult:
    model: onnx.ModelProto
    subgraphs: list = field(default_factory=list)      # partition.Subgraph
    view: GraphView | None = None
    identifier: Identifier | None = None
    seconds: float = 0.0
    kernels: object = None                               # kernels.compile.stage.KernelBuild when archs given
    fp32_math: str = FP32_MATH_DEFAULT                   # fp32 GEMM/attention math of the kernels ("tf32" | "exact")
    source: onnx.ModelProto | None = None                # the model as given (view.model has contrib ops expanded)
    contrib: contrib.Expanded | None = None              # what each contrib op became, and the ones left opaque


def rewrite_detailed(model, warehouse=None, disable=(), archs=None, cache=None, progress=None,
                     fp32_math=FP32_MATH_DEFAULT, compile_kernels: bool = True, warn: bool = True,
                     runtime_ir: bool = True, shape_reads: bool = True) -> RewriteResult:
    """Identify and fuse. With `archs` (e.g. ["sm_80", "sm_90"]) every fused node also carries its
    launch plan and compiled kernels; subgraphs whose kernels fail stay unfused (with one warning each
    unless `warn` is False: result.kernels.failures lists them). `compile_kernels=False` renders the
    kernels without compiling them (what `plus-ep inspect` reports): the model carries plans, no images.
    runtime_ir: the result has an IR version the installed onnxruntime loads (lowered when the model
    allows it, else ModelError: validate.for_runtime); False leaves it as fusion made it (reports).
    shape_reads: Shape nodes read through copies first (graph_rewrites/shape_reads.py), which lets a
    subgraph take a copy whose Shape another chain reads; False for the plugin EP's planner, whose groups
    must be convex in the graph ONNX Runtime holds, where each Shape still reads its copy."""
    with heap_spared():
        return _rewrite_detailed(model, warehouse, disable, archs, cache, progress, fp32_math, compile_kernels,
                                 warn, runtime_ir, shape_reads)


_HEAP_LOCK = threading.Lock()
_HEAP_DEPTH = 0


@contextmanager
def heap_spared():
    """The caller's objects left out of the garbage collector's scans while a rewrite runs. A rewrite
    allocates enough to set off full collections, and each full collection walks every object of the
    process: in a process that loaded torch (an export, then a rewrite) that is ~270k objects and ~0.15 s
    of CPU per collection, more than the whole warm rewrite's own work. So the objects that exist when
    the outermost rewrite starts are frozen (gc.freeze: the rewrite's own garbage is still collected) and
    handed back to the collector (gc.unfreeze) when it ends; garbage among them is collected after. Does
    nothing when the collector is off or the process froze objects itself (a pre-fork server's
    gc.freeze is left as it is)."""
    global _HEAP_DEPTH
    with _HEAP_LOCK:       # rewrites in several threads: the first one in freezes, the last one out thaws
        counted = _HEAP_DEPTH > 0 or (gc.isenabled() and gc.get_freeze_count() == 0)
        if counted:
            if _HEAP_DEPTH == 0:
                gc.freeze()
            _HEAP_DEPTH += 1
    try:
        yield
    finally:
        if counted:
            with _HEAP_LOCK:
                _HEAP_DEPTH -= 1
                if _HEAP_DEPTH == 0:
                    gc.unfreeze()


def _rewrite_detailed(model, warehouse, disable, archs, cache, progress, fp32_math, compile_kernels, warn,
                      runtime_ir, shape_reads) -> RewriteResult:
    start = time.perf_counter()
    proto = load_model(model)
    where = "" if isinstance(model, onnx.ModelProto) else (
        "<bytes>" if isinstance(model, (bytes, bytearray)) else os.fspath(model))
    if runtime_ir:
        refuse_unloadable_opset(proto, where)
    proto = check_model(proto, where)
    source = proto
    expanded = contrib.expand_model(proto)       # contrib ops -> their standard-op subgraphs
    proto = expanded.model
    if shape_reads:
        proto, _ = read_shapes_through_copies(proto)
    wh = warehouse if warehouse is not None else default_warehouse()
    if disable:
        wh = wh.without(disable)
    try:
        view = GraphView.build(proto)
    except ModelError as exc:       # a cycle: name the file too
        if where and not str(exc).startswith(where):
            raise ModelError(f"{where}: {exc}") from None
        raise
    ident = Identifier(view, wh, kernels=bool(archs))
    subgraphs = ident.run() if fusable_opset(proto) else []
    subgraphs = decoders.attach(view, subgraphs)   # MatMulNBits weights decoded inside their GEMM's kernel
    built = None
    names = _node_names(subgraphs)      # decided once: the kernel build's plans and warnings, fuse()'s nodes
    if archs:
        from .kernels.compile.stage import build_kernels
        built = build_kernels(view, proto, subgraphs, archs, cache=cache, progress=progress,
                              fp32_math=fp32_math, node_names=names,
                              compile=compile_kernels)
        split = {k for k, _, _ in built.failures if getattr(subgraphs[k], "parts", None)}
        if split:     # a horizontal group whose kernels failed: build its members one by one instead
            for k, name, why in built.failures:
                if k in split:
                    log.info("%s: building its %d members as separate nodes (%s)", name, len(subgraphs[k].parts), why)
            subgraphs = [p for k, sg in enumerate(subgraphs) for p in (sg.parts if k in split else [sg])]
            names = _node_names(subgraphs)
            built = build_kernels(view, proto, subgraphs, archs, cache=cache, progress=progress,
                                  fp32_math=fp32_math, node_names=names,
                                  compile=compile_kernels)
        if warn:
            for _, name, reason in sorted(built.failures):
                log.warning("%s stays unfused: %s", name, reason)
        kept = sorted(built.attrs)      # the subgraphs whose kernels were built; the others stay unfused
        subgraphs, names = [subgraphs[k] for k in kept], [names[k] for k in kept]
        kernel_attrs = [built.attrs[k] for k in kept]
        kernel_inputs = [built.inputs.get(k, (None, 0)) for k in kept]
    specs = []
    for k, sg in enumerate(subgraphs):
        attrs = {"pgraph": sg.pgraph.render(), "pgraph_hash": sg.pgraph.structural_hash()}
        if sg.pattern.family is not None:      # the node attribute `template` (CONTRACT.md §5) names the family
            attrs["template"] = sg.pattern.family.name
        if built is not None:
            attrs.update(kernel_attrs[k])
        order, host = kernel_inputs[k] if built is not None else (None, 0)
        idx = tuple(view.index[i] for i in sg.nodes)
        gi = view.graph_index              # the body in topological order, as fuse() builds it
        body = contrib.original_body(expanded, [gi.nodes[p] for p in gi.positions(idx)])   # ORT's own contrib ops
        specs.append(FusedSubgraph(idx, sg.pattern.name, attrs, order, host, names[k],
                                   tuple(body) if body is not None else None))
    # positions: what `plus-ep trust` needs to identify the inlined model again in the same order
    out = fuse(proto, specs, view.graph_index, record_positions=built is not None) if specs else proto
    if specs:
        _shape_values_from_inputs(view, out, subgraphs)
    out = contrib.restore(out, expanded)         # contrib ops nothing of which fused keep ORT's kernel
    if runtime_ir and out.ir_version > runtime_limits()[0]:
        if out is model:                  # never change the caller's ModelProto
            copy = onnx.ModelProto()
            copy.CopyFrom(out)
            out = copy
        out = for_runtime(out, where)
    if built is not None and specs and compile_kernels:      # what this installation built: trusted here
        _built_here(out, kernel_attrs, archs, fp32_math, disable)
    seconds = time.perf_counter() - start
    log.info("rewrote %d nodes into %d fused subgraphs in %.2fs", len(proto.graph.node), len(specs), seconds)
    return RewriteResult(out, subgraphs, view, ident, seconds, built, fp32_math, source, expanded)


def refuse_unloadable_opset(proto: onnx.ModelProto, where: str = "") -> None:
    """ModelError (one line naming both versions) when the model's default-domain opset is newer than the
    installed onnxruntime implements: its rewrite could not be loaded there. (The IR version is lowered
    where that is safe instead: validate.for_runtime. An opset is not: ops change meaning across opsets.)"""
    _, newest = runtime_limits()
    default = [o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")]
    if default and default[0] > newest:
        import onnxruntime as ort
        pre = f"{where}: " if where else ""
        raise ModelError(f"{pre}default-domain opset {default[0]}, but the installed onnxruntime {ort.__version__} "
                         f"implements opsets up to {newest}: export the model with opset <= {newest}, or install a "
                         "newer onnxruntime")


def _node_names(subgraphs) -> list[str]:
    """`plus_ep/<pattern>/<k>`, k counting every subgraph found: a subgraph that stays unfused keeps its
    number, so the warning's "plus_ep/gemm/1 stays unfused" never names a fused node, and the launcher's
    errors name the node its plan names."""
    return [node_name(sg.pattern.name, k) for k, sg in enumerate(subgraphs)]


def _shape_values_from_inputs(view, out, subgraphs) -> None:
    """Shape values a fused node's support nodes compute (Shape -> Gather of an inner tensor, moved in so the
    contraction stays acyclic) and nodes outside read: computed for those readers from the graph inputs'
    shapes instead (graph_rewrites/shape_fold.py), so they wait for no kernel output."""
    from .graph_rewrites.shape_fold import input_shape_values
    names = []
    for sg in subgraphs:
        for t in view.graph_index.boundary(sg.nodes)[1]:
            p = view.producer.get(t)
            if p is not None and not view.is_data_node(p) and t not in view.outputs:
                names.append(t)
    if names:
        n = input_shape_values(view, out, names)
        log.debug("%d shape values of fused nodes read from the graph inputs' shapes instead", n)


def _built_here(model: onnx.ModelProto, kernel_attrs: list, archs, fp32_math: str, disable) -> None:
    """Record the kernels this rewrite built in the trust manifest (plus_ep/trust.py: the launcher runs
    them), and the options it used in the model's metadata (what `plus-ep trust` rebuilds with)."""
    from . import trust
    trust.record_built(model, [attrs["plus_plan"] for attrs in kernel_attrs])
    from .kernels.arch import parse
    meta = json.dumps({"archs": [parse(a) for a in archs], "fp32_math": fp32_math,
                       "disable": sorted(disable)})
    for p in [p for p in model.metadata_props if p.key == trust.REWRITE_METADATA]:
        model.metadata_props.remove(p)
    model.metadata_props.append(onnx.StringStringEntryProto(key=trust.REWRITE_METADATA, value=meta))


def rewrite(model, warehouse=None, disable=(), archs="auto", **kw) -> onnx.ModelProto:
    """Rewrite `model` (ModelProto, bytes or path): fused subgraphs become ai.plus_ep::Fused nodes with
    model-local functions, so the result still runs anywhere ONNX Runtime does, and the nodes carry
    compiled kernels for the PlusEP launcher.

    archs: the GPU archs of the kernels, as the CLI's `--arch`: "auto" (the default) = the local GPU's,
    else `options.DEFAULT_ARCHS` (sm_80 and sm_90a); a list or a comma-separated string of archs; None,
    [] or "none" = no kernels (portable functions only: such a model runs no faster on a GPU). A
    subgraph whose kernels fail to build stays unfused, with a warning naming it. Other keywords as
    `rewrite_detailed`.

        fused = plus_ep.rewrite("model.onnx")                   # kernels for the local GPU, else sm_80,sm_90a
        onnx.save(plus_ep.rewrite("model.onnx", archs=["sm_90a"]), "model.plus.onnx")
    """
    chosen = resolve_archs(archs)
    result = rewrite_detailed(model, warehouse, disable, archs=chosen or None, **kw)
    if not chosen and result.subgraphs:
        log.info("plus_ep.rewrite: %d subgraphs fused without kernels (archs=%r): the fused nodes run their "
                 "original subgraphs", len(result.subgraphs), archs)
    return result.model


def resolve_archs(archs) -> list[str]:
    """`archs` of `rewrite` as a list: "auto"/"none"/"sm_80,sm_90a" as the CLI's `--arch`
    (options.cli_archs), a list or tuple of arch names, None = []."""
    from .options import cli_archs
    if archs is None:
        return []
    if isinstance(archs, str):
        return cli_archs(archs)
    from .kernels.arch import parse
    return [parse(a) for a in archs]
