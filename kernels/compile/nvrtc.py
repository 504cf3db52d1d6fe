"""NVRTC compilation of generated kernel sources to SASS cubins, and what the cubins cost.

    from plus_ep.kernels.compile import nvrtc
    r = nvrtc.compile_cubin(source, "sm_90a", name="gemm_k1.cu")
    r.cubin                      # bytes, loadable with cuModuleLoadData
    r.resources["plus_gemm"]     # Resources(registers=..., spill_stores=0, ..., smem_static=...)
    nvrtc.check_resources(r, dynamic_smem=96 * 1024)   # [] when it fits

Only `cuda.bindings.nvrtc` is used to compile: nothing here touches the CUDA driver, so it runs on a
machine without a GPU. `local_arch()` is the one function that asks the driver, and it is guarded.

Resource use comes from the ptxas verbose log (`-Xptxas=-v`), one record per entry function, and is
cross-checked against the cubin itself (the cubin reader, cubin.py): registers from the `.nv.info` section
(EIATTR_REGCOUNT), static shared memory from the size of `.nv.shared.<entry>` (minus the 1 KB system
reservation that sm_90 cubins fold into it). Where the two disagree the larger value wins and a warning is
logged.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import pathlib
import re
import struct
import threading
import time
from dataclasses import dataclass

from ... import config
from .. import arch as arch_table
from . import cubin as cubin_reader

log = logging.getLogger("plus_ep.kernels")

ARCHS = arch_table.ARCHS                 # the one arch table: kernels/arch.py

TEMPLATES_DIR = pathlib.Path(__file__).resolve().parents[1] / "templates"
"""Folder of the shared CUDA headers (`plus_common.cuh`, `plus_abi.h`, ...): first on the include path."""
FAMILIES_DIR = pathlib.Path(__file__).resolve().parents[1] / "families"
"""Folder of the template families: the headers directly in each family's folder are on the include path too."""

HEADER_SUFFIXES = (".cuh", ".h", ".hpp", ".inc")


# ---------------------------------------------------------------------------------------------- arch


parse_arch = arch_table.parse


def smem_limit(arch) -> int:
    """Largest shared memory (static + dynamic) one block may use on `arch`, with the opt-in attribute."""
    return arch_table.get(arch).smem_per_block


# ------------------------------------------------------------------------------------ NVRTC plumbing


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as e:  # pragma: no cover - a dependency of the package
        raise ImportError("PlusEP compiles kernels with NVRTC through cuda-python: "
                          "pip install 'cuda-python>=13' 'nvidia-cuda-nvrtc>=13.0,<13.1'") from e
    return nvrtc


def _check(ret, what: str):
    """cuda.bindings returns (status, *values); raise on a bad status, return the values."""
    status, *values = ret if isinstance(ret, tuple) else (ret,)
    if int(status) != 0:
        nvrtc = _nvrtc()
        _, msg = nvrtc.nvrtcGetErrorString(status)
        raise RuntimeError(f"{what} failed: {msg.decode() if isinstance(msg, bytes) else msg}")
    return values[0] if len(values) == 1 else values


@functools.lru_cache(maxsize=None)
def nvrtc_version() -> tuple[int, int]:
    """(major, minor) of the NVRTC library that compiles."""
    major, minor = _check(_nvrtc().nvrtcVersion(), "nvrtcVersion")
    return int(major), int(minor)


@functools.lru_cache(maxsize=None)
def compiler_id() -> str:
    """NVRTC's version plus its wheel's full version (13.0.88): patch releases can change the SASS."""
    major, minor = nvrtc_version()
    try:
        from importlib.metadata import version
        wheel = version("nvidia-cuda-nvrtc")
    except Exception:
        wheel = "unknown"
    return f"nvrtc {major}.{minor} ({wheel})"


@functools.lru_cache(maxsize=None)
def cuda_include_dir() -> str:
    """The CUDA headers (cuda_fp16.h, math_constants.h, ...) from the nvidia-cuda-runtime wheel."""
    try:
        from cuda.pathfinder import find_nvidia_header_directory
        found = find_nvidia_header_directory("cudart")
    except Exception as e:  # pragma: no cover - depends on the installation
        raise RuntimeError("cannot locate the CUDA headers: pip install 'nvidia-cuda-runtime>=13.0,<13.1'") from e
    if not found:  # pragma: no cover
        raise RuntimeError("cannot locate the CUDA headers (cuda_fp16.h): "
                           "pip install 'nvidia-cuda-runtime>=13.0,<13.1'")
    return str(found)


def family_template_dirs() -> list[pathlib.Path]:
    """The family folders that hold CUDA headers (kernels/families/<family>/*.cuh), by name."""
    if not FAMILIES_DIR.is_dir():
        return []
    return sorted(d for d in FAMILIES_DIR.iterdir()
                  if d.is_dir() and any(f.suffix in HEADER_SUFFIXES for f in d.iterdir() if f.is_file()))


def template_files() -> dict:
    """{name a kernel #includes: path} of every PlusEP header: the shared templates folder and the headers
    directly in each family's folder. One flat namespace: a name defined twice is an error (which one an
    #include finds would depend on the include order)."""
    found: dict = {}
    roots = [(TEMPLATES_DIR, True)] + [(d, False) for d in family_template_dirs()]
    for root, recursive in roots:
        if not root.is_dir():
            continue
        for path in (root.rglob("*") if recursive else root.iterdir()):
            if not path.is_file() or path.suffix not in HEADER_SUFFIXES:
                continue
            name = path.relative_to(root).as_posix()
            if name in found:
                raise RuntimeError(f"CUDA header {name} is defined twice: {found[name]} and {path}")
            found[name] = path
    return found


def include_dirs() -> list[str]:
    """Include path of every compile: the templates folder, the family folders with headers, then the CUDA
    headers."""
    return [str(TEMPLATES_DIR)] + [str(d) for d in family_template_dirs()] + [cuda_include_dir()]


def _hash_files(h, files: dict) -> None:
    """Each header's name and content digest, in name order."""
    for name in sorted(files):
        h.update(name.encode() + b"\0")
        h.update(hashlib.sha256(pathlib.Path(files[name]).read_bytes()).digest())


def _hash_dir(h, root: pathlib.Path, suffixes=None) -> None:
    root = pathlib.Path(root)
    if not root.is_dir():
        h.update(b"<missing>" + str(root).encode())
        return
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if suffixes and path.suffix not in suffixes:
            continue
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())


@functools.lru_cache(maxsize=None)
def _cuda_headers_digest() -> str:
    h = hashlib.sha256()
    _hash_dir(h, pathlib.Path(cuda_include_dir()))
    return h.hexdigest()


def header_digest(extra_dirs=()) -> str:
    """sha256 over every header a kernel can include: PlusEP's templates (`template_files`, by name: where
    a header lives does not change the key; re-read on each call, they are small and edited during
    development), the CUDA headers (hashed once per process) and the headers in `extra_dirs` (an expert's
    own template folder passed with -I)."""
    h = hashlib.sha256()
    h.update(b"templates\0")
    _hash_files(h, template_files())
    h.update(b"cuda\0" + _cuda_headers_digest().encode())
    for d in extra_dirs:
        h.update(b"extra\0")
        _hash_dir(h, pathlib.Path(d), HEADER_SUFFIXES)
    return h.hexdigest()


def lineinfo_enabled() -> bool:
    """`-lineinfo` (source lines in Nsight Compute) is off by default: it embeds the PTX text in the
    cubin, which grows the rewritten model. Set PLUS_EP_LINEINFO=1 to turn it on."""
    return config.flag("PLUS_EP_LINEINFO")


def base_options(arch) -> list[str]:
    """NVRTC options of every compile (no fast-math: hooks must match ONNX numerics)."""
    opts = ["--std=c++17", f"--gpu-architecture={parse_arch(arch)}", "-default-device",
            "-Xptxas=-v", "-Xptxas=-warn-spills"]
    if lineinfo_enabled():
        opts.append("-lineinfo")
    opts += [f"-I{d}" for d in include_dirs()]
    return opts


# --------------------------------------------------------------------------------------- results


@dataclass
class Resources:
    """What one entry function costs per thread / per block (bytes, except registers)."""
    registers: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    smem_static: int = 0
    stack: int = 0


@dataclass
class CompileResult:
    cubin: bytes
    log: str
    resources: dict[str, Resources]
    seconds: float           # wall time of this call (NVRTC compile, or cache load on a hit)
    cached: bool = False
    arch: str = ""           # canonical arch the cubin is for
    key: str = ""            # cache key when it went through a KernelCache
    ptx: str = ""            # the PTX NVRTC assembled the cubin from (image packs carry it beside the cubin)

    def __repr__(self) -> str:  # keep the cubin bytes out of reprs and test failures
        return (f"CompileResult(arch={self.arch!r}, cubin=<{len(self.cubin)} bytes>, ptx=<{len(self.ptx)} chars>, "
                f"resources={self.resources!r}, seconds={self.seconds:.3f}, cached={self.cached})")


class CompileError(RuntimeError):
    """NVRTC rejected a source (or its options). `name` is the file name, `log` the full NVRTC log."""

    def __init__(self, name: str, log: str, message: str | None = None):
        self.name = name
        self.log = log
        super().__init__(message or f"{name}: {_first_errors(log) or 'compilation failed'}")


def _first_errors(text: str, limit: int = 6) -> str:
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    idx = [i for i, ln in enumerate(lines) if re.search(r"\berror\b", ln)]
    if not idx:
        return "\n".join(lines[:limit])
    out = []
    for i in idx:  # each error line with its source line and caret
        out.extend(lines[i:i + 3] if not lines[i].startswith("At end") else lines[i:i + 1])
        if len(out) >= limit:
            break
    return "\n".join(out[:limit])


# ------------------------------------------------------------------------------ ptxas log parsing

_RE_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
_RE_PROPS = re.compile(r"Function properties for (\S+)")
_RE_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_RE_USED = re.compile(r"Used (\d+) registers")
_RE_SMEM = re.compile(r"(\d+) bytes smem")
_RE_SPILL_WARN = re.compile(r"spilled to local memory in function '([^']+)', (\d+) bytes spill stores, "
                            r"(\d+) bytes spill loads")


def parse_ptxas_log(text: str) -> dict[str, Resources]:
    """Per entry function resources from a `-Xptxas=-v` log. Records of non-entry functions
    (`Function properties for <device fn>`) are skipped; their cost shows up in the entry's record."""
    out: dict[str, Resources] = {}
    entry = None       # entry function whose record we are in
    props = None       # function named by the last "Function properties for"
    for line in text.splitlines():
        m = _RE_ENTRY.search(line)
        if m:
            entry = m.group(1)
            out.setdefault(entry, Resources())
            props = None
            continue
        m = _RE_PROPS.search(line)
        if m:
            props = m.group(1)
            continue
        m = _RE_FRAME.search(line)
        if m:
            if entry is not None and props == entry:
                r = out[entry]
                r.stack, r.spill_stores, r.spill_loads = (int(g) for g in m.groups())
            continue
        m = _RE_USED.search(line)
        if m and entry is not None:
            r = out[entry]
            r.registers = int(m.group(1))
            s = _RE_SMEM.search(line)
            r.smem_static = int(s.group(1)) if s else 0
            continue
    for m in _RE_SPILL_WARN.finditer(text):  # the -warn-spills line, in case the record lacked it
        r = out.get(m.group(1))
        if r is not None:
            r.spill_stores = max(r.spill_stores, int(m.group(2)))
            r.spill_loads = max(r.spill_loads, int(m.group(3)))
    return out



def _merge(name: str, from_log: dict[str, Resources], cubin: bytes) -> dict[str, Resources]:
    try:
        elf = cubin_reader.read_cubin(cubin)
    except (ValueError, IndexError, struct.error) as e:
        log.warning("%s: cannot read the cubin's ELF sections (%s); using the ptxas log only", name, e)
        return from_log
    res = dict(from_log)
    for fn, info in elf.items():
        r = res.get(fn)
        if r is None:  # no ptxas record (log cut or format changed): the cubin is all we have
            res[fn] = Resources(registers=info.registers or 0, smem_static=info.smem_static,
                                stack=max(info.frame, info.min_stack))
            continue
        if info.registers is not None and info.registers != r.registers:
            log.warning("%s: %s uses %d registers by the ptxas log but %d by the cubin; taking the larger",
                        name, fn, r.registers, info.registers)
            r.registers = max(r.registers, info.registers)
        if info.smem_static != r.smem_static:
            log.warning("%s: %s uses %d bytes of static shared memory by the ptxas log but %d by the cubin; "
                        "taking the larger", name, fn, r.smem_static, info.smem_static)
            r.smem_static = max(r.smem_static, info.smem_static)
        r.stack = max(r.stack, info.frame)
    return res


# ---------------------------------------------------------------------------------------- compile


def _to_bytes(x) -> bytes:
    return x if isinstance(x, bytes) else str(x).encode()


def compile_cubin(source: str | bytes, arch, name: str = "plus_kernel.cu", options=()) -> CompileResult:
    """Compile one source to a SASS cubin for `arch` with NVRTC (no driver needed; the GIL is released
    while NVRTC works, so threads compile in parallel). Raises CompileError with NVRTC's log."""
    arch = parse_arch(arch)
    nvrtc = _nvrtc()
    opts = [_to_bytes(o) for o in base_options(arch) + list(options)]
    t0 = time.perf_counter()
    prog = _check(nvrtc.nvrtcCreateProgram(_to_bytes(source), _to_bytes(name), 0, [], []), "nvrtcCreateProgram")
    try:
        status, = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        size = _check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
        buf = b" " * size
        _check(nvrtc.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
        # NVRTC joins the front end's and ptxas' logs with NULs; keep them as line breaks.
        text = "\n".join(p.strip("\n") for p in buf.decode("utf-8", "replace").split("\0") if p.strip())
        if int(status) != 0:
            _, what = nvrtc.nvrtcGetErrorString(status)
            what = what.decode() if isinstance(what, bytes) else str(what)
            if int(status) == int(nvrtc.nvrtcResult.NVRTC_ERROR_INVALID_OPTION):
                raise CompileError(name, text, f"{name}: {what}: NVRTC rejected one of the options "
                                               f"{[o.decode() for o in opts if not o.startswith(b'-I')]}"
                                               + (f"\n{_first_errors(text)}" if text else ""))
            raise CompileError(name, text, f"{name}: {what}\n{_first_errors(text)}" if text else None)
        size = _check(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
        cubin = b" " * size
        _check(nvrtc.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
        size = _check(nvrtc.nvrtcGetPTXSize(prog), "nvrtcGetPTXSize")   # a real-arch compile keeps its PTX
        ptx = b" " * size
        _check(nvrtc.nvrtcGetPTX(prog, ptx), "nvrtcGetPTX")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    seconds = time.perf_counter() - t0
    resources = _merge(name, parse_ptxas_log(text), cubin)
    return CompileResult(cubin=bytes(cubin), log=text, resources=resources, seconds=seconds, arch=arch,
                         ptx=ptx.rstrip(b"\0").decode())


# ---------------------------------------------------------------------------------- resource check


def check_resources(result: CompileResult, dynamic_smem: int | dict[str, int] = 0, arch=None) -> list[str]:
    """Problems with a compiled kernel, as sentences: register spills, and static + dynamic shared
    memory over the per-block limit of the arch. `dynamic_smem` is the launch's dynamic shared memory
    for every entry, or a dict entry -> bytes. Empty when the kernel is fine."""
    arch = arch or result.arch
    if not arch:
        m = _RE_ENTRY.search(result.log)
        arch = m.group(2) if m else None
    problems = []
    for fn, r in sorted(result.resources.items()):
        if r.spill_stores or r.spill_loads:
            problems.append(f"{fn}: registers spill to local memory ({r.spill_stores} bytes stores, "
                            f"{r.spill_loads} bytes loads, {r.registers} registers)")
        dyn = dynamic_smem.get(fn, 0) if isinstance(dynamic_smem, dict) else int(dynamic_smem or 0)
        if arch:
            limit = smem_limit(arch)
            total = r.smem_static + dyn
            if total > limit:
                problems.append(f"{fn}: {total} bytes of shared memory ({r.smem_static} static + {dyn} dynamic) "
                                f"exceed the {limit} bytes a block may use on {parse_arch(arch)}")
    if isinstance(dynamic_smem, dict):
        for fn in sorted(set(dynamic_smem) - set(result.resources)):
            problems.append(f"{fn}: dynamic shared memory given for an entry function the cubin does not have "
                            f"(entries: {', '.join(sorted(result.resources)) or 'none'})")
    return problems


# ------------------------------------------------------------------------------------- local GPU

_local_lock = threading.Lock()
_local_cache: dict[int, str | None] = {}


def local_arch(device: int = 0) -> str | None:
    """Arch of the local GPU `device` ("sm_90a" for compute capability 9.0, the best target there;
    "sm_86" for 8.6; "sm_100" for an arch PlusEP does not build for), or None when there is no CUDA
    driver or no device. Asks the driver once per process; never raises."""
    with _local_lock:
        if device not in _local_cache:
            _local_cache[device] = _probe_arch(device)
        return _local_cache[device]


def _probe_arch(device: int) -> str | None:
    try:
        import ctypes
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    try:
        from cuda.bindings import driver as cu
        if int(cu.cuInit(0)[0]) != 0:
            return None
        status, count = cu.cuDeviceGetCount()
        if int(status) != 0 or device >= count:
            return None
        status, dev = cu.cuDeviceGet(device)
        if int(status) != 0:
            return None
        a = cu.CUdevice_attribute
        s1, major = cu.cuDeviceGetAttribute(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
        s2, minor = cu.cuDeviceGetAttribute(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
        if int(s1) != 0 or int(s2) != 0:
            return None
    except Exception as e:  # driver present but unusable (no device node, version mismatch, ...)
        log.debug("local_arch: no usable CUDA device (%s)", e)
        return None
    return arch_table.for_device(int(major), int(minor))
