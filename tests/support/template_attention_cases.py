"""The fused attention template (kernels/families/flash_attention/attention.cuh) and its config menu.

1. Every menu config of the tuned head dims (64, 80, 96, 128; SIMT fp32 and f16/bf16) compiles for sm_80
   and sm_90 with NVRTC, without register spills, within the arch's shared memory limit, and with
   PLUS_ATTN_SMEM_BYTES equal to the Python mirror (the whole menu, TF32 and head dims 32 / 256 included, on
   every arch: tests/cpu/test_attention_menu_spills.py). The full cross product
   (config x dtype x causal x strided x arch) takes minutes on 2 cores, so by default each config is
   compiled once per arch with a rotating (dtype, causal, strided) choice that covers every value;
   PLUS_ATTN_FULL=1 compiles the whole product.
2. Generated-style hooks compile: GQA shape, [B, S, H, D] strided operands, a scaled additive mask read
   from an input, an output hook.
3. (gpu) Launches through cuda.bindings.driver with the 864-byte PlusArgs and compares with
   torch.nn.functional.scaled_dot_product_attention in fp32.
"""

from __future__ import annotations

import ctypes
import itertools
import os

import numpy as np
import pytest

from plus_ep.kernels.families.flash_attention import configs as ac
from plus_ep.kernels.compile import nvrtc
from tests.support.parallel import run_jobs

ARCHS = ("sm_80", "sm_90")
ENTRY = "plus_attention"
DTYPES = {0: ("float",), 1: ("float",), 2: ("half", "__nv_bfloat16")}
FULL = os.environ.get("PLUS_ATTN_FULL", "").strip().lower() in ("1", "true", "yes", "on")


def smem_assert(cfg) -> str:
    """A line that fails the compile unless the Python mirror of the shared memory size (cfg.smem_bytes)
    is the template's PLUS_ATTN_SMEM_BYTES."""
    return (f'static_assert(PLUS_ATTN_SMEM_BYTES == {cfg.smem_bytes}, '
            f'"PLUS_ATTN_SMEM_BYTES != attention_configs.attn_smem_bytes");\n')


def _source(cfg, dtype, causal, strided, hooks="", extra=None):
    return ac.source(cfg, dtype, causal=causal, strided=strided, hooks=hooks, extra_defines=extra) + smem_assert(cfg)


def _jobs():
    """(cfg, dtype, causal, strided, arch) to compile."""
    jobs = []
    tuned = [c for c in ac.all_configs() if c.math in (0, 2) and c.head_dim in (64, 80, 96, 128)]
    for k, cfg in enumerate(tuned):
        dtypes = DTYPES[cfg.math]
        strideds = (0, 1) if cfg.math != 0 else (0,)
        if FULL:
            for dt, causal, st, arch in itertools.product(dtypes, (0, 1), strideds, ARCHS):
                jobs.append((cfg, dt, causal, st, arch))
            continue
        for a, arch in enumerate(ARCHS):
            # Rotate so that each config sees both causal values and both load paths over the two archs,
            # and both element types appear for every head dim.
            causal = (k + a) % 2
            st = strideds[(k // 2 + a) % len(strideds)]
            dt = dtypes[(k // 4 + a) % len(dtypes)]
            jobs.append((cfg, dt, causal, st, arch))
    return jobs


JOBS = _jobs()


def _job_id(job):
    cfg, dt, causal, st, arch = job
    return f"{cfg.name}-{dt.strip('_')}-c{causal}-s{st}-{arch}"


@pytest.fixture(scope="module")
def compiled():
    """All compile jobs at once on two threads (NVRTC releases the GIL)."""
    def one(job):
        cfg, dt, causal, st, arch = job
        return nvrtc.compile_cubin(_source(cfg, dt, causal, st), arch, name=f"{_job_id(job)}.cu")
    return run_jobs(JOBS, _job_id, one)


@pytest.mark.parametrize("job", JOBS, ids=_job_id)
def test_config_compiles_without_spills(compiled, job):
    cfg, dt, causal, st, arch = job
    r = compiled[_job_id(job)]
    if isinstance(r, Exception):
        raise r
    res = r.resources[ENTRY]
    assert res.spill_stores == 0 and res.spill_loads == 0, f"{_job_id(job)} spills: {res}"
    assert res.stack == 0, f"{_job_id(job)} uses a stack frame: {res}"
    assert res.smem_static + cfg.smem_bytes <= nvrtc.smem_limit(arch), res
    assert not nvrtc.check_resources(r, dynamic_smem=cfg.smem_bytes)


def test_menu_shape():
    for math in ac.MATHS:
        for d in ac.HEAD_DIMS:
            cfgs = ac.configs_for(math, d)
            assert cfgs, (math, d)
            assert [c.bq for c in cfgs] == sorted((c.bq for c in cfgs), reverse=True)
            assert min(c.bq for c in cfgs) <= 16, "a config for short / decode-like queries"
            # SIMT D = 256 tops at q32 (q64 needs 8 warps and over 99 KB of shared memory)
            assert max(c.bq for c in cfgs) >= (32 if (math, d) == (0, 256) else 64), "a config for long sequences"
            for c in cfgs:
                assert c.smem_bytes == ac.attn_smem_bytes(c.math, c.head_dim, c.bq, c.bkv)
                assert c.smem_bytes <= nvrtc.smem_limit("sm_86") - 1024, c  # fits every supported arch
                defs = ac.defines(c)
                assert defs == {"PLUS_HEAD_DIM": d, "PLUS_BQ": c.bq, "PLUS_BKV": c.bkv,
                                "PLUS_WARPS": c.warps, "PLUS_MATH": math,
                                **({"PLUS_ATTN_MIN_BLOCKS": c.min_blocks} if c.min_blocks else {})}
                assert ac.by_name(c.name) is c
    with pytest.raises(ValueError):
        ac.make_config(2, 64, 64, 64, 2)  # bq != 16 * warps
    with pytest.raises(ValueError):
        ac.configs_for(2, 72)
    # suggest: decode-like queries get the smallest tile, long ones a large tile
    assert ac.suggest(2, 64, batch=1, heads=12, seq_q=1).bq == 16
    assert ac.suggest(2, 64, batch=16, heads=12, seq_q=2048).bq >= 64


# Hooks in the shape the codegen writes them: q/k/v in [B, S, H, D] (strided rows of H*D elements),
# GQA with the head counts in v[], Q scaled in its element hook, score = s * scale + mask[b, 0, i, j]
# (an fp32 input, -inf masks), output stored as [B, Sq, H, D].
HOOKS_BSHD = r"""
#define PLUS_HAS_ATTN_SHAPE
PLUS_DEV PlusAttnShape plus_attn_shape(const PlusArgs& a) {
  PlusAttnShape s; s.B = a.v[0]; s.H = a.v[1]; s.Hkv = a.v[2]; s.Sq = a.v[3]; s.Skv = a.v[4]; return s;
}
#define PLUS_HAS_QKV_PTR
PLUS_DEV const plus_qkv_t* plus_q_ptr(const PlusArgs& a, long long b, long long h) {
  return (const plus_qkv_t*)a.in[0] + (b * a.v[3] * a.v[1] + h) * PLUS_HEAD_DIM; }
PLUS_DEV const plus_qkv_t* plus_k_ptr(const PlusArgs& a, long long b, long long h) {
  return (const plus_qkv_t*)a.in[1] + (b * a.v[4] * a.v[2] + h) * PLUS_HEAD_DIM; }
PLUS_DEV const plus_qkv_t* plus_v_ptr(const PlusArgs& a, long long b, long long h) {
  return (const plus_qkv_t*)a.in[2] + (b * a.v[4] * a.v[2] + h) * PLUS_HEAD_DIM; }
PLUS_DEV long long plus_q_ld(const PlusArgs& a) { return a.v[1] * PLUS_HEAD_DIM; }
PLUS_DEV long long plus_k_ld(const PlusArgs& a) { return a.v[2] * PLUS_HEAD_DIM; }
PLUS_DEV long long plus_v_ld(const PlusArgs& a) { return a.v[2] * PLUS_HEAD_DIM; }
#define PLUS_HAS_Q
PLUS_DEV float plus_q(const PlusArgs& a, long long b, long long h, long long i, int d) {
  return plus_f(plus_q_ptr(a, b, h)[i * plus_q_ld(a) + d]) * 0.5f; }
#define PLUS_HAS_SCORE
PLUS_DEV float plus_score(const PlusArgs& a, long long b, long long h, long long i, long long j, float s) {
  const float scale = __int_as_float((int)a.v[5]);
  return s * scale + plus_load<float>(a.in[3], (b * a.v[3] + i) * a.v[4] + j); }
#define PLUS_HAS_ATTN_OUT
PLUS_DEV void plus_attn_out(const PlusArgs& a, long long b, long long h, long long i, int d, float o) {
  plus_store<plus_qkv_t>(a.out[0], ((b * a.v[3] + i) * a.v[1] + h) * PLUS_HEAD_DIM + d, plus_cvt<plus_qkv_t>(o)); }
"""
# Q goes through its element hook (the 0.5 factor); K and V are read with cp.async on the mma path.
HOOKS_BSHD_DEFINES = {"PLUS_Q_STRIDED": 0, "PLUS_K_STRIDED": 1, "PLUS_V_STRIDED": 1}


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("math,dtype", [(2, "half"), (1, "float"), (0, "float")])
def test_hooks_compile(math, dtype, arch):
    cfg = ac.configs_for(math, 64)[1]
    src = _source(cfg, dtype, causal=1, strided=0, hooks=HOOKS_BSHD, extra=HOOKS_BSHD_DEFINES)
    r = nvrtc.compile_cubin(src, arch, name="attn_hooks.cu")
    res = r.resources[ENTRY]
    assert res.spill_stores == 0 and res.spill_loads == 0, res
    assert not nvrtc.check_resources(r, dynamic_smem=cfg.smem_bytes)


def test_bad_parameters_are_rejected():
    cfg = ac.configs_for(2, 64)[0]
    src = ac.source(cfg, "float", causal=False)  # MATH 2 needs a 16-bit element type
    with pytest.raises(nvrtc.CompileError):
        nvrtc.compile_cubin(src, "sm_80", name="attn_bad.cu")
    src = ac.source(ac.configs_for(1, 64)[0], "half", causal=False)  # MATH 1 (TF32) needs float
    with pytest.raises(nvrtc.CompileError, match="MATH 1"):
        nvrtc.compile_cubin(src, "sm_80", name="attn_bad_tf32.cu")


# ------------------------------------------------------------------------------------------- GPU


class PlusArgsC(ctypes.Structure):
    _fields_ = [("in_", ctypes.c_void_p * 64), ("out", ctypes.c_void_p * 8),
                ("scratch", ctypes.c_void_p * 4), ("v", ctypes.c_longlong * 32)]


assert ctypes.sizeof(PlusArgsC) == 864


class _Gpu:
    """Just enough of the driver API: context, module load, buffers, launch."""

    def __init__(self):
        from cuda.bindings import driver as cu
        self.cu = cu
        self._check(cu.cuInit(0))
        self.dev = self._check(cu.cuDeviceGet(0))
        self.ctx = self._check(cu.cuDevicePrimaryCtxRetain(self.dev))
        self._check(cu.cuCtxSetCurrent(self.ctx))
        self.arch = nvrtc.local_arch()
        self._funcs = {}
        self._bufs = []

    def _check(self, ret):
        status, *vals = ret if isinstance(ret, tuple) else (ret,)
        if int(status) != 0:
            _, name = self.cu.cuGetErrorName(status)
            raise RuntimeError(f"CUDA driver error {name!r}")
        return vals[0] if len(vals) == 1 else (vals or None)

    def function(self, source: str, smem: int):
        if source not in self._funcs:
            r = nvrtc.compile_cubin(source, self.arch, name="attn_gpu.cu")
            image = np.frombuffer(r.cubin, dtype=np.uint8).copy()
            mod = self._check(self.cu.cuModuleLoadData(image.ctypes.data))
            fn = self._check(self.cu.cuModuleGetFunction(mod, ENTRY.encode()))
            attr = self.cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            self._check(self.cu.cuFuncSetAttribute(fn, attr, smem))
            self._funcs[source] = (mod, fn)
        return self._funcs[source][1]

    def upload(self, a: np.ndarray) -> int:
        a = np.ascontiguousarray(a)
        ptr = self._check(self.cu.cuMemAlloc(max(a.nbytes, 1)))
        self._bufs.append(ptr)
        if a.nbytes:
            self._check(self.cu.cuMemcpyHtoD(ptr, a.ctypes.data, a.nbytes))
        return int(ptr)

    def alloc(self, nbytes: int) -> int:
        ptr = self._check(self.cu.cuMemAlloc(max(nbytes, 1)))
        self._bufs.append(ptr)
        self._check(self.cu.cuMemsetD8(ptr, 0xFF, max(nbytes, 1)))  # NaN-ish garbage: every element must be written
        return int(ptr)

    def download(self, ptr: int, like: np.ndarray) -> np.ndarray:
        out = np.empty_like(like)
        self._check(self.cu.cuMemcpyDtoH(out.ctypes.data, ptr, out.nbytes))
        return out

    def launch(self, fn, grid, block, smem, args: PlusArgsC):
        params = (ctypes.c_void_p * 1)(ctypes.addressof(args))
        self._check(self.cu.cuLaunchKernel(fn, *grid, block, 1, 1, smem, self.cu.CUstream(0),
                                           ctypes.addressof(params), 0))
        self._check(self.cu.cuCtxSynchronize())

    def free_all(self):
        for p in self._bufs:
            self.cu.cuMemFree(p)
        self._bufs.clear()


@pytest.fixture(scope="module")
def gpu():
    g = _Gpu()
    if g.arch is None or g.arch not in nvrtc.ARCHS:
        pytest.skip(f"no supported GPU (local arch {g.arch})")
    yield g
    g.free_all()


def _to_device_bits(torch, t, dtype: str) -> np.ndarray:
    """numpy array holding the bits of `t` (fp32 torch tensor) in the kernel's element type."""
    if dtype == "float":
        return t.float().contiguous().numpy()
    if dtype == "half":
        return t.half().contiguous().numpy()
    return t.bfloat16().contiguous().view(torch.int16).numpy()


def _from_device_bits(torch, a: np.ndarray, dtype: str):
    if dtype == "float":
        return torch.from_numpy(a.copy()).float()
    if dtype == "half":
        return torch.from_numpy(a.copy()).float()
    return torch.from_numpy(a.copy()).view(torch.bfloat16).float()


def _rounded(torch, t, dtype: str):
    """What the kernel sees: t rounded to the element type, back in fp32."""
    return {"float": t.float(), "half": t.half().float(), "__nv_bfloat16": t.bfloat16().float()}[dtype]


def _reference(torch, q, k, v, causal: bool, mask=None, scale=1.0):
    """fp32 SDPA with bottom-right causal alignment (key j visible to query i iff j <= i + Skv - Sq),
    GQA by repeating kv heads, and 0 for rows with no visible key."""
    import torch.nn.functional as F
    B, H, Sq, D = q.shape
    Hkv, Skv = k.shape[1], k.shape[2]
    k = k.repeat_interleave(H // Hkv, dim=1)
    v = v.repeat_interleave(H // Hkv, dim=1)
    bias = torch.zeros(B, 1, Sq, Skv)
    if mask is not None:
        bias = bias + mask
    if causal:
        i = torch.arange(Sq)[:, None]
        j = torch.arange(Skv)[None, :]
        bias = bias.masked_fill(j > i + (Skv - Sq), float("-inf"))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)
    dead = torch.isinf(bias).all(dim=-1, keepdim=True)  # rows with every key masked
    return torch.where(dead, torch.zeros_like(out), out).nan_to_num(0.0)


SEQS = (1, 7, 128, 197, 577)
TOL = {"float": (1e-4, 1e-4), "half": (1e-2, 1e-2), "__nv_bfloat16": (1e-2, 1e-2)}
GPU_CASES = [(dt, d, causal) for dt in ("float", "half", "__nv_bfloat16") for d in (64, 80, 128) for causal in (0, 1)]


def _run_default_layout(gpu, torch, cfg, dtype, causal, strided, B, H, Hkv, Sq, Skv, seed):
    g = torch.Generator().manual_seed(seed)
    D = cfg.head_dim
    q = torch.randn(B, H, Sq, D, generator=g) * D ** -0.5
    k = torch.randn(B, Hkv, Skv, D, generator=g)
    v = torch.randn(B, Hkv, Skv, D, generator=g)
    qh, kh, vh = (_to_device_bits(torch, t, dtype) for t in (q, k, v))
    out_like = _to_device_bits(torch, torch.zeros(B, H, Sq, D), dtype)
    args = PlusArgsC()
    args.in_[0], args.in_[1], args.in_[2] = gpu.upload(qh), gpu.upload(kh), gpu.upload(vh)
    args.out[0] = gpu.alloc(out_like.nbytes)
    for n, x in enumerate((B, H, Hkv, Sq, Skv)):
        args.v[n] = x
    fn = gpu.function(ac.source(cfg, dtype, causal=causal, strided=strided), cfg.smem_bytes)
    gpu.launch(fn, cfg.grid(B, H, Sq), cfg.threads, cfg.smem_bytes, args)
    got = _from_device_bits(torch, gpu.download(args.out[0], out_like), dtype)
    want = _reference(torch, *(_rounded(torch, t, dtype) for t in (q, k, v)), causal=bool(causal))
    return got, want


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,head_dim,causal", GPU_CASES,
                         ids=[f"{dt.strip('_')}-d{d}-c{c}" for dt, d, c in GPU_CASES])
def test_attention_matches_sdpa(gpu, dtype, head_dim, causal):
    torch = pytest.importorskip("torch")
    math = 0 if dtype == "float" else 2
    menu = ac.configs_for(math, head_dim)
    rtol, atol = TOL[dtype]
    shapes = [(s, s) for s in SEQS] + [(1, 577), (7, 300), (200, 64)]  # decode, short prompt on a cache, Sq > Skv
    for n, (Sq, Skv) in enumerate(shapes):
        cfg = menu[n % len(menu)]                       # every config of the menu gets used
        strided = n % 2 if math == 2 else 0             # both load paths of the mma path
        B, H, Hkv = (2, 4, 2) if n % 3 else (1, 4, 1)    # GQA and MQA
        got, want = _run_default_layout(gpu, torch, cfg, dtype, causal, strided, B, H, Hkv, Sq, Skv, seed=n)
        assert torch.isfinite(got).all(), (cfg.name, Sq, Skv)
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol,
                                   msg=lambda m: f"{cfg.name} strided={strided} Sq={Sq} Skv={Skv} "
                                                 f"B,H,Hkv={B},{H},{Hkv}: {m}")


@pytest.mark.gpu
@pytest.mark.parametrize("math,dtype", [(2, "half"), (2, "__nv_bfloat16"), (0, "float")])
def test_attention_hooks_on_gpu(gpu, math, dtype):
    """[B, S, H, D] strided operands, Q hook (x0.5), scaled additive mask with fully masked rows, output hook."""
    torch = pytest.importorskip("torch")
    D, B, H, Hkv, Sq, Skv = 64, 2, 4, 2, 70, 133
    scale = 0.125
    cfg = ac.configs_for(math, D)[1]
    g = torch.Generator().manual_seed(7)
    q = torch.randn(B, Sq, H, D, generator=g)
    k = torch.randn(B, Skv, Hkv, D, generator=g)
    v = torch.randn(B, Skv, Hkv, D, generator=g)
    mask = torch.where(torch.rand(B, 1, Sq, Skv, generator=g) < 0.2, float("-inf"), 0.0)
    mask = mask + torch.randn(B, 1, Sq, Skv, generator=g) * 0.1
    mask[:, :, 3, :] = float("-inf")  # a row with nothing visible -> 0
    args = PlusArgsC()
    args.in_[0], args.in_[1], args.in_[2] = (gpu.upload(_to_device_bits(torch, t, dtype)) for t in (q, k, v))
    args.in_[3] = gpu.upload(mask.contiguous().numpy())
    out_like = _to_device_bits(torch, torch.zeros(B, Sq, H, D), dtype)
    args.out[0] = gpu.alloc(out_like.nbytes)
    for n, x in enumerate((B, H, Hkv, Sq, Skv)):
        args.v[n] = x
    args.v[5] = int(np.array([scale], np.float32).view(np.int32)[0])
    src = _source(cfg, dtype, causal=0, strided=0, hooks=HOOKS_BSHD, extra=HOOKS_BSHD_DEFINES)
    fn = gpu.function(src, cfg.smem_bytes)
    gpu.launch(fn, cfg.grid(B, H, Sq), cfg.threads, cfg.smem_bytes, args)
    got = _from_device_bits(torch, gpu.download(args.out[0], out_like), dtype).permute(0, 2, 1, 3)
    qr, kr, vr = (_rounded(torch, t, dtype).permute(0, 2, 1, 3) for t in (q, k, v))
    want = _reference(torch, qr * 0.5, kr, vr, causal=False, mask=mask, scale=scale)
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol)
    assert (got[:, :, 3, :] == 0).all()
