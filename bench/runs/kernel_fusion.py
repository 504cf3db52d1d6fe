"""Fusion with kernels built for several archs (issue 16 acceptance): for each zoo export, rewrite with
`archs` (default sm_80,sm_90a: mma.sync and wgmma side by side), count data kernels per layer (per
transformer block; T5: encoder + decoder blocks) and list every subgraph left unfused with its reason.

    python -m bench.runs.kernel_fusion --size small [--archs sm_80,sm_90a] [--cache DIR]

Kernels compile with NVRTC (no GPU). The cache (default: a fresh temporary folder) is shared by the
exports, so identical kernels compile once. Writes bench/results/<date>-kernel-fusion-<size>.json.
"""
from __future__ import annotations

import argparse
import datetime
import json
import logging
import pathlib
import tempfile
import time
from collections import Counter

from bench import RESULTS
from bench.harness.env_info import env_info
from bench.harness.fusion import _reasons, counts, model_shape

BUDGET = {"bert": 7, "albert": 7, "vit": 7, "gpt2": 7, "llama": 10, "t5": 7}   # data kernels per block


def run_one(family, exporter, size, archs, cache) -> dict:
    from plus_ep import zoo
    from plus_ep.rewrite import rewrite_detailed

    rec = {"family": family, "exporter": exporter, "size": size, **model_shape(family, size, None)}
    path = zoo.export(family, exporter, size)
    rec["model"] = path.name
    import onnx

    model = onnx.load(str(path))
    rec["original"] = counts(model, rec["blocks"])
    start = time.perf_counter()
    r = rewrite_detailed(model, archs=archs, cache=cache, progress=False)
    kb = r.kernels
    rec.update({**counts(r.model, rec["blocks"]), "seconds": round(time.perf_counter() - start, 2),
                "subgraphs": len(r.subgraphs), "unfused": len(kb.failures), "unfused_reasons": _reasons(kb.failures),
                "compiled": kb.compiled, "cached": kb.cached,
                "patterns": dict(Counter(sg.pattern.name for sg in r.subgraphs).most_common()),
                "budget_per_layer": BUDGET[family]})
    per = rec["data_kernels_per_layer"]
    cfg = zoo.config(family, size, None)
    if getattr(cfg, "is_encoder_decoder", False):   # T5: the budget counts attention blocks (decoder: 2)
        rec["attention_blocks"] = cfg.num_hidden_layers + 2 * cfg.num_decoder_layers
        per = rec["data_kernels_per_attention_block"] = round(rec["data_kernels"] / rec["attention_blocks"], 2)
    rec["within_budget"] = per <= BUDGET[family]
    return rec


def run_bert_fp16(layers, archs, cache) -> dict:
    """BERT-base fp16 (bench/harness/bert_fp16.py): real-width f16 GEMM+LayerNorm subgraphs, whose sm_80 kernels
    were lost when sm_90a's wgmma source was compiled for every arch."""
    from bench.harness.bert_fp16 import bert_base_fp16
    from plus_ep.rewrite import rewrite_detailed

    model = bert_base_fp16(layers)
    rec = {"family": "bert-base-fp16", "exporter": "demo builder", "layers": layers, "blocks": layers,
           "original": counts(model, layers)}
    start = time.perf_counter()
    r = rewrite_detailed(model, archs=archs, cache=cache, progress=False)
    groups = {}
    for n in r.model.graph.node:
        if n.domain == "ai.plus_ep":
            text = next(a.s.decode() for a in n.attribute if a.name == "plus_plan")
            groups[n.name] = [ln[len("arch "):] for ln in text.splitlines() if ln.startswith("arch ")]
    rec.update({**counts(r.model, layers), "seconds": round(time.perf_counter() - start, 2),
                "subgraphs": len(r.subgraphs), "unfused": len(r.kernels.failures),
                "unfused_reasons": _reasons(r.kernels.failures), "route_groups": groups})
    return rec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="small", choices=["small", "real"])
    ap.add_argument("--archs", default="sm_80,sm_90a")
    ap.add_argument("--families", nargs="+", default=None, help="zoo families (default: all; none: no zoo model)")
    ap.add_argument("--exporters", nargs="+", default=None)
    ap.add_argument("--cache", default=None, help="kernel cache folder (default: a fresh temporary one)")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--bert-fp16", type=int, metavar="LAYERS", default=0,
                    help="also rewrite BERT-base fp16 with LAYERS layers (bench/harness/bert_fp16.py)")
    args = ap.parse_args(argv)
    from plus_ep.kernels.compile.cache import KernelCache

    from plus_ep import zoo

    logging.getLogger("plus_ep").setLevel(logging.ERROR)
    archs = args.archs.split(",")
    tmp = None if args.cache else tempfile.TemporaryDirectory(prefix="plus_ep_kernel_fusion_")
    cache = KernelCache(args.cache or tmp.name)
    runs = []
    families = [] if args.families == ["none"] else args.families or zoo.CORE_FAMILIES   # wild ones: bench/runs/wild_families.py
    for family in families:
        for exporter in args.exporters or zoo.EXPORTERS:
            try:
                rec = run_one(family, exporter, args.size, archs, cache)
            except Exception as exc:  # noqa: BLE001 - one export's failure is a result, not the end of the run
                rec = {"family": family, "exporter": exporter, "error": f"{type(exc).__name__}: {exc}"}
            runs.append(rec)
            print(json.dumps({k: rec.get(k) for k in ("family", "exporter", "data_kernels_per_layer", "subgraphs",
                                                      "unfused", "unfused_reasons", "seconds", "error")}), flush=True)
    if args.bert_fp16:
        rec = run_bert_fp16(args.bert_fp16, archs, cache)
        runs.append(rec)
        print(json.dumps({k: rec.get(k) for k in ("family", "subgraphs", "unfused", "route_groups")}), flush=True)
    data = {"kind": "kernel_fusion", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "env": env_info(), "settings": {"size": args.size, "archs": archs}, "runs": runs}
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    what = args.size if families else f"bert-base-fp16-L{args.bert_fp16}"
    path = out / f"{datetime.date.today().isoformat()}-kernel-fusion-{what}.json"
    path.write_text(json.dumps(data, indent=2) + "\n")
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
