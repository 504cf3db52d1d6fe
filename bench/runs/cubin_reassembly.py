"""Is assembling a packed kernel's PTX here deterministic, and equal to the NVRTC cubin it shipped with?
The measurement behind `plus-ep verify`'s cubin check (plus_ep/verification/cubin_check.py).

    python -m bench.runs.cubin_reassembly [--out bench/results/DATE-cubin-check.json]

For every (cubin, PTX) pair in the kernel cache (kernel.cubin + kernel.ptx, NVRTC's compile of one
source) and in the image packs of the tiny test model: the PTX is assembled twice by ptxas, each in its
own process; it records whether the two runs gave the same bytes, whether they equal the NVRTC cubin
byte for byte, whether their canonical forms (kernels/compile/cubin.py: everything but the tool note)
are equal, which sections differ, and the time per assembly.
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

from plus_ep import config
from plus_ep.kernels.compile import cubin as C
from plus_ep.verification import cubin_check as cc


def _sections(d: bytes) -> dict:
    return {name: body for name, _, body in C._sections(d)[1]}


def pairs() -> list:
    out = []
    for meta in sorted(config.kernel_cache_dir().glob("*/*/meta.json")):
        m = json.loads(meta.read_text())
        ptx, cub = meta.parent / "kernel.ptx", meta.parent / "kernel.cubin"
        if ptx.is_file() and cub.is_file():
            out.append((f"cache {meta.parent.name[:12]}", m["arch"], cub.read_bytes(), ptx.read_text()))
    from tests.support.emulated_models import packs_of, rewritten_tiny
    from plus_ep.kernels.wire import pack
    for node in rewritten_tiny().graph.node:
        for arch, blob in packs_of(node).items():
            for i, im in enumerate(pack.parse(blob)):
                out.append((f"tiny {node.name} image {i}", arch, im.cubin, pack.untied(im.ptx)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/results/2026-11-28-cubin-check.json")
    args = ap.parse_args()
    ptxas = cc.find_ptxas()
    rows, seconds, notes = [], [], set()
    for what, arch, shipped, ptx in pairs():
        notes.add(" | ".join(C.tool_note(shipped)[2:4]))
        runs = []
        for _ in range(2):
            cc._memo.clear()
            t = time.perf_counter()
            runs.append(cc.assemble(ptxas, ptx, arch))
            seconds.append(time.perf_counter() - t)
        a, b = _sections(shipped), _sections(runs[0])
        entry = next((ln for ln in ptx.splitlines() if ln.startswith(".entry") or ".entry " in ln), "").split()
        rows.append({"what": what, "arch": arch, "entry": entry[-1].rstrip("(") if entry else "?",
                     "runs_identical": runs[0] == runs[1], "bytes_equal_nvrtc": runs[0] == shipped,
                     "canonical_equal_nvrtc": C.canonical(runs[0]) == C.canonical(shipped),
                     "sections_differing": sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))})
    summary = {k: sum(r[k] for r in rows) for k in ("runs_identical", "bytes_equal_nvrtc", "canonical_equal_nvrtc")}
    result = {"what": "issue 34: verify's cubin check measured: each (cubin, PTX) pair of the kernel cache and the tiny "
                      "model assembled twice by the standalone ptxas (separate processes) and compared with NVRTC's "
                      "cubin, bytes and canonical form (all but the tool note)",
              "date": "2026-11-28", "machine": "AMD EPYC, 2 cores (shared)", "arch": platform.machine(),
              "python": platform.python_version(), "ptxas": cc.ptxas_version(ptxas), "ptxas_path": ptxas,
              "nvrtc_tool_notes": sorted(notes),
              "pairs": len(rows), **summary,
              "archs": sorted({r["arch"] for r in rows}), "entries": sorted({r["entry"] for r in rows}),
              "seconds_per_assembly": {"mean": sum(seconds) / len(seconds), "max": max(seconds)},
              "command": "python -m bench.runs.cubin_reassembly", "rows": rows}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"{len(rows)} pairs: runs identical {summary['runs_identical']}, bytes equal to NVRTC's "
          f"{summary['bytes_equal_nvrtc']}, canonical forms equal {summary['canonical_equal_nvrtc']}; "
          f"{result['seconds_per_assembly']['mean']:.2f}s per assembly")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
