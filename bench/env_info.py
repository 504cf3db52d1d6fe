"""Versions and machine facts recorded with every benchmark result."""
from __future__ import annotations

import datetime
import os
import platform


def _version(mod):
    try:
        return __import__(mod).__version__
    except Exception:
        return None


def env_info() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    info = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": cpu, "cpu_cores": os.cpu_count(), "python": platform.python_version(),
        "driver": None, "cuda": None,
        "onnxruntime": _version("onnxruntime"), "onnx": _version("onnx"),
        "numpy": _version("numpy"), "torch": _version("torch"),
        "transformers": _version("transformers"), "plus_ep": _version("plus_ep"),
    }
    return info
