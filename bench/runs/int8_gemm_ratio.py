"""MODELLED time of one BERT-base layer's four projections at batch 16 x seq 128 (M = 2048) with 8-bit against fp16
operands on sm_90a (and sm_80 for reference), the route model's fastest variant each (kernels/families/gemm/routes.py,
kernels/perfmodel.py), per 8-bit menu: the mma.sync tiles alone (before the 8-bit TMA GEMM), with the 8-bit TMA tiles
for a weight stored [K, N] (MatMulInteger's, transposed in shared memory: what a QDQ model gets) and for one stored
[N, K]; each with the output bytes the GEMM stores: 4 (the s32 sum or the float its epilogue makes: the issue's
benchmark definition, bench/runs/quantized_minilm.py) and "requantized" (1 byte where the consumer quantizes the
output again: QKV and FFN-in; 4 where a LayerNorm follows: attention-out and FFN-out). fp16 stores 2 bytes. Not
measured on a GPU.

    python -m bench.runs.int8_gemm_ratio [--out FILE]
"""
from __future__ import annotations

import argparse
import datetime
import json
import pathlib
import sys

from bench import RESULTS
from bench.harness.env_info import env_info
from bench.runs.quantized_minilm import BERT_BASE_PROJECTIONS

REQUANTIZED = {"qkv": 1, "attention_out": 4, "ffn_in": 1, "ffn_out": 4}


def ratios(arch: str, m: int = 2048) -> dict:
    from onnx import TensorProto

    from plus_ep.kernels.families.gemm import configs as gemm_configs
    from plus_ep.kernels.families.gemm import routes
    from plus_ep.kernels.target import Target
    target = Target(arch, "tf32")
    f16_menu = routes.gemm_menu(routes.gemm_math(TensorProto.FLOAT16, "tf32"), arch, tma=True)
    f16 = {k: routes.gemm_candidates(m, n, kk, 1, f16_menu, target)[0] for k, (kk, n) in BERT_BASE_PROJECTIONS.items()}
    f16_us = sum(c.us for c in f16.values())
    menus = {"mma_sync_only": gemm_configs.configs(gemm_configs.MATH_INT8),
             "tma_weight_kn": routes.gemm_menu(gemm_configs.MATH_INT8, arch, tma=True),
             "tma_weight_nk": routes.gemm_menu(gemm_configs.MATH_INT8, arch, tma=True, b_kmajor=True)}
    out = {"fp16_us": round(f16_us, 2), "fp16_routes": {k: [c.label, round(c.us, 2)] for k, c in f16.items()}}
    for name, menu in menus.items():
        for outs, obytes in (("out4", {}), ("requantized", REQUANTIZED)):
            best = {k: routes.gemm_candidates(m, n, kk, 1, menu, target, allow_splitk=False,
                                              out_bytes=obytes.get(k))[0]
                    for k, (kk, n) in BERT_BASE_PROJECTIONS.items()}
            us = sum(c.us for c in best.values())
            out[f"{name}/{outs}"] = {"int8_us": round(us, 2), "ratio": round(us / f16_us, 3),
                                     "routes": {k: [c.label, round(c.us, 2)] for k, c in best.items()}}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    rec = {"what": "MODELLED BERT-base layer GEMMs, b16 x s128, int8 / fp16 (kernels/perfmodel.py; not measured)",
           "command": "python -m bench.runs.int8_gemm_ratio", "projections": BERT_BASE_PROJECTIONS,
           "requantized_out_bytes": REQUANTIZED, "env": env_info(),
           "archs": {arch: ratios(arch) for arch in ("sm_90a", "sm_80")}}
    print(json.dumps({a: {k: v["ratio"] for k, v in r.items() if isinstance(v, dict) and "ratio" in v}
                      for a, r in rec["archs"].items()}, indent=1))
    out = pathlib.Path(args.out) if args.out else RESULTS / f"{datetime.date.today().isoformat()}-int8-gemm-ratio.json"
    out.write_text(json.dumps(rec, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
