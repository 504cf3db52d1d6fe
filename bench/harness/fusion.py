"""Fusion benchmark, CPU mode: nodes and data kernels of every zoo model as exported, after ONNX
Runtime's optimizer (ORT_ENABLE_ALL), after ORT's transformers optimizer and after PlusEP.

    python -m bench.harness.fusion [--size small|real] [--layers N] [--families bert gpt2 ...]
                                   [--exporters torchscript dynamo] [--compile-arch sm_90|none]
                                   [--attention zoo|eager|sdpa] [--repeat N] [--out bench/results]

Writes <out>/<date>-fusion-<size>[-L<N>].json (env + one record per family/exporter) and the
markdown table beside it (bench/charts/fusion_table.py, which can regenerate it from the JSON alone).
With --compile-arch the PlusEP kernels are also compiled with NVRTC (no GPU needed) into a
temporary cache: cold compile time, number of compiles, subgraphs left unfused, warm rebuild time.
--attention eager exports with transformers' eager attention (MatMul-Div-Add-Softmax-MatMul), the
form ORT's transformers optimizer fuses into its Attention op; the zoo default (SDPA, lowered to
plain ops with an IsNaN/Where guard) is not matched by it.
A model that fails to export, optimize or rewrite is recorded with its error and the run goes on;
the exit code is 1 if any PlusEP rewrite (or kernel build) failed.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import json
import logging
import pathlib
import re
import statistics
import sys
import tempfile
import time
from collections import Counter

from bench import RESULTS
from bench.charts import fusion_table
from bench.harness import ort_offline
from bench.harness.env_info import env_info

SCHEMA = 1
STAGES = ("original", "ort_all", "ort_transformers", "plus_ep")


def counts(model, blocks: int) -> dict:
    from plus_ep.report import data_kernels

    dk = data_kernels(model)
    return {"nodes": len(model.graph.node), "data_kernels": dk,
            "data_kernels_per_layer": round(dk / blocks, 2)}


def model_shape(family: str, size: str, layers: int | None) -> dict:
    """Layers, transformer blocks (T5: encoder + decoder), heads and width from the zoo config."""
    from plus_ep import zoo

    cfg = zoo.config(family, size, layers)
    blocks = cfg.num_hidden_layers
    if getattr(cfg, "is_encoder_decoder", False):
        blocks += cfg.num_decoder_layers
    return {"layers": cfg.num_hidden_layers, "blocks": blocks,
            "num_heads": cfg.num_attention_heads, "hidden_size": cfg.hidden_size}


def _stage(fn, *args) -> dict:
    try:
        return fn(*args)
    except Exception as exc:
        return {"error": ort_offline.error_text(exc)}


def _ort_all(path, blocks, cuda):
    model, info = ort_offline.ort_enable_all(path, cuda=cuda)
    return {**counts(model, blocks), **info}


def _ort_transformers(path, blocks, family, shape):
    info = {"model_type": ort_offline.MODEL_TYPES.get(family, (None,))[0]}
    try:
        opt, more = ort_offline.transformers_optimizer(path, family, shape["num_heads"], shape["hidden_size"])
    except Exception as exc:
        return {**info, "error": ort_offline.error_text(exc)}
    info.update(more)
    if opt is None:
        return info
    out = {**counts(opt.model, blocks), **info}
    try:
        model, fp16 = ort_offline.to_fp16(opt)
        out["fp16"] = {**counts(model, blocks), **fp16}
    except Exception as exc:
        out["fp16"] = {"error": ort_offline.error_text(exc)}
    return out


def _plus_ep(model, blocks, repeat):
    from plus_ep.rewrite import rewrite_detailed

    times, result = [], None
    for _ in range(repeat):
        result = rewrite_detailed(model)
        times.append(result.seconds)
    return {**counts(result.model, blocks), "subgraphs": len(result.subgraphs),
            "patterns": dict(Counter(sg.pattern.name for sg in result.subgraphs).most_common()),
            "functions": len(result.model.functions),
            "seconds": round(statistics.median(times), 3), "seconds_all": [round(t, 3) for t in times]}


def _compile(model, blocks, arch):
    """Rewrite with kernels into an empty cache (cold), then again (warm). `compiles` counts NVRTC
    runs (identical kernels compile once), `images` the kernel images the fused nodes carry."""
    from plus_ep.kernels.compile.cache import KernelCache
    from plus_ep.rewrite import rewrite_detailed

    with tempfile.TemporaryDirectory(prefix="plus_ep_bench_kernels_") as tmp:
        cache = KernelCache(tmp)
        cold = rewrite_detailed(model, archs=[arch], cache=cache, progress=False)
        compiles = cache.stats.compiled
        log = logging.getLogger("plus_ep")
        level = log.level
        log.setLevel(logging.ERROR)         # the cold build already warned about unfused subgraphs
        try:
            warm = rewrite_detailed(model, archs=[arch], cache=cache, progress=False)
        finally:
            log.setLevel(level)
        warm_compiles = cache.stats.compiled - compiles
    kb = cold.kernels
    return {**counts(cold.model, blocks), "arch": arch, "subgraphs": len(cold.subgraphs),
            "compiles": compiles, "images": kb.compiled + kb.cached, "cold_s": round(kb.seconds, 3),
            "cold_total_s": round(cold.seconds, 3), "unfused": len(kb.failures),
            "unfused_reasons": _reasons(kb.failures),
            "warm_s": round(warm.kernels.seconds, 3), "warm_compiles": warm_compiles}


def _reasons(failures) -> dict:
    """Why subgraphs stayed unfused, node numbers dropped ("plus_ep/attention/11" -> "attention"),
    with how many subgraphs each reason stopped."""
    out = Counter()
    for _, name, reason in failures:
        text = reason if reason.startswith(name) else f"{name}: {reason}"
        out[re.sub(r"plus_ep/(\w+?)/\d+", r"\1", text)] += 1
    return dict(out.most_common())


def family_matrix(families, exporters, one, keys) -> list:
    """`one(family, exporter)` for every pair (the issue-23 family benches): a pair whose export, rewrite or
    verification fails is a record with its error, not the end of the run; each record's `keys` (and its
    verify verdict) printed as one JSON line as it comes."""
    runs = []
    for family in families:
        for exporter in exporters:
            try:
                rec = one(family, exporter)
            except Exception as exc:  # noqa: BLE001 - one export's failure is a result, not the end of the run
                rec = {"family": family, "exporter": exporter, "error": f"{type(exc).__name__}: {exc}"}
            runs.append(rec)
            print(json.dumps({k: rec.get(k) for k in ("family", "exporter", *keys, "error")}
                             | {"verify_ok": rec.get("verify", {}).get("ok")}), flush=True)
    return runs



def family_args(argv, description, families, exporters, seq_help=None) -> argparse.Namespace:
    """The command line of the issue-23 family benches (bench/runs/gated_families.py, bench/runs/wild_families.py):
    which families and exporters, --no-verify, the verify run's --batch and --seq, --cache and --out."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--families", nargs="+", default=list(families), choices=families)
    ap.add_argument("--exporters", nargs="+", default=list(exporters))
    ap.add_argument("--no-verify", action="store_true")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=7, help=seq_help)
    ap.add_argument("--cache", default=None, help="kernel cache folder (default: a fresh temporary one)")
    ap.add_argument("--out", default=None)
    return ap.parse_args(argv)


def family_cache(args, prefix: str):
    """plus_ep's log quieted to errors, and the family benches' kernel cache: --cache, or a fresh temporary
    folder named `prefix...`. Returns (cache, the temporary folder or None: keep it until the run ends)."""
    from plus_ep.kernels.compile.cache import KernelCache

    logging.getLogger("plus_ep").setLevel(logging.ERROR)
    tmp = None if args.cache else tempfile.TemporaryDirectory(prefix=prefix)
    return KernelCache(args.cache or tmp.name), tmp


def write_family_results(data: dict, out: str | None, name: str) -> pathlib.Path:
    """`data` as JSON at --out, or at bench/results/<date>-kernel-fusion-<name>.json; prints the path."""
    path = pathlib.Path(out) if out else RESULTS / f"{datetime.date.today().isoformat()}-kernel-fusion-{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, default=float) + "\n")
    print(path)
    return path

def _line(label, rec) -> str:
    if "error" in rec:
        return f"  {label}: FAILED {rec['error']}"
    if "not_supported" in rec:
        return f"  {label}: not supported ({rec['not_supported']})"
    text = (f"  {label}: {rec['nodes']} nodes, {rec['data_kernels']} data kernels "
            f"({rec['data_kernels_per_layer']}/layer)")
    if "seconds" in rec:
        text += f", {rec['seconds']}s"
    if "compiles" in rec:
        text += (f"; {rec['compiles']} compiles in {rec['cold_s']}s, {rec['unfused']} unfused, "
                 f"warm {rec['warm_s']}s ({rec['warm_compiles']} compiles)")
    return text


def run_one(family, exporter, args, cuda) -> dict:
    import onnx

    from plus_ep import zoo

    run = {"family": family, "exporter": exporter, "size": args.size}
    try:
        run.update(model_shape(family, args.size, args.layers))
        start = time.perf_counter()
        path = zoo.export(family, exporter, args.size, args.layers)
        run["export_s"] = round(time.perf_counter() - start, 3)
        run["model"] = path.name
        model = onnx.load(str(path))
    except Exception as exc:
        run["error"] = f"export: {ort_offline.error_text(exc)}"
        print(f"  export FAILED: {run['error']}", flush=True)
        return run
    blocks = run["blocks"]
    run["original"] = counts(model, blocks)
    print(_line("original", run["original"]), flush=True)
    run["ort_all"] = _stage(_ort_all, path, blocks, cuda)
    print(_line("ORT_ENABLE_ALL", run["ort_all"]), flush=True)
    run["ort_transformers"] = _stage(_ort_transformers, path, blocks, family, run)
    print(_line("ORT transformers optimizer", run["ort_transformers"]), flush=True)
    run["plus_ep"] = _stage(_plus_ep, model, blocks, args.repeat)
    print(_line("PlusEP", run["plus_ep"]), flush=True)
    if args.compile_arch != "none":
        run["compile"] = _stage(_compile, model, blocks, args.compile_arch)
        print(_line(f"PlusEP + kernels {args.compile_arch}", run["compile"]), flush=True)
    del model
    gc.collect()
    return run


def output_stem(size: str, layers: int | None, attention: str = "zoo", date: str | None = None) -> str:
    date = date or datetime.date.today().isoformat()
    return (f"{date}-fusion-{size}" + (f"-L{layers}" if layers is not None else "")
            + (f"-{attention}" if attention != "zoo" else ""))


def write(data: dict, out: pathlib.Path, stem: str) -> pathlib.Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{stem}.json"
    path.write_text(json.dumps(data, indent=2) + "\n")
    path.with_suffix(".md").write_text(fusion_table.render(data))
    return path


def failed_rewrites(data: dict) -> list[str]:
    bad = []
    for r in data["runs"]:
        for stage in ("plus_ep", "compile"):
            if "error" in r.get(stage, {}):
                bad.append(f"{r['family']}/{r['exporter']} {stage}: {r[stage]['error']}")
    return bad


def parse_args(argv):
    from plus_ep.zoo import CORE_FAMILIES, EXPORTERS, SIZES

    ap = argparse.ArgumentParser(prog="python -m bench.harness.fusion", description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=SIZES, default="small")
    ap.add_argument("--layers", type=int, default=None, help="override the zoo's layer count")
    ap.add_argument("--families", nargs="+", choices=CORE_FAMILIES, default=list(CORE_FAMILIES))
    ap.add_argument("--exporters", nargs="+", choices=EXPORTERS, default=list(EXPORTERS))
    ap.add_argument("--compile-arch", default="none",
                    help="also compile the kernels for this arch (e.g. sm_90) into a temporary cache")
    ap.add_argument("--attention", choices=("zoo", "eager", "sdpa"), default="zoo",
                    help="transformers attention implementation for the exports (default: the zoo's)")
    ap.add_argument("--repeat", type=int, default=1, help="rewrite this many times (median recorded)")
    ap.add_argument("--out", default=str(RESULTS), help="results folder (default bench/results)")
    args = ap.parse_args(argv)
    if args.layers is not None and args.layers < 1:
        ap.error("--layers must be >= 1")
    if args.repeat < 1:
        ap.error("--repeat must be >= 1")
    if args.compile_arch != "none":
        from plus_ep.kernels.compile import nvrtc
        try:
            nvrtc.parse_arch(args.compile_arch)
        except ValueError as exc:
            ap.error(f"--compile-arch: {exc}")
    return args


@contextlib.contextmanager
def attention_implementation(choice: str, families):
    """Set the zoo's attention knob (zoo.configs.ATTN_IMPLEMENTATION, part of its cache key) for
    the run and put it back afterwards."""
    from plus_ep.zoo import configs

    saved = dict(configs.ATTN_IMPLEMENTATION)
    if choice != "zoo":
        configs.ATTN_IMPLEMENTATION.update({f: choice for f in families})
    try:
        yield
    finally:
        configs.ATTN_IMPLEMENTATION.update(saved)


def main(argv=None) -> int:
    args = parse_args(argv)
    with attention_implementation(args.attention, args.families):
        return _run(args)


def _run(args) -> int:
    probe = ort_offline.cuda_ep_probe()
    env = {**env_info(), "ort_cuda_ep": probe}
    data = {"schema": SCHEMA, "kind": "fusion", "env": env,
            "settings": {"size": args.size, "layers": args.layers, "families": args.families,
                         "exporters": args.exporters, "compile_arch": args.compile_arch,
                         "attention": args.attention, "repeat": args.repeat, "ort_all_cuda": probe["available"],
                         "ort_transformers": {"opt_level": ort_offline.OPT_LEVEL, "use_gpu": False,
                                              "fp16": "convert_float_to_float16(keep_io_types=True)"}},
            "runs": []}
    stem = output_stem(args.size, args.layers, args.attention)
    out = pathlib.Path(args.out)
    cases = [(f, e) for f in args.families for e in args.exporters]
    start = time.perf_counter()
    print(f"fusion benchmark: {len(cases)} models, size {args.size}"
          f"{f', {args.layers} layers' if args.layers else ''}"
          f"{f', {args.attention} attention' if args.attention != 'zoo' else ''}; ORT_ENABLE_ALL on "
          f"{'the CUDA EP' if probe['available'] else 'the CPU EP (no CUDA EP here)'}", flush=True)
    for k, (family, exporter) in enumerate(cases, 1):
        print(f"[{k}/{len(cases)}] {family}/{exporter}", flush=True)
        data["runs"].append(run_one(family, exporter, args, probe["available"]))
        data["seconds"] = round(time.perf_counter() - start, 1)
        path = write(data, out, stem)          # after every model: a long run keeps what it has
    bad = failed_rewrites(data)
    print(f"wrote {path} and {path.with_suffix('.md').name} in {data['seconds']}s", flush=True)
    for line in bad:
        print(f"PlusEP failed: {line}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
