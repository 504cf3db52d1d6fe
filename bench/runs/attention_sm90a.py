"""The sm_90a attention body (attention_sm90a.cuh: wgmma, TMA, producer/consumer warpgroups) beside today's
mma.sync kernel, MODELLED on an H100 SXM5 (kernels/perfmodel.py) from the PTX interpreter's counts: fp16 prefill,
b1 x 32 heads x seq 4096, head dims 64 and 128, non-causal and causal.

    python -m bench.runs.attention_sm90a --out bench/results/DATE-attention-sm90a.json

Each shape is an ONNX attention (Q, K, V [1, 32, S, D] inputs, K through a Transpose, Q·Kᵀ·D^-0.5, for the causal
case Where(causal, ·, -inf) with a bool [1, 1, S, S] mask input as exports pass it, Softmax, ·V) rewritten for
sm_90a and profiled with `--sample-ctas` CTAs interpreted, counts scaled (bench/runs/perfmodel_calibration.py
profile_one; DRAM bytes = the compulsory ones). Three kernels per shape: the route's choice (the sm_90a body), the
mma.sync route today's rule picks (`today_route`: the body kept out of the menu) and the mma.sync menu's largest
tile (`today_largest`). Efficiency = FLOPs / modelled time / the dense fp16 tensor peak (989.4 TFLOP/s); FLOPs
= 4 S² D H B, halved for causal as FlashAttention counts them (`efficiency`), and the full square
(`efficiency_executed`). `--mask input` (the default) passes the causal mask as a bool input, which the kernels
cannot prove causal: every key tile runs, masked by the score hook; `--mask trilu` builds it as torch.onnx's
`is_causal` export does, which they prove, and each block stops at its last visible key tile
(docs/design-notes.md, "Causal attention"). `--table` also measures the sm_90a body's
instructions and MUFU operations per key tile (routes.py ISSUES). Every time is MODELLED, not measured, and not
verified on a GPU.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import pathlib
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from bench.harness.env_info import env_info
from bench.runs.perfmodel_calibration import forced_attention_config, private_cache, profile_one, remodel
from plus_ep.kernels import perfmodel


def attention_model(batch: int, heads: int, seq: int, dim: int, causal: bool, mask: str = "input") -> onnx.ModelProto:
    """softmax(Q·Kᵀ·dim^-0.5 [causal])·V in fp16, Q, K, V [batch, heads, seq, dim]. The causal mask: `input` a bool
    [1, 1, seq, seq] input through Where(mask, s, -inf) (the kernels cannot prove it causal: every key tile runs),
    `trilu` torch.onnx's `is_causal` form, Where(Equal(Trilu(Expand(1, [seq, seq])), 0), -inf, 0) added (proved:
    the key tiles above the diagonal are skipped, attention.cuh PLUS_HAS_ATTN_CAUSAL)."""
    f16 = TensorProto.FLOAT16
    ins = [helper.make_tensor_value_info(n, f16, [batch, heads, seq, dim]) for n in "qkv"]
    inits = [numpy_helper.from_array(np.array(dim ** -0.5, np.float16), "scale")]
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s0"]), helper.make_node("Mul", ["s0", "scale"], ["s"])]
    if causal and mask == "trilu":
        inits += [numpy_helper.from_array(np.array(-np.inf, np.float16), "ninf"),
                  numpy_helper.from_array(np.array(0, np.float16), "zero"),
                  numpy_helper.from_array(np.array(1, np.float16), "one"),
                  numpy_helper.from_array(np.array([seq, seq], np.int64), "dims")]
        nodes += [helper.make_node("Expand", ["one", "dims"], ["ones"]),
                  helper.make_node("Trilu", ["ones"], ["tri"], upper=0),
                  helper.make_node("Equal", ["tri", "zero"], ["above"]),
                  helper.make_node("Where", ["above", "ninf", "zero"], ["bias"]),
                  helper.make_node("Add", ["s", "bias"], ["sm"])]
    elif causal:
        ins.append(helper.make_tensor_value_info("causal", TensorProto.BOOL, [1, 1, seq, seq]))
        inits.append(numpy_helper.from_array(np.array(-np.inf, np.float16), "ninf"))
        nodes.append(helper.make_node("Where", ["causal", "s", "ninf"], ["sm"]))
    nodes += [helper.make_node("Softmax", ["sm" if causal else "s"], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", "v"], ["o"])]
    g = helper.make_graph(nodes, "attention", ins, [helper.make_tensor_value_info("o", f16, [batch, heads, seq, dim])],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


@contextlib.contextmanager
def without_body():
    """Today's routes: the sm_90a body out of the menu (a private cache, the render cache emptied both sides)."""
    from plus_ep.kernels.families.flash_attention import routes as ar
    real = ar.wgmma_menu
    with private_cache("attention_sm90a_cache_"):
        ar.wgmma_menu = lambda *a, **k: []
        try:
            yield
        finally:
            ar.wgmma_menu = real


def row(what: dict, node: dict) -> dict:
    """One kernel at one shape: modelled time on the H100 and the efficiencies (module doc)."""
    kernels = remodel(node, "sm_90a")
    us = sum(k["modelled_us"] for k in kernels)
    full = 4.0 * what["seq"] ** 2 * what["head_dim"] * what["heads"] * what["batch"]
    flops = full / 2 if what["causal"] else full
    peak = perfmodel.part("sm_90a").peak("fp16")
    m = node["per_kernel"][0]["model_inputs"]
    return {**what, "modelled_us": round(us, 2), "flops": flops,
            "modelled_tflops": round(flops / (us * 1e-6) / 1e12, 1),
            "efficiency": round(flops / (us * 1e-6) / peak, 3),
            "efficiency_executed": round(full / (us * 1e-6) / peak, 3),
            "bound": kernels[0]["bound"], "terms_us": kernels[0]["terms_us"], "registers": kernels[0]["registers"],
            "smem": kernels[0]["smem"], "grid": kernels[0]["grid"], "block": kernels[0]["block"],
            "tensor_flops": m["tensor"], "warp_instructions": m["warp_instructions"], "mufu": m["mufu"]}


def issue_table() -> dict:
    """Per sm_90a body config: warp instructions and MUFU operations of one CTA ([1, 1, BQ, tiles x BKV], the
    scale hook) at 2 and 4 key tiles, fitted as a + b x key tiles (routes.py ISSUES)."""
    from plus_ep.kernels.families.flash_attention import configs as ac
    from tests.support import wg_attention_cases as W
    out = {}
    for d, cfgs in ac.WGMMA_CONFIGS.items():
        for cfg in cfgs:
            pts = []
            for tiles in (2, 4):
                _, _, findings, r = W.run(cfg, 1, 1, cfg.bq, tiles * cfg.bkv)
                assert not findings, findings
                c = r.counters
                pts.append((tiles, c["warp_instructions"], c["thread_instructions_by_class"].get("mufu", 0)))
            (t0, w0, u0), (t1, w1, u1) = pts
            b, mb = (w1 - w0) / (t1 - t0), (u1 - u0) / (t1 - t0)
            out[cfg.name] = {"warp_instructions": {"a": w0 - b * t0, "b": b}, "mufu": {"a": u0 - mb * t0, "b": mb}}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--sample-ctas", type=int, default=2)
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--table", action="store_true", help="also measure the body's issues per key tile")
    ap.add_argument("--mask", choices=("input", "trilu"), default="input",
                    help="the causal mask's form (attention_model): trilu lets the kernels skip key tiles")
    ap.add_argument("--causal-only", action="store_true", help="only the causal shapes")
    a = ap.parse_args(argv)
    from plus_ep.kernels.families.flash_attention import configs as ac
    t0 = time.perf_counter()
    rows, runs = [], []
    table = issue_table() if a.table else None
    out = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "what": ("the sm_90a attention body beside today's mma.sync kernel, fp16 prefill b1 x "
                    f"{a.heads} heads x seq {a.seq}, MODELLED on an H100 SXM5 from the PTX interpreter's counts "
                    f"({a.sample_ctas} CTAs sampled per launch, counts scaled; DRAM bytes = compulsory)"),
           "note": "MODELLED, not measured; not verified on a GPU",
           "machine": "2-core AMD EPYC (shared)", "env": env_info(),
           "command": "python -m bench.runs.attention_sm90a " + " ".join(argv if argv is not None else sys.argv[1:]),
           "peak_fp16_tflops": round(perfmodel.part("sm_90a").peak("fp16") / 1e12, 1),
           "issue_targets": {"head_dim_128": 0.55, "head_dim_64": 0.45},
           "rows": rows, "issue_table": table, "runs": runs}

    def save():       # after every row: a crash at exit (the emulated driver's unload) loses nothing
        out["wall_s"] = round(time.perf_counter() - t0, 1)
        if a.out:
            pathlib.Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    for dim in (int(x) for x in a.dims.split(",")):
        for causal in (True,) if a.causal_only else (False, True):
            model = attention_model(1, a.heads, a.seq, dim, causal, a.mask)
            for kernel, ctx in (("sm90a_route", contextlib.nullcontext()), ("today_route", without_body()),
                                ("today_largest", None)):
                if ctx is None:
                    ctx = forced_attention_config(ac.configs_for(ac.MATH_F16, dim)[0].name)
                with ctx:
                    r = profile_one(model, a.sample_ctas)
                node = r["node"]
                what = {"kernel": kernel, "head_dim": dim, "heads": a.heads, "batch": 1, "seq": a.seq,
                        "causal": causal, **({"mask": a.mask} if causal else {})}
                rows.append(row(what, node))
                runs.append({**what, "rewrite_s": r["rewrite_s"], "profile_s": r["profile_s"], "node": node})
                print(json.dumps({k: rows[-1][k] for k in ("kernel", "head_dim", "causal", "modelled_us",
                                                           "efficiency", "efficiency_executed", "bound")}), flush=True)
                save()
    save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
