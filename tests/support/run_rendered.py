"""Run a rendered fused subgraph (kernels.render.render) on the CPU PTX interpreter: every launch of
its first route, with static shapes (launch expressions over literals only)."""
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


def run_rendered(rd, inputs: list, outputs: list, arch: str = "sm_80", name: str = "fused") -> list:
    """Launch route 0 of `rd` with `inputs` (arrays in the subgraph's input order) and return the
    outputs, shaped and typed like the `outputs` templates (arrays)."""
    from tests.support.ptx_harness import Device, module, plus_args
    assert not rd.plan.syms, "static shapes only"
    dev = Device()
    ins = [dev.upload(np.asarray(a)) for a in inputs]
    outs = [dev.upload(np.zeros_like(o)) for o in outputs]
    for launch in rd.plan.routes[0].launches:
        kernel = module(rd.variants[launch.image].source, arch, f"{name}_{launch.image}").kernel(launch.entry)
        kernel.launch(grid=tuple(static_value(g) for g in launch.grid),
                      block=tuple(static_value(b) for b in launch.block),
                      shared_bytes=static_value(launch.smem), params=plus_args(ins=ins, outs=outs),
                      memory=dev.mem)
    return [dev.download(p, o) for p, o in zip(outs, outputs)]
