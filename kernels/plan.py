"""The launch plan: the text the native launcher evaluates per run (format: CONTRACT.md §3)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from . import symdim
from .pull import RenderError

VERSION = 1


@dataclass
class Launch:
    image: int
    entry: str
    grid: tuple
    block: tuple
    smem: str


@dataclass
class Route:
    cond: str
    launches: list = field(default_factory=list)
    label: str = ""


@dataclass
class Plan:
    node: str
    inputs: list = field(default_factory=list)    # (dtype, [tokens])
    outputs: list = field(default_factory=list)   # (dtype, [rpn])
    syms: list = field(default_factory=list)      # symbol names, index = K of sK / args.v[K]
    scratch: list = field(default_factory=list)   # rpn byte counts
    routes: list = field(default_factory=list)
    archs: list = field(default_factory=list)

    def text(self) -> str:
        lines = [f"plusplan {VERSION}", f"node {self.node}"]
        if self.archs:
            lines.append("archs " + " ".join(self.archs))
        lines += [f"sym {k} {name}" for k, name in enumerate(self.syms)]
        for i, (dt, dims) in enumerate(self.inputs):
            lines.append(" ".join(["in", str(i), str(dt), str(len(dims)), *dims]))
        for i, (dt, dims) in enumerate(self.outputs):
            lines.append(" ".join(["out", str(i), str(dt), str(len(dims)), *dims]))
        bound = {tok for _, dims in self.inputs for tok in dims if tok.startswith("s")}
        lines += [f"val {k} s{k}" if f"s{k}" in bound else f"val {k} 0" for k in range(len(self.syms))]
        lines += [f"scratch {k} {e}" for k, e in enumerate(self.scratch)]
        for r, route in enumerate(self.routes):
            lines.append(f"route {r} {route.cond}")
            for ln in route.launches:
                lines.append(" ".join(["kernel", str(r), str(ln.image), ln.entry, *ln.grid, *ln.block, ln.smem]))
        lines.append("end")
        return "\n".join(lines) + "\n"


def input_tokens(shape, syms: symdim.Symbols) -> list:
    """Plan tokens of an input's dims: literals, symbols that the input binds, `*` otherwise."""
    out = []
    for d in shape:
        e = symdim.parse(d)
        if e.is_Integer:
            out.append(str(int(e)))
        elif e.is_Symbol:
            out.append(f"s{syms.index(e)}")
        else:
            out.append("*")
    return out


def check_bound(plan: Plan, node_name: str, sources=()):
    """Every symbol the plan's expressions or the kernels use must be bound by an input dim."""
    bound = {tok for _, dims in plan.inputs for tok in dims if tok.startswith("s")}
    text = plan.text()
    used_plan = set(re.findall(r"(?<![A-Za-z_])s(\d+)(?![0-9])", " ".join(
        ln for ln in text.splitlines() if not ln.startswith(("in ", "sym ", "val ", "node ")))))
    used_src = {m for s in sources for m in re.findall(r"args\.v\[(\d+)\]", s)}
    for k, name in enumerate(plan.syms):
        if str(k) in (used_plan | used_src) and f"s{k}" not in bound:
            raise RenderError(f"{node_name}: dimension '{name}' is not the exact size of any input axis, "
                              "so the launcher cannot bind it")
