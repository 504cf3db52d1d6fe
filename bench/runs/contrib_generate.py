"""Greedy generation with an onnxruntime-genai-style int4 decoder (issue 28 acceptance): the model with
ORT's own contrib kernels (GroupQueryAttention, MatMulNBits, SkipSimplifiedLayerNormalization) on ORT CPU,
against the PlusEP rewrite whose fused nodes run their kernels on the CPU PTX interpreter (emulated CUDA
driver, real launcher, checkers on). Both loops feed back their own tokens and KV cache.

    python -m bench.runs.contrib_generate [--layers 2] [--prompt 6] [--new 6] [--archs sm_80,sm_90a]

Writes bench/results/<date>-contrib-generate.json (tokens of both, kernel launches, findings)."""
from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np

from bench import RESULTS, ROOT


def child(args) -> int:
    """Runs with PLUS_EP_CUDA_LIBRARY = the emulated driver: the rewritten model on ORT CPU with the
    launcher registered, every fused node's kernels on the PTX interpreter."""
    import onnx
    import onnxruntime as ort

    from plus_ep.library import get_library_path
    from plus_ep.verification.emulator import Emulator
    from plus_ep.verification.run import _attribute
    from plus_ep.zoo.ortopt import genai_greedy
    model = onnx.load(args.rewritten)
    emu = Emulator.get()
    emu.register_model(model)
    emu.set_arch(args.arch)
    emu.fail_on_findings = False
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.register_custom_ops_library(get_library_path())
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    t0 = time.perf_counter()
    tokens = genai_greedy(lambda f: dict(zip(names, sess.run(None, f))), model, json.loads(args.prompt_ids), args.new)
    fused = [n for n in model.graph.node if n.domain == "ai.plus_ep"]
    owner = _attribute(emu.load_order, fused, args.arch)     # which node loaded each module, as verify does
    launched = {owner.get(r.module, r.node) for r in emu.records}
    json.dump({"tokens": tokens, "launches": len(emu.records), "findings": sum(len(r.findings) for r in emu.records),
               "errors": [r.error for r in emu.records if r.error][:3], "fused_nodes": len(fused),
               "unlaunched": sorted({n.name for n in fused} - launched),
               "seconds": round(time.perf_counter() - t0, 1)}, open(args.result, "w"))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=6)
    ap.add_argument("--new", type=int, default=6)
    ap.add_argument("--archs", default="sm_80,sm_90a")
    ap.add_argument("--arch", help=argparse.SUPPRESS)
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--model", default=None, help="a genai-form model file instead of plus_ep.zoo.ortopt.genai_llama's "
                    "(e.g. onnxruntime-genai's builder output)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rewritten", help=argparse.SUPPRESS)
    ap.add_argument("--prompt-ids", dest="prompt_ids", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args)
    import onnx
    import onnxruntime as ort

    from bench.harness.env_info import env_info
    from plus_ep.verification.emulator import library_path
    from plus_ep.report import report
    from plus_ep.rewrite import rewrite_detailed
    from plus_ep.zoo import ortopt
    from plus_ep.zoo.ortopt import genai_greedy

    path = pathlib.Path(args.model) if args.model else ortopt.genai_llama(layers=args.layers, dtype=args.dtype)
    model = onnx.load(str(path))
    vocab = model.graph.output[0].type.tensor_type.shape.dim[2].dim_value
    prompt = [int(x) for x in np.random.default_rng(1).integers(3, vocab, args.prompt)]
    so = ort.SessionOptions()
    so.log_severity_level = 3
    ref_sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in ref_sess.get_outputs()]
    want = genai_greedy(lambda f: dict(zip(names, ref_sess.run(None, f))), model, prompt, args.new)
    t0 = time.perf_counter()
    archs = args.archs.split(",")
    r = rewrite_detailed(model, archs=archs, progress=False)
    rep = report(r)
    rec = {"model": str(path) if args.model else path.name, "layers": args.layers, "dtype": args.dtype, "archs": archs, "prompt": prompt,
           "new_tokens": args.new, "rewrite_seconds": round(time.perf_counter() - t0, 1),
           "contrib_ops": rep.get("contrib_ops"), "contrib_opaque": rep.get("contrib_opaque"),
           "patterns": rep["patterns"], "unfused": [list(f[1:]) for f in r.kernels.failures],
           "data_kernels": [rep["data_kernels_before"], rep["data_kernels_after"]],
           "int4_gemms_decoding_in_kernel": sum(1 for sg in r.subgraphs if "nbits" in (sg.roles or {})),
           "ort_cpu_tokens": want, "env": env_info(), "runs": {}}
    with tempfile.TemporaryDirectory() as td:
        rewritten = os.path.join(td, "m.plus.onnx")
        onnx.save(r.model, rewritten)
        env = {**os.environ, "PLUS_EP_CUDA_LIBRARY": library_path()}
        for arch in archs:
            result = os.path.join(td, f"{arch}.json")
            subprocess.run([sys.executable, "-m", "bench.runs.contrib_generate", "--child", "--rewritten", rewritten,
                            "--prompt-ids", json.dumps(prompt), "--new", str(args.new), "--arch", arch,
                            "--result", result], check=True, env=env,
                           cwd=str(ROOT))
            got = json.load(open(result))
            got["same_tokens"] = got["tokens"] == want
            rec["runs"][arch] = got
            print(arch, json.dumps(got), flush=True)
    rec["same_tokens"] = all(g["same_tokens"] for g in rec["runs"].values())
    date = datetime.date.today().isoformat()
    out = pathlib.Path(args.out) if args.out else RESULTS / f"{date}-contrib-generate.json"
    out.write_text(json.dumps(rec, indent=1) + "\n")
    print(f"wrote {out}")
    ok = rec["same_tokens"] and all(g["findings"] == 0 and not g["errors"] and not g["unlaunched"]
                                    for g in rec["runs"].values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
