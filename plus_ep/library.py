"""Where the native launcher library lives.

    so = plus_ep.get_library_path()
    opts = onnxruntime.SessionOptions()
    opts.register_custom_ops_library(so)     # ai.plus_ep::Fused nodes now run their CUDA kernels

The library exports ``RegisterCustomOps`` (this path) and the plugin-EP entry points
``CreateEpFactories`` / ``ReleaseEpFactory`` ("PlusEP" in providers=[...], registered by
``import plus_ep``; see plus_ep/ep.py). ``RegisterCustomOps`` registers nothing (so Fused nodes run their
model-local function bodies) when the CUDA driver cannot be loaded or reports no device, or when
``PLUS_EP_DISABLE=1``; without a usable driver it warns once per process on stderr (``PLUS_EP_VERBOSE=1``:
at every registration; ``PLUS_EP_DISABLE=1``: never). ``PLUS_EP_CUDA_LIBRARY`` names another driver
library (tests use a stand-in). The environment is read once per process, at the first registration.
"""
from __future__ import annotations

from pathlib import Path

__all__ = ["get_library_path"]

_HERE = Path(__file__).resolve().parent


def get_library_path() -> str:
    """Absolute path of the launcher shared library (``plus_ep/_launcher*.so``)."""
    found = sorted(_HERE.glob("_launcher*.so")) + sorted(_HERE.glob("_launcher*.pyd"))
    if not found:
        raise FileNotFoundError(
            f"PlusEP's native launcher (plus_ep/_launcher*.so) is not built in {_HERE}. "
            "Build it with `pip install -e .` (in a source checkout; needs a C compiler) "
            "or reinstall the package with `pip install .`."
        )
    return str(found[0])
