"""`plus_ep.rewrite(model)`: identify fused subgraphs and rewrite them into ai.plus_ep::Fused nodes."""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field

import onnx

from graph_rewrites.fuse import FusedSubgraph, fuse
from graph_rewrites.graph import GraphView, ModelError
from graph_rewrites.identify import Identifier
from warehouse import default_warehouse

log = logging.getLogger("plus_ep")


@dataclass
class RewriteResult:
    model: onnx.ModelProto
    subgraphs: list = field(default_factory=list)      # identify.Subgraph
    view: GraphView | None = None
    identifier: Identifier | None = None
    seconds: float = 0.0
    kernels: object = None                               # kernel_build.KernelBuild when archs given


def load_model(model) -> onnx.ModelProto:
    """A ModelProto from a proto, bytes or a path; unreadable input raises ModelError (one line)."""
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray)):
        data, where = bytes(model), "<bytes>"
    else:
        where = os.fspath(model)
        if not os.path.exists(where):
            raise ModelError(f"{where}: no such file")
        with open(where, "rb") as f:
            data = f.read()
    try:
        proto = onnx.load_model_from_string(data)
    except Exception as exc:
        raise ModelError(f"{where}: not an ONNX model ({type(exc).__name__}: {str(exc)[:120]})") from None
    if not proto.HasField("graph") or not proto.graph.node:
        raise ModelError(f"{where}: not an ONNX model (no graph nodes); is the file truncated?")
    if not isinstance(model, (bytes, bytearray)) and any(
            t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer):
        onnx.load_external_data_for_model(proto, os.path.dirname(os.path.abspath(where)))
    return proto


def rewrite_detailed(model, warehouse=None, disable=(), archs=None, cache=None, progress=None,
                     fp32_math="exact") -> RewriteResult:
    """Identify and fuse. With `archs` (e.g. ["sm_80", "sm_90"]) every fused node also carries its
    launch plan and compiled kernels; subgraphs whose kernels fail stay unfused (with a warning)."""
    start = time.perf_counter()
    proto = load_model(model)
    wh = warehouse if warehouse is not None else default_warehouse()
    if disable:
        wh = wh.without(disable)
    view = GraphView.build(proto)
    ident = Identifier(view, wh)
    subgraphs = ident.run()
    built = None
    if archs:
        from .kernel_build import build_kernels
        built = build_kernels(view, proto, subgraphs, archs, cache=cache, progress=progress,
                              fp32_math=fp32_math)
        subgraphs = [sg for k, sg in enumerate(subgraphs) if k in built.attrs]
        kernel_attrs = [built.attrs[k] for k in sorted(built.attrs)]
    specs = []
    for k, sg in enumerate(subgraphs):
        attrs = {"pgraph": sg.pgraph.render(), "pgraph_hash": sg.pgraph.structural_hash()}
        if sg.pattern.template:
            attrs["template"] = sg.pattern.template
        if built is not None:
            attrs.update(kernel_attrs[k])
        specs.append(FusedSubgraph(tuple(view.index[i] for i in sg.nodes), sg.pattern.name, attrs))
    out = fuse(proto, specs) if specs else proto
    seconds = time.perf_counter() - start
    log.info("rewrote %d nodes into %d fused subgraphs in %.2fs", len(proto.graph.node), len(specs), seconds)
    return RewriteResult(out, subgraphs, view, ident, seconds, built)


def rewrite(model, warehouse=None, disable=(), archs=None, **kw) -> onnx.ModelProto:
    """Rewrite `model` (ModelProto or path): fused subgraphs become ai.plus_ep::Fused nodes with
    model-local functions, so the result still runs anywhere ONNX Runtime does; with `archs` the
    nodes also carry compiled kernels for the PlusEP launcher."""
    return rewrite_detailed(model, warehouse, disable, archs=archs, **kw).model
