"""Architectures in the wild (issue 23 acceptance): the zoo's Swin, Whisper encoder, CLIP text and ResNet-18
exports (small size, realistic random weights, both exporters) rewritten with kernels for sm_80 and sm_90a
(NVRTC, no GPU): data kernels in total and per block against the budgets, subgraphs left unfused with their
reasons; ResNet-18 against ONNX Runtime's own optimized graph; then `plus-ep verify` of every fused node's
kernels on the CPU PTX interpreter for both archs (a padded batch of 2 at an odd length), and the issue's
3-node repro (Add -> LayerNorm -> Y, Transpose(Y)) and its RMSNorm and GEMM + LayerNorm variants.

    python -m bench.runs.wild_families [--families swin whisper] [--no-verify] [--cache DIR]

Writes bench/results/<date>-kernel-fusion-wild.json. Verification is interpreted execution, not a GPU run;
ORT's optimized graph is the CPU EP's (the CUDA EP's fusions need a GPU).
"""
from __future__ import annotations

import datetime
import json
import pathlib
import tempfile
import time
from collections import Counter

from bench.harness.env_info import env_info
from bench.harness.fusion import _reasons, family_args, family_cache, family_matrix, write_family_results

ARCHS = ["sm_80", "sm_90a"]
LAYERS = 2            # Swin: stages of 2 blocks; ResNet: blocks per stage (ResNet-18); Whisper, CLIP: layers
# data kernels per block (Swin: transformer block; Whisper encoder, CLIP text: layer) and for the whole model
BUDGET = {"swin": {"per_block": 8, "model": 32}, "whisper": {"per_block": 5}, "clip": {"per_block": 5}}


def blocks_of(family: str, cfg) -> int:
    if family == "swin":
        return sum(cfg.depths)
    if family == "resnet":
        return sum(cfg.depths)
    if family == "whisper":
        return cfg.encoder_layers
    return cfg.num_hidden_layers


def _verify(model, batch, seq) -> dict:
    from plus_ep.verification.check import verify
    start = time.perf_counter()
    rep = verify(model, batch=batch, seq=seq, progress=False)
    out = {"ok": rep["ok"], "summary": rep["summary"], "seconds": round(time.perf_counter() - start, 1),
           "inputs": {k: v.get("shape") for k, v in rep.get("inputs", {}).items()},
           "outputs": [{k: o[k] for k in ("name", "arch", "rel", "tol", "ok")} for o in rep["outputs"]],
           "worst_node_rel": max((o["rel"] for n in rep["nodes"] for o in n["outputs"]), default=None)}
    return out


def run_one(family, exporter, cache, verify_runs, batch, seq) -> dict:
    import onnx

    from plus_ep import zoo
    from plus_ep.report import data_kernels
    from plus_ep.rewrite import rewrite_detailed
    cfg = zoo.config(family, "small", LAYERS)
    path = zoo.export(family, exporter, "small", LAYERS)
    model = onnx.load(str(path))
    nblocks = blocks_of(family, cfg)
    rec = {"family": family, "exporter": exporter, "size": "small", "layers": LAYERS, "blocks": nblocks,
           "model": path.name, "original": {"nodes": len(model.graph.node), "data_kernels": data_kernels(model)}}
    start = time.perf_counter()
    r = rewrite_detailed(model, archs=ARCHS, cache=cache, progress=False, warn=False)
    dk = data_kernels(r.model)
    rec.update({"nodes": len(r.model.graph.node), "data_kernels": dk,
                "data_kernels_per_block": round(dk / nblocks, 2), "seconds": round(time.perf_counter() - start, 2),
                "subgraphs": len(r.subgraphs), "unfused": len(r.kernels.failures),
                "unfused_reasons": _reasons(r.kernels.failures), "compiled": r.kernels.compiled,
                "cached": r.kernels.cached,
                "patterns": dict(Counter(sg.pattern.name for sg in r.subgraphs).most_common()),
                "left_to_ort": len(r.identifier.placed)})
    if family == "swin":
        rec["attention_kernels"] = rec["patterns"].get("attention", 0)
    budget = BUDGET.get(family)
    if budget and family == "swin":      # the whole model (patch embedding, merging, head) against 8 per block
        rec["budget"] = budget
        rec["within_budget"] = dk <= budget["model"] and dk <= budget["per_block"] * nblocks
    elif budget:                        # a layer's kernels: what one more layer adds (the 1-layer export's count)
        one = rewrite_detailed(zoo.export(family, exporter, "small", 1), archs=ARCHS, compile_kernels=False, warn=False)
        rec["data_kernels_1_layer"] = data_kernels(one.model)
        rec["data_kernels_per_layer"] = (dk - rec["data_kernels_1_layer"]) / (LAYERS - 1)
        rec["budget"] = budget
        rec["within_budget"] = rec["data_kernels_per_layer"] <= budget["per_block"] and not one.kernels.failures
    if family == "resnet":
        from bench.harness.ort_offline import ort_enable_all
        with tempfile.TemporaryDirectory() as tmp:
            rw = pathlib.Path(tmp) / "rewritten.onnx"
            onnx.save(r.model, rw)
            ort_rw, info = ort_enable_all(rw)
        ort_orig, _ = ort_enable_all(path)
        rec["ort_optimized"] = {"ep": info["ep"], "original": data_kernels(ort_orig), "rewritten": data_kernels(ort_rw)}
        rec["within_budget"] = rec["ort_optimized"]["rewritten"] <= rec["ort_optimized"]["original"]
    if verify_runs and r.subgraphs:
        rec["verify"] = _verify(r.model, batch, seq)
    return rec


def run_repro(cache) -> list:
    """The issue's 3-node repro and its variants (tests/support/row_layout_models.py), exact fp32."""
    from onnx import TensorProto

    from plus_ep.rewrite import rewrite_detailed
    from plus_ep.verification.check import verify
    from tests.support import row_layout_models as M
    cases = {"add_layernorm_transpose": (M.norm_transposed("ln"), None),
             "add_rmsnorm_transpose": (M.norm_transposed("rms"), None),
             "layernorm_3d_permuted": (M.norm_transposed("ln", ("batch", "seq", 16), (0, 2, 1)), {"batch": 2, "seq": 5}),
             "gemm_layernorm_transpose": (M.gemm_layernorm_transposed(), None),
             "gemm_layernorm_transpose_f16": (M.gemm_layernorm_transposed(dtype=TensorProto.FLOAT16), None)}
    out = []
    for name, (model, sizes) in cases.items():
        r = rewrite_detailed(model, archs=ARCHS, cache=cache, fp32_math="exact", progress=False, warn=False)
        rep = verify(r.model, inputs=M.feeds(model, sizes), progress=False)
        out.append({"case": name, "ok": rep["ok"], "summary": rep["summary"], "unfused": len(r.kernels.failures),
                    "outputs": [{k: o[k] for k in ("name", "arch", "rel", "ok")} for o in rep["outputs"]]})
        print(json.dumps({"repro": name, "ok": rep["ok"]}), flush=True)
    return out


def main(argv=None) -> int:
    from plus_ep import zoo
    args = family_args(argv, __doc__.splitlines()[0], zoo.WILD_FAMILIES, zoo.EXPORTERS,
                       seq_help="sequence length of CLIP's inputs (Swin, Whisper: static)")
    cache, _tmp = family_cache(args, "plus_ep_wild_")
    runs = family_matrix(args.families, args.exporters,
                         lambda f, e: run_one(f, e, cache, not args.no_verify, args.batch, args.seq),
                         ("data_kernels", "data_kernels_per_block", "data_kernels_per_layer", "unfused",
                          "within_budget", "ort_optimized"))
    repro = [] if args.no_verify else run_repro(cache)
    data = {"kind": "kernel_fusion", "what": "architectures in the wild (issue 23): data kernels with kernels built "
            "for sm_80,sm_90a; verify = kernels executed on the CPU PTX interpreter through the launcher (not a GPU)",
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "env": env_info(),
            "settings": {"size": "small", "layers": LAYERS, "archs": ARCHS, "batch": args.batch, "seq": args.seq},
            "runs": runs, "repro": repro}
    write_family_results(data, args.out, "wild")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
