"""Shape routes: which variant runs for which shapes, chosen by an analytic model, not by tuning.

This module holds what every template family's route model shares: `sampled_routes` (a symbolic dim sampled
at SAMPLES, neighbouring samples with the same choice merged into one route `dim <= bound`, the last route
ALWAYS; a neighbour's choice within ROUTE_TOLERANCE is kept), LAUNCH_PREFERENCE (how much faster a plan of
more launches must be modelled), the menu filter `_usable` (configs the target excludes or whose shared
memory does not fit) with its error NoConfig, and the value helpers `_value`, `_static` and `sm_count`.
Each family's routes live with the family: kernels/families/gemm/routes.py (GEMM, grouped and gated GEMM, GEMM + row
normalisation), kernels/families/flash_attention/routes.py (attention).
"""
from __future__ import annotations

from . import arch as arch_table
from .codegen import symdim
from .codegen.pull import RenderError

ALWAYS = "1"
SAMPLES = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 65536]
GUESS = 512                       # a symbolic N/K (rare) is assumed to be this large


class NoConfig(RenderError):
    """Every config of a menu is excluded or does not fit the arch."""


def _usable(menu, target, what):
    """The configs of `menu` the target allows: not excluded (the kernel build excludes configs that
    spilled or exceeded the arch's resources when compiled, so a smaller one replaces them) and
    fitting the arch's shared memory."""
    arch, excluded = target.arch, target.excluded
    room = arch_table.get(arch).smem_per_block - arch_table.RESERVED_SMEM_PER_BLOCK
    out = [c for c in menu if c.name not in excluded and c.smem_bytes <= room]
    if not out:
        raise NoConfig(f"no {what} configuration left for {arch} (excluded after compiling: "
                       f"{', '.join(sorted(excluded & {c.name for c in menu})) or 'none'}; "
                       f"shared memory per block {room} bytes)")
    return out


def sm_count(arch) -> int:
    return arch_table.get(arch).sms


def _value(expr, sample) -> int:
    expr = symdim.parse(expr)
    if expr.is_Integer:
        return int(expr)
    return max(1, int(expr.subs({s: 1 for s in expr.free_symbols if s != _main(expr)}).subs(_main(expr), sample)))


def _main(expr):
    syms = sorted(expr.free_symbols, key=str)
    return syms[-1] if syms else None


ROUTE_TOLERANCE = 0.05        # a neighbouring sample's choice within 5 % of the best is kept (fewer variants)
# A plan of more launches must be modelled this much faster to be chosen: beyond the GPU-side gap the model
# charges, a launch costs host time (the driver's launch call, ORT's dispatch when no CUDA graph replays the
# run) and the two-kernel plans' fp32 scratch costs an allocation and L2 capacity the model does not see.
LAUNCH_PREFERENCE = 0.10


def sampled_routes(M, syms, ranked) -> list:
    """[(condition rpn, choice)] from `ranked(m) -> [choices, fastest first]` (each with .key() and .cost) at
    static M, or at SAMPLES of the symbolic M; the last condition is ALWAYS. At a sample where the previous
    sample's choice is within ROUTE_TOLERANCE of the fastest, it is kept: the model is not that precise, and
    every distinct choice is another variant to compile."""
    M = symdim.parse(M)
    if M.is_Integer:
        return [(ALWAYS, ranked(int(M))[0])]
    picks, prev = [], None
    for s in SAMPLES:
        cands = ranked(_value(M, s))
        choice = cands[0]
        if prev is not None:
            same = [c for c in cands if c.key() == prev.key()]
            if same and same[0].cost <= choice.cost * (1 + ROUTE_TOLERANCE):
                choice = same[0]
        picks.append((s, choice))
        prev = choice
    routes = []
    for i, (s, choice) in enumerate(picks):
        last = i == len(picks) - 1
        if not last and picks[i + 1][1].key() == choice.key():
            continue
        routes.append((ALWAYS if last else f"{syms.rpn(M)},{_value(M, s)},<=", choice))
    return routes


def _static(expr, default=GUESS) -> int:
    e = symdim.parse(expr)
    return int(e) if e.is_Integer else default


__all__ = ["ALWAYS", "NoConfig", "sampled_routes"]
