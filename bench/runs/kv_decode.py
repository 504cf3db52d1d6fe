"""Decoders with a KV cache (issue 25): the acceptance runs, recorded as dated JSON under bench/results/.

    python -m bench.runs.kv_decode generate [--families llama,qwen2] [--exporters torchscript,dynamo] [--steps 24]
    python -m bench.runs.kv_decode profile [--batches 1,16] [--pasts 128,2048] [--sample-ctas 2]

generate: each family x exporter of plus_ep/zoo/decoders.py (small: 2 layers, GQA, RoPE, SwiGLU, RMSNorm,
random weights) rewritten with kernels for sm_80 and sm_90a; data kernels per layer (the 2-layer export's
count less the 1-layer export's); greedy generation through the kernels on the PTX interpreter against
the original on ORT CPU (plus_ep/verification/generate.py): a left-padded batch of two prompts (20 and 13
tokens) for --steps tokens, and a one-token prompt for 3 (past 0, 1, 2).

profile: the Llama-3.2-1B-width layer (fp16, one layer, a 256-token vocabulary) rewritten for sm_90a; one
decode step (seq 1) per batch x past through `plus-ep profile --emulate` (plus_ep/verification/profile.py:
per node max(flops / peak, DRAM bytes / 3.35 TB/s) of an H100 SXM, from the interpreter's counters, CTAs
sampled and scaled), summed over the nodes: a MODEL of the step's time, next to its DRAM floor (every
weight and the KV cache read once). Nothing here is measured on a GPU.
"""
from __future__ import annotations

import argparse
import datetime
import json
import pathlib
import sys
import tempfile
import time

import numpy as np
import onnx

from bench import RESULTS
from bench.harness.env_info import env_info

ARCHS = ["sm_80", "sm_90a"]
PROMPTS = [[11, 523, 7, 99, 402, 18, 3, 77, 250, 9, 640, 31, 5, 808, 14, 2, 390, 61, 27, 4],
           [815, 42, 6, 170, 95, 333, 12, 708, 50, 1, 263, 88, 19]]
H100_DRAM = 3.35e12


def _out(path, kind):
    if path:
        return pathlib.Path(path)
    day = datetime.date.today().isoformat()
    return RESULTS / f"{day}-decode-{kind}.json"


def _compact_generation(rep: dict) -> dict:
    return {"ok": rep["ok"], "prompt_lengths": [len(p) for p in rep["prompts"]], "steps": rep["steps_requested"],
            "reference_tokens": rep["reference_tokens"],
            "archs": [{"arch": a["arch"], "math": a["math"], "ok": a["ok"], "tokens_equal": a["tokens_equal"],
                       "error": a["error"],
                       "steps": [{k: r[k] for k in ("step", "past", "seq", "launches", "nodes_launched", "findings",
                                                    "logits_rel", "tol", "seconds")} for r in a["steps"]]}
                      for a in rep["archs"]]}


def generate(args) -> int:
    from plus_ep.report import data_kernels
    from plus_ep.rewrite import rewrite_detailed
    from plus_ep.verification.generate import generate as run_generation, generate_text
    from plus_ep.zoo import decoders
    out = _out(args.out, "generate")
    record = {"what": "issue 25: decoders with past key/values, greedy generation through the kernels on the CPU "
                      "PTX interpreter vs the original model on ORT CPU", "env": env_info(), "runs": []}
    for family in args.families.split(","):
        for exporter in args.exporters.split(","):
            t0 = time.perf_counter()
            path = decoders.export(family, exporter, "small", layers=2)
            one = decoders.export(family, exporter, "small", layers=1)
            res = rewrite_detailed(str(path), archs=ARCHS)
            dk2 = data_kernels(res.model)
            dk1 = data_kernels(rewrite_detailed(str(one)).model)
            run = {"family": family, "exporter": exporter, "model": path.name,
                   "data_kernels_before": data_kernels(onnx.load(path)), "data_kernels": dk2,
                   "data_kernels_per_layer": dk2 - dk1, "unfused": [f[1] for f in res.kernels.failures],
                   "rewrite_seconds": round(time.perf_counter() - t0, 1),
                   "attention_nodes": sum(sg.pattern.name == "attention" for sg in res.subgraphs)}
            with tempfile.TemporaryDirectory() as tmp:
                rewritten = pathlib.Path(tmp) / "model.plus.onnx"
                onnx.save(res.model, rewritten)
                for prompts, steps in ((PROMPTS, args.steps), ([[17]], 3)):
                    t1 = time.perf_counter()
                    rep = run_generation(path, rewritten, prompts, steps, archs=ARCHS)
                    print(f"{family}/{exporter}: " + generate_text(rep), flush=True)
                    run.setdefault("generations", []).append(
                        dict(_compact_generation(rep), seconds=round(time.perf_counter() - t1, 1)))
            record["runs"].append(run)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(record, indent=1, default=float) + "\n")
    ok = all(g["ok"] for r in record["runs"] for g in r["generations"])
    print(f"{'PASSED' if ok else 'FAILED'}; written {out}")
    return 0 if ok else 1


def _floor_bytes(model: onnx.ModelProto, feeds: dict) -> tuple[int, int]:
    """(bytes of every initializer, bytes of the KV cache fed as the past)."""
    weights = sum(int(np.prod(t.dims)) * np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
                  for t in model.graph.initializer)
    cache = sum(v.nbytes for k, v in feeds.items() if k.startswith("past_key_values."))
    return weights, cache


def profile(args) -> int:
    from plus_ep.rewrite import rewrite_detailed
    from plus_ep.verification.profile import profile as run_profile, profile_text
    from plus_ep.zoo import decoders
    out = _out(args.out, "step-profile-modelled")
    path = decoders.export("llama", "torchscript", "real")
    t0 = time.perf_counter()
    res = rewrite_detailed(str(path), archs=["sm_90a"])
    record = {"what": "issue 25: MODELLED time of one decode step (seq 1) of a Llama-3.2-1B-width layer (fp16, "
                      "hidden 2048, 32 heads of 64, 8 KV heads, MLP 8192, 1 layer, vocabulary 256) from the PTX "
                      "interpreter's counters (plus-ep profile --emulate, sm_90a kernels, H100 SXM roofline per node: "
                      "max(flops / peak, DRAM bytes / 3.35 TB/s)); not a measurement",
              "env": env_info(), "model": path.name, "rewrite_seconds": round(time.perf_counter() - t0, 1),
              "unfused": [f[1] for f in res.kernels.failures], "sample_ctas": args.sample_ctas, "steps": []}
    with tempfile.TemporaryDirectory() as tmp:
        rewritten = pathlib.Path(tmp) / "model.plus.onnx"
        onnx.save(res.model, rewritten)
        for batch in (int(b) for b in args.batches.split(",")):
            for past in (int(p) for p in args.pasts.split(",")):
                feeds = decoders.feeds(path, batch=batch, seq=1, past=past)
                t1 = time.perf_counter()
                rep = run_profile(str(rewritten), arch="sm_90a", inputs=feeds, sample_ctas=args.sample_ctas)
                print(profile_text(rep), flush=True)
                weights, cache = _floor_bytes(res.model, feeds)
                step_us = sum(r["roofline_us"] for r in rep["nodes"])
                floor_us = (weights + cache) / H100_DRAM * 1e6
                record["steps"].append({
                    "batch": batch, "past": past, "ok": rep["ok"], "errors": rep["errors"][:3],
                    "modelled_step_us": round(step_us, 2), "dram_floor_us": round(floor_us, 2),
                    "ratio": round(step_us / floor_us, 3), "weight_bytes": weights, "kv_cache_bytes": cache,
                    "interpreter_seconds": round(time.perf_counter() - t1, 1),
                    "nodes": [{k: r[k] for k in ("node", "pattern", "flops", "dram_bytes", "roofline_us", "bound",
                                                 "sampled")} for r in rep["nodes"]]})
                print(f"batch {batch}, past {past}: modelled step {step_us:.1f} us, DRAM floor {floor_us:.1f} us "
                      f"(x{step_us / floor_us:.2f})", flush=True)
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(json.dumps(record, indent=1, default=float) + "\n")
    print(f"written {out}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.runs.kv_decode", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate")
    g.add_argument("--families", default="llama,qwen2")
    g.add_argument("--exporters", default="torchscript,dynamo")
    g.add_argument("--steps", type=int, default=24)
    g.add_argument("--out", default=None)
    p = sub.add_parser("profile")
    p.add_argument("--batches", default="1,16")
    p.add_argument("--pasts", default="128,2048")
    p.add_argument("--sample-ctas", type=int, default=2)
    p.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    return generate(args) if args.cmd == "generate" else profile(args)


if __name__ == "__main__":
    sys.exit(main())
