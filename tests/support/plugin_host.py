"""Builders for the tests that load the PlusEP library into ONNX Runtime from a C host (no Python):
the library's C sources as setup.py lists them, the C host tests/native/ep_host.c and the stand-in driver
built with given flags (ASan/UBSan), a run of the host; and the symbols the library exports."""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GCC = shutil.which("gcc") or shutil.which("cc")
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", "-fno-omit-frame-pointer"]
NATIVE = ROOT / "plus_ep" / "native"

# The library's exports (its linker version script, plus_ep/native/exports.map): the plugin-EP and custom-op
# entry points and the PlusEP_* hooks plus_ep/ep.py calls through ctypes.
EXPECTED_EXPORTS = {"CreateEpFactories", "ReleaseEpFactory", "RegisterCustomOps", "PlusEP_SetPlanner",
                    "PlusEP_PlanAddGroup", "PlusEP_PlanBeginGroup", "PlusEP_PlanAddPart", "PlusEP_PlanAddConstant",
                    "PlusEP_PlanSetError", "PlusEP_SetOptionCheck", "PlusEP_NodeStats", "PlusEP_ResetNodeStats",
                    "PlusEP_MemoryStats", "PlusEP_NoDeviceReason", "PlusEP_SetQuietRegistration",
                    "PlusEP_PlanSetPartNode", "PlusEP_PlanAddPartString", "PlusEP_Log", "PlusEP_LogSeverity",
                    "PlusEP_PlanLog", "PlusEP_PlanLogSeverity"}


def _launcher_sources() -> list[str]:
    """setup.py's SOURCES: the C files of the library (one list for the build and these sanitizer builds)."""
    import ast
    for node in ast.parse((ROOT / "setup.py").read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "SOURCES" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("setup.py has no SOURCES list")


SOURCES = _launcher_sources()

SOURCES = _launcher_sources()


def ort_c_library() -> str:
    ort = pytest.importorskip("onnxruntime")
    found = sorted(glob.glob(os.path.join(os.path.dirname(ort.__file__), "capi", "libonnxruntime.so.*")))
    if not found:
        pytest.skip("this onnxruntime wheel ships no libonnxruntime.so")
    return found[0]


def build_host(out: Path, flags: list[str]) -> tuple[Path, Path, Path]:
    """(ep_host, PlusEP library, stand-in driver) built with `flags`."""
    if GCC is None:
        pytest.skip("needs a C compiler")
    out.mkdir(parents=True, exist_ok=True)
    common = ["-std=c11", "-g", "-O1", "-Wall", "-Wextra", "-Werror", f"-I{NATIVE}", *flags]
    host, lib, fake = out / "ep_host", out / "libplus_ep.so", out / "fake_cuda.so"
    subprocess.run([GCC, *common, str(ROOT / "tests" / "native" / "ep_host.c"), "-o", str(host), "-ldl"], check=True)
    subprocess.run([GCC, *common, "-fPIC", "-shared", "-fvisibility=hidden", *[str(NATIVE / s) for s in SOURCES],
                    "-o", str(lib), "-ldl", "-lpthread"], check=True)
    subprocess.run([GCC, *common, "-fPIC", "-shared", str(ROOT / "tests" / "native" / "fake_cuda.c"), "-o", str(fake),
                    "-lpthread"], check=True)
    return host, lib, fake


def run_host(host, lib, model, n, env, *opts):
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("FAKE_CUDA_", "PLUS_EP_")) or k == "PLUS_EP_CACHE_DIR"}   # its trust manifest
    e.update({"ASAN_OPTIONS": "detect_leaks=1", "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1", **env})
    r = subprocess.run([str(host), ort_c_library(), str(lib), str(model), str(n), *opts], capture_output=True,
                       text=True, env=e, timeout=300)
    assert "ERROR: AddressSanitizer" not in r.stderr and "runtime error" not in r.stderr, r.stderr[-4000:]
    assert "LeakSanitizer" not in r.stderr, r.stderr[-4000:]
    return r
