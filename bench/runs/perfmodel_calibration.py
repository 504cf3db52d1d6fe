"""The time model (kernels/perfmodel.py) against published measurements: today's kernels, executed on the PTX
interpreter with sampled CTAs, modelled on an H100 SXM5 (and the attention also on an A100), beside
FlashAttention-2's published throughput at FlashAttention's benchmark shapes, and a GEMM at 4096^3.

    python -m bench.runs.perfmodel_calibration --out bench/results/DATE-perfmodel-calibration.json

Attention: FlashAttention's forward benchmark (FA2 paper section 4.1, FA3 section 4.1): fp16, no mask, hidden
2048 (head dim 64: 32 heads; 128: 16 heads), batch x seq = 16k tokens, FLOPs = 4 seq^2 head_dim heads batch.
Each shape is an ONNX attention (Q·Kᵀ·d^-0.5 -> Softmax -> ·V) rewritten for sm_90a (today's renderer and
route), profiled with `--sample-ctas` CTAs interpreted and the counts scaled; `--configs` adds the same
kernel forced onto other tiles of the menu (the route excluded from choosing, a private kernel cache).
GEMM: an fp16 MatMul M x K by a K x N weight, likewise.

Counts of a sampled run are exact per CTA (every CTA of these launches does the same work), but its DRAM
bytes are scaled from the sampled CTAs' unique sectors; they are replaced by the compulsory bytes (every
input and output once), which an every-CTA run counts as its unique sectors. Every time is MODELLED.

`--nvdisasm PATH` (CUDA's disassembler, e.g. from the nvidia-cuda-nvdisasm wheel; not a PlusEP dependency)
adds each kernel's static instruction counts, PTX against SASS (NOPs left out): the model charges the
interpreter's PTX instruction issues, and this says how far SASS is from that, statically.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import pathlib
import re
import subprocess
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from bench.harness.env_info import env_info
from plus_ep.kernels import perfmodel
from plus_ep.rewrite import rewrite_detailed
from plus_ep.verification.profile import model_kernel, profile

TOKENS, HIDDEN = 16384, 2048
# FlashAttention-2's forward throughput, fp16, no causal mask, TFLOP/s at FlashAttention's benchmark shapes:
# H100 SXM5 at seq 16k from FA3's Fig. 5 (arXiv:2407.08608; values as transcribed in
# viktor-shcherb/msc_thesis references/2024-12-flashattention-3/analysis.md); A100 80GB SXM4 from FA2's Fig. 5
# (arXiv:2307.08691; transcribed in the same repository, references/2024-05-flashattention-2/sections/
# 04_empirical-validation.md). FA3's abstract: FA2 reaches "only 35%" of the H100's peak.
FA2_FWD = {"sm_90a": {(64, 16384): 324, (128, 16384): 370},
           "sm_80": {(64, 2048): 193, (64, 4096): 192, (64, 8192): 192, (64, 16384): 192,
                     (128, 2048): 200, (128, 4096): 224, (128, 8192): 222, (128, 16384): 225}}
FA2_SOURCE = ("H100: FA3 paper (arXiv:2407.08608) Fig. 5, FlashAttention-2 bars at 16k; A100: FA2 paper "
              "(arXiv:2307.08691) Fig. 5; both as transcribed in viktor-shcherb/msc_thesis (references/"
              "2024-12-flashattention-3/analysis.md, references/2024-05-flashattention-2/sections/"
              "04_empirical-validation.md); FA3 abstract: FA2 reaches 35 % of the H100's peak")


def attention_model(batch: int, heads: int, seq: int, dim: int, key_major: bool = False) -> onnx.ModelProto:
    """softmax(Q·Kᵀ·dim^-0.5)·V in fp16, Q, K, V [batch, heads, seq, dim]; `key_major`: K comes as Kᵀ
    [batch, heads, dim, seq] (materialised, as BERT's Q/K/V GEMM stores it) instead of through a Transpose."""
    f16 = TensorProto.FLOAT16
    ins = [helper.make_tensor_value_info(n, f16, [batch, heads, dim, seq] if n == "kt" else [batch, heads, seq, dim])
           for n in ("q", "kt" if key_major else "k", "v")]
    out = helper.make_tensor_value_info("o", f16, [batch, heads, seq, dim])
    scale = numpy_helper.from_array(np.array(dim ** -0.5, np.float16), "scale")
    nodes = ([] if key_major else [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2])]) + [
        helper.make_node("MatMul", ["q", "kt"], ["s0"]), helper.make_node("Mul", ["s0", "scale"], ["s"]),
        helper.make_node("Softmax", ["s"], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["o"])]
    g = helper.make_graph(nodes, "attention", ins, [out], [scale])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


def gemm_model(m: int, n: int, k: int) -> onnx.ModelProto:
    f16 = TensorProto.FLOAT16
    w = numpy_helper.from_array((np.random.default_rng(0).standard_normal((k, n)) * k ** -0.5).astype(np.float16),
                                "w")
    g = helper.make_graph([helper.make_node("MatMul", ["a", "w"], ["c"])], "gemm",
                          [helper.make_tensor_value_info("a", f16, [m, k])],
                          [helper.make_tensor_value_info("c", f16, [m, n])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


@contextlib.contextmanager
def private_cache(prefix: str = "perfmodel_cal_cache_"):
    """A private kernel cache root for the block, the in-process render cache emptied on entry and on exit, so
    that no cache hands a render made under a forced route to anyone else (or the other way round)."""
    from plus_ep import config
    from plus_ep.kernels.render import clear_render_cache
    old = config.get("PLUS_EP_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix=prefix) as cache:
        os.environ["PLUS_EP_CACHE_DIR"] = cache
        clear_render_cache()
        try:
            yield
        finally:
            clear_render_cache()
            if old is None:
                os.environ.pop("PLUS_EP_CACHE_DIR", None)
            else:
                os.environ["PLUS_EP_CACHE_DIR"] = old


@contextlib.contextmanager
def forced_attention_config(name: str | None):
    """The attention route held to one config of the menu (None: today's route), in a private_cache."""
    if name is None:
        yield
        return
    from plus_ep.kernels.families.flash_attention import routes as ar
    real = ar.attention_routes

    def forced(B, H, Sq, Skv, D, target, syms, math_=0, **_):
        picks = real(B, H, Sq, Skv, D, target, syms, math_)
        menu = {c.name: c for c in ar.ac.all_configs()}
        return [(cond, menu[name]) for cond, _ in picks]
    with private_cache():
        ar.attention_routes = forced
        try:
            yield
        finally:
            ar.attention_routes = real


def static_counts(model: onnx.ModelProto, nvdisasm: str) -> list[dict]:
    """Per kernel of the rewritten model's sm_90a images: static PTX instructions (as the interpreter parses
    them) and SASS instructions (nvdisasm, NOPs left out)."""
    from onnx import numpy_helper

    from plus_ep.kernels.ptx import Module
    from plus_ep.kernels.wire.pack import parse as parse_pack
    out = []
    for node in model.graph.node:
        for a in node.attribute:
            if a.name != "plus_images_sm_90a":
                continue
            for im in parse_pack(numpy_helper.to_array(a.t).tobytes()):
                if im.ptx is None:
                    continue
                with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
                    f.write(im.cubin)
                    f.flush()
                    text = subprocess.run([nvdisasm, "-c", f.name], capture_output=True, text=True,
                                          check=True).stdout
                sass, cur = {}, None
                for ln in text.splitlines():
                    m = re.match(r"\s*\.text\.(\w+):", ln)
                    if m:
                        cur = m.group(1)
                    elif cur and re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+\S", ln) and " NOP" not in ln:
                        sass[cur] = sass.get(cur, 0) + 1
                ptx = im.ptx if isinstance(im.ptx, str) else im.ptx.decode()
                mod = Module.parse(ptx, name="static")
                for name, n in sorted(sass.items()):
                    p = len(mod.kernel(name).ops)
                    out.append({"entry": name, "ptx": p, "sass": n, "sass_per_ptx": round(n / p, 3)})
    return out


def profile_one(model: onnx.ModelProto, sample: int, config: str | None = None, nvdisasm: str | None = None) -> dict:
    """(the single fused node's profile row, rewrite seconds, profile seconds[, static counts])."""
    t0 = time.perf_counter()
    with forced_attention_config(config):
        r = rewrite_detailed(model, archs=["sm_90a"])
    t1 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "m.onnx"
        onnx.save(r.model, path)
        rep = profile(str(path), arch="sm_90a", sample_ctas=sample)
    if rep["errors"] or len(rep["nodes"]) != 1 or rep["nodes"][0]["errors"]:
        raise RuntimeError(f"profile failed: {rep['errors']} {[n['errors'] for n in rep['nodes']]}")
    out = {"node": rep["nodes"][0], "rewrite_s": round(t1 - t0, 1), "profile_s": round(time.perf_counter() - t1, 1)}
    if nvdisasm:
        out["static_instructions"] = static_counts(r.model, nvdisasm)
    return out


def remodel(node: dict, arch: str) -> list[dict]:
    """Each launch of the node modelled on `arch`, its DRAM bytes the node's compulsory bytes (module doc)."""
    out = []
    for k in node["per_kernel"]:
        m = dict(k["model_inputs"], dram_bytes=node["compulsory_bytes"] / len(node["per_kernel"]))
        out.append({"entry": k["entry"], "grid": k["grid"], "block": k["block"], "registers": k["registers"],
                    "smem": k["smem"], **model_kernel(m, arch)})
    return out


def summary_row(what: dict, node: dict, flops: float, arch: str) -> dict:
    kernels = remodel(node, arch)
    us = sum(k["modelled_us"] for k in kernels)
    peak = perfmodel.part(arch).peak("fp16")
    tflops = flops / (us * 1e-6) / 1e12
    m = node["per_kernel"][0]["model_inputs"]
    return {**what, "arch": arch, "part": perfmodel.part(arch).name, "flops": flops, "modelled_us": round(us, 2),
            "modelled_tflops": round(tflops, 1), "efficiency": round(tflops * 1e12 / peak, 3),
            "peak_tflops": round(peak / 1e12, 1), "bound": kernels[0]["bound"], "terms_us": kernels[0]["terms_us"],
            "per_kernel": kernels, "interpreted_tensor_flops": m["tensor"],
            "warp_instructions_per_mma_flop_k": round(m["warp_instructions"] / max(1.0, sum(m["tensor"].values()))
                                                      * 1e3, 3)}


def rows_of(what: dict, node: dict) -> list[dict]:
    """The summary rows of one profiled shape: attention on the H100 and the A100 (the fp16 attention's PTX is
    the same for sm_80 and sm_90a but for the .target line), the GEMM on the H100."""
    if what["kind"] == "gemm":
        return [summary_row(what, node, 2.0 * what["m"] * what["n"] * what["k"], "sm_90a")]
    dim, seq = what["head_dim"], what["seq"]
    flops = 4.0 * seq * seq * dim * what["heads"] * what["batch"]
    out = []
    for arch in ("sm_90a", "sm_80"):
        row = summary_row(what, node, flops, arch)
        fa2 = FA2_FWD[arch].get((dim, seq))
        if fa2:
            row["fa2_published_tflops"] = fa2
            row["fa2_published_efficiency"] = round(fa2 * 1e12 / perfmodel.part(arch).peak("fp16"), 3)
            row["modelled_over_fa2"] = round(row["modelled_tflops"] / fa2, 3)
        out.append(row)
    return out


def issue_table(dims, key_major: bool) -> dict:
    """Per f16/bf16 attention config of the menu at each head dim: the interpreter's warp instructions and MUFU
    operations per CTA at 2 and 4 key tiles (one CTA of a [1, 1, S, D] problem, S = tiles x the key tile),
    fitted as a + b x key tiles: what a route model by perfmodel needs to compare the tiles."""
    from plus_ep.kernels.families.flash_attention import configs as ac
    out = {}
    for dim in dims:
        for cfg in ac.configs_for(ac.MATH_F16, dim):
            pts = []
            for tiles in (2, 4):
                r = profile_one(attention_model(1, 1, tiles * cfg.bkv, dim, key_major), 1, cfg.name)
                m = r["node"]["per_kernel"][0]["model_inputs"]
                pts.append((tiles, m["warp_instructions"] / m["ctas"], m["mufu"] / m["ctas"]))
            (t0, w0, u0), (t1, w1, u1) = pts
            b, mb = (w1 - w0) / (t1 - t0), (u1 - u0) / (t1 - t0)
            out[cfg.name] = {"warps": cfg.warps, "bq": cfg.bq, "bkv": cfg.bkv, "head_dim": dim,
                             "warp_instructions": {"a": w0 - b * t0, "b": b}, "mufu": {"a": u0 - mb * t0, "b": mb}}
    return out


def routing_evidence(table: dict, shapes) -> list[dict]:
    """Each config of the table modelled (perfmodel.launch_time, sm_90a) at (batch, heads, seq, head dim): its
    measured issues and MUFU operations, tensor FLOPs of its padded tiles, K/V re-read per CTA through L2,
    Q, K, V and O once from DRAM; beside the config today's attention route picks."""
    import math

    from plus_ep.kernels.families.flash_attention import configs as ac
    from plus_ep.kernels.families.flash_attention import routes as ar
    from plus_ep.kernels.codegen import symdim
    from plus_ep.kernels.target import Target
    out = []
    for b, h, s, d in shapes:
        route = ar.attention_routes(b, h, s, s, d, Target("sm_90a"), symdim.Symbols(), math_=ac.MATH_F16)[0][1].name
        us = {}
        for name, e in table.items():
            if e["head_dim"] != d:
                continue
            cfg = ac.by_name(name)
            tiles, ctas = math.ceil(s / cfg.bkv), math.ceil(s / cfg.bq) * h * b
            f = ctas * 4.0 * cfg.bq * tiles * cfg.bkv * d
            w, u = e["warp_instructions"], e["mufu"]
            us[name] = round(perfmodel.launch_time(
                "sm_90a", ctas=ctas, threads=cfg.threads, smem=cfg.smem_bytes, flops=f, tensor={"mma.fp16": f},
                warp_instructions=ctas * (w["a"] + w["b"] * tiles), mufu=ctas * (u["a"] + u["b"] * tiles),
                dram_bytes=b * h * 4 * s * d * 2, l2_bytes=ctas * (2 * cfg.bq + 2 * tiles * cfg.bkv) * d * 2).modelled_us, 2)
        best = min(us, key=us.get)
        out.append({"batch": b, "heads": h, "seq": s, "head_dim": d, "route": route, "modelled_us": us,
                    "model_best": best, "route_over_best": round(us[route] / us[best], 2)})
    return out


def summary(rows: list[dict]) -> dict:
    """The comparisons the rows support: at each head dim, today's route and the largest tile against FA2's
    published forward throughput (H100 at 16k; A100 at every length), and the drop from the A100 to the H100
    in the model beside the drop in FA2's published numbers."""
    out = {}
    for dim in sorted({r["head_dim"] for r in rows if r["kind"] == "attention"}):
        d = {}
        for cfg, layout in sorted({(r["config"], r.get("k_layout", "")) for r in rows if r.get("head_dim") == dim}):
            at = {(r["arch"], r["seq"]): r for r in rows
                  if r.get("head_dim") == dim and r["config"] == cfg and r.get("k_layout", "") == layout}
            h, a = at.get(("sm_90a", 16384)), at.get(("sm_80", 16384))
            if not (h and a):
                continue
            d[f"{cfg}, K {layout}" if layout else cfg] = {"h100_16k_efficiency": h["efficiency"], "h100_16k_over_fa2": h.get("modelled_over_fa2"),
                      "a100_over_fa2_by_seq": {s: r.get("modelled_over_fa2") for (arch, s), r in sorted(at.items())
                                               if arch == "sm_80"},
                      "h100_over_a100_efficiency": round(h["efficiency"] / a["efficiency"], 3)}
        fa2_h = FA2_FWD["sm_90a"].get((dim, 16384))
        fa2_a = FA2_FWD["sm_80"].get((dim, 16384))
        if fa2_h and fa2_a:
            d["fa2_published_h100_over_a100_efficiency"] = round(
                (fa2_h / perfmodel.part("sm_90a").peak("fp16")) / (fa2_a / perfmodel.part("sm_80").peak("fp16")), 3)
        out[f"head_dim_{dim}"] = d
    for r in rows:
        if r["kind"] == "gemm":
            out[f"gemm_{r['m']}x{r['n']}x{r['k']}_efficiency"] = r["efficiency"]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--sample-ctas", type=int, default=2)
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--seqs", default="2048,4096,8192,16384")
    ap.add_argument("--configs", default="route,largest",
                    help="'route' (today's choice), 'largest' (the menu's largest query tile) or config names")
    ap.add_argument("--key-major", action="store_true",
                    help="K as a materialised Kᵀ input (BERT's layout) instead of K through a Transpose")
    ap.add_argument("--gemm", default="4096,4096,4096", help="M,N,K of the GEMM ('' for none)")
    ap.add_argument("--nvdisasm", default=None, help="path of nvdisasm: add static PTX vs SASS counts")
    ap.add_argument("--static", default=None,
                    help="a JSON list of static PTX / SASS counts (static_counts) to record with the rows")
    ap.add_argument("--issue-table", default=None,
                    help="head dims (e.g. 64,128): measure the f16 attention menu's issues per key tile "
                         "(issue_table) and model each config at BERT and FlashAttention shapes")
    ap.add_argument("--remodel", default=None,
                    help="a previous output: re-state its rows with the current model from its runs' model "
                         "inputs, without the interpreter")
    a = ap.parse_args(argv)
    from plus_ep.kernels.families.flash_attention import configs as ac
    t0 = time.perf_counter()
    rows, runs = [], []
    if a.issue_table:
        dims = [int(x) for x in a.issue_table.split(",")]
        table = issue_table(dims, a.key_major)
        shapes = [(b, 12, 128, 64) for b in (1, 8, 16)] + [(TOKENS // s, HIDDEN // d, s, d) for d in dims
                                                           for s in (2048, 16384)]
        out = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "what": ("the f16 attention menu's interpreter counts per key tile (K "
                        + ("a materialised Kᵀ" if a.key_major else "through a Transpose") + ") and each config "
                        "MODELLED at BERT-base and FlashAttention shapes beside today's route's choice"),
               "note": "MODELLED, not measured; not verified on a GPU", "env": env_info(), "table": table,
               "shapes": [s for s in shapes if s[3] in dims], "evidence": routing_evidence(table, [
                   s for s in shapes if s[3] in dims]), "wall_s": round(time.perf_counter() - t0, 1)}
        if a.out:
            pathlib.Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
        print(json.dumps(out["evidence"], indent=1))
        return 0
    if a.remodel:
        prev = json.loads(pathlib.Path(a.remodel).read_text())
        runs = prev["runs"]
        for r in runs:
            what = {k: v for k, v in r.items() if k not in ("rewrite_s", "profile_s", "static_instructions", "node")}
            rows += rows_of(what, r["node"])
        a.sample_ctas = prev.get("sample_ctas", a.sample_ctas)
    for dim in (int(x) for x in ("" if a.remodel else a.dims).split(",") if x):
        heads = HIDDEN // dim
        for seq in (int(x) for x in a.seqs.split(",") if x):
            batch = TOKENS // seq
            for cfg in a.configs.split(","):
                forced = None if cfg == "route" else (ac.configs_for(ac.MATH_F16, dim)[0].name if cfg == "largest"
                                                      else cfg)
                r = profile_one(attention_model(batch, heads, seq, dim, a.key_major), a.sample_ctas, forced,
                                a.nvdisasm)
                node = r["node"]
                what = {"kind": "attention", "head_dim": dim, "heads": heads, "batch": batch, "seq": seq,
                        "k_layout": "as a materialised Kᵀ" if a.key_major else "through a Transpose",
                        "config": "route" if forced is None else forced,
                        "launch": [(k["grid"], k["block"]) for k in node["per_kernel"]]}
                rows += rows_of(what, node)
                runs.append({**what, "rewrite_s": r["rewrite_s"], "profile_s": r["profile_s"],
                             "static_instructions": r.get("static_instructions"), "node": node})
                print(json.dumps({k: rows[-2][k] for k in ("head_dim", "seq", "config", "modelled_tflops",
                                                           "efficiency", "bound")}), flush=True)
    if a.gemm and not a.remodel:
        m, n, k = (int(x) for x in a.gemm.split(","))
        r = profile_one(gemm_model(m, n, k), a.sample_ctas, nvdisasm=a.nvdisasm)
        what = {"kind": "gemm", "m": m, "n": n, "k": k, "config": "route",
                "launch": [(kk["grid"], kk["block"]) for kk in r["node"]["per_kernel"]]}
        rows += rows_of(what, r["node"])
        runs.append({**what, "rewrite_s": r["rewrite_s"], "profile_s": r["profile_s"],
                     "static_instructions": r.get("static_instructions"), "node": r["node"]})
        print(json.dumps({kk: rows[-1][kk] for kk in ("m", "modelled_tflops", "efficiency", "bound")}), flush=True)
    out = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "what": ("the time model (kernels/perfmodel.py) against published measurements: today's attention "
                    "kernel at FlashAttention's forward benchmark shapes and a GEMM, on the PTX interpreter "
                    f"({a.sample_ctas} CTAs sampled per launch, counts scaled; DRAM bytes = compulsory), "
                    "MODELLED H100 SXM5 / A100 times beside FlashAttention-2's published throughput"),
           "note": "MODELLED, not measured; not verified on a GPU", "env": env_info(), "sample_ctas": a.sample_ctas,
           "remodelled_from": a.remodel, "fa2_source": FA2_SOURCE,
           "peaks": {arch: {kk: v.flops for kk, v in perfmodel.part(arch).peaks.items()} for arch in ("sm_90a", "sm_80")},
           "sources": perfmodel.SOURCES, "summary": summary(rows),
           "static_instructions": json.loads(pathlib.Path(a.static).read_text()) if a.static else None,
           "rows": rows, "wall_s": round(time.perf_counter() - t0, 1), "runs": runs}
    if a.out:
        pathlib.Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
