"""PlusEP's native library, by ONNX Runtime's plugin-EP packaging rules: where it is, the EP names it
provides, and whether the ONNX Runtime this process imports can host it.

    import onnxruntime as ort, plus_ep
    ort.register_execution_provider_library(plus_ep.get_ep_name(), plus_ep.get_library_path())  # done by import
    devices = [d for d in ort.get_ep_devices() if d.ep_name in plus_ep.get_ep_names()]

    opts = ort.SessionOptions()
    opts.register_custom_ops_library(plus_ep.get_library_path())   # the custom-op path (rewritten models)

The library exports the plugin-EP entry points ``CreateEpFactories`` / ``ReleaseEpFactory`` ("PlusEP" in
providers=[...], registered by ``import plus_ep``; see plus_ep/ep.py), ``RegisterCustomOps`` and the
``PlusEP_*`` hooks the Python planner installs; nothing else (a linker version script,
plus_ep/native/exports.map). It links no ONNX Runtime: the host's is found at run time and its C API
version negotiated (ORT >= 1.25). ``RegisterCustomOps`` registers nothing (so Fused nodes run their
model-local function bodies) when the CUDA driver cannot be loaded or reports no device, or when
``PLUS_EP_DISABLE=1``. ``PLUS_EP_CUDA_LIBRARY`` names another driver library (tests use a stand-in).

`host_problem()` is the check `import plus_ep` makes before registering: one line naming what is wrong
with the host ONNX Runtime and the fix (too old; two distributions installed into one folder, e.g.
onnxruntime and onnxruntime-gpu), or None.
"""
from __future__ import annotations

import os
from pathlib import Path

__all__ = ["get_library_path", "get_ep_names", "get_ep_name", "host_problem"]

from .options import NAME as EP_NAME   # OrtEpFactory::GetName (plus_ep/native/ep.h PLUS_EP_NAME)

_HERE = Path(__file__).resolve().parent
MIN_ORT = (1, 25)           # providers=["PlusEP"] by name (plus_ep/native/ep_abi.h PLUS_EP_ORT_API_MIN)


def get_library_path() -> str:
    """Absolute path of the native library (``plus_ep/_launcher*.so``): the plugin EP and the custom ops."""
    found = sorted(_HERE.glob("_launcher*.so")) + sorted(_HERE.glob("_launcher*.pyd"))
    if not found:
        raise FileNotFoundError(
            f"PlusEP's native launcher (plus_ep/_launcher*.so) is not built in {_HERE}. "
            "Build it with `pip install -e .` (in a source checkout; needs a C compiler) "
            "or reinstall the package with `pip install .`."
        )
    return str(found[0])


def get_ep_names() -> list[str]:
    """The execution providers the library's factories create, as `providers=[...]` and
    `OrtEpDevice.ep_name` spell them: ``["PlusEP"]``."""
    return [EP_NAME]


def get_ep_name() -> str:
    """The one execution provider name: ``"PlusEP"``."""
    return EP_NAME


def _version(text: str) -> tuple[int, int]:
    parts = text.split(".")
    try:
        return int(parts[0]), int(parts[1].split("+")[0].split("rc")[0].split("dev")[0])
    except (IndexError, ValueError):
        return (0, 0)


def ort_distributions(package_dir: str | os.PathLike) -> list[tuple[str, str]]:
    """(name, version) of every installed distribution that put files into the `onnxruntime` package at
    `package_dir` (its .dist-info folders beside it list them in RECORD). One is normal; two mean their
    files overlay each other (onnxruntime + onnxruntime-gpu: which library loads depends on install order)."""
    from importlib.metadata import Distribution
    package_dir = Path(package_dir)
    site = package_dir.parent
    found = []
    try:
        entries = sorted(os.listdir(site))
    except OSError:
        return []
    for entry in entries:
        low = entry.lower()
        if not low.endswith(".dist-info") or not low.startswith(("onnxruntime", "ort_nightly", "ort-nightly")):
            continue
        dist = Distribution.at(site / entry)
        files = dist.files or []
        if any(str(f).replace("\\", "/").startswith(f"{package_dir.name}/capi/") for f in files):
            found.append((dist.metadata["Name"] or entry.split("-")[0], dist.version or "?"))
    return found


def host_problem(ort_module=None) -> str | None:
    """What keeps PlusEP from running in this process's ONNX Runtime, in one line with the fix, or None.

    >>> host_problem()            # one onnxruntime(-gpu) >= 1.25 installed
    """
    if ort_module is None:
        try:
            import onnxruntime as ort_module
        except ImportError:
            return ("PlusEP: ONNX Runtime is not installed: install one distribution, "
                    "`pip install onnxruntime-gpu` (NVIDIA GPUs) or `pip install onnxruntime`")
    version = getattr(ort_module, "__version__", "0.0")
    if _version(version) < MIN_ORT:
        return (f"PlusEP needs onnxruntime >= {MIN_ORT[0]}.{MIN_ORT[1]} as a plugin execution provider (this is "
                f"{version}): `pip install -U onnxruntime-gpu` (or the onnxruntime distribution you use)")
    package = Path(getattr(ort_module, "__file__", "") or ".").parent
    dists = ort_distributions(package)
    libs = sorted(p.name for p in (package / "capi").glob("libonnxruntime.so.*")) if (package / "capi").is_dir() else []
    every = " ".join(sorted({n for n, _ in dists})) or "onnxruntime"
    keep = "onnxruntime-gpu" if any(n.lower().replace("_", "-") == "onnxruntime-gpu" for n, _ in dists) else \
        (dists[0][0] if dists else "onnxruntime")
    fix = f"`pip uninstall -y {every} && pip install {keep}`"
    if len(dists) > 1:
        names = ", ".join(f"{n} {v}" for n, v in dists)
        return (f"PlusEP: two ONNX Runtime distributions are installed into one folder {package} ({names}); which "
                f"library loads depends on install order. Keep one: {fix}")
    if len(libs) > 1:
        return (f"PlusEP: {package / 'capi'} holds more than one ONNX Runtime library ({', '.join(libs)}), left by "
                f"distributions installed over each other. Reinstall one: {fix}")
    return None
