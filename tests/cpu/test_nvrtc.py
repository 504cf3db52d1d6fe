"""NVRTC compilation on CPU: cubins for every arch, resources from the ptxas log and the cubin, checks."""

import logging
import time

import pytest

pytest.importorskip("cuda.bindings.nvrtc")

from plus_ep.kernels.compile import cubin as cubin_reader  # noqa: E402
from plus_ep.kernels.compile import nvrtc  # noqa: E402
from plus_ep.kernels.compile.nvrtc import CompileError, CompileResult, Resources  # noqa: E402

TINY = r'''
#include "plus_common.cuh"
extern "C" __global__ void __launch_bounds__(256) plus_tiny(const PlusArgs args) {
  __shared__ float red[33];
  const long long n = args.v[0];
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  float x = i < n ? plus_f(plus_load<__half>(args.in[0], i)) : 0.0f;
  float s = plus_block_sum(x, red);
  if (i < n) plus_store<float>(args.out[0], i, x / s);
}
extern "C" __global__ void plus_fill(const PlusArgs args) {
  plus_store<float>(args.out[0], threadIdx.x, 1.0f);
}
'''

# 64 accumulators live across a loop, squeezed into 32 registers by __launch_bounds__(1024, 2).
SPILL = r'''
extern "C" __global__ void __launch_bounds__(1024, 2) spills(const float* __restrict__ in, float* out, int n) {
  float acc[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = in[threadIdx.x + i * 1024];
  for (int k = 0; k < n; ++k) {
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = acc[i] * acc[(i + 1) & 63] + in[k + i];
  }
#pragma unroll
  for (int i = 0; i < 64; ++i) out[threadIdx.x + i * 1024] = acc[i];
}
'''

# 40 KB of static shared memory: fine alone, over the sm_86 limit with 64 KB of dynamic on top.
BIG_SMEM = r'''
extern "C" __global__ void big_smem(float* out) {
  __shared__ float tile[10240];
  extern __shared__ float dyn[];
  tile[threadIdx.x] = out[threadIdx.x];
  dyn[threadIdx.x] = 2.0f;
  __syncthreads();
  out[threadIdx.x] = tile[threadIdx.x ^ 1] + dyn[threadIdx.x ^ 2];
}
'''


@pytest.mark.parametrize("text,arch", [
    ("sm_90", "sm_90"), ("90", "sm_90"), ("sm_90a", "sm_90a"), ("90a", "sm_90a"), ("9.0", "sm_90"),
    ("8.6", "sm_86"), (80, "sm_80"), ("SM_89", "sm_89"), ("compute_80", "sm_80"), (" sm_80 ", "sm_80"),
])
def test_parse_arch(text, arch):
    assert nvrtc.parse_arch(text) == arch


@pytest.mark.parametrize("text", ["sm_75", "sm_100", "7.5", "hopper", "", "sm_9", "sm_90b"])
def test_parse_arch_rejects(text):
    with pytest.raises(ValueError, match="sm_80, sm_86"):
        nvrtc.parse_arch(text)


def test_versions_and_paths():
    assert nvrtc.nvrtc_version() >= (12, 0)
    dirs = nvrtc.include_dirs()
    assert dirs[0] == str(nvrtc.TEMPLATES_DIR) and (nvrtc.TEMPLATES_DIR / "plus_common.cuh").is_file()
    assert any(p.name == "cuda_fp16.h" for p in __import__("pathlib").Path(dirs[-1]).iterdir())
    assert str(nvrtc.FAMILIES_DIR / "gemm") in dirs and str(nvrtc.FAMILIES_DIR / "flash_attention") in dirs
    d = nvrtc.header_digest()
    assert len(d) == 64 and d == nvrtc.header_digest()
    opts = nvrtc.base_options("90a")
    assert "--gpu-architecture=sm_90a" in opts and "-Xptxas=-v" in opts
    assert not any("fast" in o for o in opts)


def test_smem_limits():
    assert nvrtc.smem_limit("sm_80") == 166912
    assert nvrtc.smem_limit("sm_86") == nvrtc.smem_limit("8.9") == 101376
    assert nvrtc.smem_limit("sm_90") == nvrtc.smem_limit("sm_90a") == 232448


@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_90a"])
def test_compile_tiny_kernel(arch, caplog):
    caplog.set_level(logging.WARNING, logger="plus_ep.kernels")
    r = nvrtc.compile_cubin(TINY, arch, name="tiny.cu")
    assert isinstance(r, CompileResult) and not r.cached and r.arch == arch
    assert r.cubin[:4] == b"\x7fELF" and r.seconds > 0
    assert set(r.resources) == {"plus_tiny", "plus_fill"}
    tiny = r.resources["plus_tiny"]
    assert tiny.registers > 0 and tiny.spill_stores == 0 and tiny.spill_loads == 0
    assert tiny.smem_static == 33 * 4
    assert r.resources["plus_fill"].smem_static == 0
    assert nvrtc.check_resources(r) == []
    # The cubin's own ELF sections agree with the ptxas log (no cross-check warning was logged).
    elf = cubin_reader.read_cubin(r.cubin)
    assert elf["plus_tiny"].registers == tiny.registers and elf["plus_tiny"].smem_static == 132
    assert not [rec for rec in caplog.records if rec.levelno >= logging.WARNING]


def test_spills_are_reported():
    r = nvrtc.compile_cubin(SPILL, "sm_80", name="spills.cu")
    res = r.resources["spills"]
    assert res.registers <= 32 and res.spill_stores > 0 and res.spill_loads > 0 and res.stack > 0
    problems = nvrtc.check_resources(r)
    assert len(problems) == 1 and "spills" in problems[0] and "spill" in problems[0]


def test_shared_memory_over_limit():
    r86 = nvrtc.compile_cubin(BIG_SMEM, "sm_86", name="big.cu")
    assert r86.resources["big_smem"].smem_static == 40960
    assert nvrtc.check_resources(r86) == []
    problems = nvrtc.check_resources(r86, dynamic_smem=64 * 1024)
    assert len(problems) == 1 and "106496 bytes" in problems[0] and "sm_86" in problems[0]
    assert nvrtc.check_resources(r86, dynamic_smem={"big_smem": 64 * 1024}) == problems
    assert nvrtc.check_resources(r86, dynamic_smem={"big_smem": 1024}) == []
    assert "does not have" in nvrtc.check_resources(r86, dynamic_smem={"nope": 1})[0]
    # sm_90 cubins fold 1 KB of reserved shared memory into .nv.shared.<entry>: not counted.
    r90 = nvrtc.compile_cubin(BIG_SMEM, "sm_90", name="big.cu")
    assert r90.resources["big_smem"].smem_static == 40960
    assert nvrtc.check_resources(r90, dynamic_smem=64 * 1024) == []


def test_syntax_error_raises_compile_error():
    src = 'extern "C" __global__ void broken(float* o) { o[0] = 1.0f }\n'
    with pytest.raises(CompileError) as info:
        nvrtc.compile_cubin(src, "sm_80", name="broken.cu")
    e = info.value
    assert e.name == "broken.cu"
    assert "broken.cu(1): error" in e.log and 'expected a ";"' in e.log
    assert str(e).startswith("broken.cu") and "error" in str(e)


def test_bad_option_raises_compile_error():
    with pytest.raises(CompileError, match="-O3"):
        nvrtc.compile_cubin('extern "C" __global__ void k() {}', "sm_80", name="opt.cu", options=["-O3"])


def test_parse_ptxas_log_skips_device_functions():
    text = """\
ptxas info    : 0 bytes gmem
ptxas info    : Function properties for helper
ptxas         .     48 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads
ptxas info    : Compiling entry function '_Z4gemmv' for 'sm_90a'
ptxas info    : Function properties for _Z4gemmv
ptxas         .     16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 16 bytes cumulative stack size, 2048 bytes smem
ptxas info    : Compiling entry function 'other' for 'sm_90a'
ptxas info    : Function properties for other
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, 360 bytes cmem[0]
"""
    res = nvrtc.parse_ptxas_log(text)
    assert res == {"_Z4gemmv": Resources(registers=168, spill_stores=0, spill_loads=0, smem_static=2048, stack=16),
                   "other": Resources(registers=12)}


def test_read_cubin_rejects_garbage():
    with pytest.raises(ValueError):
        cubin_reader.read_cubin(b"not an elf")
    r = nvrtc.compile_cubin(TINY, "sm_80")
    with pytest.raises(ValueError):
        cubin_reader.read_cubin(r.cubin[:200])


def test_local_arch_without_driver_is_quick():
    t0 = time.perf_counter()
    a = nvrtc.local_arch()
    assert a is None or a.startswith("sm_")
    assert nvrtc.local_arch() == a  # a second call neither hangs nor changes its mind
    assert time.perf_counter() - t0 < 30


def test_static_shared_memory_over_48k_is_a_compile_error():
    src = ('extern "C" __global__ void k(float* o) { __shared__ float t[20000]; t[threadIdx.x] = 1.0f; '
           '__syncthreads(); o[threadIdx.x] = t[threadIdx.x ^ 1]; }')
    with pytest.raises(CompileError, match="too much shared data") as info:
        nvrtc.compile_cubin(src, "sm_80", name="toobig.cu")
    assert "\0" not in info.value.log


def test_template_headers_are_one_namespace(tmp_path, monkeypatch):
    """The shared headers and the family folders' headers are keyed by name and content: moving a header
    between them keeps every kernel cache key, editing one changes it, and a name defined twice is refused."""
    import shutil
    shared, families = tmp_path / "templates", tmp_path / "families"
    shutil.copytree(nvrtc.TEMPLATES_DIR, shared)
    (families / "mine").mkdir(parents=True)
    (families / "mine" / "mine.cuh").write_text("// v1\n")
    (families / "mine" / "render.py").write_text("# not a header\n")
    monkeypatch.setattr(nvrtc, "TEMPLATES_DIR", shared)
    monkeypatch.setattr(nvrtc, "FAMILIES_DIR", families)
    assert set(nvrtc.template_files()) == {p.name for p in shared.iterdir()} | {"mine.cuh"}
    assert str(families / "mine") in nvrtc.include_dirs()
    k = nvrtc.header_digest()
    shutil.move(families / "mine" / "mine.cuh", shared / "mine.cuh")       # the same header, another folder
    assert nvrtc.header_digest() == k
    (shared / "mine.cuh").write_text("// v2\n")
    assert nvrtc.header_digest() != k
    (families / "mine" / "mine.cuh").write_text("// v2\n")
    with pytest.raises(RuntimeError, match="mine.cuh is defined twice"):
        nvrtc.header_digest()
