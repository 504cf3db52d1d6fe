"""The GPU tests of tests/gpu/test_template_attention.py run a second time with the PTX interpreter as
their device: the same test functions, given an emulated `gpu` object with the fixture's interface
(function / upload / alloc / download / launch), so that each has executed at least once without a GPU.
Every launch runs with the checkers on and must have no findings."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from tests.emulated import ptx_harness as H
from tests.gpu import test_template_attention as T


class EmulatedGpu:
    """The `gpu` fixture's interface over the PTX interpreter (sm_80 PTX by default)."""

    def __init__(self, arch: str = "sm_80"):
        self.arch = arch
        self.dev = H.Device()
        self.findings = []

    def function(self, source: str, smem: int):
        return H.module(source, self.arch, "attn_emulated").kernel(T.ENTRY)

    def upload(self, a: np.ndarray) -> int:
        return self.dev.upload(np.ascontiguousarray(a), "buf")

    def alloc(self, nbytes: int) -> int:
        return self.dev.alloc(nbytes, "buf", fill=0xFF)

    def download(self, ptr: int, like: np.ndarray) -> np.ndarray:
        return self.dev.download(ptr, like)

    def launch(self, fn, grid, block, smem, args):
        raw = bytes(ctypes.string_at(ctypes.addressof(args), ctypes.sizeof(args)))
        r = fn.launch(tuple(grid), (block, 1, 1), smem, raw, self.dev.mem, checks=True)
        self.findings += r.findings

    def free_all(self):
        self.dev = H.Device()


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
# the fp32 SIMT case (16 CTAs x 133 keys) costs ~30 s of CPU here: its hooks run at a smaller shape in
# test_ptx_attention.py::test_attention_bshd_hooks_mask_on_interpreter instead
@pytest.mark.parametrize("math,dtype", [(2, "half"), (2, "__nv_bfloat16")])
def test_attention_hooks_on_interpreter(math, dtype, arch):
    pytest.importorskip("torch")
    if arch == "sm_90" and dtype != "__nv_bfloat16":
        pytest.skip("sm_90 PTX differs from sm_80 only for bf16 (cvt.f32.bf16)")
    gpu = EmulatedGpu(arch)
    T.test_attention_hooks_on_gpu(gpu, math, dtype)
    assert not gpu.findings, "\n".join(map(str, gpu.findings))
