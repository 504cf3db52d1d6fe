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

from .. import progress as _progress
from ..validate import load_model
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


def _feeds(model: onnx.ModelProto, inputs, batch: int, seq: int, seed: int, past: int = 0) -> dict:
    from ..feeds import check_feeds, sample_inputs
    if inputs is None:
        feeds = sample_inputs(model, batch=batch, seq=seq, seed=seed, past=past)
        check_feeds(model, feeds, source="the default inputs")
        return feeds
    source = "--inputs"
    if isinstance(inputs, (str, os.PathLike)):
        source = f"--inputs {Path(inputs).name}"
        try:
            with np.load(inputs, allow_pickle=False) as z:
                feeds = {k: z[k] for k in z.files}
        except (OSError, ValueError, EOFError) as e:
            raise ValueError(f"{source}: not a readable .npz file of arrays ({' '.join(str(e).split())[:200]})") \
                from None
    else:
        feeds = {k: np.asarray(v) for k, v in dict(inputs).items()}
    check_feeds(model, feeds, source=source)
    return feeds


def _runtime_problem(model: onnx.ModelProto, path) -> str | None:
    """Why the installed onnxruntime cannot load `model` (IR version or opset too new), else None."""
    import onnxruntime as ort
    ir, opsets = max_loadable()
    name = Path(path).name
    if model.ir_version > ir:
        return (f"{name} has ONNX IR version {model.ir_version}, but the installed onnxruntime {ort.__version__} "
                f"loads IR versions up to {ir}: save the original model with ir_version {ir} (if it uses nothing "
                f"newer) and rewrite it again, or install a newer onnxruntime")
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx") and o.version > opsets:
            return (f"{name} imports the ONNX opset {o.version}, but the installed onnxruntime {ort.__version__} "
                    f"implements opsets up to {opsets}: export the model with opset <= {opsets}")
    return None


def max_loadable() -> tuple[int, int]:
    """(highest IR version, highest default-domain opset) the installed onnxruntime loads: the one probe,
    plus_ep/validate.py's (rewrite lowers the IR version with it)."""
    from ..validate import runtime_limits
    return runtime_limits()


def emulated_env() -> dict:
    """The environment of a child process whose launcher runs on the emulated CUDA driver (the launcher
    reads PLUS_EP_CUDA_LIBRARY once per process)."""
    env = dict(os.environ, PLUS_EP_CUDA_LIBRARY=library_path())
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


def verify(model, archs=None, batch: int | None = None, seq: int | None = None, inputs=None, seed: int = 0,
           progress: bool | None = None, timeout: float | None = None, stress: bool = True, past: int = 0,
           cubins: bool = True, outputs_to=None) -> dict:
    """Verify `model` (path or ModelProto of a rewritten model with kernels). Returns the report dict
    (see verify_text); report["ok"] is the verdict. archs: default every arch in the packs.

    Shapes: with neither batch, seq nor inputs given, the model runs at batch 1, seq 8, and every distinct
    fused node runs on synthetic inputs (plus_ep/verification/stress.py) at the cheapest shape where its
    chosen routes span every tile they can, with a ragged remainder (plus_ep/verification/shapes.py: seq 8,
    else batch 2 at seq 17, 37, 67, 133 or 259); batch / seq / inputs fix the one shape everything runs
    at. stress=False: the model run only. past: the KV-cache length of a decoder exported with past
    key/values (0: the prefill; seq=1, past=N: a decode step at past length N); a past also fixes the shape.
    cubins: assemble each image's PTX here and compare it with its cubin (cubin_check.py; a node whose
    cubin differs, or cannot be checked, fails); False verifies the PTX alone, and the report says so.
    outputs_to: a .npz path that receives the kernels' model outputs of the model run, keyed "<arch>/<name>"
    (e.g. verify(m, inputs="x.npz", outputs_to="y.npz"); np.load("y.npz")["sm_80/logits"])."""
    auto = batch is None and seq is None and inputs is None and not past
    return run_emulated(model, archs, 1 if batch is None else batch, 8 if seq is None else seq, inputs, seed,
                        progress, timeout, extra={"stress": stress, "auto_shapes": auto and stress, "ties": not cubins,
                                                  "cubins": cubins, "save_outputs": outputs_to and os.fspath(outputs_to)},
                        past=past)


def run_emulated(model, archs=None, batch: int = 1, seq: int = 8, inputs=None, seed: int = 0,
                 progress: bool | None = None, timeout: float | None = None, extra: dict | None = None,
                 past: int = 0) -> dict:
    """The child-process run behind verify (and, with extra={"profile": True, ...}, profile)."""
    with tempfile.TemporaryDirectory(prefix="plus_ep_verify_") as tmp:
        tmp = Path(tmp)
        if isinstance(model, onnx.ModelProto):
            path = tmp / "model.onnx"
            onnx.save(model, path)
            proto = model
        else:
            path = Path(model).resolve()
            proto = load_model(path)        # the one loader: an unreadable file is one ModelError line
        fused = [n for n in proto.graph.node if n.domain == "ai.plus_ep"]
        have = pack_archs(proto)
        if not fused:
            raise ValueError(f"{path.name} has no ai.plus_ep::Fused nodes: rewrite it first "
                             "(`plus-ep rewrite MODEL -o MODEL.plus.onnx --arch sm_80,sm_90a`)")
        if not have:
            raise ValueError(f"the fused nodes of {path.name} carry no kernel images: rewrite it with "
                             "kernels (`plus-ep rewrite MODEL -o MODEL.plus.onnx --arch sm_80,sm_90a`)")
        archs = list(archs) if archs else have
        missing = [a for a in archs if a not in have]
        if missing:
            raise ValueError(f"no image packs for {', '.join(missing)} in {path.name} (packs: {', '.join(have)})")
        problem = _runtime_problem(proto, path)
        if problem:
            raise ValueError(problem)
        feeds = _feeds(proto, inputs, batch, seq, seed, past)
        np.savez(tmp / "inputs.npz", **feeds)
        progress = _progress.resolve(progress)       # "bar" (a terminal), "lines" (-v) or "off"
        request = {"model": str(path), "inputs": str(tmp / "inputs.npz"), "archs": archs, "progress": progress,
                   "seed": seed, **(extra or {})}
        (tmp / "request.json").write_text(json.dumps(request))
        env = emulated_env()
        r = subprocess.run([sys.executable, "-m", "plus_ep.verification.run", str(tmp / "request.json"),
                            str(tmp / "result.json")], env=env, timeout=timeout, check=False,
                           stdout=subprocess.PIPE, stderr=None if progress != "off" else subprocess.PIPE, text=True)
        if r.returncode != 0 or not (tmp / "result.json").exists():
            parts = [(name, (text or "").strip()[-3000:]) for name, text in (("stderr", r.stderr), ("stdout", r.stdout))]
            shown = "\n".join(f"--- its {name} (last 3000 characters):\n{text}" for name, text in parts if text)
            why = (f"killed by signal {-r.returncode}" if r.returncode < 0 else f"exit {r.returncode}")
            raise RuntimeError(f"the verification process failed ({why}"
                               f"{'' if (tmp / 'result.json').exists() else ', no result written'}):\n"
                               f"{shown or '(it printed nothing; with progress on, its stderr went to the terminal)'}")
        result = json.loads((tmp / "result.json").read_text())
    result["inputs"] = {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in feeds.items()}
    if (extra or {}).get("cubins"):
        _check_cubins(result, proto, archs)
    _trust_status(result, proto)
    names = [n.name for n in fused]
    for arch in ([] if result.get("tie_errors") or result.get("inputs_refused") else archs):
        rows = {r["node"] for r in result["nodes"] if r["arch"] == arch}
        for nm in names:
            if nm not in rows:
                result["errors"].append(f"[{arch}] node {nm} has no row")
    bad = [r for r in result["nodes"] if not r["ok"]]
    result["summary"] = {
        "fused_nodes": len(fused), "archs": archs, "rows": len(result["nodes"]),
        "executed": sum(r["executed"] for r in result["nodes"]),
        "mismatches": sum(any(not o["ok"] for o in r["outputs"]) for r in result["nodes"]),
        "findings": sum(r["n_findings"] for r in result["nodes"]),
        "not_executed": sum(not r["executed"] for r in result["nodes"]),
        "output_mismatches": sum(not o["ok"] for o in result["outputs"]),
        "failed_rows": len(bad),
        "checks": sum(len(r["outputs"]) for r in result["nodes"]),
        "worst_ratio": max((o.get("ratio", 0.0) for r in result["nodes"] for o in r["outputs"]
                            if o.get("bound") == "element"), default=0.0),
        "cubin_rows": len((result.get("cubins") or {}).get("rows", [])),
        "cubins_matched": sum(c["status"] == "match" for c in (result.get("cubins") or {}).get("rows", [])),
    }
    result["ok"] = (not bad and not result["errors"] and all(o["ok"] for o in result["outputs"])
                    and (len(result["outputs"]) > 0 or bool((extra or {}).get("profile"))))
    return result


def _check_cubins(result: dict, proto: onnx.ModelProto, archs) -> None:
    """Each node's cubins against its PTX assembled here (cubin_check.py): a row per node and arch in
    result["cubins"], the status on the node's rows, and every MISMATCH or unchecked image an error."""
    from .cubin_check import check_model
    checked = check_model(proto, archs)
    result["cubins"] = checked
    status = {(r["node"], r["arch"]): r for r in checked["rows"]}
    for r in result["nodes"]:
        c = status.get((r["node"], r["arch"]))
        r["cubin"] = c["status"] if c else "-"
        if c and c["status"] != "match":
            r["ok"] = False
            r["errors"].append(f"cubin {c['status']}: {c['detail']}")
    for c in checked["rows"]:
        if c["status"] != "match":
            result["errors"].append(f"[{c['arch']}] node {c['node']}: cubin {c['status']}: {c['detail']}")


def _trust_status(result: dict, proto: onnx.ModelProto) -> None:
    """How the launcher's trust check would treat each node here (verify itself runs with it off)."""
    from ..trust import TrustError, status
    try:
        result["trust"] = [{"node": n.node, "digest": n.digest, "how": n.how, "why": n.why} for n in status(proto)]
    except TrustError as exc:
        result["trust"] = [{"node": "*", "digest": "", "how": None, "why": str(exc)}]


def _e(x: float) -> str:
    return "inf" if x == float("inf") else f"{x:.1e}"


def _worst(outputs: list) -> dict | None:
    def key(o):
        return o.get("ratio", 0.0) if o.get("bound") == "element" else o["rel"] / o["tol"] if o.get("tol") else 0.0
    return max(outputs, key=key, default=None)


def verify_text(report: dict) -> str:
    """The table `plus-ep verify` prints: one row per fused node and arch, then the model outputs.

    `err/bound` is the worst element's |kernel - exact| over its own bound (plus_ep/verification/bounds.py),
    over every run of the node (the model run and the stress runs); a row fails above 1."""
    lines = []
    ins = ", ".join(f"{k}{v['shape']}" for k, v in report.get("inputs", {}).items())
    lines.append(f"verify {Path(report['model']).name}: kernels run on the CPU PTX interpreter through the "
                 f"launcher (emulated CUDA driver); model run on {ins}")
    cub = report.get("cubins")
    lines.append("checked: each node's PTX executed and compared with its function body on ORT CPU; "
                 + ("cubins assembled here from their PTX with ptxas (" + (cub["version"] or "none found")
                    + ") and compared section by section" if cub else
                    "cubins NOT checked (--no-cubin-check: what a GPU loads is not verified)")
                 + "; trust as listed below (not enforced: verify runs with plus_ep.trust=any)")
    for r in report.get("runs", []):
        lines.append(f"  {r['label']}: {r['distinct_nodes']} distinct of {r['fused_nodes']} fused nodes on synthetic "
                     "inputs (plus_ep/verification/stress.py)")
    t = report.get("tiles") or {}
    if t.get("not_spanned"):
        lines.append(f"  tiles not spanned with a ragged remainder at any shape tried (dims set by the weights, "
                     f"\"(fixed)\", or by batch alone): {'; '.join(t['not_spanned'][:6])}")
    hdr = (f"{'node':<34} {'pattern':<18} {'kernel':<22} {'arch':<7} {'math':<5} {'checks':>6} {'max abs':>8} "
           f"{'err/bound':>9} {'findings':>8} {'cubin':>8}  result")
    lines.append(hdr)
    for r in report["nodes"]:
        w = _worst(r["outputs"])
        mabs = max((o["max_abs"] for o in r["outputs"]), default=float("nan"))
        if w is None:
            ratio = "-"
        elif w.get("bound") == "element":
            ratio = _e(w["ratio"])
        else:
            ratio = _e(w["rel"] / w["tol"]) + "*"
        verdict = "ok" if r["ok"] else ("ERROR" if r["errors"] else "NOT RUN" if not r["executed"]
                                        else "FINDINGS" if r["n_findings"] else "MISMATCH")
        kern = ",".join(r["kernels"]) or "-"
        cubin = {"match": "match", "MISMATCH": "DIFFERS", "not checked": "UNCHECKED"}.get(r.get("cubin"), "-")
        lines.append(f"{r['node'][:34]:<34} {r['pattern'][:18]:<18} {kern[:22]:<22} {r['arch']:<7} {r['math']:<5} "
                     f"{len(r['outputs']):>6} {_e(mabs):>8} {ratio:>9} {r['n_findings']:>8} {cubin:>8}  {verdict}")
        if w is not None and not w.get("ok", True):
            where = f"element {w.get('worst')}" if w.get("worst") is not None else "output"
            if w.get("bound") == "element":
                lines.append(f"    {w['name']} ({w['run']}): {where} is {w.get('worst_kernel')!r}, exact "
                             f"{w.get('worst_ref')!r}, bound {_e(w.get('worst_bound', float('nan')))}"
                             + (f"; {w['nonfinite_mismatches']} NaN/inf mismatches" if w.get("nonfinite_mismatches")
                                else ""))
            else:
                lines.append(f"    {w['name']} ({w['run']}): rel {_e(w['rel'])} over tolerance {_e(w['tol'])} "
                             f"({w['bound']})")
        for e in r["errors"][:3]:
            lines.append(f"    error: {e[:400]}")
        for f in r["findings"][:3]:
            lines.append(f"    finding: {f[:300]}")
    for c in (cub or {}).get("rows", []):
        if c["status"] != "match" and not any(r["node"] == c["node"] and r["arch"] == c["arch"] for r in report["nodes"]):
            lines.append(f"{c['node']} [{c['arch']}]: cubin {c['status']}: {c['detail'][:400]}")
    for t in report.get("trust", []):
        lines.append(f"trust {t['node']}: " + (f"{t['how']} (digest {t['digest'][:16]})" if t["how"] else
                                               f"NOT TRUSTED here: {t['why'][:300]}"))
    for o in report["outputs"]:
        lines.append(f"model output {o['name']} [{o['arch']}] vs the original graph on ORT CPU: max abs "
                     f"{_e(o['max_abs'])}, rel {_e(o['rel'])} (tol {_e(o['tol'])}) {'ok' if o['ok'] else 'MISMATCH'}")
    for a in report["archs"]:
        lines.append(f"[{a['arch']}] {a['launches']} kernel launches interpreted in {a['seconds']:.1f}s"
                     + (f"; run failed: {a['error'][:400]}" if a["error"] else ""))
    for e in report.get("errors", [])[:10]:
        if not any(e.endswith(a["error"] or "\0") for a in report["archs"]):
            lines.append(f"error: {e[:600]}")
    s = report["summary"]
    cubins = (f", cubins {s['cubins_matched']}/{s['cubin_rows']} match" if cub else ", cubins NOT checked")
    lines.append(f"{'PASSED' if report['ok'] else 'FAILED'}: {s['executed']}/{s['rows']} node runs executed "
                 f"({s['fused_nodes']} fused nodes x {len(s['archs'])} archs), {s['checks']} output checks, "
                 f"{s['mismatches']} mismatches (worst err/bound {_e(s['worst_ratio'])}), "
                 f"{s['findings']} checker findings, {s['output_mismatches']} model-output mismatches{cubins}")
    return "\n".join(lines)
