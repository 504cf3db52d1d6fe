"""The emulated CUDA driver's Python side: kernels launched by the real C launcher run on the PTX
interpreter (plus_ep.kernels.ptx) on the CPU.

    from plus_ep.verification.emulator import Emulator
    emu = Emulator.get()                # loads plus_ep/_emucuda*.so and attaches the interpreter
    emu.register_model(model)           # cubin digest -> PTX, from every Fused node's image packs
    emu.set_arch("sm_90a")              # the device's compute capability (9.0: the launcher takes sm_90a)
    env = emu.environment()             # {"PLUS_EP_CUDA_LIBRARY": <emulated driver>} for the launcher
    # ... ORT sessions with the launcher registered now launch through the interpreter;
    emu.records                         # one LaunchRecord per launch (entry, grid, counters, findings)

The launcher reads PLUS_EP_CUDA_LIBRARY once per process, when ORT first registers it: set the
environment before that (`use_in_this_process()` says whether it is still possible).

How images become PTX: the launcher picks a pack by the emulated device's arch and hands the
driver a cubin (as on a GPU). A cubin holds SASS only, so the emulator looks its sha256 up in a
registry filled from the packs (each cubin sits beside the PTX it was assembled from, CONTRACT §4).
A PTX image (the launcher's forward-compatibility path) is parsed as is.

Errors: an interpreter error (PtxError: an unimplemented form, an out-of-bounds access, a collective
missing lanes) fails the launch with CUDA_ERROR_LAUNCH_FAILED and the interpreter's message, which the
launcher reports as an ORT error naming the node. Checker findings do the same unless
`fail_on_findings` is False (then they are only recorded, for `plus-ep verify` to report per node).
A parameter word that points into host memory outside every device allocation (a host pointer handed
to a kernel) fails cuLaunchKernel itself with CUDA_ERROR_ILLEGAL_ADDRESS, whatever `fail_on_findings`
says, and is recorded as a finding. Launches on a stream run when the stream is waited for (the driver's
stream order, native/emucuda.c); their failures report at that wait, with the node in the message.
"""
from __future__ import annotations

import atexit
import ctypes
import hashlib
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..kernels import arch as arch_table
from ..kernels.compile import cubin as cubin_reader
from ..kernels.compile import nvrtc
from ..kernels.wire.pack import parse as parse_pack
from ..kernels.ptx import GlobalMemory, Module, PtxError

__all__ = ["Emulator", "LaunchRecord", "TieError", "driver_path", "launcher_loaded", "library_path"]

log = logging.getLogger("plus_ep")
_HERE = Path(__file__).resolve().parents[1]   # plus_ep/, where the native libraries are built
CUDA_ERROR_INVALID_IMAGE, CUDA_ERROR_INVALID_PTX = 200, 218
CUDA_ERROR_NOT_FOUND, CUDA_ERROR_ILLEGAL_ADDRESS, CUDA_ERROR_LAUNCH_FAILED = 500, 700, 719

_LOAD = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                         ctypes.POINTER(ctypes.c_longlong))
_GETFN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_longlong, ctypes.c_char_p, ctypes.POINTER(ctypes.c_longlong))
_PACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_longlong, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p,
                         ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t))
_LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_longlong, ctypes.POINTER(ctypes.c_uint), ctypes.c_uint,
                           ctypes.c_void_p, ctypes.c_size_t)
_UNLOAD = ctypes.CFUNCTYPE(None, ctypes.c_longlong)
_U64P, _U32P = ctypes.POINTER(ctypes.c_ulonglong), ctypes.POINTER(ctypes.c_uint)
_TMAP = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.c_ulonglong, _U64P, _U64P,
                         _U32P, _U32P, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int)
CUDA_ERROR_INVALID_VALUE = 1


def driver_path() -> str:
    """The emulated driver this process's launcher loads: the library PLUS_EP_CUDA_LIBRARY names when its
    file name says it is one (``*emucuda*.so``, e.g. a sanitizer build of plus_ep/native/emucuda.c), else
    `library_path()`. The interpreter must attach to that same library object."""
    from .. import config
    named = config.get("PLUS_EP_CUDA_LIBRARY") or ""
    return named if "emucuda" in os.path.basename(named) and os.path.isfile(named) else library_path()


def library_path() -> str:
    """Absolute path of the emulated driver (``plus_ep/_emucuda*.so``)."""
    found = sorted(_HERE.glob("_emucuda*.so"))
    if not found:
        raise FileNotFoundError(f"the emulated CUDA driver (plus_ep/_emucuda*.so) is not built in {_HERE}; "
                                "build it with `pip install -e .` (needs a C compiler)")
    return str(found[0])


def device_attributes(arch: str) -> tuple[int, int, int, int]:
    """(major, minor, SMs, opt-in shared memory per block) the emulated driver reports for `arch`:
    kernels/arch.py's row (for an arch newer than the table, its compute capability and the newest row's
    figures)."""
    digits = str(arch)[3:].rstrip("a")
    row = arch_table.TABLE.get(str(arch)) or arch_table.TABLE[arch_table.ARCHS[-1]]
    return int(digits[:-1]), int(digits[-1]), row.sms, row.smem_per_block


def launcher_loaded() -> bool:
    """Whether this process has already loaded the launcher (then its driver choice is fixed)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return True   # cannot tell: assume the worst
    from ..library import get_library_path
    try:
        return os.path.realpath(get_library_path()) in maps
    except FileNotFoundError:
        return False


class TieError(ValueError):
    """Packs whose PTX is not the source of their cubins, or two different PTX texts for one cubin: the
    interpreter would execute another kernel than a GPU. `problems`: one sentence per image, naming the node."""

    def __init__(self, problems: list):
        self.problems = list(problems)
        more = f" (and {len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
        super().__init__(f"{self.problems[0]}{more}")


@dataclass
class ImageInfo:
    ptx: str
    node: str       # first node whose pack holds this cubin
    arch: str
    image: int      # index in the pack
    nodes: list = field(default_factory=list)   # every node holding it


@dataclass
class LaunchRecord:
    module: int                 # emulator module handle (one per cuModuleLoadData)
    node: str                   # node the loaded image came from ("" for a bare PTX image)
    arch: str                   # pack arch of the image ("ptx" for a PTX image)
    entry: str
    grid: tuple
    block: tuple
    smem: int
    seconds: float
    counters: dict = field(default_factory=dict)
    findings: list = field(default_factory=list)
    error: str | None = None


class _LoadedModule:
    def __init__(self, module: Module, info: ImageInfo | None, is_ptx: bool, registers: dict | None = None):
        self.module, self.info, self.is_ptx = module, info, is_ptx
        self.registers = registers or {}      # entry -> registers per thread (the cubin's EIATTR_REGCOUNT)


class Emulator:
    """One per process (the driver library is process-wide): use Emulator.get()."""

    _instance = None
    _instance_lock = threading.Lock()

    @classmethod
    def get(cls) -> Emulator:
        with cls._instance_lock:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

    def __init__(self):
        self.path = driver_path()
        self.lib = ctypes.CDLL(self.path)
        self.lib.plus_emucuda_set_error.argtypes = [ctypes.c_int, ctypes.c_char_p]
        self.lib.plus_emucuda_lookup.argtypes = [ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t),
                                                 ctypes.POINTER(ctypes.c_size_t)]
        self.lib.plus_emucuda_live_allocations.restype = ctypes.c_long
        self.lib.plus_emucuda_live_functions.restype = ctypes.c_long
        self.lib.plus_emucuda_pending.restype = ctypes.c_long
        self.lib.plus_emucuda_host_mapped.argtypes = [ctypes.c_size_t]
        self._lock = threading.RLock()
        self.registry: dict[str, ImageInfo] = {}      # sha256(cubin) -> PTX and where it came from
        self._parsed: dict[str, Module] = {}          # sha256(ptx) -> parsed module
        self._modules: dict[int, _LoadedModule] = {}
        self._functions: dict[int, tuple] = {}        # handle -> (module handle, Kernel)
        self._next = 1
        self.records: list[LaunchRecord] = []
        self.load_order: list[tuple[int, str]] = []   # (module handle, cubin digest or "ptx:<digest>")
        self.checks = True
        self.approx = "exact"
        self.sample_ctas: int | None = None
        self.fail_on_findings = True
        self.progress = None                          # callable(record) after each launch
        self.set_arch("sm_90a")
        self._cbs = (_LOAD(self._cb_load), _GETFN(self._cb_getfn), _PACK(self._cb_pack), _LAUNCH(self._cb_launch),
                     _UNLOAD(self._cb_unload))
        self.lib.plus_emucuda_attach(*self._cbs)
        self._tmap_cb = _TMAP(self._cb_tmap)
        self.lib.plus_emucuda_attach_tmap(self._tmap_cb)
        # Detach before the interpreter tears itself down: sessions still alive then are destroyed during
        # finalization (module teardown, the last garbage collection), when this object and its callbacks
        # may already be gone. atexit keeps the callbacks alive until the detach, which waits for any
        # callback in flight on another thread.
        atexit.register(_detach, self.lib, (*self._cbs, self._tmap_cb))

    # ------------------------------------------------------------------------------ setup
    def environment(self) -> dict:
        return {"PLUS_EP_CUDA_LIBRARY": self.path}

    def use_in_this_process(self) -> bool:
        """Point this process's launcher at the emulated driver; False when the launcher was already
        loaded with another driver (then run in a child process)."""
        from .. import config  # the owner of every PLUS_EP_* variable
        if config.get("PLUS_EP_CUDA_LIBRARY") == self.path:
            return True
        if launcher_loaded():
            return False
        os.environ["PLUS_EP_CUDA_LIBRARY"] = self.path
        return True

    def set_arch(self, arch: str) -> None:
        """The emulated device: compute capability of `arch` (sm_90 and sm_90a are both 9.0, where the
        launcher prefers an sm_90a pack), SM count and opt-in shared memory per block of its reference
        part (kernels/arch.py). An arch newer than the table (sm_100, ...) gets the newest row's figures."""
        arch = nvrtc.parse_arch(arch) if not str(arch).startswith("sm_1") else str(arch)
        self.lib.plus_emucuda_set_device(*device_attributes(arch))
        self.arch = arch

    def register_pack(self, blob: bytes, node: str, arch: str, check: bool = False, ties: bool = True) -> int:
        """Add every (cubin, PTX) of one pack; returns how many carried PTX. With check, raise TieError
        when another node's pack carries a different PTX text for the same cubin (only one copy would ever
        execute) or, with ties, when a PTX is not tied to its cubin (kernels/wire/pack.py tie: verify's
        cubin check, plus_ep/verification/cubin_check.py, makes that moot when it runs)."""
        from ..kernels.wire.pack import tie_problem, untied
        n, problems = 0, []
        for i, im in enumerate(parse_pack(blob)):
            if im.ptx is None:
                continue
            where = f"node {node}: pack {arch} image {i}"
            why = tie_problem(im) if check and ties else None
            if why:
                problems.append(f"{where}: {why}")
            digest = hashlib.sha256(im.cubin).hexdigest()
            with self._lock:
                info = self.registry.get(digest)
                if info is None:
                    self.registry[digest] = ImageInfo(im.ptx, node, arch, i, [node])
                else:
                    if check and untied(info.ptx) != untied(im.ptx):
                        problems.append(f"{where}: its cubin is also in node {info.node} (pack {info.arch} image "
                                        f"{info.image}) with a different PTX text: one cubin, two kernels")
                    if node not in info.nodes:
                        info.nodes.append(node)
            n += 1
        if problems:
            raise TieError(problems)
        return n

    def register_model(self, model, archs=None, ties: bool = True) -> int:
        """Register the packs of every ai.plus_ep node of an onnx ModelProto; returns the image count.
        With archs (a list), only those packs, each checked (register_pack's check): TieError lists
        every problem, naming the node."""
        from onnx import numpy_helper
        n, problems = 0, []
        for node in model.graph.node:
            if node.domain != "ai.plus_ep":
                continue
            for a in node.attribute:
                arch = a.name[len("plus_images_"):]
                if a.name.startswith("plus_images_") and (archs is None or arch in archs):
                    blob = numpy_helper.to_array(a.t).tobytes()
                    try:
                        n += self.register_pack(blob, node.name, arch, check=archs is not None, ties=ties)
                    except TieError as e:
                        problems += e.problems
        if problems:
            raise TieError(problems)
        return n

    def reset_records(self) -> None:
        with self._lock:
            self.records = []
            self.load_order = []

    def live_allocations(self) -> int:
        return int(self.lib.plus_emucuda_live_allocations())

    def live_functions(self) -> int:
        """Function handles (cuModuleGetFunction) of modules not unloaded yet: 0 once every session is gone."""
        return int(self.lib.plus_emucuda_live_functions())

    def attached(self) -> bool:
        """Whether the driver calls this interpreter (False after the detach at interpreter exit)."""
        return bool(self.lib.plus_emucuda_attached())

    def pending(self) -> int:
        """Operations queued on streams and not yet run (stream-ordered work nobody waited for)."""
        return int(self.lib.plus_emucuda_pending())

    # -------------------------------------------------------------------------- callbacks
    def _fail(self, code: int, message: str) -> int:
        self.lib.plus_emucuda_set_error(code, " ".join(message.split())[:880].encode("utf-8", "replace"))
        return code

    def _cb_load(self, image, size, is_ptx, handle_out) -> int:
        try:
            data = ctypes.string_at(image, size)
            registers = {}
            if is_ptx:
                text = data.rstrip(b"\0").decode("utf-8", "replace")
                info, key = None, "ptx:" + hashlib.sha256(data).hexdigest()
            else:
                key = hashlib.sha256(data).hexdigest()
                info = self.registry.get(key)
                if info is None:
                    return self._fail(CUDA_ERROR_INVALID_IMAGE,
                                      f"cubin {key[:12]} ({size} bytes) has no PTX registered with the emulator: "
                                      "rebuild the model with this PlusEP (packs carry PTX since format "
                                      "PLUSIMG2) and register it (Emulator.register_model)")
                text = info.ptx
                registers = _cubin_registers(data)
            pkey = hashlib.sha256(text.encode()).hexdigest()
            with self._lock:
                mod = self._parsed.get(pkey)
            if mod is None:
                name = f"{info.node}:{info.arch}:image{info.image}" if info else "ptx-image"
                mod = Module.parse(text, name=name)
                with self._lock:
                    self._parsed[pkey] = mod
            with self._lock:
                h = self._next
                self._next += 1
                self._modules[h] = _LoadedModule(mod, info, bool(is_ptx), registers)
                self.load_order.append((h, key))
            handle_out[0] = h
            return 0
        except PtxError as e:
            return self._fail(CUDA_ERROR_INVALID_PTX, f"PTX interpreter: {e}")
        except Exception as e:  # noqa: BLE001 - never let an exception cross into C
            return self._fail(CUDA_ERROR_INVALID_IMAGE, f"emulator: {type(e).__name__}: {e}")

    def _cb_getfn(self, module, name, handle_out) -> int:
        try:
            with self._lock:
                lm = self._modules[module]
            k = lm.module.kernel(name.decode())
            with self._lock:
                h = self._next
                self._next += 1
                self._functions[h] = (module, k)
            handle_out[0] = h
            return 0
        except PtxError as e:
            return self._fail(CUDA_ERROR_NOT_FOUND, f"PTX interpreter: {e}")
        except Exception as e:  # noqa: BLE001
            return self._fail(CUDA_ERROR_NOT_FOUND, f"emulator: {type(e).__name__}: {e}")

    def _cb_tmap(self, out, dtype, rank, address, dims, strides, box, estr, interleave, swizzle, l2, oob) -> int:
        """cuTensorMapEncodeTiled: the interpreter's encoding of the map (kernels/ptx/tensormap.py), or
        CUDA_ERROR_INVALID_VALUE naming the requirement it breaks."""
        from ..kernels.ptx import tensormap
        try:
            raw = tensormap.encode_tiled(dtype, int(address), [dims[i] for i in range(rank)],
                                         [strides[i] for i in range(rank - 1)], [box[i] for i in range(rank)],
                                         [estr[i] for i in range(rank)], interleave, swizzle, l2, oob)
            ctypes.memmove(out, raw, len(raw))
            return 0
        except tensormap.TensorMapError as e:
            return self._fail(CUDA_ERROR_INVALID_VALUE, f"cuTensorMapEncodeTiled: {e}")
        except Exception as e:  # noqa: BLE001 - never let an exception cross into C
            return self._fail(CUDA_ERROR_INVALID_VALUE, f"emulator: {type(e).__name__}: {e}")

    def _cb_unload(self, module) -> None:
        with self._lock:
            self._modules.pop(module, None)
            for h in [h for h, (m, _) in self._functions.items() if m == module]:
                del self._functions[h]

    def _lookup(self, word: int):
        base, size = ctypes.c_size_t(), ctypes.c_size_t()
        if word and self.lib.plus_emucuda_lookup(word, ctypes.byref(base), ctypes.byref(size)):
            return base.value, size.value
        return None

    def _memory(self, params: bytes) -> GlobalMemory:
        """Map each allocation a pointer-sized, 8-byte aligned parameter word points into."""
        mem = GlobalMemory()
        seen = set()
        for off in range(0, len(params) - 7, 8):
            found = self._lookup(int.from_bytes(params[off:off + 8], "little"))
            if found and found[0] not in seen:
                seen.add(found[0])
                mem.map(found[0], found[1], f"allocation@{found[0]:#x}")
        return mem

    def host_pointer_words(self, params: bytes) -> list[tuple[int, int]]:
        """(byte offset, value) of every 8-byte aligned parameter word that points into mapped host memory
        outside every device allocation: a host pointer handed to a kernel (an illegal address on a GPU)."""
        bad = []
        for off in range(0, len(params) - 7, 8):
            word = int.from_bytes(params[off:off + 8], "little")
            if word >> 12 and self._lookup(word) is None and self.lib.plus_emucuda_host_mapped(word):
                bad.append((off, word))
        return bad

    def _cb_pack(self, function, params, out, cap, size_out) -> int:
        """cuLaunchKernel: the parameters into the driver's buffer (the launch may run later, in stream
        order); a host pointer among them fails the launch here, naming the word."""
        try:
            with self._lock:
                module, k = self._functions[function]
                lm = self._modules[module]
            buf = bytearray(k.param_bytes)
            for i, (pname, psize, _align) in enumerate(k.params):
                off = k._param_offsets[pname]
                buf[off:off + psize] = ctypes.string_at(params[i], psize)
            if len(buf) > cap:
                return self._fail(CUDA_ERROR_LAUNCH_FAILED, f"emulator: {len(buf)} bytes of kernel parameters "
                                                            f"exceed the driver's {cap}")
            bad = self.host_pointer_words(bytes(buf))
            if bad:
                off, word = bad[0]
                info = lm.info
                msg = (f"kernel {k.name}: parameter word at byte offset {off} holds {word:#x}, a host address "
                       f"outside every device allocation (a host pointer passed to a kernel; an illegal address "
                       f"on a GPU){f' [node {info.node}]' if info else ''}")
                self._record(LaunchRecord(module, info.node if info else "", info.arch if info else "ptx", k.name,
                                          (0, 0, 0), (0, 0, 0), 0, 0.0, findings=[msg], error=msg))
                return self._fail(CUDA_ERROR_ILLEGAL_ADDRESS, msg)
            ctypes.memmove(out, bytes(buf), len(buf))
            size_out[0] = len(buf)
            return 0
        except Exception as e:  # noqa: BLE001 - never let an exception cross into C
            return self._fail(CUDA_ERROR_LAUNCH_FAILED, f"emulator: {type(e).__name__}: {e}")

    def _cb_launch(self, function, dims, smem, packed, size) -> int:
        t0 = time.perf_counter()
        rec = None
        try:
            with self._lock:
                module, k = self._functions[function]
                lm = self._modules[module]
            grid, block = (dims[0], dims[1], dims[2]), (dims[3], dims[4], dims[5])
            buf = ctypes.string_at(packed, size)
            info = lm.info
            rec = LaunchRecord(module, info.node if info else "", info.arch if info else "ptx", k.name, grid,
                               block, int(smem), 0.0)
            res = k.launch(grid=grid, block=block, shared_bytes=int(smem), params=buf,
                           memory=self._memory(buf), checks=self.checks, approx=self.approx,
                           seed=0, sample_ctas=self.sample_ctas)
            rec.counters, rec.findings = dict(res.counters), [str(f) for f in res.findings]
            # what occupancy depends on (plus_ep/verification/profile.py models waves from it)
            rec.counters["entry"] = k.name
            rec.counters["resources"] = {"registers": lm.registers.get(k.name, 0),
                                         "smem_static": int(k.static_shared_bytes), "smem_dynamic": int(smem),
                                         "cluster": list(k.cluster_dims or (1, 1, 1))}
            rec.seconds = time.perf_counter() - t0
            self._record(rec)
            if res.findings and self.fail_on_findings:
                try:
                    res.raise_for_findings()
                except PtxError as e:
                    return self._fail(CUDA_ERROR_LAUNCH_FAILED, f"PTX interpreter checker: {e}{_node(info)}")
            return 0
        except PtxError as e:
            msg = f"PTX interpreter: {e}"
        except Exception as e:  # noqa: BLE001
            msg = f"emulator: {type(e).__name__}: {e}"
        if rec is not None:
            rec.error, rec.seconds = msg, time.perf_counter() - t0
            self._record(rec)
            msg += _node(lm.info)
        return self._fail(CUDA_ERROR_LAUNCH_FAILED, msg)

    def _record(self, rec: LaunchRecord) -> None:
        with self._lock:
            self.records.append(rec)
        if self.progress is not None:
            try:
                self.progress(rec)
            except Exception:
                log.debug("emulator progress callback failed", exc_info=True)


def _detach(lib, callbacks) -> None:
    """Stop the driver calling into Python (at interpreter exit): later unloads only free, later loads and
    launches fail naming the detached interpreter. `callbacks` stay referenced until this has returned."""
    lib.plus_emucuda_attach(None, None, None, None, None)
    del callbacks


def _node(info) -> str:
    return f" [node {info.node}]" if info is not None and info.node else ""


def _cubin_registers(cubin: bytes) -> dict:
    """entry -> registers per thread, from the cubin (empty when it cannot be read)."""
    try:
        return {fn: info.registers or 0 for fn, info in cubin_reader.read_cubin(cubin).items()}
    except ValueError:
        return {}
