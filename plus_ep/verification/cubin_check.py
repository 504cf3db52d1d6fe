"""`plus-ep verify`'s cubin check: the interpreter executes each image's PTX, a GPU loads its cubin, so
every cubin is assembled here from its PTX (ptxas from the CUDA toolkit or the nvidia-cuda-nvcc wheel)
and compared with the shipped one; a cubin that is not what its PTX assembles to fails verify naming
the node.

    rows = check_model(model, ["sm_80", "sm_90a"])   # [{"node", "arch", "images", "status", "detail"}]
    rows[0]["status"]                                # "match", "MISMATCH" or "not checked"

The comparison is `kernels.compile.cubin.canonical`: every section, header and segment byte for byte
except the assembler's tool note (name, build string, options), which differs between NVRTC's built-in
ptxas and the standalone one of the same release. Measured (bench/runs/cubin_reassembly.py, results in
bench/results/2026-11-28-cubin-check.json): the standalone ptxas gives byte-identical cubins across
processes, and the same canonical form as the packs' NVRTC cubins, never the same bytes. A cubin whose
tool note names another ptxas release, or options this check does not pass on, is "not checked" (it
fails verify unless the check is turned off), so a forged note cannot pass for a match.
"""
from __future__ import annotations

import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

from ..kernels.compile.cubin import TOOL_NOTE, canonical, tool_note
from ..kernels.wire.pack import parse as parse_pack, untied

__all__ = ["find_ptxas", "ptxas_version", "check_image", "check_model"]

# ptxas options of a packed cubin's tool note that the check passes on (code-changing) or may ignore
_PASSED = re.compile(r"^(-lineinfo|-O[0-3]|--?generate-line-info)$")
_IGNORED = {"-v", "--verbose", "-warn-spills", "--warn-on-spills"}
_memo: dict = {}


def find_ptxas() -> str | None:
    """ptxas on PATH, else in $CUDA_HOME/$CUDA_PATH, /usr/local/cuda*/bin or a pip nvidia wheel."""
    found = shutil.which("ptxas")
    if found:
        return found
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")] + sorted(glob.glob("/usr/local/cuda*"))
    roots += [os.path.join(p, "nvidia", d) for p in sys.path if os.path.isdir(os.path.join(p, "nvidia"))
              for d in ("cu13", "cuda_nvcc", "cu12")]
    for r in roots:
        if r and os.access(os.path.join(r, "bin", "ptxas"), os.X_OK):
            return os.path.join(r, "bin", "ptxas")
    return None


def ptxas_version(ptxas: str) -> str:
    """The release line of `ptxas --version` ("Cuda compilation tools, release 13.0, V13.0.88")."""
    out = subprocess.run([ptxas, "--version"], capture_output=True, text=True, timeout=60).stdout
    return next((ln.strip() for ln in out.splitlines() if ln.startswith("Cuda compilation tools")), out.strip())


def _options(note: list, arch: str) -> tuple[list, str | None]:
    """The ptxas options to pass on (from the tool note's option string), or why the check cannot
    reproduce them."""
    text = note[-1] if note and note[-1].lstrip().startswith("-") else ""
    words, out, k = text.split(), [], 0
    while k < len(words):
        w = words[k]
        if w in ("-arch", "--gpu-name") and k + 1 < len(words):
            if words[k + 1] != arch:
                return [], f"its tool note says -arch {words[k + 1]}, not {arch}"
            k += 2
            continue
        if _PASSED.match(w):
            out.append(w)
        elif w not in _IGNORED:
            return [], f"it was assembled with the ptxas option {w}, which this check does not reproduce"
        k += 1
    return out, None


def assemble(ptxas: str, ptx: str, arch: str, options=()) -> bytes:
    """The cubin ptxas makes of `ptx` for `arch` here (memoised by PTX, arch and options)."""
    key = (hashlib.sha256(ptx.encode()).hexdigest(), arch, tuple(options), ptxas)
    if key not in _memo:
        with tempfile.TemporaryDirectory(prefix="plus_ep_ptxas_") as t:
            src, out = os.path.join(t, "k.ptx"), os.path.join(t, "k.cubin")
            with open(src, "w") as f:
                f.write(ptx)
            r = subprocess.run([ptxas, f"-arch={arch}", *options, src, "-o", out], capture_output=True,
                               text=True, timeout=600)
            if r.returncode:
                raise ValueError(f"ptxas rejects its PTX: {' '.join((r.stderr or r.stdout).split())[:300]}")
            with open(out, "rb") as f:
                _memo[key] = f.read()
    return _memo[key]


def check_image(cubin: bytes, ptx: str | None, arch: str, ptxas: str | None, version: str) -> tuple[str, str]:
    """("match" | "MISMATCH" | "not checked", why) for one image of a pack."""
    if ptxas is None:
        return "not checked", ("no ptxas found (the CUDA toolkit's, or `pip install nvidia-cuda-nvcc`); "
                               "run verify where one is, or pass --no-cubin-check to verify the PTX only")
    if not ptx:
        return "not checked", "it carries no PTX to assemble"
    try:
        note = tool_note(cubin)
    except ValueError as exc:
        return "MISMATCH", f"its cubin is not an ELF image ({exc})"
    made_by = next((s for s in note if s.startswith("Cuda compilation tools")), None)
    if made_by is None:
        return "not checked", f"its cubin has no ptxas tool note ({TOOL_NOTE})"
    if made_by != version:
        return "not checked", (f"it was assembled by ptxas '{made_by}', this machine has '{version}': verify it "
                               "where that release is installed, or rewrite the model here")
    options, why = _options(note, arch)
    if why:
        return "not checked", why
    try:
        local = assemble(ptxas, untied(ptx), arch, options)
        shipped = canonical(cubin)
    except ValueError as exc:
        return "MISMATCH", str(exc)
    if shipped == canonical(local):
        return "match", ""
    return "MISMATCH", "its cubin is not what its PTX assembles to (another kernel would run on a GPU)"


def check_model(model, archs, ptxas: str | None = None, workers: int = 2) -> dict:
    """Assemble and compare every image of every fused node's packs for `archs`. Returns {"ptxas": path
    or None, "version": release line, "rows": [{"node", "arch", "images", "status", "detail"}]}, one row
    per node and arch: MISMATCH if any image mismatches, else "not checked" if any is, else "match"."""
    from onnx import numpy_helper
    ptxas = ptxas or find_ptxas()
    version = ptxas_version(ptxas) if ptxas else ""
    jobs = []
    for node in model.graph.node:
        if node.domain != "ai.plus_ep":
            continue
        for a in node.attribute:
            arch = a.name[len("plus_images_"):]
            if a.name.startswith("plus_images_") and arch in archs:
                for i, im in enumerate(parse_pack(numpy_helper.to_array(a.t).tobytes())):
                    jobs.append((node.name, arch, i, im))
    with ThreadPoolExecutor(max(1, workers)) as pool:
        results = list(pool.map(lambda j: check_image(j[3].cubin, j[3].ptx, j[1], ptxas, version), jobs))
    rows: dict = {}
    for (node, arch, i, _), (status, why) in zip(jobs, results):
        row = rows.setdefault((node, arch), {"node": node, "arch": arch, "images": 0, "status": "match", "detail": ""})
        row["images"] += 1
        rank = {"match": 0, "not checked": 1, "MISMATCH": 2}
        if rank[status] > rank[row["status"]]:
            row["status"], row["detail"] = status, f"image {i}: {why}"
    return {"ptxas": ptxas, "version": version, "rows": list(rows.values())}
