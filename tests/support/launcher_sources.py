"""The launcher's C sources (plus_ep/native) that the native harness links: one list for
tests/native/test_launcher.py and bench/runs/launch_overhead.py (the ORT-facing files are left out)."""
import re as _re
import shutil as _shutil
import subprocess as _subprocess
from pathlib import Path as _Path

LAUNCHER_SOURCES = ["dtype.c", "plan.c", "expr.c", "bind.c", "pack.c", "driver.c", "kernel.c", "sha256.c", "trust.c", "tmap.c"]


# ---- the custom-op stand-in host (tests/native/ortop_host.c), shared by the tests that drive ort_op.c
_ROOT = _Path(__file__).resolve().parents[2]
_NATIVE = _ROOT / "plus_ep" / "native"
GCC = _shutil.which("gcc") or _shutil.which("cc")
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", "-fno-omit-frame-pointer"]
ORT_OP_SOURCES = ["ort_tensor.c", "ort_run.c", "ort_op.c", "ep_base.c"]   # the custom-op front end
ORTOP_SOURCES = LAUNCHER_SOURCES + ORT_OP_SOURCES


def build_harness(out: _Path, flags: list) -> tuple:
    """Compile the stand-in driver and the native harness (tests/native/harness.c) with `flags` into
    `out`; returns (harness, fake_cuda.so)."""
    out.mkdir(parents=True, exist_ok=True)
    common = ["-std=c11", "-g", "-O1", "-Wall", "-Wextra", "-Werror", f"-I{_NATIVE}", *flags]
    fake, harness = out / "fake_cuda.so", out / "harness"
    _subprocess.run([GCC, *common, "-fPIC", "-shared", str(_ROOT / "tests/native/fake_cuda.c"), "-o", str(fake),
                     "-lpthread"], check=True)
    _subprocess.run([GCC, *common, str(_ROOT / "tests/native/harness.c"), *[str(_NATIVE / s) for s in LAUNCHER_SOURCES],
                     "-o", str(harness), "-ldl", "-lpthread"], check=True)
    return harness, fake


def build_ortop_host(out: _Path, flags: list) -> tuple:
    """(ortop_host, fake_cuda.so) compiled with `flags` into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    common = ["-std=c11", "-g", "-O1", "-Wall", "-Wextra", "-Werror", f"-I{_NATIVE}", *flags]
    fake, host = out / "fake_cuda.so", out / "ortop_host"
    _subprocess.run([GCC, *common, "-fPIC", "-shared", str(_ROOT / "tests/native/fake_cuda.c"), "-o", str(fake),
                     "-lpthread"], check=True)
    _subprocess.run([GCC, *common, str(_ROOT / "tests/native/ortop_host.c"), *[str(_NATIVE / s) for s in ORTOP_SOURCES],
                     "-o", str(host), "-ldl", "-lpthread"], check=True)
    return host, fake


def ortop_counts(out: str) -> dict:
    """The stand-in driver's counters ortop_host prints ("counts: sync=S dtoh=D launch=L")."""
    return {k: int(v) for k, v in _re.findall(r"(\w+)=(\d+)", out.split("counts:")[1])}


def ortop_node_key(op: str, plan: str, pack: bytes, specs, output: str = ""):
    """The node ortop_host hands the custom op (plus_ep/trust.py NodeKey: its name, one input per SPEC,
    `absent` ones wired to nothing, output 0 wired unless ORTOP_OUTPUT=absent), for a test that vouches
    for its stand-in kernels: trust.record(trust.digest(ortop_node_key(...)), ...)."""
    from plus_ep import trust
    return trust.NodeKey("ai.plus_ep", op, "plus_ep/test/0", tuple(s != "absent" for s in specs),
                         (output != "absent",), {"plus_plan": plan.encode()}, {"sm_90": pack})
