"""+Code side of PlusEP: render fused subgraphs into CUDA sources and launch plans, compile and cache
them, and the formats and interpreter that check them. Installed as `plus_ep.kernels` (this folder).

    from plus_ep.kernels import Target, build_kernels, KernelCache
    from plus_ep.kernels.render import render
    rendered = render(view, subgraph, inputs, outputs, Target("sm_90a", fp32_math="tf32"))

Rooms, by job (docs/architecture.md maps them):
  render.py, routes.py, target.py, arch.py   one subgraph -> sources + plan; route-model base; what for; GPU table
  codegen/      the emitters every family shares (pull, forward, row, pointwise, cexpr, symdim, ...)
  families/     a template family each (folder = family name): its renderer, config menu, shape routes and
                CUDA templates (.cuh)
  compile/      NVRTC, the cubin reader, compile jobs, the content-keyed kernel cache, PTX for the interpreter,
                the compile stage (build_kernels)
  wire/         the formats the C launcher reads: the plan (plan.py) and image packs (pack.py)
  ptx/          the PTX interpreter `plus-ep verify` runs kernels on
  templates/    the shared CUDA headers (plus_common.cuh, plus_ptx.cuh, plus_cluster.cuh) and plus_abi.h,
                the ABI shared with plus_ep/native

graph_rewrites and warehouse never import this package (tests/cpu/test_layout.py); the rewrite stage
hands it fused subgraphs and embeds what it returns. The names below load their module on first use,
so importing one room does not import the others.
"""
from __future__ import annotations

import importlib

_PUBLIC = {
    "Target": ".target", "FP32_MATHS": ".target", "FP32_MATH_DEFAULT": ".target",
    "Rendered": ".render", "Variant": ".render", "KernelFamily": ".families", "kernel_half": ".families",
    "RenderError": ".codegen.pull",
    "build_kernels": ".compile.stage", "KernelBuild": ".compile.stage",
    "KernelCache": ".compile.cache", "CompileError": ".compile.nvrtc", "ResourceError": ".compile.jobs",
    "Plan": ".wire.plan", "Route": ".wire.plan", "Launch": ".wire.plan",
    "Image": ".wire.pack", "pack_images": ".wire.pack", "unpack_images": ".wire.pack",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_PUBLIC))
