"""torch contenders: eager and torch.compile of the fp32 model cast to the dtype, inputs on the device."""
from __future__ import annotations

import copy

import numpy as np

from bench.harness.contender import Contender, start_twice


class TorchBound:
    def __init__(self, fn, feeds, device, dtype):
        import torch
        self.fn, self.cuda = fn, device == "cuda"
        float_type = torch.float16 if dtype == "fp16" else torch.float32
        self.args = tuple(t.to(float_type) if t.is_floating_point() else t
                          for t in (torch.from_numpy(np.ascontiguousarray(v)).to(device) for v in feeds.values()))
        self.out = None

    def run(self):
        import torch
        with torch.inference_mode():
            self.out = self.fn(*self.args)

    def sync(self):
        if self.cuda:
            import torch
            torch.cuda.synchronize()

    def outputs(self):
        return [o.detach().float().cpu().numpy() for o in self.out]


class TorchRunner:
    def __init__(self, ctx, mode):
        import torch
        dtype = torch.float16 if ctx.dtype == "fp16" else torch.float32
        self.model = copy.deepcopy(ctx.torch_fp32().wrapper).to(ctx.device, dtype).eval()
        self.fn = self.model if mode is None else torch.compile(self.model, mode=mode)
        self.ctx, self.provider, self.gpu_run, self.note = ctx, f"torch {ctx.device}", ctx.device == "cuda", None

    def bind(self, feeds, out_shapes):
        return TorchBound(self.fn, feeds, self.ctx.device, self.ctx.dtype)

    def close(self):
        self.fn = self.model = None


class Torch(Contender):
    """torch eager (``mode=None``) or ``torch.compile(mode=...)`` of the fp32 model cast to dtype."""
    uses_onnx = False

    def __init__(self, name, mode=None, needs_gpu=False):
        self.name, self.mode, self.needs_gpu = name, mode, needs_gpu

    def prepare(self, ctx, feeds, out_shapes):
        ctx.torch_fp32()

        def start():
            if self.mode is not None:
                import torch
                torch._dynamo.reset()          # a fresh compile; Inductor's on-disk caches stay
            runner = TorchRunner(ctx, self.mode)
            bound = runner.bind(feeds, out_shapes)
            bound.run()
            bound.sync()
            return runner, bound
        return start_twice(start)
