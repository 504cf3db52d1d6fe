"""Rebuilding a rewritten model's kernels on this installation (the trust policy's way (a), plus_ep/trust.py):
every fused node is replaced by its function body and the result rewritten with this installation's
renderer and NVRTC, kernels from the local kernel cache; a node whose plan and images come out
byte-identical is trusted as it is, otherwise the local build runs.

    from plus_ep import rebuild
    report = rebuild.rebuild(model)        # report.same: node name -> identical?; report.local: the local build
    model, what = rebuild.resolve(model)   # what plus_ep.InferenceSession hands the launcher

Separate from plus_ep/trust.py because the rewriter records what it builds through trust (a leaf),
while rebuilding calls the rewriter.
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field

import onnx

from .trust import (REWRITE_METADATA, TrustError, kernel_nodes, model_signer, node_digest, node_packs, node_plan,
                    record_nodes, status)

log = logging.getLogger("plus_ep")


@dataclass
class Rebuild:
    """The local build of a model's fused nodes: `local` is the model this installation rewrites from
    the embedded model's function bodies; per embedded node, whether its plan and images are
    byte-identical to the local build of the same node (matched by its outputs)."""
    local: onnx.ModelProto
    same: dict = field(default_factory=dict)        # node name -> bool
    archs: list = field(default_factory=list)
    fp32_math: str = ""
    seconds: float = 0.0

    @property
    def identical(self) -> bool:
        return bool(self.same) and all(self.same.values())


def rewrite_options(model: onnx.ModelProto) -> dict:
    """The options the model's rewrite recorded (metadata plus_ep.rewrite), else the archs its plans
    list and the defaults."""
    from .kernels.target import FP32_MATH_DEFAULT
    meta = next((p.value for p in model.metadata_props if p.key == REWRITE_METADATA), None)
    opts = {}
    if meta:
        try:
            opts = json.loads(meta)
        except ValueError:
            opts = None
        if not isinstance(opts, dict):
            raise TrustError(f"metadata {REWRITE_METADATA}: not a JSON object ({meta[:80]!r})")
        for key, what in (("archs", "arch names"), ("disable", "pattern names")):
            value = opts.get(key)
            if value is not None and (not isinstance(value, list) or not all(isinstance(x, str) for x in value)):
                raise TrustError(f"metadata {REWRITE_METADATA}: {key} must be a list of {what} (strings), "
                                 f"not {json.dumps(value)[:80]}")
    archs = opts.get("archs")
    if not archs:
        from .kernels.wire.plan import PlanSyntaxError, parse
        for node in kernel_nodes(model):
            try:
                archs = parse(node_plan(node).decode("utf-8", "replace")).archs
            except PlanSyntaxError:
                archs = None
            archs = archs or sorted(node_packs(node))
            break
    fp32 = opts.get("fp32_math")
    return {"archs": list(archs or []), "fp32_math": fp32 if fp32 in ("tf32", "exact") else FP32_MATH_DEFAULT,
            "disable": list(opts.get("disable") or [])}


def _digest_or_none(node) -> bytes | None:
    try:
        return node_digest(node)
    except TrustError:
        return None


def rebuild(model: onnx.ModelProto, cache=None, progress=None) -> Rebuild:
    """Rewrite the model's original graph (every fused node replaced by its function body) with this
    installation's renderer and NVRTC, kernels from the local kernel cache, and compare each embedded
    node with the local node of the same outputs."""
    from .graph_rewrites.fuse import inline_fused
    from .rewrite import rewrite_detailed
    t0 = time.perf_counter()
    opts = rewrite_options(model)
    if not opts["archs"]:
        raise TrustError("the model's fused nodes list no archs to rebuild for")
    original = inline_fused(model, fused_order=True)
    res = rewrite_detailed(original, disable=tuple(opts["disable"]), archs=opts["archs"], cache=cache,
                           progress=progress, fp32_math=opts["fp32_math"])
    local = {tuple(n.output): _digest_or_none(n) for n in kernel_nodes(res.model)}
    same = {n.name: _digest_or_none(n) is not None and local.get(tuple(n.output)) == _digest_or_none(n)
            for n in kernel_nodes(model)}
    return Rebuild(res.model, same, opts["archs"], opts["fp32_math"], time.perf_counter() - t0)


def resolve(model: onnx.ModelProto, cache=None, cache_dir=None) -> tuple[onnx.ModelProto, str]:
    """The model to hand the launcher: `model` itself when every kernel node is trusted already
    (manifest, signature) or is rebuilt here byte-identical (then recorded); else the local build
    (recorded as built here), with a warning naming the nodes that differed. Returns (model, what
    happened in one line)."""
    nodes = status(model, cache_dir)
    if not nodes or all(n.how for n in nodes):
        return model, "embedded kernels trusted" if nodes else "no embedded kernels"
    signer = model_signer(model)
    if signer:                  # signed whole by a listed key: recorded (the launcher reads the manifest)
        record_nodes(kernel_nodes(model), f"whole model signed by key {signer}", cache_dir)
        return model, f"embedded kernels trusted: the whole model is signed by key {signer}"
    r = rebuild(model, cache=cache)
    if r.identical:
        record_nodes(kernel_nodes(model), "rebuilt here byte-identical", cache_dir)
        return model, f"embedded kernels rebuilt here byte-identical ({len(r.same)} nodes, {r.seconds:.1f}s)"
    differ = sorted(k for k, v in r.same.items() if not v)
    log.warning("PlusEP: the embedded kernels of %d fused node(s) differ from what this installation builds from "
                "their function bodies (%s%s); running the local build instead", len(differ), ", ".join(differ[:5]),
                ", ..." if len(differ) > 5 else "")
    return r.local, f"local build used: {len(differ)} of {len(r.same)} nodes differed ({', '.join(differ[:3])})"
