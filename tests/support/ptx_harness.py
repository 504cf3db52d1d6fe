"""Helpers of the emulated kernel tests: PlusArgs packing (layout read from plus_common.cuh, so a change
of PLUS_MAX_* follows), device-like buffers in a GlobalMemory, and one-call launches of PTX kernels."""
from __future__ import annotations

import functools
import pathlib
import re

import numpy as np

from plus_ep.kernels.compile.nvrtc import TEMPLATES_DIR
from plus_ep.kernels.families.gemm.configs import reduce_grid
from plus_ep.kernels.ptx import GlobalMemory, Module
from plus_ep.kernels.compile.ptx import compile_ptx
from plus_ep.verification.bounds import unit
from tests.support.poison import POISON_BYTE, assert_written


@functools.lru_cache(maxsize=None)
def plus_args_layout() -> dict:
    text = (pathlib.Path(TEMPLATES_DIR) / "plus_abi.h").read_text()   # PlusArgs
    n = {k: int(re.search(rf"#define {k} (\d+)", text).group(1))
         for k in ("PLUS_MAX_IN", "PLUS_MAX_OUT", "PLUS_MAX_SCRATCH", "PLUS_MAX_V")}
    i, o, s, v = n["PLUS_MAX_IN"], n["PLUS_MAX_OUT"], n["PLUS_MAX_SCRATCH"], n["PLUS_MAX_V"]
    return {"in": 0, "out": i, "scratch": i + o, "v": i + o + s, "words": i + o + s + v}


def plus_args(ins=(), outs=(), scratch=(), v=()) -> bytes:
    """PlusArgs bytes: in[], out[], scratch[] pointers, then v[] int64."""
    L = plus_args_layout()
    a = np.zeros(L["words"], np.uint64)
    for base, vals in ((L["in"], ins), (L["out"], outs), (L["scratch"], scratch)):
        for k, p in enumerate(vals):
            a[base + k] = int(p or 0)
    a.view(np.int64)[L["v"]:L["v"] + len(v)] = [int(x) for x in v]
    return a.tobytes()


class Device:
    """A GlobalMemory with numpy-backed allocations (kept alive here)."""

    def __init__(self):
        self.mem = GlobalMemory()
        self.arrays = []

    def upload(self, a: np.ndarray, name: str = "buf") -> int:
        a = np.ascontiguousarray(a).copy()
        if a.nbytes == 0:
            a = np.zeros(16, np.uint8)
        self.arrays.append(a)
        return self.mem.map_array(a, name)

    def alloc(self, nbytes: int, name: str = "buf", fill: int = POISON_BYTE) -> int:
        """An allocation of `nbytes` (at least 16), poisoned by default (tests/support/poison.py)."""
        return self.upload(np.full(max(int(nbytes), 16), fill, np.uint8), name)

    def output(self, like: np.ndarray, name: str = "out") -> int:
        """A poisoned output buffer the size of `like`; read it back with `download_written`."""
        return self.alloc(np.asarray(like).nbytes, name)

    def download_written(self, addr: int, like: np.ndarray, what: str = "output") -> np.ndarray:
        """download(), failing when an element still holds the poison: any output but a signed integer one
        (where -1 is a value; compare those exactly), bf16 carried as uint16 bits included."""
        got = self.download(addr, like)
        if got.dtype.kind != "i":
            assert_written(got, what)
        return got

    def array(self, addr: int) -> np.ndarray:
        for a in self.arrays:
            if a.ctypes.data == addr:
                return a
        raise KeyError(addr)

    def download(self, addr: int, like: np.ndarray) -> np.ndarray:
        raw = self.array(addr).view(np.uint8)[:like.nbytes]
        return raw.view(like.dtype).reshape(like.shape).copy()


@functools.lru_cache(maxsize=256)
def module(source: str, arch: str, name: str = "kernel") -> Module:
    return Module.parse(compile_ptx(source, arch, name=f"{name}.cu"), name=name)


def with_tmaps(kernel, args: bytes, maps: bytes) -> bytes:
    """The parameter bytes of a kernel taking (PlusArgs, __grid_constant__ PlusTmaps): `args` (plus_args), then the
    encoded tensor maps (128 bytes each, kernels/ptx/tensormap.py) at the second parameter's offset."""
    params = bytearray(kernel.param_bytes)
    params[:len(args)] = args
    off = kernel._param_offsets[kernel.params[1][0]]
    params[off:off + len(maps)] = maps
    return bytes(params)


def plan_tmaps(tmaps, ptrs, syms: dict) -> bytes:
    """The tensor maps of a plan's `tmap` records (kernels/wire/plan.py, inputs only) encoded as the emulated
    driver encodes them: `ptrs` the inputs' device addresses, `syms` {symbol index: value}."""
    from plus_ep.kernels.ptx import tensormap as TM
    from plus_ep.verification.shapes import rpn
    out = []
    for dtype, buf, index, offset, dims, strides, box, swizzle in tmaps:
        assert buf == "in" and swizzle in (0, 128), (buf, swizzle)
        es = 2 if dtype in (10, 16) else 1 if dtype in (2, 3) else 4
        code = {10: TM.F16, 16: TM.BF16, 2: TM.U8, 3: TM.U8}[dtype]
        out.append(TM.encode_tiled(code, ptrs[index] + rpn(offset, syms) * es, [rpn(e, syms) for e in dims],
                                   [rpn(e, syms) * es for e in strides], box,
                                   swizzle=TM.SWIZZLE_128B if swizzle == 128 else TM.SWIZZLE_NONE))
    return b"".join(out)


def launch_gemm(mod: Module, cfg, grid, params: bytes, mem: GlobalMemory, splitk: int, out_shape, checks=True):
    """A plus_gemm launch as the launcher runs it: plus_gemm on `grid` (cfg.threads threads, cfg.smem_bytes
    of shared memory), then, when the K split goes through scratch (splitk > 1), plus_splitk_reduce over
    the (batch, M, N) `out_shape`. Returns (plus_gemm's launch result, the findings of both launches)."""
    r = mod.kernel("plus_gemm").launch(grid, (cfg.threads, 1, 1), cfg.smem_bytes, params, mem, checks=checks)
    findings = list(r.findings)
    if splitk > 1:
        findings += mod.kernel("plus_splitk_reduce").launch(reduce_grid(*out_shape), (256, 1, 1), 0, params, mem,
                                                            checks=checks).findings
    return r, findings


def bf16_bits(x: np.ndarray) -> np.ndarray:
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_value(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def tf32(x: np.ndarray) -> np.ndarray:
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((u + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def encode(x: np.ndarray, dtype: str):
    """(device array, float64 values the kernel sees) for dtype half / __nv_bfloat16 / float."""
    if dtype == "half":
        h = x.astype(np.float16)
        return h, h.astype(np.float64)
    if dtype == "__nv_bfloat16":
        b = bf16_bits(x)
        return b, bf16_value(b).astype(np.float64)
    f = x.astype(np.float32)
    return f, f.astype(np.float64)


def decode(dev: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "__nv_bfloat16":
        return bf16_value(dev).astype(np.float64)
    return dev.astype(np.float64)


# unit roundoff of each storage type (relative half-ulp), used for output-rounding tolerances, by C type
# name; the values are verify's (plus_ep/verification/bounds.py)
UNIT = {c: unit(t) for c, t in (("half", "float16"), ("__nv_bfloat16", "bfloat16"), ("float", "float32"))}
