"""Markdown tables of a fusion benchmark result, rendered from its JSON alone.

    python -m bench.charts.fusion_table bench/results/<date>-fusion-<size>.json [-o OUT.md | -o -]

Writes the .md beside the JSON (or to OUT, '-' for stdout).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

COLUMNS = (("original", "original"), ("ort_all", "ORT_ENABLE_ALL"),
           ("ort_transformers", "ORT transformers optimizer"), ("plus_ep", "PlusEP"))


def _cell(rec: dict | None, key: str = "data_kernels", per_layer: bool = True) -> str:
    if rec is None:
        return "–"
    if "error" in rec:
        return "error¹"
    if "not_supported" in rec:
        return "not supported¹"
    if per_layer:
        return f"{rec[key]} ({rec[key + '_per_layer']:.1f})"
    return str(rec[key])


def _ops(hist: dict | None) -> str:
    if not hist:
        return "–"
    return ", ".join(f"{op.removeprefix('com.microsoft::')} ×{n}" for op, n in hist.items())


def _rows(runs, header, row_fn, text_columns: int = 2) -> list[str]:
    """A markdown table; the first `text_columns` columns are left-aligned, numbers right-aligned."""
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---" if k < text_columns else "---:" for k in range(len(header))) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row_fn(r)) + " |" for r in runs]
    return lines


def _ratio(r) -> str:
    before, after = r.get("original", {}), r.get("plus_ep", {})
    if "data_kernels" not in before or "data_kernels" not in after or not after["data_kernels"]:
        return "–"
    return f"{before['data_kernels'] / after['data_kernels']:.1f}×"


def render(data: dict) -> str:
    env, st = data["env"], data["settings"]
    ok = [r for r in data["runs"] if "error" not in r]
    layers = f"{st['layers']} layers (override)" if st["layers"] else "the zoo's default depth"
    ep = "CUDA EP" if st["ort_all_cuda"] else "CPU EP"
    tf = st["ort_transformers"]
    attention = st.get("attention", "zoo")
    attention = "the zoo's default attention (SDPA; T5 eager)" if attention == "zoo" else f"`{attention}` attention"
    out = [f"# Fusion table: zoo size `{st['size']}`, {layers}, {attention}", "",
           f"{env['date']} · {env['device']} ({env['cpu_cores']} cores) · GPU driver {env['driver'] or 'none'} · "
           f"onnxruntime {env['onnxruntime']} · onnx {env['onnx']} · torch {env['torch']} · "
           f"transformers {env['transformers']} · plus_ep {env['plus_ep']}", "",
           "- **Data kernels**: nodes that compute on graph-input data, excluding Shape/Size and pure "
           "aliases (Reshape, Squeeze, Unsqueeze, Flatten, Identity, Dropout); a fused node or an ORT "
           "contrib op counts as one. In parentheses: per transformer layer (T5: encoder + decoder "
           "layers), embeddings and head included — compare the per-layer numbers between columns; "
           "totals depend on the depth.",
           f"- **ORT_ENABLE_ALL**: the graph ONNX Runtime runs after its own optimizer, saved with "
           f"`SessionOptions.optimized_model_filepath`; these are the **{ep}'s** fusions. "
           f"{env.get('ort_cuda_ep', {}).get('note', '')}",
           f"- **ORT transformers optimizer**: `onnxruntime.transformers.optimizer.optimize_model`, "
           f"opt_level {tf['opt_level']}, use_gpu={tf['use_gpu']}, num_heads/hidden_size from the zoo "
           f"config; model type per family below.",
           "- **PlusEP**: `plus_ep.rewrite` (" + ("no kernels" if st["compile_arch"] == "none" else
                                                  f"kernels compiled for {st['compile_arch']} below") + ").",
           "", "## Data kernels (per layer)", ""]
    out += _rows(data["runs"], ["family", "exporter", "layers"] + [t for _, t in COLUMNS] + ["original / PlusEP"],
                 lambda r: [r["family"], r["exporter"], r.get("blocks", "–")]
                 + [_cell(r.get(k)) for k, _ in COLUMNS] + [_ratio(r)])
    out += ["", "## Nodes", ""]
    out += _rows(data["runs"], ["family", "exporter"] + [t for _, t in COLUMNS] + ["rewrite s"],
                 lambda r: [r["family"], r["exporter"]] + [_cell(r.get(k), "nodes", False) for k, _ in COLUMNS]
                 + [r.get("plus_ep", {}).get("seconds", "–")])
    patterns = sorted({p for r in ok for p in r.get("plus_ep", {}).get("patterns", {})})
    out += ["", "## PlusEP fused subgraphs by pattern", ""]
    out += _rows(ok, ["family", "exporter", "subgraphs"] + patterns,
                 lambda r: [r["family"], r["exporter"], r.get("plus_ep", {}).get("subgraphs", "–")]
                 + [r.get("plus_ep", {}).get("patterns", {}).get(p, 0) for p in patterns])
    out += ["", "## ORT fused operators", ""]
    out += _rows(ok, ["family", "exporter", f"ORT_ENABLE_ALL ({ep})", "transformers model type",
                      "transformers optimizer", "transformers fp16 data kernels"],
                 lambda r: [r["family"], r["exporter"], _ops(r["ort_all"].get("fused_ops")),
                            r["ort_transformers"].get("model_type") or "–",
                            _ops(r["ort_transformers"].get("fused_ops")),
                            _cell(r["ort_transformers"].get("fp16"))], text_columns=5)
    if st["compile_arch"] != "none":
        out += ["", f"## PlusEP kernels ({st['compile_arch']}, NVRTC, empty cache)", ""]
        out += _rows(ok, ["family", "exporter", "NVRTC compiles", "kernel images", "cold s", "warm s",
                          "warm compiles", "left unfused", "data kernels (per layer)"],
                     lambda r: [r["family"], r["exporter"]] + (
                         ["error¹"] * 7 if "error" in r["compile"] else
                         [r["compile"][k] for k in ("compiles", "images", "cold_s", "warm_s", "warm_compiles",
                                                     "unfused")] + [_cell(r["compile"])]))
    out += _notes(data)
    return "\n".join(out) + "\n"


def _notes(data) -> list[str]:
    lines = []
    for r in data["runs"]:
        name = f"{r['family']}/{r['exporter']}"
        if "error" in r:
            lines.append(f"- {name}: {r['error']}")
        for key, title in COLUMNS[1:] + (("compile", "kernels"), ("fp16", "fp16")):
            rec = r.get(key) if key != "fp16" else r.get("ort_transformers", {}).get("fp16")
            if rec and "error" in rec:
                lines.append(f"- {name} {title}: {rec['error']}")
            if rec and "not_supported" in rec:
                lines.append(f"- {name} {title}: not supported: {rec['not_supported']}")
        if r.get("compile", {}).get("unfused"):
            why = "; ".join(f"{n}× {reason}" for reason, n in r["compile"]["unfused_reasons"].items())
            lines.append(f"- {name} kernels: {r['compile']['unfused']} subgraphs left unfused: {why}")
    types = {}
    for r in data["runs"]:
        t = r.get("ort_transformers", {})
        if t.get("model_type_note"):
            types.setdefault(r["family"], f"`{t['model_type']}` ({t['model_type_note']})")
    out = ["", "## Notes", ""]
    out += [f"- transformers optimizer model type for {f}: {text}" for f, text in types.items()]
    if lines:
        out += ["", "¹ Errors, unsupported cases, subgraphs left unfused:", ""] + lines
    out += ["", f"Run time {data.get('seconds', '–')} s. Regenerate this file with "
                "`python -m bench.charts.fusion_table <the JSON>`."]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.charts.fusion_table", description=__doc__.splitlines()[0])
    ap.add_argument("json", help="a bench/results/<date>-fusion-<size>.json file")
    ap.add_argument("-o", "--output", help="output file (default: the JSON's name with .md; '-' = stdout)")
    args = ap.parse_args(argv)
    src = pathlib.Path(args.json)
    try:
        data = json.loads(src.read_text())
        text = render(data)
    except (OSError, ValueError, KeyError) as exc:
        print(f"fusion_table: error: {src}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    if args.output == "-":
        sys.stdout.write(text)
        return 0
    dest = pathlib.Path(args.output) if args.output else src.with_suffix(".md")
    dest.write_text(text)
    print(f"wrote {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
