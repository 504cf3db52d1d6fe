"""Sanitizer builds of the emulated CUDA driver (plus_ep/native/emucuda.c) with gcc: a shared library a
Python process loads through PLUS_EP_CUDA_LIBRARY (the ASan runtime preloaded), and the C stress harness
tests/native/emucuda_stress.c linked with the driver's source.

    cc = sanitize.gcc("address")                   # None (why: sanitize.why("address")) when gcc cannot
    lib = sanitize.driver(tmp_path, cc)            # <tmp>/libemucuda_asan.so
    env = sanitize.preload_env(cc)                 # LD_PRELOAD of libasan (+ libstdc++ for ORT's C++)
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DRIVER = ROOT / "plus_ep" / "native" / "emucuda.c"
STRESS = ROOT / "tests" / "native" / "emucuda_stress.c"
FLAGS = ["-std=c11", "-g", "-O1", "-Wall", "-Wextra", "-Werror", "-fno-omit-frame-pointer"]
KINDS = {"address": ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"],
         "thread": ["-fsanitize=thread"]}


@functools.lru_cache(maxsize=None)
def _probe(kind: str) -> tuple[str | None, str]:
    cc = shutil.which(os.environ.get("CC_SANITIZE") or "gcc")
    if not cc:
        return None, "no gcc on PATH"
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "p.c"
        src.write_text("int main(void) { return 0; }\n")
        r = subprocess.run([cc, *KINDS[kind], str(src), "-o", str(Path(d) / "p")], capture_output=True, text=True)
    if r.returncode:
        return None, f"gcc cannot link -fsanitize={kind}: {(r.stderr.strip().splitlines() or ['?'])[-1]}"
    return cc, ""


def gcc(kind: str = "address") -> str | None:
    return _probe(kind)[0]


def why(kind: str = "address") -> str:
    return _probe(kind)[1]


def driver(out: Path, cc: str) -> Path:
    """The emulated driver built with ASan + UBSan as `out/libemucuda_asan.so` (its name says it is an
    emulated driver: plus_ep.verification.emulator.driver_path attaches the interpreter to it)."""
    lib = out / "libemucuda_asan.so"
    subprocess.run([cc, *FLAGS, *KINDS["address"], "-fPIC", "-shared", "-fvisibility=hidden", str(DRIVER),
                    "-o", str(lib), "-lpthread"], check=True)
    return lib


def stress(out: Path, cc: str, kind: str, source: Path = DRIVER) -> Path:
    """The stress harness linked with the driver's `source`, under `kind` ("address" or "thread")."""
    exe = out / f"emucuda_stress_{kind}"
    subprocess.run([cc, *FLAGS, *KINDS[kind], str(STRESS), str(source), "-o", str(exe), "-lpthread"], check=True)
    return exe


def preload_env(cc: str, base: dict | None = None) -> dict:
    """An environment that runs an uninstrumented Python with ASan's runtime preloaded (libstdc++ too, or
    ASan's __cxa_throw interceptor finds no real one when ONNX Runtime throws). Leak checking is off:
    the interpreter itself leaks at exit."""
    runtime = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    cxx = subprocess.run([cc, "-print-file-name=libstdc++.so.6"], capture_output=True, text=True).stdout.strip()
    env = dict(os.environ if base is None else base)
    env["LD_PRELOAD"] = " ".join(p for p in (runtime, cxx) if os.path.isabs(p))
    env["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=0"
    env["UBSAN_OPTIONS"] = "halt_on_error=1:print_stacktrace=1"
    return env
