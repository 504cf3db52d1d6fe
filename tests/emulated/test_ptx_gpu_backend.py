"""The GPU tests of tests/gpu/test_template_attention.py, test_template_gemm.py and
test_template_gemm_sm90a.py run a second time with the PTX interpreter as their device: the same test
functions, given an emulated `gpu` object with the fixture's interface (load_source / function / upload /
alloc / download / launch / unload), at their small shapes, so that each has executed at least once
without a GPU. Every launch runs with the checkers on and must have no findings."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from tests.support import ptx_harness as H
from tests.support import template_attention_cases as T
from tests.support import template_gemm_cases as G80
from tests.support import template_gemm_sm90a_cases as G90


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


# the fp32 SIMT case (16 CTAs x 133 keys) costs ~30 s of CPU here: its hooks run at a smaller shape in
# test_ptx_attention.py::test_attention_bshd_hooks_mask_on_interpreter instead. bf16 runs on sm_90 only (its
# PTX differs from sm_80's in cvt.f32.bf16; the sm_80 bf16 attention path runs in test_ptx_attention.py).
@pytest.mark.parametrize("math,dtype,arch", [(2, "half", "sm_80"), (2, "__nv_bfloat16", "sm_90")])
def test_attention_hooks_on_interpreter(math, dtype, arch):
    pytest.importorskip("torch")
    gpu = EmulatedGpu(arch)
    T.test_attention_hooks_on_gpu(gpu, math, dtype)
    assert not gpu.findings, "\n".join(map(str, gpu.findings))


class EmulatedGemmGpu:
    """The `gpu` fixture's interface of test_template_gemm*.py over the PTX interpreter: buffers are
    numpy arrays or CPU torch tensors; `launch` takes (module, entry, ...) as in test_template_gemm.py,
    or a `function(...)` result as in test_template_gemm_sm90a.py."""

    def __init__(self, arch: str):
        self.arch = arch
        self.dev = H.Device()
        self.findings = []
        self.launches = 0

    def load_source(self, source: str, name: str):
        return H.module(source, self.arch, name.removesuffix(".cu"))

    def unload(self, module):
        pass

    def function(self, module, entry: str, smem: int):
        return module.kernel(entry)

    @staticmethod
    def _raw(t) -> np.ndarray:
        if isinstance(t, np.ndarray):
            return np.ascontiguousarray(t)
        t = t.contiguous()                                      # torch: its bytes (bf16 included)
        return t.reshape(-1).view(__import__("torch").uint8).numpy()

    def upload(self, t) -> int:
        return self.dev.upload(self._raw(t), "buf")

    def alloc(self, nbytes: int, fill: int = 0xFF) -> int:   # poisoned unless told
        return self.dev.alloc(nbytes, "buf", fill=fill)

    def download(self, ptr: int, host):
        dst = self._raw(host)
        dst.view(np.uint8).reshape(-1)[:] = self.dev.array(ptr).view(np.uint8)[:dst.nbytes]
        return host

    def launch(self, fn, *rest, sync: bool = True):
        if isinstance(rest[0], str):                            # (module, entry, grid, block, smem, args)
            fn, rest = fn.kernel(rest[0]), rest[1:]
        grid, block, smem, args = rest
        raw = args.tobytes() if isinstance(args, np.ndarray) else bytes(args)
        r = fn.launch(tuple(grid), (block, 1, 1), smem, raw, self.dev.mem, checks=True)
        self.findings += r.findings
        self.launches += 1

    def free_all(self):
        self.dev = H.Device()


def _small(problems, limit):
    return [p for p in problems if p.batch * p.m * p.n * p.k <= limit]


def _gemm_problems():
    """Small problems of test_template_gemm.py: per math/dtype one, the hooks kind rotating."""
    small = _small(G80.GPU_PROBLEMS, 1_500_000)
    out, kinds = [], ("", "strided", "fused")
    for i, key in enumerate(dict.fromkeys((p.v.cfg.split("_")[0], p.v.dtype) for p in small)):
        group = [p for p in small if (p.v.cfg.split("_")[0], p.v.dtype) == key]
        out.append(next((p for p in group if p.v.hooks == kinds[i % 3]), group[0]))
    return out


GEMM_PROBLEMS = _gemm_problems()
WGMMA_PROBLEMS = _small(G90.GPU_PROBLEMS, 1_500_000)


@pytest.mark.parametrize("prob", GEMM_PROBLEMS, ids=[p.id for p in GEMM_PROBLEMS])
def test_gemm_reference_on_interpreter(prob):
    gpu = EmulatedGemmGpu("sm_80")
    G80.test_gemm_matches_reference(prob, gpu)
    assert gpu.launches >= 1 and not gpu.findings, "\n".join(map(str, gpu.findings))


@pytest.mark.parametrize("prob", WGMMA_PROBLEMS, ids=[p.id for p in WGMMA_PROBLEMS])
def test_gemm_sm90a_torch_on_interpreter(prob):
    pytest.importorskip("torch")
    gpu = EmulatedGemmGpu("sm_90a")
    G90.test_gemm_matches_torch(prob, gpu)
    assert gpu.launches >= 1 and not gpu.findings, "\n".join(map(str, gpu.findings))


def test_the_emulated_problems_cover_every_math_and_hooks():
    assert {p.v.cfg.split("_")[0] for p in GEMM_PROBLEMS} == {"f16", "tf32", "simt"}
    assert {p.v.dtype for p in GEMM_PROBLEMS} == {"half", "__nv_bfloat16", "float"}
    assert {p.v.hooks for p in GEMM_PROBLEMS} >= {"", "strided", "fused"}
    assert {p.v.hooks for p in WGMMA_PROBLEMS} >= {"strided", "fused"} and any(p.v.splitk > 1 for p in WGMMA_PROBLEMS)
