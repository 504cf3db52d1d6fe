"""The Hopper wgmma GEMM template (kernels/families/gemm/gemm_sm90a.cuh) and its config menu
(kernels/families/gemm/sm90a_configs.py).

Without a GPU: every config x {half, bf16} x B layout x alignment compiles for sm_90a with zero register
spills and shared memory within the limit, PLUS_THREADS / PLUS_SMEM_BYTES equal the Python mirrors
(static_asserts in the source), hooked and split-K variants compile, and plain sm_90 is refused with
the template's #error. With a compute-capability-9.0 GPU (`gpu` marker): launches through the CUDA driver
API on odd shapes and compares with torch.matmul.
"""

from __future__ import annotations

import zlib

import pytest

from plus_ep.kernels.families.gemm import sm90a_configs as gc
from plus_ep.kernels.compile import nvrtc
from tests.support import gemm_variants
from tests.support.parallel import submit_selected
from tests.support.gemm_variants import Problem, Variant, round_up

ARCH = "sm_90a"
DTYPES = ("half", "__nv_bfloat16")

def source(v: Variant) -> str:
    return gemm_variants.source(v, gc, "gemm_sm90a.cuh")


# ------------------------------------------------------------------------------------ compile checks

# Every config x dtype x B layout; the alignment alternates so that every config still compiles both
# ALIGNED values with both B layouts (the full 32-case matrix takes ~40 s on 2 cores).
COMPILE_CASES = [Variant(c.name, dt, bt, (ci + di + bt) % 2)
                 for ci, c in enumerate(gc.CONFIGS) for di, dt in enumerate(DTYPES) for bt in (0, 1)]
COMPILE_CASES += [
    Variant("wg_128x256x64_w64x256_s4", "half", 0, 1, hooks="fused"),
    Variant("wg_256x128x64_w128x128_s4", "__nv_bfloat16", 1, 0, hooks="fused"),
    Variant("wg_64x128x64_w64x128_s4", "half", 1, 1, splitk=3, hooks="fused"),
    Variant("wg_128x128x64_w64x128_s5", "__nv_bfloat16", 0, 1, splitk=2),
]


def _compile(v):
    return nvrtc.compile_cubin(source(v), ARCH, f"gemm_sm90a_{v.id}.cu")


@pytest.fixture(scope="module")
def compiled(request):
    """Compile every selected case up front on a few threads (NVRTC releases the GIL)."""
    yield from submit_selected(request, "variant", _compile)


def test_menu_is_consistent():
    assert 2 <= len(gc.CONFIGS) <= 4
    assert len(gc.BY_NAME) == len(gc.CONFIGS)
    for c in gc.CONFIGS:
        assert c.math == gc.MATH_F16 and c.bk == 64
        assert c.wm in (64, 128) and c.wn in (64, 128, 192, 256)
        assert c.bm % c.wm == 0 and c.bn % c.wn == 0 and c.stages >= 3
        assert (c.wm // 64) * (c.wn // 2) <= 128, "accumulators per thread"
        assert c.threads == gc.gemm_threads(c.bm, c.bn, c.wm, c.wn) and c.threads in (128, 256, 384)
        assert c.smem_bytes == gc.gemm_smem_bytes(c.bm, c.bn, c.bk, c.stages)
        assert c.smem_bytes <= nvrtc.smem_limit(ARCH)
    d = gc.defines(gc.CONFIGS[0], b_trans=1, aligned=1, splitk=2)
    assert d["PLUS_MATH"] == 2 and d["PLUS_B_TRANS"] == 1 and d["PLUS_ALIGNED"] == 1 and d["PLUS_SPLITK"] == 2
    assert gc.grid(gc.CONFIGS[0], 3, 77, 300, splitk=2) == (2, 1, 6)
    with pytest.raises(ValueError):
        gc.defines(gc.CONFIGS[0], splitk=0)


@pytest.mark.parametrize("variant", COMPILE_CASES, ids=[v.id for v in COMPILE_CASES])
def test_compiles_without_spills(variant, compiled):
    cfg = gc.BY_NAME[variant.cfg]
    r = compiled[variant].result()
    gemm = r.resources["plus_gemm"]
    assert gemm.spill_stores == 0 and gemm.spill_loads == 0, (gemm, r.log)
    assert gemm.stack == 0, gemm
    assert gemm.registers * cfg.threads <= 65536
    assert gemm.smem_static + cfg.smem_bytes <= nvrtc.smem_limit(ARCH), gemm
    dyn = {"plus_gemm": cfg.smem_bytes}
    if variant.splitk > 1:
        assert "plus_splitk_reduce" in r.resources
        dyn["plus_splitk_reduce"] = 0
    else:
        assert "plus_splitk_reduce" not in r.resources
    assert nvrtc.check_resources(r, dynamic_smem=dyn, arch=ARCH) == []
    # wgmma kept asynchronous: ptxas reports when it has to serialize wgmma.mma_async
    assert "serialized" not in r.log, r.log


def test_plain_sm90_is_refused():
    v = Variant(gc.CONFIGS[0].name, "half", 0, 1)
    with pytest.raises(nvrtc.CompileError) as e:
        nvrtc.compile_cubin(source(v), "sm_90", name="gemm_sm90a_on_sm90.cu")
    assert "needs wgmma" in str(e.value) and "sm_90a" in str(e.value)


def test_other_math_is_refused():
    src = source(Variant(gc.CONFIGS[-1].name, "half", 0, 1)).replace("#define PLUS_MATH 2", "#define PLUS_MATH 1")
    with pytest.raises(nvrtc.CompileError) as e:
        nvrtc.compile_cubin(src, ARCH, name="gemm_sm90a_tf32.cu")
    assert "PLUS_MATH 2" in str(e.value)


# ---------------------------------------------------------------------------------------------- GPU


_BIG, _TALL, _MID, _SMALL = (c.name for c in gc.CONFIGS)
GPU_PROBLEMS = [
    Problem(Variant(_BIG, "half", 0, 1), 1, 2048, 768, 768),                      # BERT FFN-ish, interior
    Problem(Variant(_BIG, "__nv_bfloat16", 1, 1), 2, 200, 300, 136),               # M/N/K edges
    Problem(Variant(_BIG, "half", 1, 0), 3, 77, 131, 45),                          # unaligned rows, odd everything
    Problem(Variant(_TALL, "__nv_bfloat16", 0, 0), 1, 300, 72, 100),
    Problem(Variant(_TALL, "half", 1, 1, hooks="strided"), 2, 260, 136, 200),
    Problem(Variant(_MID, "half", 1, 1, splitk=3), 2, 130, 200, 520),
    Problem(Variant(_MID, "__nv_bfloat16", 0, 1, splitk=3), 1, 64, 64, 64),       # splits with no k-tiles
    Problem(Variant(_MID, "__nv_bfloat16", 0, 1, splitk=2, hooks="fused"), 2, 130, 72, 264),
    Problem(Variant(_SMALL, "__nv_bfloat16", 0, 1, hooks="fused"), 2, 150, 200, 264),
    Problem(Variant(_SMALL, "half", 1, 0, hooks="fused"), 1, 5, 131, 45),
    Problem(Variant(_SMALL, "half", 0, 1, hooks="strided"), 3, 65, 129, 8),         # K = 8: one partial tile
]


class _Gpu:
    """Just enough of the CUDA driver API (cuda.bindings.driver) to run one kernel."""

    def __init__(self):
        from cuda.bindings import driver as cu
        self.cu = cu
        self.check(cu.cuInit(0))
        self.dev = self.check(cu.cuDeviceGet(0))
        attr = cu.CUdevice_attribute
        self.cc = (self.check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.dev)),
                   self.check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.dev)))
        self.ctx = self.check(cu.cuDevicePrimaryCtxRetain(self.dev))
        self.check(cu.cuCtxSetCurrent(self.ctx))
        self.allocs = []

    def check(self, ret):
        status, *vals = ret if isinstance(ret, tuple) else (ret,)
        if int(status) != 0:
            _, name = self.cu.cuGetErrorName(status)
            raise RuntimeError(f"CUDA driver error {name!r}")
        return vals[0] if len(vals) == 1 else (vals or None)

    def alloc(self, nbytes: int, fill: int = 0xFF) -> int:   # poisoned unless told
        ptr = self.check(self.cu.cuMemAlloc(max(nbytes, 16)))
        self.allocs.append(ptr)
        self.check(self.cu.cuMemsetD8(ptr, fill, max(nbytes, 16)))
        return int(ptr)

    def upload(self, t) -> int:
        """A contiguous CPU torch tensor to a new device buffer."""
        t = t.contiguous()
        nbytes = t.numel() * t.element_size()
        ptr = self.alloc(nbytes)
        if nbytes:
            self.check(self.cu.cuMemcpyHtoD(ptr, t.data_ptr(), nbytes))
        return ptr

    def download(self, ptr: int, t):
        self.check(self.cu.cuMemcpyDtoH(t.data_ptr(), self.cu.CUdeviceptr(ptr), t.numel() * t.element_size()))
        return t

    def free_all(self):
        for p in self.allocs:
            self.cu.cuMemFree(p)
        self.allocs.clear()

    def load(self, cubin: bytes):
        import ctypes
        image = ctypes.create_string_buffer(cubin, len(cubin))
        return self.check(self.cu.cuModuleLoadData(ctypes.addressof(image)))

    def load_source(self, source: str, name: str):
        """Compile `source` for sm_90a and load the cubin (tests/emulated/test_ptx_gpu_backend.py gives
        the same interface over the PTX interpreter)."""
        return self.load(nvrtc.compile_cubin(source, ARCH, name=name).cubin)

    def unload(self, module):
        self.check(self.cu.cuModuleUnload(module))

    def function(self, module, entry: str, smem: int):
        fn = self.check(self.cu.cuModuleGetFunction(module, entry.encode()))
        if smem > 48 * 1024:
            self.check(self.cu.cuFuncSetAttribute(
                fn, self.cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem))
        return fn

    def launch(self, fn, grid, block: int, smem: int, args: bytes, sync: bool = True):
        import ctypes
        buf = ctypes.create_string_buffer(args, len(args))
        params = (ctypes.c_void_p * 1)(ctypes.addressof(buf))  # void* params[] = {&args}
        self.check(self.cu.cuLaunchKernel(fn, *grid, block, 1, 1, smem, self.cu.CUstream(0),
                                          ctypes.addressof(params), 0))
        if sync:
            self.check(self.cu.cuCtxSynchronize())


def plus_args(ins=(), outs=(), scratch=(), v=()) -> bytes:
    """The 864-byte PlusArgs: in[64], out[8], scratch[4] pointers, then v[32] int64."""
    import struct
    ptrs = [0] * 76
    for i, p in enumerate(ins):
        ptrs[i] = p
    for i, p in enumerate(outs):
        ptrs[64 + i] = p
    for i, p in enumerate(scratch):
        ptrs[72 + i] = p
    vals = list(v) + [0] * (32 - len(v))
    blob = struct.pack("<76Q32q", *ptrs, *vals)
    assert len(blob) == 864
    return blob


@pytest.fixture(scope="module")
def gpu():
    try:
        g = _Gpu()
    except Exception as e:  # no driver / no device
        pytest.skip(f"no usable CUDA device ({e})")
    if g.cc != (9, 0):
        pytest.skip(f"gemm_sm90a needs compute capability 9.0 (sm_90a), the device is {g.cc[0]}.{g.cc[1]}")
    yield g
    g.free_all()


def _torch():
    return pytest.importorskip("torch")


@pytest.mark.gpu
@pytest.mark.parametrize("prob", GPU_PROBLEMS, ids=[p.id for p in GPU_PROBLEMS])
def test_gemm_matches_torch(prob, gpu):
    torch = _torch()
    v, cfg = prob.v, gc.BY_NAME[prob.v.cfg]
    batch, M, N, K = prob.batch, prob.m, prob.n, prob.k
    tdt = torch.float16 if v.dtype == "half" else torch.bfloat16
    gen = torch.Generator().manual_seed(zlib.crc32(prob.id.encode()))

    # Layouts: default hooks = contiguous operands; strided/fused = padded leading dims (multiples of
    # 8 elements when ALIGNED=1, odd otherwise) and a broadcast B (batch stride 0).
    strided = v.hooks in ("strided", "fused")
    b_rows, b_cols = (N, K) if v.b_trans else (K, N)
    pad = 8 if v.aligned else 3
    lda = round_up(K, 8) + pad if strided else K
    ldb = round_up(b_cols, 8) + pad if strided else b_cols
    if v.aligned:
        assert lda % 8 == 0 and ldb % 8 == 0, "test problem would break the ALIGNED=1 contract"
    b_batch = 1 if strided else batch

    a_full = ((torch.rand(batch, M, lda, generator=gen) * 2 - 1) / K ** 0.5).to(tdt)
    b_full = (torch.rand(b_batch, b_rows, ldb, generator=gen) * 2 - 1).to(tdt)
    a_val = a_full[:, :, :K].float()
    b_val = b_full[:, :, :b_cols].float()
    if v.hooks == "fused":  # the prologue in fp32, stored back as plus_ab_t by the template
        a_val = (a_val * 0.5 + 0.25).to(tdt).float()
    b_kn = b_val.transpose(1, 2) if v.b_trans else b_val
    ref = torch.matmul(a_val, b_kn.expand(batch, K, N))

    bias = torch.rand(N, generator=gen) * 2 - 1
    if v.hooks == "fused":
        y = ref + bias
        ref = torch.where(y > 0, y, 0.1 * y)
        out = torch.empty(batch, M, N, dtype=torch.float32)
    else:
        out = torch.empty(batch, M, N, dtype=tdt)

    module = gpu.load_source(source(v), f"gemm_sm90a_{prob.id}.cu")
    try:
        pa, pb, pbias = gpu.upload(a_full), gpu.upload(b_full), gpu.upload(bias)
        pout = gpu.alloc(out.numel() * out.element_size(), fill=0xFF)  # NaN garbage: all must be written
        pscratch = gpu.alloc(v.splitk * batch * M * N * 4, fill=0xFF) if v.splitk > 1 else 0
        vals = [batch, M, N, K, lda, M * lda, ldb, 0 if strided else b_rows * ldb]
        args = plus_args(ins=(pa, pb, pbias), outs=(pout,), scratch=(pscratch,), v=vals)
        gemm = gpu.function(module, "plus_gemm", cfg.smem_bytes)
        gpu.launch(gemm, gc.grid(cfg, batch, M, N, v.splitk), cfg.threads, cfg.smem_bytes, args)
        if v.splitk > 1:
            red = gpu.function(module, "plus_splitk_reduce", 0)
            gpu.launch(red, gc.reduce_grid(batch, M, N), 256, 0, args)
        got = gpu.download(pout, out).float()
    finally:
        gpu.unload(module)
        gpu.free_all()
    torch.testing.assert_close(got, ref, rtol=1e-2, atol=1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", gc.CONFIGS, ids=[c.name for c in gc.CONFIGS])
def test_throughput_report(cfg, gpu):
    """Not a gate: prints TFLOP/s of a 4096^3 f16 GEMM (B [K,N]) per config, for the 75-80% goal
    (H100 SXM dense f16 peak ~989 TFLOP/s)."""
    torch = _torch()
    M = N = K = 4096
    v = Variant(cfg.name, "half", 0, 1)
    r = nvrtc.compile_cubin(source(v), ARCH, name=f"gemm_sm90a_perf_{cfg.name}.cu")
    cu = gpu.cu
    module = gpu.load(r.cubin)
    try:
        a = (torch.rand(M, K) - 0.5).half()
        b = (torch.rand(K, N) - 0.5).half()
        pa, pb = gpu.upload(a), gpu.upload(b)
        pout = gpu.alloc(M * N * 2, fill=0xFF)       # poisoned: every element must be written
        args = plus_args(ins=(pa, pb), outs=(pout,), v=[1, M, N, K])
        fn = gpu.function(module, "plus_gemm", cfg.smem_bytes)
        grid = gc.grid(cfg, 1, M, N)
        gpu.launch(fn, grid, cfg.threads, cfg.smem_bytes, args)  # warm-up
        start, stop = gpu.check(cu.cuEventCreate(0)), gpu.check(cu.cuEventCreate(0))
        reps = 20
        gpu.check(cu.cuEventRecord(start, cu.CUstream(0)))
        for _ in range(reps):
            gpu.launch(fn, grid, cfg.threads, cfg.smem_bytes, args, sync=False)
        gpu.check(cu.cuEventRecord(stop, cu.CUstream(0)))
        gpu.check(cu.cuEventSynchronize(stop))
        ms = gpu.check(cu.cuEventElapsedTime(start, stop)) / reps
        tflops = 2 * M * N * K / (ms * 1e-3) / 1e12
        print(f"\n{cfg.name}: {ms:.3f} ms, {tflops:.0f} TFLOP/s ({r.resources['plus_gemm'].registers} registers)")
        got = gpu.download(pout, torch.empty(M, N, dtype=torch.float16)).float()
        torch.testing.assert_close(got, a.float() @ b.float(), rtol=1e-2, atol=2e-2)
    finally:
        gpu.check(cu.cuModuleUnload(module))
        gpu.free_all()
