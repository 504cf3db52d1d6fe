"""Gated MLPs, RoPE and disentangled attention (issue 23 items 4, 5, 7): the zoo's Llama (realistic weights, on
request), Qwen2, Phi-3 and DeBERTa-v2 exports (small size, 2 layers, both exporters) rewritten with kernels for
sm_80 and sm_90a (NVRTC, no GPU): data kernels in total and per layer (the 2-layer count minus the 1-layer
count) against the budgets, subgraphs left unfused with their reasons, the patterns; then `plus-ep verify` of
every fused node's kernels on the CPU PTX interpreter for both archs (a padded batch of 2 at an odd length).

    python -m bench.runs.gated_families [--families qwen2 phi3] [--no-verify] [--cache DIR]

Writes bench/results/<date>-kernel-fusion-gated.json. Verification is interpreted execution, not a GPU run.
"""
from __future__ import annotations

import datetime
import time
from collections import Counter

from bench.harness.env_info import env_info
from bench.harness.fusion import _reasons, family_args, family_cache, family_matrix, write_family_results

ARCHS = ["sm_80", "sm_90a"]
LAYERS = 2
FAMILIES = ("llama", "qwen2", "phi3", "deberta_v2")
# data kernels per layer, and for the 2-layer model (embedding, final norm and head included)
BUDGET = {"llama": {"per_layer": 5, "model": 14}, "qwen2": {"per_layer": 5, "model": 14},
          "phi3": {"per_layer": 5, "model": 14}, "deberta_v2": {"per_layer": 6}}


def _export(family, exporter, layers):
    from plus_ep import zoo
    return zoo.export(family, exporter, "small", layers)


def _verify(model, batch, seq) -> dict:
    from plus_ep.verification.check import verify
    start = time.perf_counter()
    rep = verify(model, batch=batch, seq=seq, progress=False)
    return {"ok": rep["ok"], "summary": rep["summary"], "seconds": round(time.perf_counter() - start, 1),
            "outputs": [{k: o.get(k) for k in ("name", "arch", "rel", "tol", "ok")} for o in rep["outputs"]],
            "worst_node_rel": max((o["rel"] for n in rep["nodes"] for o in n["outputs"]), default=None)}


def run_one(family, exporter, cache, verify_runs, batch, seq) -> dict:
    import onnx

    from plus_ep.report import data_kernels
    from plus_ep.rewrite import rewrite_detailed
    from plus_ep.zoo.configs import WEIGHTS_SCHEME
    path = _export(family, exporter, LAYERS)
    model = onnx.load(str(path))
    rec = {"family": family, "exporter": exporter, "size": "small", "layers": LAYERS, "model": path.name,
           "weights": WEIGHTS_SCHEME, "original": {"nodes": len(model.graph.node), "data_kernels": data_kernels(model)}}
    start = time.perf_counter()
    r = rewrite_detailed(model, archs=ARCHS, cache=cache, progress=False)
    dk = data_kernels(r.model)
    one = rewrite_detailed(_export(family, exporter, 1), archs=ARCHS, cache=cache, progress=False)
    rec.update({"nodes": len(r.model.graph.node), "data_kernels": dk, "data_kernels_1_layer": data_kernels(one.model),
                "seconds": round(time.perf_counter() - start, 2), "subgraphs": len(r.subgraphs),
                "unfused": len(r.kernels.failures) + len(one.kernels.failures),
                "unfused_reasons": _reasons(r.kernels.failures), "compiled": r.kernels.compiled,
                "cached": r.kernels.cached,
                "patterns": dict(Counter(sg.pattern.name for sg in r.subgraphs).most_common())})
    rec["data_kernels_per_layer"] = (dk - rec["data_kernels_1_layer"]) / (LAYERS - 1)
    budget = BUDGET[family]
    rec["budget"] = budget
    rec["within_budget"] = rec["data_kernels_per_layer"] <= budget["per_layer"] and rec["unfused"] == 0 and \
        dk <= budget.get("model", dk)
    if verify_runs:
        rec["verify"] = _verify(r.model, batch, seq)
    return rec


def main(argv=None) -> int:
    args = family_args(argv, __doc__.splitlines()[0], FAMILIES, ["torchscript", "dynamo"])
    cache, _tmp = family_cache(args, "plus_ep_gated_")
    runs = family_matrix(args.families, args.exporters,
                         lambda f, e: run_one(f, e, cache, not args.no_verify, args.batch, args.seq),
                         ("data_kernels", "data_kernels_per_layer", "unfused", "within_budget"))
    data = {"kind": "kernel_fusion", "what": "gated MLPs, RoPE, disentangled attention (issue 23 items 4, 5, 7): data "
            "kernels with kernels built for sm_80,sm_90a (per layer: the 2-layer count minus the 1-layer count); "
            "verify = kernels executed on the CPU PTX interpreter through the launcher (not a GPU)",
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "env": env_info(),
            "settings": {"size": "small", "layers": LAYERS, "archs": ARCHS, "batch": args.batch, "seq": args.seq,
                         "fp32_math": "tf32"},
            "runs": runs}
    write_family_results(data, args.out, "gated")
    return 0 if all(r.get("within_budget") and r.get("verify", {}).get("ok", True) for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
