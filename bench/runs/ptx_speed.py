"""PTX interpreter benchmarks: speed (thread-instructions per second) and emulator counters for the
kernels of one BERT-base fp16 layer at real shape.

    python -m bench.runs.ptx_speed            # both; writes bench/results/<date>-ptx-speed.json and
                                         # bench/results/<date>-ptx-bert-counters.json
    python -m bench.runs.ptx_speed --speed    # only the speed table

Counters are *emulator counts* (modelled from the interpreted execution, a sample of CTAs), not
measurements; see plus_ep/kernels/ptx/counters.py for the model.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time

import numpy as np

from bench import RESULTS
from bench.harness.env_info import env_info
from plus_ep.kernels.families.flash_attention import configs as ac
from plus_ep.kernels.families.gemm import configs as gc
from plus_ep.kernels.families.gemm import sm90a_configs as gc90
from tests.support import ptx_harness as H
from tests.support.ptx_sources import gemm_source, wgmma_source
from tests.support.gemm_variants import Variant



def _gemm_launch(v, arch, batch, M, N, K, sample=None, checks=False):
    wg = v.cfg.startswith("wg_")
    configs = gc90 if wg else gc
    cfg = configs.BY_NAME[v.cfg]
    mod = H.module(wgmma_source(v) if wg else gemm_source(v), arch, v.id)
    rng = np.random.default_rng(0)
    dev = H.Device()
    b_shape = (batch, N, K) if v.b_trans else (batch, K, N)
    a, _ = H.encode(rng.uniform(-1, 1, (batch, M, K)).astype(np.float32), v.dtype)
    b, _ = H.encode(rng.uniform(-1, 1, b_shape).astype(np.float32), v.dtype)
    pa, pb = dev.upload(a, "A"), dev.upload(b, "B")
    pc = dev.alloc(batch * M * N * (2 if v.dtype != "float" else 4), "C")
    params = H.plus_args(ins=(pa, pb), outs=(pc,), v=(batch, M, N, K))
    t0, c0 = time.perf_counter(), time.process_time()
    r = mod.kernel("plus_gemm").launch(configs.grid(cfg, batch, M, N, v.splitk), (cfg.threads, 1, 1), cfg.smem_bytes,
                                       params, dev.mem, checks=checks, sample_ctas=sample)
    return r, time.perf_counter() - t0, time.process_time() - c0


def _attn_launch(cfg, dtype, B, Hh, S, sample=None, checks=False):
    mod = H.module(ac.source(cfg, dtype), "sm_80", cfg.name)
    rng = np.random.default_rng(0)
    dev = H.Device()
    D = cfg.head_dim
    ptrs = [dev.upload(H.encode(rng.standard_normal((B, Hh, S, D)).astype(np.float32) * (D ** -0.25), dtype)[0], n)
            for n in ("Q", "K", "V")]
    po = dev.alloc(B * Hh * S * D * (2 if dtype != "float" else 4), "O")
    params = H.plus_args(ins=ptrs, outs=(po,), v=(B, Hh, Hh, S, S))
    t0, c0 = time.perf_counter(), time.process_time()
    r = mod.kernel("plus_attention").launch(cfg.grid(B, Hh, S), (cfg.threads, 1, 1), cfg.smem_bytes, params, dev.mem,
                                            checks=checks, sample_ctas=sample)
    return r, time.perf_counter() - t0, time.process_time() - c0


def speed() -> dict:
    rows = []
    cases = [
        ("gemm simt fp32 64x64x64", lambda ch: _gemm_launch(Variant("simt_64x64x8_w32x32", "float", 0, 1), "sm_80", 1, 64, 64, 64, checks=ch)),
        ("gemm mma f16 64x64x256", lambda ch: _gemm_launch(Variant("f16_64x64x32_w32x32_s4", "half", 0, 1), "sm_80", 1, 64, 64, 256, checks=ch)),
        ("gemm mma tf32 64x64x256", lambda ch: _gemm_launch(Variant("tf32_64x64x32_w32x32_s3", "float", 0, 1), "sm_80", 1, 64, 64, 256, checks=ch)),
        ("gemm wgmma f16 64x128x256", lambda ch: _gemm_launch(Variant("wg_64x128x64_w64x128_s4", "half", 1, 1), "sm_90a", 1, 64, 128, 256, checks=ch)),
        ("attention mma f16 B1 H2 S64 D64", lambda ch: _attn_launch(ac.by_name("tc_d64_q64_kv64_w4"), "half", 1, 2, 64, checks=ch)),
        ("attention simt fp32 B1 H2 S64 D64", lambda ch: _attn_launch(ac.by_name("simt_d64_q32_kv32_w4"), "float", 1, 2, 64, checks=ch)),
    ]
    for name, fn in cases:
        fn(False)                              # compile + warm
        for checks in (False, True):
            r, wall, cpu = fn(checks)
            ti = r.counters["thread_instructions"]
            rows.append({"kernel": name, "checks": checks, "ctas": len(r.ctas), "wall_s": round(wall, 3),
                         "cpu_s": round(cpu, 3), "warp_instructions": r.counters["warp_instructions"],
                         "thread_instructions": ti, "thread_instructions_per_cpu_s": round(ti / max(cpu, 1e-9)),
                         "thread_instructions_per_wall_s": round(ti / max(wall, 1e-9))})
            print(f"{name:40s} checks={checks!s:5s} {ti:>10d} thread-instrs {cpu:6.2f}s cpu "
                  f"{ti / max(cpu, 1e-9) / 1e6:6.2f} M thread-instr/s", flush=True)
    tot_ti = sum(r["thread_instructions"] for r in rows if not r["checks"])
    tot_cpu = sum(r["cpu_s"] for r in rows if not r["checks"])
    tot_ti_c = sum(r["thread_instructions"] for r in rows if r["checks"])
    tot_cpu_c = sum(r["cpu_s"] for r in rows if r["checks"])
    return {"what": "PTX interpreter speed (plus_ep.kernels.ptx), thread-instructions per CPU second",
            "rows": rows, "thread_instructions_per_cpu_s": round(tot_ti / tot_cpu),
            "thread_instructions_per_cpu_s_with_checks": round(tot_ti_c / tot_cpu_c)}


def bert_layer_counters(sample: int = 4) -> dict:
    """One BERT-base layer, fp16, batch 8 x seq 128 (M = 1024 tokens), hidden 768, 12 heads, FFN 3072."""
    M, Hd, F, B, S, NH = 1024, 768, 3072, 8, 128, 12
    gemms = [("qkv_proj", M, 3 * Hd, Hd), ("attn_out_proj", M, Hd, Hd), ("ffn_up", M, F, Hd), ("ffn_down", M, Hd, F)]
    out = {"what": "emulator counts (modelled, not measurements) for the kernels of one BERT-base fp16 layer",
           "shape": {"batch": B, "seq": S, "hidden": Hd, "heads": NH, "ffn": F}, "sample_ctas": sample,
           "kernels": []}
    paths = [("sm_80", "f16_128x128x32_w64x64_s3"), ("sm_90a", "wg_128x128x64_w64x128_s5")]
    for arch, cfgname in paths:
        for name, m, n, k in gemms:
            v = Variant(cfgname, "half", 1, 1)          # weights [N, K] (Gemm transB=1), aligned
            r, wall, cpu = _gemm_launch(v, arch, 1, m, n, k, sample=sample)
            out["kernels"].append(_row(f"{name} GEMM {m}x{n}x{k}", arch, cfgname, r, cpu))
            print(out["kernels"][-1]["kernel"], arch, f"{cpu:.1f}s", flush=True)
    cfg = ac.by_name("tc_d64_q64_kv64_w4")
    r, wall, cpu = _attn_launch(cfg, "half", B, NH, S, sample=sample)
    out["kernels"].append(_row(f"attention B{B} H{NH} S{S} D64", "sm_80", cfg.name, r, cpu))
    return out


def _row(name, arch, cfg, r, cpu):
    c = r.counters
    row = {"kernel": name, "arch": arch, "config": cfg, "grid": c["grid"], "ctas_run": c["ctas_run"],
           "cpu_s": round(cpu, 2), "warp_instructions": c["warp_instructions"],
           "tensor_core_instructions": c["tensor_core_instructions"], "flops": c["flops"],
           "unique_dram_bytes": c["unique_dram_bytes"]}
    for key, d in c.items():
        if key.startswith(("global_", "shared_")) and isinstance(d, dict):
            row[key] = d
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--speed", action="store_true", help="only the speed table")
    ap.add_argument("--sample", type=int, default=4, help="CTAs per BERT kernel (corners first)")
    a = ap.parse_args(argv)
    day = datetime.date.today().isoformat()
    RESULTS.mkdir(parents=True, exist_ok=True)
    env = env_info()
    path = RESULTS / f"{day}-ptx-speed.json"
    res = {"date": day, "env": env, "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()], **speed()}
    res["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    if path.exists():                          # an earlier run of the day: keep its totals beside
        try:
            old = json.loads(path.read_text())
            res["earlier_run"] = {k: old.get(k) for k in ("thread_instructions_per_cpu_s",
                                                          "thread_instructions_per_cpu_s_with_checks")}
            res["earlier_run"]["env_date"] = old.get("env", {}).get("date")
        except ValueError:
            pass
    path.write_text(json.dumps(res, indent=1) + "\n")
    print("speed:", res["thread_instructions_per_cpu_s"], "thread-instructions per CPU second")
    if not a.speed:
        res = {"date": day, "env": env, **bert_layer_counters(a.sample)}
        (RESULTS / f"{day}-ptx-bert-counters.json").write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
