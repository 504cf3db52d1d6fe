"""`plus-ep verify`: run a rewritten model's kernels on the CPU, through the real launcher, and check them.

    import plus_ep
    report = plus_ep.verify("bert.plus.onnx", archs=["sm_80", "sm_90a"], batch=1, seq=8)
    report["ok"], report["nodes"], report["outputs"]
    print(plus_ep.verify_text(report))

ORT CPU runs the rewritten model with the native launcher on the emulated CUDA driver
(plus_ep/_emucuda*.so): the launcher binds dims, picks routes, computes grids and launches exactly as
on a GPU, and each launch executes the kernel's PTX (the text its cubin was assembled from, carried in
the image pack) on the PTX interpreter, with its checkers on. Each fused node's outputs are compared
with its function body run by ORT CPU on the same inputs, and the model's outputs with the rewritten
model run by plain ORT CPU (function bodies inlined: the original graph's computation). Tolerances by
math mode: plus_ep/verification/tolerances.py. The run happens in a child process: the launcher reads
PLUS_EP_CUDA_LIBRARY once per process, and `import plus_ep` loads it.

It fails (report["ok"] False) on a node whose kernels did not execute, any output beyond tolerance, any
checker finding, or any launch error. Nothing here needs a GPU; nothing here proves GPU timing or
ptxas/SASS correctness (the interpreter runs PTX, not the cubin's SASS).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

from .emulator import library_path

__all__ = ["pack_archs", "verify", "verify_text"]


def pack_archs(model: onnx.ModelProto) -> list[str]:
    """Archs with an image pack on the model's fused nodes, in a stable order."""
    seen = []
    for node in model.graph.node:
        if node.domain == "ai.plus_ep":
            for a in node.attribute:
                if a.name.startswith("plus_images_") and a.name[12:] not in seen:
                    seen.append(a.name[12:])
    return sorted(seen)


def _feeds(model: onnx.ModelProto, inputs, batch: int, seq: int, seed: int) -> dict:
    if inputs is None:
        from ..feeds import sample_inputs
        return sample_inputs(model, batch=batch, seq=seq, seed=seed)
    if isinstance(inputs, (str, os.PathLike)):
        with np.load(inputs) as z:
            return {k: z[k] for k in z.files}
    return dict(inputs)


def verify(model, archs=None, batch: int = 1, seq: int = 8, inputs=None, seed: int = 0,
           progress: bool | None = None, timeout: float | None = None) -> dict:
    """Verify `model` (path or ModelProto of a rewritten model with kernels). Returns the report dict
    (see verify_text); report["ok"] is the verdict. archs: default every arch in the packs."""
    return run_emulated(model, archs, batch, seq, inputs, seed, progress, timeout)


def run_emulated(model, archs=None, batch: int = 1, seq: int = 8, inputs=None, seed: int = 0,
                 progress: bool | None = None, timeout: float | None = None, extra: dict | None = None) -> dict:
    """The child-process run behind verify (and, with extra={"profile": True, ...}, profile)."""
    with tempfile.TemporaryDirectory(prefix="plus_ep_verify_") as tmp:
        tmp = Path(tmp)
        if isinstance(model, onnx.ModelProto):
            path = tmp / "model.onnx"
            onnx.save(model, path)
            proto = model
        else:
            path = Path(model).resolve()
            proto = onnx.load(path, load_external_data=False)
        fused = [n for n in proto.graph.node if n.domain == "ai.plus_ep"]
        have = pack_archs(proto)
        if not fused:
            raise ValueError(f"{path.name} has no ai.plus_ep::Fused nodes: rewrite it first "
                             "(`plus-ep rewrite MODEL --arch sm_80,sm_90a`)")
        if not have:
            raise ValueError(f"the fused nodes of {path.name} carry no kernel images: rewrite it with "
                             "kernels (`plus-ep rewrite MODEL --arch sm_80,sm_90a`)")
        archs = list(archs) if archs else have
        missing = [a for a in archs if a not in have]
        if missing:
            raise ValueError(f"no image packs for {', '.join(missing)} in {path.name} (packs: {', '.join(have)})")
        feeds = _feeds(proto, inputs, batch, seq, seed)
        np.savez(tmp / "inputs.npz", **feeds)
        if progress is None:
            progress = sys.stderr.isatty()
        request = {"model": str(path), "inputs": str(tmp / "inputs.npz"), "archs": archs, "progress": progress,
                   **(extra or {})}
        (tmp / "request.json").write_text(json.dumps(request))
        env = dict(os.environ, PLUS_EP_CUDA_LIBRARY=library_path())
        root = str(Path(__file__).resolve().parents[2])   # the folder holding plus_ep/
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        r = subprocess.run([sys.executable, "-m", "plus_ep.verification.run", str(tmp / "request.json"),
                            str(tmp / "result.json")], env=env, timeout=timeout, check=False,
                           stdout=subprocess.PIPE, stderr=None if progress else subprocess.PIPE, text=True)
        if r.returncode != 0 or not (tmp / "result.json").exists():
            parts = [(name, (text or "").strip()[-3000:]) for name, text in (("stderr", r.stderr), ("stdout", r.stdout))]
            shown = "\n".join(f"--- its {name} (last 3000 characters):\n{text}" for name, text in parts if text)
            why = (f"killed by signal {-r.returncode}" if r.returncode < 0 else f"exit {r.returncode}")
            raise RuntimeError(f"the verification process failed ({why}"
                               f"{'' if (tmp / 'result.json').exists() else ', no result written'}):\n"
                               f"{shown or '(it printed nothing; with progress on, its stderr went to the terminal)'}")
        result = json.loads((tmp / "result.json").read_text())
    result["inputs"] = {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in feeds.items()}
    names = [n.name for n in fused]
    for arch in archs:
        rows = {r["node"] for r in result["nodes"] if r["arch"] == arch}
        for nm in names:
            if nm not in rows:
                result["errors"].append(f"[{arch}] node {nm} has no row")
    bad = [r for r in result["nodes"] if not r["ok"]]
    result["summary"] = {
        "fused_nodes": len(fused), "archs": archs, "rows": len(result["nodes"]),
        "executed": sum(r["executed"] for r in result["nodes"]),
        "mismatches": sum(any(o["rel"] > o["tol"] for o in r["outputs"]) for r in result["nodes"]),
        "findings": sum(r["n_findings"] for r in result["nodes"]),
        "not_executed": sum(not r["executed"] for r in result["nodes"]),
        "output_mismatches": sum(not o["ok"] for o in result["outputs"]),
        "failed_rows": len(bad),
    }
    result["ok"] = (not bad and not result["errors"] and all(o["ok"] for o in result["outputs"])
                    and (len(result["outputs"]) > 0 or bool((extra or {}).get("profile"))))
    return result


def _e(x: float) -> str:
    return "inf" if x == float("inf") else f"{x:.1e}"


def verify_text(report: dict) -> str:
    """The table `plus-ep verify` prints: one row per fused node and arch, then the model outputs."""
    lines = []
    ins = ", ".join(f"{k}{v['shape']}" for k, v in report.get("inputs", {}).items())
    lines.append(f"verify {Path(report['model']).name}: kernels run on the CPU PTX interpreter through the "
                 f"launcher (emulated CUDA driver); inputs {ins}")
    hdr = f"{'node':<34} {'pattern':<22} {'kernel':<22} {'arch':<7} {'math':<5} {'max abs':>8} {'rel':>8} {'tol':>7} {'findings':>8}  result"
    lines.append(hdr)
    for r in report["nodes"]:
        mabs = max((o["max_abs"] for o in r["outputs"]), default=float("nan"))
        rel = max((o["rel"] for o in r["outputs"]), default=float("nan"))
        tol = min((o["tol"] for o in r["outputs"]), default=float("nan"))
        verdict = "ok" if r["ok"] else ("ERROR" if r["errors"] else "NOT RUN" if not r["executed"]
                                        else "FINDINGS" if r["n_findings"] else "MISMATCH")
        kern = ",".join(r["kernels"]) or "-"
        lines.append(f"{r['node'][:34]:<34} {r['pattern'][:22]:<22} {kern[:22]:<22} {r['arch']:<7} {r['math']:<5} "
                     f"{_e(mabs):>8} {_e(rel):>8} {_e(tol):>7} {r['n_findings']:>8}  {verdict}")
        for e in r["errors"]:
            lines.append(f"    error: {e[:400]}")
        for f in r["findings"][:3]:
            lines.append(f"    finding: {f[:300]}")
    for o in report["outputs"]:
        lines.append(f"model output {o['name']} [{o['arch']}] vs the original graph on ORT CPU: max abs "
                     f"{_e(o['max_abs'])}, rel {_e(o['rel'])} (tol {_e(o['tol'])}) {'ok' if o['ok'] else 'MISMATCH'}")
    for a in report["archs"]:
        lines.append(f"[{a['arch']}] {a['launches']} kernel launches interpreted in {a['seconds']:.1f}s"
                     + (f"; run failed: {a['error'][:400]}" if a["error"] else ""))
    s = report["summary"]
    lines.append(f"{'PASSED' if report['ok'] else 'FAILED'}: {s['executed']}/{s['rows']} node runs executed "
                 f"({s['fused_nodes']} fused nodes x {len(s['archs'])} archs), {s['mismatches']} mismatches, "
                 f"{s['findings']} checker findings, {s['output_mismatches']} model-output mismatches")
    return "\n".join(lines)
