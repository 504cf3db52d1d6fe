"""Markdown table and PNG chart of a GPU-run JSON, from that JSON alone.

    python -m bench report bench/results/<date>-gpu-<device>.json [--out-dir DIR]

Writes ``<stem>.md`` and ``<stem>.png`` (the PNG needs matplotlib: the ``bench`` extra) beside the
JSON or in ``--out-dir``.
"""
from __future__ import annotations

import argparse
import json
import pathlib

from bench.charts import goals, gpu_chart
from bench.charts.gpu_chart import banner
from bench.harness.run_order import ORDER


def _num(x, unit=""):
    if not isinstance(x, (int, float)):
        return "—" if x is None else str(x)
    if unit == "e":
        return f"{x:.1e}"
    return (f"{x:.3f}" if abs(x) < 10 else f"{x:.1f}") + unit


def _table(head, rows) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "|".join("---" if i < 4 else "---:" for i in range(len(head))) + "|",
            *["| " + " | ".join(map(str, r)) + " |" for r in rows]]


def _primary_exporter(doc):
    return (doc.get("args", {}).get("exporters") or [None])[0]


def _pivot(doc, rows, cell, sweep=False, exporter=None, torch=True):
    """Rows keyed (model, dtype, batch, seq), one column per contender; ONNX contenders on
    ``exporter`` (default: the first), torch contenders (no exporter) when ``torch``."""
    ex = exporter or _primary_exporter(doc)
    rows = [r for r in rows if r["sweep"] == sweep and (r["exporter"] == ex or (torch and r["exporter"] is None))]
    cols = [c for c in ORDER if any(r["contender"] == c for r in rows)]
    keys = sorted({(r["model"], r["dtype"], r["batch"], r["seq"]) for r in rows},
                  key=lambda k: (list(doc.get("models", {})).index(k[0]) if k[0] in doc.get("models", {}) else 99,
                                 k[1], k[3], k[2]))
    by = {(r["model"], r["dtype"], r["batch"], r["seq"], r["contender"]): r for r in rows}
    body = []
    for k in keys:
        body.append([*k, *(cell(by.get((*k, c))) for c in cols)])
    return _table(["model", "dtype", "batch", "seq", *cols], body)


def _latency(r):
    if r is None:
        return ""
    if r["status"] != "ok":
        return r["status"]
    return _num(r.get("p50_ms")) + ("" if r.get("gpu_run") else "*")


def _kernels(r):
    if r is None or r["status"] != "ok":
        return "" if r is None else r["status"]
    k, prof = r.get("kernels_per_run"), r.get("ort_profile") or {}
    if k is not None:
        return f"{k:g} ({r['kernels_per_layer']:.1f}/layer)"
    return "—" + (f" ({prof['nodes_per_run']:g} ORT nodes)" if prof.get("nodes_per_run") else "")


def _diff(r):
    if r is None or r["status"] != "ok":
        return "" if r is None else r["status"]
    return _num(r.get("max_abs_diff"), "e")


def _goals(doc) -> list[str]:
    mark = {True: "yes", False: "no", None: "—"}
    return _table(["goal", "measured", "met"], [[g["text"], g["measured"], mark[g["met"]]] for g in goals.evaluate(doc)])


def _ratios(doc) -> list[str]:
    rows = []
    for g in goals.GOALS:
        if g.kind == "ratio":
            for m, dt, b, s, plus, other, ratio in goals.ratio_cases(doc, g):
                rows.append([m, dt, b, s, f"{plus['contender']} {_num(plus['p50_ms'])}",
                             f"{other['contender']} {_num(other['p50_ms'])}", f"{ratio:.2f}x"])
    return _table(["model", "dtype", "batch", "seq", "best PlusEP (ms)", "best other (ms)", "speed-up"], rows) \
        if rows else ["No ratio: no GPU rows from one process with both sides measured."]


def _startup(doc) -> list[str]:
    firsts = [r for r in doc["results"] if r["status"] == "ok" and "create_cold_s" in r and not r["sweep"]]
    rss = {(r["model"], r["dtype"], r["exporter"], r["batch"]): r["rss_delta_mb"]
           for r in doc["results"] if r["contender"] == "ort" and r["status"] == "ok" and not r["sweep"]}
    body = []
    for r in firsts:
        over = ""
        base = rss.get((r["model"], r["dtype"], r["exporter"], r["batch"]))
        if r["contender"].startswith("plus_ep") and base is not None:
            over = _num(r["rss_delta_mb"] - base)
        body.append([r["model"], r["dtype"], r["exporter"] or "—", r["contender"], _num(r["create_cold_s"]),
                     _num(r["create_warm_s"]), _num(r.get("gpu_mem_mb")), _num(r["rss_delta_mb"]), over])
    return _table(["model", "dtype", "exporter", "contender", "cold start s", "warm start s", "GPU MiB",
                   "RSS MiB", "PlusEP RSS over ORT MiB"], body)


def _problems(doc) -> list[str]:
    units = {}
    for r in doc["results"]:
        if r["status"] != "ok":
            key = (r["status"], r["reason"], r["contender"])
            units.setdefault(key, set()).add(f"{r['model']}/{r['dtype']}/{r['exporter'] or 'torch'}"
                                             + ("/sweep" if r["sweep"] else ""))
    body = [[st, c, ", ".join(sorted(ms)), reason] for (st, reason, c), ms in sorted(units.items(), key=str)]
    return _table(["status", "contender", "where", "reason"], body) if body else ["Nothing skipped or failed."]


def markdown(doc) -> str:
    env, g = doc["env"], doc["env"].get("gpu", {})
    lines = [f"# PlusEP GPU benchmark: {doc['date'][:10]} on {doc['device']}", ""]
    if doc.get("kind") != "gpu":
        lines += [f"> **{banner(doc)}** {doc.get('note') or ''}", ""]
    lines += [f"driver {env.get('driver') or '—'} (CUDA {g.get('driver_cuda') or '—'}), torch {env.get('torch')} "
              f"(CUDA {g.get('torch_cuda') or '—'}), onnxruntime {env.get('onnxruntime')} ({g.get('ort_package')}, "
              f"CUDA {g.get('ort_cuda') or '—'}), NVRTC {g.get('nvrtc') or '—'}, transformers {env.get('transformers')}, "
              f"plus_ep {env.get('plus_ep')}, Python {env.get('python')}. Budget {doc['budget_s']:.0f} s, used "
              f"{doc.get('elapsed_s', 0):.0f} s, {'complete' if doc.get('complete') else 'INCOMPLETE (cut off)'}; "
              f"results ok/skipped/error: {_counts(doc)}. One process: `{doc['process']}`.", "",
              "## Goals (targets, not assertions)", "", *_goals(doc), "",
              "### PlusEP speed-up (same process, same GPU)", "", *_ratios(doc), "",
              f"## Latency p50 (ms), ONNX contenders on the {_primary_exporter(doc)} export", "",
              "Wall time of one inference with device-resident inputs/outputs, synchronised; "
              "`*` marks a row that did not run on a GPU.", "", *_pivot(doc, doc["results"], _latency), "",
              "## GPU kernels per inference (CUPTI via torch.profiler)", "", *_pivot(doc, doc["results"], _kernels), "",
              "## Max |difference| vs fp32 torch eager", "", *_pivot(doc, doc["results"], _diff), "",
              "## Start-up and memory (first shape of each unit)", "",
              "Cold/warm start: creation to first finished inference, first and second time in the process. "
              "GPU MiB: device memory held after the runs minus before (weights, arena, graphs); RSS MiB likewise "
              "for host memory.", "", *_startup(doc), ""]
    if any(r["sweep"] for r in doc["results"]):
        lines += ["## Dynamic sweep, p50 (ms), one session per contender", "",
                  *_pivot(doc, doc["results"], _latency, sweep=True), ""]
    for ex in doc.get("args", {}).get("exporters", [])[1:]:
        if any(r["exporter"] == ex for r in doc["results"]):
            lines += [f"## ONNX contenders on the {ex} export, p50 (ms)", "",
                      *_pivot(doc, doc["results"], _latency, exporter=ex, torch=False), ""]
    lines += ["## Skipped and failed", "", *_problems(doc), ""]
    return "\n".join(lines)


def _counts(doc):
    return "/".join(str(sum(r["status"] == s for r in doc["results"])) for s in ("ok", "skipped", "error"))


def write(path, out_dir=None) -> list[pathlib.Path]:
    path = pathlib.Path(path)
    doc = json.loads(path.read_text())
    out = pathlib.Path(out_dir) if out_dir else path.parent
    out.mkdir(parents=True, exist_ok=True)
    md = out / (path.stem + ".md")
    md.write_text(markdown(doc))
    written = [md]
    png = gpu_chart.write(doc, out / (path.stem + ".png"))
    if png:
        written.append(png)
    return written


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench report", description=__doc__.splitlines()[0])
    ap.add_argument("json", nargs="+", help="GPU-run result JSON file(s)")
    ap.add_argument("--out-dir", default=None)
    a = ap.parse_args(argv)
    for p in a.json:
        for w in write(p, a.out_dir):
            print(f"wrote {w}")
    return 0
