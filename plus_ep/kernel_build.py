"""Render and compile the kernels of every fused subgraph; produce the fused nodes' attributes.

    build = build_kernels(view, model, subgraphs, archs=["sm_80", "sm_90"])
    build.attrs[k]      # {"plus_plan": str, "plus_images_sm_80": TensorProto, ...} for subgraph k
    build.failures      # [(k, node name, reason)]: those subgraphs stay unfused

A subgraph whose kernels cannot be rendered or compiled is left to ONNX Runtime (its original nodes)
with a warning naming the node and the reason; nothing is fused without a kernel behind it.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np
from onnx import numpy_helper

from .kernels import nvrtc
from .kernels.compile import Job, compile_all
from .kernels.pack import Image, pack_images, unpack_images  # noqa: F401  (the pack format lives there)
from .kernels.pack import write as write_pack
from .kernels.plan import problem as plan_problem
from .kernels.pull import RenderError
from .kernels.render import render

log = logging.getLogger("plus_ep")


@dataclass
class KernelBuild:
    attrs: dict = field(default_factory=dict)
    failures: list = field(default_factory=list)
    rendered: dict = field(default_factory=dict)
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


def build_kernels(view, model, subgraphs, archs, cache=None, progress=None, fp32_math="exact",
                  node_names=None) -> KernelBuild:
    start = time.perf_counter()
    archs = [nvrtc.parse_arch(a) for a in archs]
    out = KernelBuild()
    jobs, owners = [], []
    for k, sg in enumerate(subgraphs):
        name = node_names[k] if node_names else f"plus_ep/{sg.pattern.name}/{k}"
        try:
            ins, outs = view.graph_index.boundary(sg.nodes)
            rd = render(view, sg, ins, outs, arch=archs[0], node_name=name, fp32_math=fp32_math)
            problem = plan_problem(rd.plan.text())
            if problem:
                raise RenderError(problem)
        except RenderError as exc:
            out.failures.append((k, name, str(exc)))
            continue
        except Exception as exc:  # noqa: BLE001 - a codegen bug in one subgraph must not stop the rest
            log.debug("rendering %s failed", name, exc_info=True)
            out.failures.append((k, name, f"internal error while rendering its kernels: "
                                          f"{type(exc).__name__}: {exc}"))
            continue
        rd.plan.archs = list(archs)
        out.rendered[k] = rd
        for v, variant in enumerate(rd.variants):
            for arch in archs:
                jobs.append(Job(f"{name}:{variant.name}:{arch}", variant.source, arch,
                                dynamic_smem=_smem(rd.plan, v)))
                owners.append((k, v, arch))
    results = compile_all(jobs, cache=cache, progress=progress) if jobs else []
    images: dict = {}
    failed = set()
    for (k, v, arch), job, res in zip(owners, jobs, results):
        if isinstance(res, Exception):
            if k not in failed:
                failed.add(k)
                first = str(res).strip().splitlines()[:3]
                out.failures.append((k, job.name.split(":")[0], f"kernel compile failed: {' | '.join(first)}"))
            continue
        out.cached += bool(getattr(res, "cached", False))
        out.compiled += not getattr(res, "cached", False)
        images.setdefault(k, {}).setdefault(arch, {})[v] = Image(res.cubin, res.ptx or None)
    for k, rd in out.rendered.items():
        if k in failed:
            continue
        attrs = {"plus_plan": rd.plan.text()}
        for arch in archs:
            blobs = [images[k][arch][v] for v in range(len(rd.variants))]
            arr = np.frombuffer(write_pack(blobs), dtype=np.uint8)
            attrs[f"plus_images_{arch}"] = numpy_helper.from_array(arr, name=f"plus_images_{arch}")
        out.attrs[k] = attrs
    for k, name, reason in sorted(out.failures):
        log.warning("%s stays unfused: %s", name, reason)
    out.seconds = time.perf_counter() - start
    log.info("kernels: %d subgraphs built (%d compiled, %d cached), %d left unfused, %.1fs",
             len(out.attrs), out.compiled, out.cached, len(out.failures), out.seconds)
    return out
