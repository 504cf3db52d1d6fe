"""Acceptance run of `plus-ep verify` (kernels on the CPU PTX interpreter through the launcher):
the demo BERT (1 layer) and the zoo's small exports (six families x two exporters, 2 layers by
default), fp32 exact, fp32 with
--fp32-math tf32 and fp16 (ORT's float16 converter), images for sm_80 and sm_90a.

    python -m bench.runs.verify_emulated [--models demo,bert-torchscript,...] [--modes exact,tf32,fp16]
                                    [--batch 1] [--seq 8] [--out bench/results/DATE-verify-emulated.json]

Writes the JSON after every model (a long run leaves what it finished); one record per
(model, mode): the verify summary, each node's row (pattern, kernels, arch, math, max abs / rel error,
tolerance, findings, errors, interpreter seconds) and the model outputs' comparison.
"""
from __future__ import annotations

import argparse
import datetime
import json
import pathlib
import sys
import tempfile
import time
import warnings

import onnx

from bench.harness.env_info import env_info

ARCHS = ["sm_80", "sm_90a"]


def _models(names, layers):
    from plus_ep import zoo
    from plus_ep.demo_model import build_bert
    for name in names:
        if name == "demo":
            yield name, build_bert(layers=1)
        else:
            fam, exp = name.split("-")
            yield name, zoo.load(fam, exp, "small", layers=layers)


def _fp16(model: onnx.ModelProto) -> onnx.ModelProto:
    from onnxruntime.transformers.float16 import convert_float_to_float16
    model = onnx.shape_inference.infer_shapes(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return convert_float_to_float16(model, keep_io_types=False, disable_shape_infer=True)


def _compact(row: dict) -> dict:
    """One node row, kilobytes-sized: its verdict, math, kernels and the worst check (error over bound)."""
    checks = row["outputs"]
    worst = max(checks, key=lambda o: o.get("ratio", 0.0), default={})
    return {"node": row["node"], "arch": row["arch"], "pattern": row["pattern"], "math": row["math"],
            "kernels": row["kernels"], "launches": row["launches"], "ok": row["ok"], "checks": len(checks),
            "bounds": sorted({o.get("bound", "")[:40] for o in checks}), "worst_ratio": worst.get("ratio"),
            "worst_run": worst.get("run"), "max_abs": max((o["max_abs"] for o in checks), default=None),
            "n_findings": row["n_findings"], "findings": row["findings"][:2], "errors": row["errors"][:2]}


def merge(paths, out: pathlib.Path, note: str = "") -> dict:
    """One results file from several runs (later runs replace earlier records of the same model and
    mode), with the git commit of the working tree and a table of the verdicts."""
    import subprocess
    docs = [json.loads(pathlib.Path(p).read_text()) for p in paths]
    runs: dict = {}
    for d in docs:
        for r in d["runs"]:
            runs[(r["model"], r["mode"])] = r
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=False).stdout.strip()
    dirty = subprocess.run(["git", "status", "--short", "--untracked-files=no"], capture_output=True, check=False,
                           text=True).stdout.count("\n")
    doc = dict(docs[0])
    doc.update(runs=list(runs.values()), merged_from=[str(p) for p in paths], git_head=head,
               git_modified_files=dirty, note=note,
               finished=max(d.get("finished", "") for d in docs),
               table=[{"model": r["model"], "mode": r["mode"], "ok": r["ok"], "fused": r.get("fused"),
                       "left_unfused": len(r.get("left_unfused", [])), **r.get("summary", {}),
                       "error": r.get("error"), "seconds": r["seconds"]} for r in runs.values()])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1, default=float) + "\n")
    return doc


def main(argv=None) -> int:
    from plus_ep import zoo
    from plus_ep.rewrite import rewrite_detailed
    from plus_ep.verification.check import verify
    ap = argparse.ArgumentParser()
    default = ["demo"] + [f"{f}-{e}" for f in zoo.CORE_FAMILIES for e in zoo.EXPORTERS]
    ap.add_argument("--models", default=",".join(default))
    ap.add_argument("--modes", default="exact,tf32,fp16")
    ap.add_argument("--batch", type=int, default=None, help="one shape for every run (default: verify's own: "
                    "batch 1, seq 8 plus stress runs there and at a shape spanning every kernel tile)")
    ap.add_argument("--seq", type=int, default=None)
    ap.add_argument("--layers", type=int, default=2, help="depth of the zoo exports (small width)")
    ap.add_argument("--out", default=f"bench/results/{datetime.date.today()}-verify-emulated.json")
    ap.add_argument("--merge", nargs="+", metavar="JSON", help="merge earlier result files into --out instead")
    ap.add_argument("--note", default="")
    a = ap.parse_args(argv)
    out = pathlib.Path(a.out)
    if a.merge:
        merge(a.merge, out, a.note)
        return 0
    doc = {"what": "plus-ep verify: every fused node's kernels executed on the PTX interpreter through the "
                   "launcher on the emulated CUDA driver (CPU); not a GPU run",
           "env": env_info(), "archs": ARCHS, "batch": a.batch, "seq": a.seq, "zoo_layers": a.layers,
           "demo": "build_bert(layers=1): hidden 256, 4 heads",
           "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "runs": []}
    modes = a.modes.split(",")
    for name, model in _models(a.models.split(","), a.layers):
        for mode in modes:
            t0 = time.time()
            rec = {"model": name, "mode": mode}
            try:
                m = _fp16(model) if mode == "fp16" else model
                r = rewrite_detailed(m, archs=ARCHS, fp32_math="tf32" if mode == "tf32" else "exact")
                rec["fused"] = len(r.kernels.attrs)
                rec["left_unfused"] = [list(f[1:]) for f in r.kernels.failures]
                with tempfile.TemporaryDirectory() as td:
                    p = pathlib.Path(td) / f"{name}-{mode}.plus.onnx"
                    onnx.save(r.model, p)
                    rep = verify(str(p), archs=ARCHS, batch=a.batch, seq=a.seq, progress=False)
                rec.update(ok=rep["ok"], summary=rep["summary"], errors=rep["errors"][:5], archs=rep["archs"],
                           outputs=rep["outputs"], inputs=rep["inputs"], runs=rep.get("runs", []),
                           tiles=rep.get("tiles"), nodes=[_compact(row) for row in rep["nodes"]])
            except Exception as e:  # noqa: BLE001 - recorded, the run goes on
                rec.update(ok=False, error=f"{type(e).__name__}: {' '.join(str(e).split())[:2000]}")
            rec["seconds"] = round(time.time() - t0, 1)
            doc["runs"].append(rec)
            s = rec.get("summary", {})
            print(f"{name} {mode}: {'ok' if rec['ok'] else 'FAILED'} {s} {rec.get('error', '')[:300]} "
                  f"({rec['seconds']}s)", file=sys.stderr, flush=True)
            doc["finished"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(doc, indent=1, default=float) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
