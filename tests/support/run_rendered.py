"""Run a rendered fused subgraph (kernels.render.render) on the CPU PTX interpreter: every launch of
one route, with static shapes (launch expressions over literals only)."""
from __future__ import annotations

import numpy as np

_OPS = {"cdiv": lambda a, b: -(-a // b), "min": min, "max": max, "*": lambda a, b: a * b,
        "+": lambda a, b: a + b}


def static_value(rpn: str) -> int:
    """The value of a launch-plan expression made of literals (no symbols)."""
    stack = []
    for tok in rpn.split(","):
        if tok.lstrip("-").isdigit():
            stack.append(int(tok))
        else:
            b, a = stack.pop(), stack.pop()
            stack.append(_OPS[tok](a, b))
    (value,) = stack
    return value


def launch_route(rd, inputs: list, outputs: list, arch: str = "sm_80", name: str = "fused", route: int = 0,
                 ptx_edit=None, checks: bool = True, cta_order: str = "linear", seed: int = 0, repeat: int = 1):
    """Launch every kernel of route `route` of `rd` with `inputs` (arrays in the subgraph's input order);
    returns (outputs shaped and typed like the `outputs` templates, [LaunchResult]). Output and scratch
    buffers start poisoned (tests/support/poison.py) and a float output element no launch wrote fails
    here. `ptx_edit(text) -> text` mutates the PTX before it is parsed (mutation tests). `cta_order`
    "random" runs the CTAs (clusters) in a random order drawn from `seed`; `repeat` runs the route that many
    times on the same buffers (outputs poisoned again, scratch left as the previous run left it) and returns the
    last run's outputs and results."""
    from tests.support.poison import POISON_BYTE
    from tests.support.ptx_harness import Device
    assert not rd.plan.syms, "static shapes only"
    dev = Device()
    ins = [dev.upload(np.asarray(a)) for a in inputs]
    outs = [dev.output(o) for o in outputs]
    scratch = [dev.alloc(static_value(e), "scratch") for e in rd.plan.scratch]
    for k in range(repeat):
        if k:          # outputs poisoned again: what the last run did not write fails
            for p in outs:
                dev.array(p)[:] = POISON_BYTE
        results = _launches(rd, route, name, arch, ptx_edit, dev, ins, outs, scratch, checks, cta_order, seed)
    got = [dev.download_written(p, np.asarray(o), f"{name} output {k}") for k, (p, o) in enumerate(zip(outs, outputs))]
    return got, results


def _launches(rd, route, name, arch, ptx_edit, dev, ins, outs, scratch, checks, cta_order, seed) -> list:
    from plus_ep.kernels.ptx import Module
    from plus_ep.kernels.compile.ptx import compile_ptx
    from tests.support.ptx_harness import module, plus_args
    results = []
    for launch in rd.plan.routes[route].launches:
        source = rd.variants[launch.image].source
        if ptx_edit is None:
            mod = module(source, arch, f"{name}_{launch.image}")
        else:
            mod = Module.parse(ptx_edit(compile_ptx(source, arch, name=f"{name}_{launch.image}.cu")), name=name)
        results.append(mod.kernel(launch.entry).launch(
            grid=tuple(static_value(g) for g in launch.grid), block=tuple(static_value(b) for b in launch.block),
            shared_bytes=static_value(launch.smem), params=plus_args(ins=ins, outs=outs, scratch=scratch),
            memory=dev.mem, checks=checks, cta_order=cta_order, seed=seed))
    return results


def run_rendered(rd, inputs: list, outputs: list, arch: str = "sm_80", name: str = "fused") -> list:
    """Route 0 of `rd` through launch_route; returns the outputs (checker findings fail)."""
    got, results = launch_route(rd, inputs, outputs, arch, name)
    findings = [str(f) for r in results for f in r.findings]
    assert not findings, "\n".join(findings)
    return got
