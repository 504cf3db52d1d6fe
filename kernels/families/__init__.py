"""The kernel halves of the template families: one folder each, named as the family, holding its renderer,
config menus, shape routes and CUDA templates (the `.cuh` files directly in the folder are on NVRTC's include
path beside `kernels/templates/`). Each folder's package declares `KERNEL`, a `KernelFamily` naming its graph
half (the family's `Family`, warehouse/families/); a family finds its kernel half through `Family.kernels`.

    kf = kernel_half(sg.pattern.family)           # KernelFamily(family, render, entries, hidden_tiles)
    variants = kf.render(job)                     # [(name, prefix, kernels, condition)] (kernels/render.py)
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from ...graph_rewrites.family import Family


@dataclass(frozen=True)
class KernelFamily:
    """A template family's kernel half. `render(job) -> [(variant name, source prefix, [(source, entry,
    (grid, block, smem))], route condition)]` renders one subgraph (kernels/render.py's Job); `entries`: the
    kernel entry points its sources define; `hidden_tiles(kernel, symbols, names, head_dim, math) -> [(what,
    tile, extent)]`: tiles of a launch that no grid dimension shows, which `plus-ep verify` must also span
    (`kernel`: the plan's kernel line as tokens; `symbols`: {index: value} bound; `names`: {index: name})."""
    family: Family
    render: Callable
    entries: tuple = ()
    hidden_tiles: Callable | None = None


class NoKernelHalf(LookupError):
    """A family whose kernel half does not import or does not declare a KernelFamily for it."""


def kernel_half(family: Family) -> KernelFamily:
    """The KernelFamily the module `family.kernels` declares as `KERNEL` (imported on first use)."""
    try:
        module = importlib.import_module(family.kernels)
    except ImportError as e:
        raise NoKernelHalf(f"template family {family.name!r}: its kernel half {family.kernels} does not import "
                           f"({e})") from e
    kf = getattr(module, "KERNEL", None)
    if not isinstance(kf, KernelFamily) or kf.family is not family:
        raise NoKernelHalf(f"template family {family.name!r}: {family.kernels} declares no KERNEL = "
                           "KernelFamily(...) for it")
    return kf


def declared() -> list:
    """The kernel halves of every declared family (the built-in ones and those of loaded user patterns)."""
    from ...warehouse import loading  # noqa: F401  (the built-in families declare themselves on import)
    from ...warehouse.registry import FAMILIES
    return [kernel_half(f) for f in FAMILIES.values()]


def of_entry(entry: str) -> KernelFamily | None:
    """The kernel half whose sources define kernel entry point `entry`, else None."""
    return next((kf for kf in declared() if entry in kf.entries), None)
