"""What every step of the GPU lease shares (bench/lease/gpu_lease.sh): the device it runs on, stock
onnxruntime sessions with PlusEP on the GPU device, device-resident OrtValues, PlusEP's per-node
statistics, the step's status file.

Two modes, one code path:
  device    the lent machine: the system CUDA driver, a real GPU; CPU onnxruntime + the PlusEP plugin EP
            on its GPU device (no CUDA EP), torch with CUDA for the comparisons.
  emulated  the rehearsal here: PLUS_EP_CUDA_LIBRARY names the emulated driver and PLUS_EP_VIRTUAL_GPU=1
            describes its device as an NVIDIA GPU, so the same plugin-EP GPU path runs, every kernel on
            the PTX interpreter (checkers on); steps that need a CUDA torch say `skipped`.
"""
from __future__ import annotations

import ctypes
import json
import os
import pathlib
import sys
import time

from bench import ROOT

import numpy as np

NVIDIA = 0x10DE
_EMU = None


def config():
    """plus_ep/config.py, the owner of every PLUS_EP_* variable, loaded as the standalone module it is (it
    imports only the standard library): the preflight step runs before PlusEP is installed."""
    import importlib.util
    global _CONFIG
    if _CONFIG is None:
        path = ROOT / "plus_ep" / "config.py"
        spec = importlib.util.spec_from_file_location("plus_ep_config_for_lease", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module          # its dataclasses look their module up there
        spec.loader.exec_module(module)
        _CONFIG = module
    return _CONFIG


_CONFIG = None


def mode() -> str:
    lib = config().get("PLUS_EP_CUDA_LIBRARY") or ""
    return "emulated" if "_emucuda" in os.path.basename(lib) else "device"


def emulator():
    """The PTX interpreter behind the emulated driver (emulated mode), else None. Call before any session."""
    global _EMU
    if mode() != "emulated":
        return None
    if _EMU is None:
        from plus_ep.verification.emulator import Emulator
        _EMU = Emulator.get()
        _EMU.set_arch("sm_90a")       # an H100's compute capability: the launcher picks what it would there
    return _EMU


def register(model) -> None:
    """Emulated mode: the cubin -> PTX map for a model's packs (the launcher loads cubins)."""
    emu = emulator()
    if emu is not None:
        emu.register_model(model)


def _lib():
    import plus_ep
    lib = ctypes.CDLL(plus_ep.get_library_path())
    lib.PlusEP_NodeStats.restype = ctypes.c_size_t
    lib.PlusEP_NodeStats.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    return lib


def node_stats() -> dict:
    """{node: {runs, timed, ms_sum, ms_min, ms_max}} of every PlusEP node run in this process."""
    lib = _lib()
    n = lib.PlusEP_NodeStats(None, 0)
    buf = ctypes.create_string_buffer(n + 1)
    lib.PlusEP_NodeStats(buf, n + 1)
    return {r.pop("node"): r for r in json.loads(buf.value.decode())}


def reset_stats() -> None:
    _lib().PlusEP_ResetNodeStats()


def devices() -> list:
    import plus_ep
    return [{k: v for k, v in d.items() if k != "device"} for d in plus_ep.ep.devices()]


def session(path, options=None, level=None, custom_ops=False):
    """Stock onnxruntime.InferenceSession with PlusEP first (its GPU device) and the CPU EP. custom_ops:
    also register the launcher as a custom-op library, which gives ORT the schema of ai.plus_ep::Fused
    (a model without function bodies loads only then; with no usable driver it registers nothing)."""
    import onnxruntime as ort

    import plus_ep  # registers "PlusEP"
    so = ort.SessionOptions()
    if custom_ops:
        so.register_custom_ops_library(plus_ep.get_library_path())
    so.log_severity_level = 3
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    if level is not None:
        so.graph_optimization_level = level
    return ort.InferenceSession(str(path), so, providers=[("PlusEP", {k: str(v) for k, v in (options or {}).items()}),
                                                         "CPUExecutionProvider"])


def on_plus(sess) -> list:
    """Names (or op types) of the nodes ORT assigned to PlusEP."""
    return [n.name or n.op_type for sg in sess.get_provider_graph_assignment_info() if sg.ep_name == "PlusEP"
            for n in sg.get_nodes()]


def device_value(arr: np.ndarray):
    """An OrtValue in PlusEP's device memory holding `arr` (copied with PlusEP's data transfer)."""
    import onnxruntime as ort
    arr = np.ascontiguousarray(arr)
    v = ort.OrtValue.ortvalue_from_shape_and_type(list(arr.shape), arr.dtype, "gpu", 0, NVIDIA)
    ort.copy_tensors([ort.OrtValue.ortvalue_from_numpy(arr)], [v], None)
    return v


def device_value_ort(host):
    """A copy of a host OrtValue (any element type, bfloat16 too) in PlusEP's device memory."""
    import onnxruntime as ort
    t = _ONNX[host.data_type()]
    v = ort.OrtValue.ortvalue_from_shape_and_type(host.shape(), t, "gpu", 0, NVIDIA)
    ort.copy_tensors([host], [v], None)
    return v


_ONNX = {"tensor(float)": 1, "tensor(uint8)": 2, "tensor(int8)": 3, "tensor(int32)": 6, "tensor(int64)": 7,
         "tensor(bool)": 9, "tensor(float16)": 10, "tensor(double)": 11, "tensor(bfloat16)": 16}


def empty_device(shape, dtype):
    import onnxruntime as ort
    return ort.OrtValue.ortvalue_from_shape_and_type(list(shape), np.dtype(dtype), "gpu", 0, NVIDIA)


def to_host(value) -> np.ndarray:
    """A host copy of an OrtValue in device memory. (OrtValue.numpy() of a value made from a numpy array
    is a view of that array: it is the array we keep, never that view.)"""
    import onnxruntime as ort
    arr = np.zeros(value.shape(), _NP[value.data_type()])
    ort.copy_tensors([value], [ort.OrtValue.ortvalue_from_numpy(arr)], None)
    return arr


_NP = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64,
       "tensor(int32)": np.int32, "tensor(double)": np.float64, "tensor(bool)": np.bool_,
       "tensor(uint8)": np.uint8, "tensor(int8)": np.int8}


def torch_cuda() -> tuple:
    """(torch, None) when torch has a CUDA device here, else (None, why)."""
    if mode() == "emulated":
        return None, "rehearsal on the emulated driver: no CUDA torch (torch comparisons run on a GPU only)"
    try:
        import torch
    except ImportError as e:
        return None, f"torch is not installed ({e})"
    if not torch.cuda.is_available():
        return None, f"torch {torch.__version__} sees no CUDA device"
    return torch, None


class Status:
    """A step's verdict for gpu_lease.sh: written to $LEASE_STATUS (JSON) whenever it changes, so a step
    cut off by its timeout still leaves what it had."""

    def __init__(self, step: str):
        self.step, self.t0 = step, time.perf_counter()
        self.path = os.environ.get("LEASE_STATUS")
        self.status, self.detail = "failed", "started, did not finish"
        self.write()

    def write(self):
        if self.path:
            pathlib.Path(self.path).write_text(json.dumps({"status": self.status, "detail": self.detail}))

    def set(self, status: str, detail: str) -> None:
        self.status, self.detail = status, detail
        self.write()
        say(f"{self.step}: {status}: {detail}")


def stamp(msg: str) -> str:
    return f"[lease {time.strftime('%H:%M:%S')}] {msg}"


def say(msg: str) -> None:
    print(stamp(msg), flush=True)


def write_json(path, data) -> None:
    p = pathlib.Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=_default))
    os.replace(tmp, p)


def _default(o):
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def out_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("OUT") or "gpu-lease-out")


def deadline_left() -> float:
    """Seconds this step may still use ($LEASE_STEP_DEADLINE: epoch seconds), less a margin."""
    d = os.environ.get("LEASE_STEP_DEADLINE")
    return float(d) - time.time() - 3 if d else float("inf")


if __name__ == "__main__":   # pragma: no cover
    print(mode(), devices())
    sys.exit(0)
