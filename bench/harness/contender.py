"""The interface every contender implements (the registry is bench/harness/contenders.py)."""
from __future__ import annotations

import time

from bench.harness import measure


class Contender:
    """``prepare(ctx, feeds, out_shapes) -> runner`` (started twice, see ``start_twice``).

    A runner has ``provider``, ``gpu_run``, ``note`` (why it is not a GPU run, or None),
    ``create_cold_s``, ``create_warm_s``, ``first_bound`` (bound to ``feeds``), ``bind(feeds,
    out_shapes) -> bound`` and ``close()``; ONNX Runtime runners also ``ort_profile(...) -> path``.
    A bound has ``run()``, ``sync()`` and ``outputs()`` (float32 numpy, in the model's output order).
    """
    name = ""
    needs_gpu = False        # CUDA graphs, max-autotune: nothing to measure on a CPU
    uses_onnx = True

    def skip_reason(self, ctx):
        if self.needs_gpu and ctx.device != "cuda":
            return f"{self.name} needs a CUDA GPU (this is a {ctx.device} run)"
        return None


def start_twice(start):
    """start() -> (runner, bound) with one inference done; returns the warm pair and both times."""
    t = time.perf_counter()
    runner, bound = start()
    cold = time.perf_counter() - t
    runner.close()
    del runner, bound
    measure.release()
    t = time.perf_counter()
    runner, bound = start()
    runner.create_cold_s, runner.create_warm_s = cold, time.perf_counter() - t
    runner.first_bound = bound
    return runner
