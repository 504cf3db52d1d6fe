"""Render and compile the kernels of every fused subgraph; produce the fused nodes' attributes.

    build = build_kernels(view, model, subgraphs, archs=["sm_80", "sm_90"])
    build.attrs[k]      # {"plus_plan": str, "plus_images_sm_80": TensorProto, ...} for subgraph k
    build.failures      # [(k, node name, reason)]: those subgraphs stay unfused
    build.inputs[k]     # (input names in node order, n) when the first n are CPU-resident shape tensors

A subgraph whose kernels cannot be rendered or compiled is left to ONNX Runtime (its original nodes)
with a warning naming the node and the reason; nothing is fused without a kernel behind it.
"""
from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field

import numpy as np
from onnx import numpy_helper

from ...graph_rewrites.partition import node_name
from ... import progress as _progress
from . import nvrtc
from .cache import KernelCache
from .jobs import Job, ResourceError, compile_all
from .render_store import RenderStore
from ..wire.pack import Image, pack_images, unpack_images  # noqa: F401  (the pack format lives there)
from ..wire.pack import tie
from ..wire.pack import write as write_pack
from ..wire.plan import merge as merge_plans
from ..wire.plan import problem as plan_problem
from ..codegen.pull import RenderError
from ..families.gemm.routes import forced_exclusions
from ..render import render
from ..target import FP32_MATH_DEFAULT, Target

log = logging.getLogger("plus_ep")


@dataclass
class KernelBuild:
    attrs: dict = field(default_factory=dict)
    failures: list = field(default_factory=list)
    rendered: dict = field(default_factory=dict)
    inputs: dict = field(default_factory=dict)     # k -> (input order, host inputs), shapev nodes only
    compiled: int = 0
    cached: int = 0
    seconds: float = 0.0


def _smem(plan, variant: int) -> int:
    out = 0
    for route in plan.routes:
        for ln in route.launches:
            if ln.image == variant and ln.smem.isdigit():
                out = max(out, int(ln.smem))
    return out


MAX_FALLBACKS = 6          # rounds of "exclude the configs that failed on an arch, render again"


@dataclass
class _Group:
    """The archs whose renders of one subgraph are identical: one route group of the plan."""
    archs: list
    rendered: object                  # render.Rendered


def _config_name(variant_name: str) -> str:
    return variant_name.split("/")[0]          # "f16_128x128x32_w64x64_s3/splitk1" -> the config


def _render_per_arch(view, sg, name, archs, fp32_math, excluded, store=None):
    """Render for each arch and group the archs whose kernels come out the same; returns the groups,
    the node's input order and how many leading inputs are CPU-resident. A node whose plan reads shape
    tensors on the host (`shapev`) takes them first (op type FusedHost<n>, kernels/CONTRACT.md §3),
    unless a kernel also reads one of them in device memory (then the launcher copies them per run)."""
    ins, outs = view.graph_index.boundary(sg.nodes)
    groups = _render_groups(view, sg, name, archs, fp32_math, excluded, ins, outs, store)
    host = sorted({i for _, i, _ in groups[0].rendered.plan.shapev})
    if host and len(host) < len(ins):
        order = [ins[i] for i in host] + [t for i, t in enumerate(ins) if i not in host]
        try:
            regrouped = _render_groups(view, sg, name, archs, fp32_math, excluded, order, outs, store)
        except RenderError as exc:      # keep the order that rendered (its shapes are copied per run)
            log.debug("%s: shape tensors first does not render: %s", name, exc)
            regrouped = None
        if regrouped is not None and _host_safe(regrouped, len(host)):
            return regrouped, order, len(host)
    return groups, list(ins), 0


def _host_safe(groups, n: int) -> bool:
    """The shapev inputs are exactly inputs 0..n-1 and no kernel dereferences them."""
    device = re.compile(r"args\.in\[(\d+)\]")
    for g in groups:
        if {i for _, i, _ in g.rendered.plan.shapev} != set(range(n)):
            return False
        if any(int(m) < n for v in g.rendered.variants for m in device.findall(v.source)):
            return False
    return True


def _render_groups(view, sg, name, archs, fp32_math, excluded, ins, outs, store=None) -> list:
    """Render for each arch (its routes, template choice and resource limits; configs that failed on
    that arch excluded) and group the archs whose kernels come out the same."""
    groups: list = []
    for arch in archs:
        target = Target(arch, fp32_math, frozenset(excluded.get(arch, ())) | forced_exclusions(arch))
        rd = render(view, sg, ins, outs, target=target, node_name=name, store=store)
        key = ([v.source for v in rd.variants], [(r.cond, r.launches) for r in rd.plan.routes], rd.plan.scratch)
        for g in groups:
            r0 = g.rendered
            if key == ([v.source for v in r0.variants], [(r.cond, r.launches) for r in r0.plan.routes],
                       r0.plan.scratch):
                g.archs.append(arch)
                break
        else:
            groups.append(_Group([arch], rd))
    return groups


def build_kernels(view, model, subgraphs, archs, cache=None, progress=None, fp32_math=FP32_MATH_DEFAULT,
                  node_names=None, compile: bool = True) -> KernelBuild:
    """Render per arch, compile, and where a variant spills or exceeds an arch's resources render that
    arch again without its config (a smaller one takes its place) before giving the subgraph up.
    `compile=False` (plus-ep inspect): render only; each built subgraph gets its plan but no images, and
    the failures are the render failures (what a build would refuse short of NVRTC)."""
    start = time.perf_counter()
    archs = [nvrtc.parse_arch(a) for a in archs]
    out = KernelBuild()
    excluded: dict = {}                # k -> {arch: {config names}}
    pending = list(range(len(subgraphs)))
    names = {k: node_names[k] if node_names else node_name(sg.pattern.name, k) for k, sg in enumerate(subgraphs)}
    images: dict = {}
    plans: dict = {}
    # renders kept on disk beside the kernels (render_store.py); cache=False (no kernel cache): none
    store = None if cache is False else RenderStore.beside(cache if cache is not None else KernelCache())
    for round_ in range(MAX_FALLBACKS + 1):
        jobs, owners, groups_of = [], [], {}
        with _progress.bar("rendering kernels", total=len(pending), unit="subgraphs", enabled=progress) as shown:
            for k in pending:
                try:
                    name = names[k]
                    try:
                        groups, order, n_host = _render_per_arch(view, subgraphs[k], name, archs, fp32_math,
                                                                 excluded.get(k, {}), store)
                        plan = merge_plans([(g.archs, g.rendered.plan) for g in groups], archs)
                        problem = plan_problem(plan.text())
                        if problem:
                            raise RenderError(problem)
                    except RenderError as exc:
                        out.failures.append((k, name, str(exc)))
                        continue
                    except Exception as exc:  # a codegen bug in one subgraph must not stop the rest
                        log.debug("rendering %s failed", name, exc_info=True)
                        why = f"internal error while rendering its kernels: {type(exc).__name__}: {exc}"
                        out.failures.append((k, name, why))
                        continue
                    plans[k], groups_of[k] = plan, groups
                    out.inputs.pop(k, None)
                    if n_host:
                        out.inputs[k] = (tuple(order), n_host)
                    for g in groups:
                        rd = g.rendered
                        for v, variant in enumerate(rd.variants):
                            for arch in g.archs:
                                jobs.append(Job(f"{name}:{variant.name}:{arch}", variant.source, arch,
                                                dynamic_smem=_smem(rd.plan, v)))
                                owners.append((k, v, arch, variant.name))
                finally:
                    shown.update()
        if not compile:
            for k, groups in groups_of.items():
                out.rendered[k] = groups[0].rendered
                out.attrs[k] = {"plus_plan": plans[k].text()}
            break
        results = compile_all(jobs, cache=cache, progress=progress) if jobs else []
        failed: dict = {}
        for (k, v, arch, vname), job, res in zip(owners, jobs, results):
            if isinstance(res, Exception):
                failed.setdefault(k, []).append((arch, vname, res))
                continue
            out.cached += bool(getattr(res, "cached", False))
            out.compiled += not getattr(res, "cached", False)
            ptx = tie(res.cubin, res.ptx) if res.ptx else None     # PTX and cubin of this one compile
            images.setdefault(k, {}).setdefault(arch, {})[v] = Image(res.cubin, ptx)
        pending = []
        for k, groups in groups_of.items():
            if k not in failed:
                g_of = {a: g for g in groups for a in g.archs}
                out.rendered[k] = groups[0].rendered
                attrs = {"plus_plan": plans[k].text()}
                for arch in archs:
                    blobs = [images[k][arch][v] for v in range(len(g_of[arch].rendered.variants))]
                    arr = np.frombuffer(write_pack(blobs), dtype=np.uint8)
                    attrs[f"plus_images_{arch}"] = numpy_helper.from_array(arr, name=f"plus_images_{arch}")
                out.attrs[k] = attrs
                continue
            images.pop(k, None)
            resource = [(a, vn) for a, vn, e in failed[k] if isinstance(e, ResourceError)]
            before = sum(len(v) for v in excluded.get(k, {}).values())
            for arch, vname in resource:         # spills / too much shared memory: a smaller config
                excluded.setdefault(k, {}).setdefault(arch, set()).add(_config_name(vname))
            grew = sum(len(v) for v in excluded.get(k, {}).values()) > before   # else: no config to swap
            if round_ < MAX_FALLBACKS and resource and len(resource) == len(failed[k]) and grew:
                log.info("%s: %s; rendering again without %s", names[k], str(failed[k][0][2]).splitlines()[0],
                         ", ".join(sorted({f"{_config_name(vn)} ({a})" for a, vn in resource})))
                pending.append(k)
                continue
            first = str(failed[k][0][2]).strip().splitlines()[:3]
            out.failures.append((k, names[k], f"kernel compile failed: {' | '.join(first)}"))
        if not pending:
            break
    for k, name, reason in sorted(out.failures):      # the caller warns once per subgraph (rewrite.py)
        log.debug("%s: no kernels: %s", name, reason)
    out.seconds = time.perf_counter() - start
    log.info("kernels: %d subgraphs built (%d compiled, %d cached), %d left unfused, %.1fs",
             len(out.attrs), out.compiled, out.cached, len(out.failures), out.seconds)
    return out
