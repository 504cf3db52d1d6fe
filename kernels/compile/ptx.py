"""NVRTC's PTX of a generated source (the text the cubin is assembled from), cached on disk.

    from plus_ep.kernels.compile.ptx import compile_ptx
    text = compile_ptx(source, "sm_90a", name="gemm_k1.cu")

Same options as `nvrtc.compile_cubin` (`nvrtc.base_options`), so the PTX is exactly what ptxas
assembled for the shipped cubin. Entries live in the kernel cache folder (`<kernel cache>/ptx/<key>.ptx`,
key = the kernel cache's key of (source, arch, options) plus a "ptx" tag) and are written atomically.
"""
from __future__ import annotations

import hashlib
import pathlib

from . import nvrtc
from .cache import KernelCache, cache_key
from .files import write_atomic


def _root(cache_dir=None) -> pathlib.Path:
    if cache_dir is not None:
        return pathlib.Path(cache_dir).expanduser()
    return KernelCache().root / "ptx"


def ptx_options(arch: str, virtual: bool = True) -> list[str]:
    """`nvrtc.base_options(arch)`, with the virtual target (compute_XX) when `virtual`: NVRTC then stops
    after NVVM (no ptxas), which halves the time, and the PTX text is byte-identical to the sm_XX
    compile's (tests/cpu/test_compile_ptx.py checks that)."""
    opts = nvrtc.base_options(arch)
    if not virtual:
        return opts
    out = []
    for o in opts:
        if o.startswith("--gpu-architecture=sm_"):
            out.append("--gpu-architecture=compute_" + o.split("sm_", 1)[1])
        elif not o.startswith("-Xptxas"):
            out.append(o)
    return out


def _compile(source: str, arch: str, name: str, options=(), virtual: bool = True) -> str:
    lib = nvrtc._nvrtc()
    opts = [o.encode() for o in ptx_options(arch, virtual) + [str(o) for o in options]]
    prog = nvrtc._check(lib.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []), "nvrtcCreateProgram")
    try:
        status, = lib.nvrtcCompileProgram(prog, len(opts), opts)
        if int(status) != 0:
            size = nvrtc._check(lib.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
            buf = b" " * size
            nvrtc._check(lib.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
            text = buf.decode("utf-8", "replace").replace("\0", "\n")
            raise nvrtc.CompileError(name, text)
        size = nvrtc._check(lib.nvrtcGetPTXSize(prog), "nvrtcGetPTXSize")
        buf = b" " * size
        nvrtc._check(lib.nvrtcGetPTX(prog, buf), "nvrtcGetPTX")
    finally:
        lib.nvrtcDestroyProgram(prog)
    return buf.rstrip(b"\0 ").decode()


def compile_ptx(source: str, arch, name: str = "plus_kernel.cu", options=(), cache_dir=None,
                use_cache: bool = True, virtual: bool = True) -> str:
    """PTX text NVRTC emits for `source` on `arch` (cached by content unless use_cache=False)."""
    arch = nvrtc.parse_arch(arch)
    if not use_cache:
        return _compile(source, arch, name, options, virtual)
    key = hashlib.sha256((f"ptx virtual={virtual}\n" + cache_key(source, arch, options)).encode()).hexdigest()
    path = _root(cache_dir) / key[:2] / f"{key}.ptx"
    try:
        return path.read_text()
    except OSError:
        pass
    text = _compile(source, arch, name, options, virtual)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text.encode())
    except OSError:
        pass  # read-only cache folder: compile every time
    return text
