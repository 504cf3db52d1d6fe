"""Versions and machine facts recorded with every benchmark result.

``env_info()``: CPU, Python and package versions. ``env_info(gpu=True)`` adds ``gpu``: what
nvidia-smi, torch, ONNX Runtime, NVRTC and cuda-bindings say about the GPU and CUDA, and makes
``device`` the GPU's name when one is found (``cpu`` keeps the processor). Facts that cannot be read
are ``None`` with the reason in ``gpu["errors"]``; nothing is guessed.
"""
from __future__ import annotations

import datetime
import importlib
import os
import platform
import re
import shutil
import subprocess


def _version(mod):
    try:
        return importlib.import_module(mod).__version__
    except Exception:
        return None


def _cpu_name() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return cpu


def _nvidia_smi(errors: dict) -> dict:
    if not shutil.which("nvidia-smi"):
        errors["nvidia_smi"] = "nvidia-smi not found"
        return {}
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
                            "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30)
        head = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        errors["nvidia_smi"] = str(exc)
        return {}
    if q.returncode != 0 or not q.stdout.strip():
        errors["nvidia_smi"] = (q.stderr or q.stdout).strip()[:300]
        return {}
    name, driver, mem, clock = [x.strip() for x in q.stdout.strip().splitlines()[0].split(",")]
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", head)
    return {"name": name, "driver": driver, "memory_mib": mem, "max_sm_clock_mhz": clock,
            "driver_cuda": cuda.group(1) if cuda else None, "count": len(q.stdout.strip().splitlines())}


def _torch_cuda(errors: dict) -> dict:
    try:
        import torch
        if not torch.cuda.is_available():
            errors["torch"] = "torch.cuda.is_available() is False"
            return {"torch_cuda": torch.version.cuda}
        p = torch.cuda.get_device_properties(0)
        return {"torch_cuda": torch.version.cuda, "torch_device": p.name,
                "capability": f"{p.major}.{p.minor}", "sms": p.multi_processor_count,
                "torch_memory_mib": p.total_memory // 2**20}
    except Exception as exc:  # noqa: BLE001 - recorded
        errors["torch"] = f"{type(exc).__name__}: {exc}"
        return {}


def _ort(errors: dict) -> dict:
    try:
        import onnxruntime as ort
        from onnxruntime.capi import build_and_package_info as b
        return {"ort_package": getattr(b, "package_name", None), "ort_cuda": getattr(b, "cuda_version", None),
                "ort_providers": ort.get_available_providers(), "ort_path": os.path.dirname(ort.__file__)}
    except Exception as exc:  # noqa: BLE001
        errors["onnxruntime"] = f"{type(exc).__name__}: {exc}"
        return {}


def _nvrtc(errors: dict) -> dict:
    out = {"cuda_bindings": _version("cuda.bindings")}
    try:
        from plus_ep.kernels.compile import nvrtc
        out["nvrtc"] = ".".join(map(str, nvrtc.nvrtc_version()))
        out["local_arch"] = nvrtc.local_arch()
    except Exception as exc:  # noqa: BLE001
        errors["nvrtc"] = f"{type(exc).__name__}: {exc}"
    return out


def gpu_info() -> dict:
    errors: dict = {}
    info = {**_nvidia_smi(errors), **_torch_cuda(errors), **_ort(errors), **_nvrtc(errors)}
    info["present"] = bool(info.get("name") or info.get("torch_device"))
    info["errors"] = errors
    return info


def env_info(gpu: bool = False) -> dict:
    cpu = _cpu_name()
    info = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": cpu, "cpu": cpu, "cpu_cores": os.cpu_count(), "python": platform.python_version(),
        "driver": None, "cuda": None,
        "onnxruntime": _version("onnxruntime"), "onnx": _version("onnx"),
        "numpy": _version("numpy"), "torch": _version("torch"),
        "transformers": _version("transformers"), "plus_ep": _version("plus_ep"),
    }
    if gpu:
        g = gpu_info()
        info["gpu"] = g
        if g["present"]:
            info["device"] = g.get("name") or g.get("torch_device")
            info["driver"], info["cuda"] = g.get("driver"), g.get("driver_cuda") or g.get("torch_cuda")
    return info
