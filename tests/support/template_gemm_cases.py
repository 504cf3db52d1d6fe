"""The GEMM template (kernels/families/gemm/gemm.cuh) and its config menu (kernels/families/gemm/configs.py).

Without a GPU: every menu config compiles for sm_80 (full matrix of dtype x B layout x alignment) and
sm_90 (a sample) with zero register spills and shared memory within the arch's limit, the template's
PLUS_THREADS / PLUS_SMEM_BYTES macros equal the Python mirrors (static_asserts in the source), split-K
and hooked variants compile. With a GPU (`gpu` marker): launches against a host reference.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from plus_ep.kernels.families.gemm import configs as gc
from plus_ep.kernels.compile import nvrtc
from tests.support import gemm_variants
from tests.support.parallel import submit_selected
from tests.support.gemm_variants import Problem, Variant, round_up
from tests.support.ptx_harness import bf16_value, encode, tf32

DTYPES = {gc.MATH_F16: ("half", "__nv_bfloat16"), gc.MATH_TF32: ("float",), gc.MATH_SIMT: ("float",),
          gc.MATH_INT8: ("signed char",)}     # 8-bit: compiled here, executed by tests/emulated/test_gemm_int8.py

def source(v: Variant) -> str:
    return gemm_variants.source(v, gc, "gemm.cuh")


def _compile_matrix() -> list[tuple[str, Variant]]:
    cases = []
    for math, cfgs in gc.CONFIGS.items():
        for i, cfg in enumerate(cfgs):
            for dtype in DTYPES[math]:
                for b_trans in (0, 1):
                    for aligned in (0, 1) if math != gc.MATH_INT8 else (b_trans,):
                        cases.append(("sm_80", Variant(cfg.name, dtype, b_trans, aligned)))
                # sm_90: every config once per B layout, alternating the dtype and alignment
                if dtype == DTYPES[math][i % len(DTYPES[math])]:
                    for b_trans in (0, 1):
                        cases.append(("sm_90", Variant(cfg.name, dtype, b_trans, (i + b_trans) % 2)))
    for arch in ("sm_80", "sm_90"):
        cases.append((arch, Variant("f16_128x64x32_w64x32_s3", "half", 0, 1, splitk=2)))
        cases.append((arch, Variant("simt_64x64x8_w32x32", "float", 1, 0, splitk=2)))
        cases.append((arch, Variant("f16_128x128x32_w64x64_s3", "__nv_bfloat16", 1, 1, hooks="fused")))
        cases.append((arch, Variant("simt_128x128x8_w32x64", "float", 0, 1, hooks="fused")))
        cases.append((arch, Variant("tf32_128x128x16_w64x64_s3", "float", 0, 1, splitk=3, hooks="fused")))
    return cases


COMPILE_CASES = _compile_matrix()


def _compile(case):
    arch, v = case
    return nvrtc.compile_cubin(source(v), arch, name=f"gemm_{v.id}.cu")


@pytest.fixture(scope="module")
def compiled(request):
    """Compile every selected case up front on a few threads (NVRTC releases the GIL)."""
    yield from submit_selected(request, "case", _compile)


def test_menu_is_small_and_consistent():
    for math, cfgs in gc.CONFIGS.items():
        assert 3 <= len(cfgs) <= 6
        for c in cfgs:
            assert c.math == math
            assert c.threads == (c.bm // c.wm) * (c.bn // c.wn) * 32
            assert c.bm % c.wm == 0 and c.bn % c.wn == 0
            assert c.smem_bytes == gc.gemm_smem_bytes(math, c.bm, c.bn, c.bk, c.stages)
            if math == gc.MATH_SIMT:
                assert c.wm % 16 == 0 and c.wn % 32 == 0 and c.stages == 2
            else:
                assert c.wm % 16 == 0 and c.wn % 16 == 0 and c.bk % (32 if math == gc.MATH_INT8 else 16) == 0
                assert 2 <= c.stages <= 4
    names = [c.name for cs in gc.CONFIGS.values() for c in cs]
    assert len(names) == len(set(names)) == len(gc.BY_NAME)
    d = gc.defines(gc.F16_CONFIGS[0], b_trans=1, aligned=1, splitk=2)
    assert d["PLUS_B_TRANS"] == 1 and d["PLUS_ALIGNED"] == 1 and d["PLUS_SPLITK"] == 2
    assert gc.grid(gc.F16_CONFIGS[0], 3, 77, 131, splitk=2) == (2, 1, 6)
    assert gc.reduce_grid(3, 77, 131) == (-(-3 * 77 * 131 // 256), 1, 1)


@pytest.mark.parametrize("case", COMPILE_CASES, ids=[f"{a}-{v.id}" for a, v in COMPILE_CASES])
def test_compiles_without_spills(case, compiled):
    arch, v = case
    cfg = gc.BY_NAME[v.cfg]
    r = compiled[case].result()
    gemm = r.resources["plus_gemm"]
    assert gemm.spill_stores == 0 and gemm.spill_loads == 0, (gemm, r.log)
    assert gemm.smem_static + cfg.smem_bytes <= nvrtc.smem_limit(arch), gemm
    assert gemm.registers * cfg.threads <= 65536
    dyn = {"plus_gemm": cfg.smem_bytes}
    if v.splitk > 1:
        assert "plus_splitk_reduce" in r.resources
        dyn["plus_splitk_reduce"] = 0
    else:
        assert "plus_splitk_reduce" not in r.resources
    assert nvrtc.check_resources(r, dynamic_smem=dyn, arch=arch) == []


# ------------------------------------------------------------------------------------------ GPU


def _gpu_problems() -> list[Problem]:
    out = []
    for math, dtype in ((2, "half"), (2, "__nv_bfloat16"), (1, "float"), (0, "float")):
        cfgs = gc.CONFIGS[math]
        big, mid, small = cfgs[0], cfgs[len(cfgs) // 2], cfgs[-1]
        out += [
            Problem(Variant(big.name, dtype, 0, 1), 1, 2048, 768, 768),
            Problem(Variant(big.name, dtype, 1, 0), 3, 77, 131, 45),
            Problem(Variant(small.name, dtype, 0, 1, hooks="strided"), 3, 77, 131, 45),
            Problem(Variant(mid.name, dtype, 1, 1, hooks="strided"), 2, 200, 96, 300),
            Problem(Variant(mid.name, dtype, 0, 0, splitk=3), 2, 77, 131, 200),
            Problem(Variant(big.name, dtype, 1, 1, splitk=2, hooks="fused"), 2, 130, 72, 264),
            Problem(Variant(small.name, dtype, 0, 1, hooks="fused"), 1, 5, 131, 45),
        ]
    # every config at an odd shape, both B layouts, aligned loads with padded leading dims
    for i, cfg in enumerate(gc.BY_NAME.values()):
        if cfg.math == gc.MATH_INT8:             # exact integers: tests/emulated/test_gemm_int8.py
            continue
        dtype = DTYPES[cfg.math][i % len(DTYPES[cfg.math])]
        out.append(Problem(Variant(cfg.name, dtype, i % 2, 1, hooks="strided"), 2, 150, 200, 100))
    return out


GPU_PROBLEMS = _gpu_problems()


def _encode(x: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """(device bytes, the float32 values the kernel sees)."""
    dev, seen = encode(x, dtype)
    return dev, seen.astype(np.float32)


def _matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    try:
        import torch
        return torch.matmul(torch.from_numpy(a), torch.from_numpy(b)).numpy()
    except ImportError:  # pragma: no cover
        return np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(np.float32)


class _Gpu:
    """Just enough of the CUDA driver API (cuda.bindings) to run one kernel."""

    def __init__(self):
        from cuda.bindings import driver as cu
        self.cu = cu
        self.check(cu.cuInit(0))
        dev = self.check(cu.cuDeviceGet(0))
        self.ctx = self.check(cu.cuDevicePrimaryCtxRetain(dev))
        self.check(cu.cuCtxSetCurrent(self.ctx))
        self.dev = dev
        self.allocs = []

    def check(self, ret):
        status, *vals = ret if isinstance(ret, tuple) else (ret,)
        if int(status) != 0:
            _, name = self.cu.cuGetErrorName(status)
            raise RuntimeError(f"CUDA driver error {name!r}")
        return vals[0] if len(vals) == 1 else (vals or None)

    def upload(self, host: np.ndarray) -> int:
        host = np.ascontiguousarray(host)
        ptr = self.check(self.cu.cuMemAlloc(max(host.nbytes, 16)))
        self.allocs.append(ptr)
        if host.nbytes:
            self.check(self.cu.cuMemcpyHtoD(ptr, host.ctypes.data, host.nbytes))
        return int(ptr)

    def alloc(self, nbytes: int, fill: int = 0xFF) -> int:   # poisoned unless told
        ptr = self.check(self.cu.cuMemAlloc(max(nbytes, 16)))
        self.allocs.append(ptr)
        self.check(self.cu.cuMemsetD8(ptr, fill, max(nbytes, 16)))
        return int(ptr)

    def download(self, ptr: int, host: np.ndarray) -> np.ndarray:
        self.check(self.cu.cuMemcpyDtoH(host.ctypes.data, self.cu.CUdeviceptr(ptr), host.nbytes))
        return host

    def free_all(self):
        for p in self.allocs:
            self.cu.cuMemFree(p)
        self.allocs.clear()

    def load_source(self, source: str, name: str):
        """Compile `source` for this device and load the cubin (tests/emulated/test_ptx_gpu_backend.py
        gives the same interface over the PTX interpreter)."""
        r = nvrtc.compile_cubin(source, self.arch, name=name)
        image = np.frombuffer(r.cubin, dtype=np.uint8).copy()
        return self.check(self.cu.cuModuleLoadData(image.ctypes.data))

    def unload(self, module):
        self.check(self.cu.cuModuleUnload(module))

    def launch(self, module, entry: str, grid, block: int, smem: int, args: np.ndarray):
        cu = self.cu
        fn = self.check(cu.cuModuleGetFunction(module, entry.encode()))
        if smem > 48 * 1024:
            self.check(cu.cuFuncSetAttribute(
                fn, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem))
        params = np.array([args.ctypes.data], dtype=np.uint64)  # void* params[] = {&args}
        self.check(cu.cuLaunchKernel(fn, *grid, block, 1, 1, smem, cu.CUstream(0), params.ctypes.data, 0))
        self.check(cu.cuCtxSynchronize())


def plus_args(ins=(), outs=(), scratch=(), v=()) -> np.ndarray:
    """The 864-byte PlusArgs: in[64], out[8], scratch[4] pointers, then v[32] int64."""
    a = np.zeros(108, dtype=np.uint64)
    for i, p in enumerate(ins):
        a[i] = p
    for i, p in enumerate(outs):
        a[64 + i] = p
    for i, p in enumerate(scratch):
        a[72 + i] = p
    a.view(np.int64)[76:76 + len(v)] = v
    assert a.nbytes == 864
    return a


@pytest.fixture(scope="module")
def gpu():
    arch = nvrtc.local_arch()
    if arch is None:
        pytest.skip("no usable CUDA device")
    try:
        nvrtc.parse_arch(arch)
    except ValueError:
        pytest.skip(f"PlusEP does not build for {arch}")
    g = _Gpu()
    g.arch = arch
    yield g
    g.free_all()


@pytest.mark.gpu
@pytest.mark.parametrize("prob", GPU_PROBLEMS, ids=[p.id for p in GPU_PROBLEMS])
def test_gemm_matches_reference(prob, gpu):
    v, cfg = prob.v, gc.BY_NAME[prob.v.cfg]
    batch, M, N, K = prob.batch, prob.m, prob.n, prob.k
    rng = np.random.default_rng(zlib.crc32(prob.id.encode()))
    elem = 2 if cfg.math == gc.MATH_F16 else 4
    align = 16 // elem

    # Operand layouts: default hooks = contiguous; strided/fused = padded leading dims (multiples of
    # 16 bytes, so ALIGNED=1 is legal) and a broadcast B (batch stride 0).
    strided = v.hooks in ("strided", "fused")
    b_rows, b_cols = (N, K) if v.b_trans else (K, N)
    lda = round_up(K, align) + align if strided else K
    ldb = round_up(b_cols, align) + align if strided else b_cols
    if v.aligned:
        assert lda % align == 0 and ldb % align == 0, "test problem would break the ALIGNED=1 contract"
    b_batch = 1 if strided else batch

    a_full = rng.uniform(-1, 1, size=(batch, M, lda)).astype(np.float32)
    b_full = rng.uniform(-1, 1, size=(b_batch, b_rows, ldb)).astype(np.float32)
    a_dev, a_val = _encode(a_full, v.dtype)
    b_dev, b_val = _encode(b_full, v.dtype)
    a_val, b_val = a_val[:, :, :K], b_val[:, :, :b_cols]
    if v.hooks == "fused":
        a_val = a_val * np.float32(0.5) + np.float32(0.25)  # the prologue, in fp32 (exact here)
        if cfg.math == gc.MATH_F16:  # the template stores the prologue result back as plus_ab_t
            a_val = _encode(a_val, v.dtype)[1]
    if cfg.math == gc.MATH_TF32:
        a_val, b_val = tf32(a_val), tf32(b_val)
    b_kn = np.transpose(b_val, (0, 2, 1)) if v.b_trans else b_val
    ref = _matmul(np.array(a_val, dtype=np.float32), np.array(np.broadcast_to(b_kn, (batch, K, N)), dtype=np.float32))

    bias = rng.uniform(-1, 1, size=N).astype(np.float32)
    if v.hooks == "fused":
        y = ref + bias
        ref = np.where(y > 0, y, np.float32(0.1) * y)
        out_host = np.zeros((batch, M, N), dtype=np.float32)
    elif v.dtype == "half":
        out_host = np.zeros((batch, M, N), dtype=np.float16)
    elif v.dtype == "__nv_bfloat16":
        out_host = np.zeros((batch, M, N), dtype=np.uint16)
    else:
        out_host = np.zeros((batch, M, N), dtype=np.float32)

    module = gpu.load_source(source(v), f"gemm_{prob.id}.cu")
    try:
        pa, pb = gpu.upload(a_dev), gpu.upload(b_dev)
        pbias = gpu.upload(bias)
        pout = gpu.alloc(out_host.nbytes, fill=0xFF)  # NaN-ish garbage: every element must be written
        pscratch = gpu.alloc(v.splitk * batch * M * N * 4, fill=0xFF) if v.splitk > 1 else 0
        vals = [batch, M, N, K, lda, M * lda, ldb, 0 if strided else b_rows * ldb]
        args = plus_args(ins=(pa, pb, pbias), outs=(pout,), scratch=(pscratch,), v=vals)
        gpu.launch(module, "plus_gemm", gc.grid(cfg, batch, M, N, v.splitk), cfg.threads, cfg.smem_bytes, args)
        if v.splitk > 1:
            gpu.launch(module, "plus_splitk_reduce", gc.reduce_grid(batch, M, N), 256, 0, args)
        got = gpu.download(pout, out_host)
    finally:
        gpu.unload(module)
        gpu.free_all()

    if v.dtype == "__nv_bfloat16" and v.hooks != "fused":
        got = bf16_value(got)
    got = got.astype(np.float32)
    tol = 1e-4 if cfg.math == gc.MATH_SIMT else 1e-2
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)
