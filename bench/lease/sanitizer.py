"""The lease's compute-sanitizer step: memcheck, racecheck and synccheck on the kernels most likely to hide
a memory or synchronisation bug, the cluster GEMM + LayerNorm (distributed shared memory across a
5-CTA cluster) and attention at head dims 128 (fp16) and 64 (TF32), each a carried model run once through
onnxruntime + PlusEP on the GPU (bench/lease/correctness.py --sanitizer). Each tool's "ERROR SUMMARY" (racecheck:
its hazard count) is the verdict; the output goes to sanitizer.log. A machine that refuses the sanitizer
("Device not supported", error 999 at the first allocation: seen on the gVisor H200) or has none makes
the step `skipped`, with its words.

    python -m bench.lease.sanitizer CARRY OUT_LOG
"""
from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

from bench.lease import env as lease_env

MODELS = ("norm_ln_f16__sm_90a", "attn_d128_f16__sm_90a", "attn_d64_tf32__sm_90a")
TOOLS = ("memcheck", "racecheck", "synccheck")
REFUSED = ("Device not supported", "error 999", "CUDA_ERROR_UNKNOWN", "Unable to find injection library")


def find() -> str | None:
    for c in (shutil.which("compute-sanitizer"), "/usr/local/cuda/bin/compute-sanitizer",
              "/opt/nvidia/compute-sanitizer/compute-sanitizer"):
        if c and os.path.exists(c):
            return c
    return None


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    carry, log = pathlib.Path(argv[0]), pathlib.Path(argv[1])
    st = lease_env.Status("sanitizer")
    tool = find()
    if lease_env.mode() == "emulated":
        st.set("skipped", "rehearsal: compute-sanitizer needs a GPU (the emulated driver's checkers - races, "
                          "uninitialised shared memory, out-of-bounds - ran in the correctness step)")
        return 0
    if not tool:
        st.set("skipped", "compute-sanitizer not found on this machine")
        return 0
    models = [m for m in MODELS if (carry / "models" / m / "meta.json").exists()]
    if not models:
        st.set("failed", f"none of {', '.join(MODELS)} in {carry}/models")
        return 1
    results, text = [], []
    for name in TOOLS:
        left = lease_env.deadline_left()
        if left < 15:
            results.append((name, "skipped", "no time left"))
            continue
        cmd = [tool, "--tool", name, "--print-limit", "20", "--target-processes", "all", sys.executable, "-m",
               "bench.lease.correctness", str(carry), str(log.with_suffix(f".{name}.json")), "--sanitizer", "--only", *models]
        if name == "racecheck":
            cmd[3:3] = ["--racecheck-report", "all"]
        t0 = time.perf_counter()
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=max(10, left - 5),
                               env={**os.environ, "LEASE_STATUS": ""})
            out, rc = (r.stdout or "") + (r.stderr or ""), r.returncode
        except subprocess.TimeoutExpired as e:
            out, rc = f"{e.stdout or ''}{e.stderr or ''}\n(timed out)", -1
        seconds = time.perf_counter() - t0
        log.with_suffix(f".{name}.json").unlink(missing_ok=True)
        text.append(f"===== compute-sanitizer --tool {name} ({seconds:.0f}s, exit {rc})\n{out[-20000:]}")
        errors = re.search(r"ERROR SUMMARY: (\d+) error", out)
        hazards = re.search(r"RACECHECK SUMMARY: (\d+) hazard", out)
        if any(s in out for s in REFUSED):
            results.append((name, "refused", next(s for s in REFUSED if s in out)))
        elif rc == -1:
            results.append((name, "failed", f"timed out after {seconds:.0f}s"))
        elif errors is None:
            results.append((name, "failed", f"no ERROR SUMMARY (exit {rc})"))
        else:
            n = int(errors.group(1)) + (int(hazards.group(1)) if hazards else 0)
            ran = "models ran" in out and rc == 0
            results.append((name, "ok" if n == 0 and ran else "failed",
                            f"{n} errors/hazards" + ("" if ran else f", the models did not all run (exit {rc})")))
        log.write_text("\n".join(text))
    detail = f"{', '.join(models)}: " + "; ".join(f"{t} {s} ({d})" for t, s, d in results)
    if all(s == "refused" for _, s, _ in results):
        st.set("skipped", "the machine refuses compute-sanitizer: " + detail)
        return 0
    ok = all(s in ("ok", "refused", "skipped") for _, s, _ in results)
    st.set("ok" if ok else "failed", detail)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
