"""The GEMM route model's choice and MODELLED time (kernels/families/gemm/routes.py, kernels/perfmodel.py on the
arch's reference part: an H100 SXM5 for sm_90a) for GEMM 4096^3 and BERT-base's GEMMs at M = batch x seq = 2048
(fp16, B a [K, N] weight with tensor maps, so the TMA tiles are on the menu): per GEMM the route taken, its
modelled time, the tensor floor (FLOPs at the dense wgmma peak), the share of that peak it reaches, and the
terms of its plus_gemm launch (which binds: tensor, issue, L2, DRAM). The GEMM + LayerNorm rows take the route
of the one-kernel row tile, the one-launch row finish or the two-kernel plan, as the renderer does (every tile
width's cluster menu). No interpreter: the model's analytic counts (ISSUES are the interpreter's).

    python -m bench.runs.gemm_routes [--m 2048] [--out bench/results/DATE-gemm-routes-bert-base-b16.json]
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import pathlib

from onnx import TensorProto

from bench.harness.env_info import env_info
from plus_ep.kernels import perfmodel
from plus_ep.kernels.families.gemm import routes as R
from plus_ep.kernels.families.gemm import sm90a_configs as gc
from plus_ep.kernels.target import Target

ARCH = "sm_90a"
F16 = TensorProto.FLOAT16


def cases(m: int) -> list:
    """(name, kind, M, N, K, batch, a_batch): kind "plain" or "norm" (GEMM + LayerNorm over rows of N)."""
    return [("gemm 4096^3", "plain", 4096, 4096, 4096, 1, None),
            ("QKV group (3 x 768 x 768, one A)", "plain", m, 768, 768, 3, 1),
            ("out-proj + LayerNorm (768 x 768)", "norm", m, 768, 768, 1, None),
            ("FFN1 + GELU (3072 x 768)", "plain", m, 3072, 768, 1, None),
            ("FFN2 (768 x 3072), plain", "plain", m, 768, 3072, 1, None),
            ("FFN2 + LayerNorm (768 x 3072)", "norm", m, 768, 3072, 1, None)]


@contextlib.contextmanager
def launches():
    """Records every perfmodel.launch_time estimate made inside the block (the route model's launches)."""
    seen, orig = [], perfmodel.launch_time

    def spy(*a, **kw):
        est = orig(*a, **kw)
        seen.append(est)
        return est
    perfmodel.launch_time = spy
    try:
        yield seen
    finally:
        perfmodel.launch_time = orig


def _first(routes_):
    """The route taken at the sampled M (a static M gives one route)."""
    return routes_[0][1:] if len(routes_[0]) == 3 else ("gemm", routes_[0][1])


def row(name, kind, m, n, k, batch, a_batch) -> dict:
    target = Target(ARCH, "exact", frozenset())
    if kind == "plain":
        (_, choice), = R.gemm_routes(m, n, k, batch, F16, target, None, a_batch=a_batch, tma=True)
        how = "gemm"
        with launches() as seen:
            R.gemm_time(choice.cfg, m, n, k, batch, ARCH, choice.split, choice.csplit, a_batch=a_batch)
    else:
        menus = [(-(-n // bn), gc.cluster_menu(bn)) for bn in gc.CLUSTER_WIDTHS if -(-n // bn) <= gc.CLUSTER_MAX]
        (_, how, choice), = R.gemm_norm_routes(m, n, k, F16, target, None, tile_menus=menus, finish=True, tma=True)
        with launches() as seen:
            if how == "tile":
                R.gemm_time(choice.cfg, m, n, k, 1, ARCH, csplit=choice.csplit, cx=choice.cx)
            else:
                R.gemm_time(choice.cfg, m, n, k, 1, ARCH, csplit=choice.csplit, out_bytes=4,
                            persistent=how != "one" or not gc.is_ws(choice.cfg))
    est = seen[0]
    flops = 2.0 * m * n * k * batch
    floor = flops / perfmodel.part(ARCH).unit_peak("wgmma.fp16") * 1e6
    return {"gemm": name, "M": m, "N": n, "K": k, "batch": batch, "route": how, "choice": choice.label,
            "modelled_us": round(choice.us, 3), "tensor_floor_us": round(floor, 3),
            "pct_of_dense_peak": round(100 * floor / choice.us, 1),
            "gemm_launch": {"ctas": est.ctas, "bound": est.bound, "modelled_us": round(est.modelled_us, 3),
                            "terms_us": {t: round(v, 3) for t, v in est.terms_us.items() if v}}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", type=int, default=2048, help="rows of BERT's GEMMs (batch x seq)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    rows = [row(*c) for c in cases(a.m)]
    layer = [r for r in rows if r["gemm"].startswith(("QKV", "out-proj", "FFN1", "FFN2 +"))]
    out = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "what": "GEMM route model: route, MODELLED time, tensor floor and binding term per GEMM, H100 SXM5 "
                   "(sm_90a, fp16); not measurements, GPU timing not measured (no GPU)",
           "env": env_info(), "part": perfmodel.part(ARCH).name, "rows": rows,
           "bert_layer": {"modelled_us": round(sum(r["modelled_us"] for r in layer), 2),
                          "tensor_floor_us": round(sum(r["tensor_floor_us"] for r in layer), 2)}}
    text = json.dumps(out, indent=1)
    if a.out:
        pathlib.Path(a.out).write_text(text + "\n")
    for r in rows:
        print(f"{r['gemm']:36s} {r['choice']:44s} {r['modelled_us']:8.2f} us  floor {r['tensor_floor_us']:7.2f}  "
              f"{r['pct_of_dense_peak']:5.1f} %  {r['gemm_launch']['bound']}")
    print("BERT layer GEMMs:", out["bert_layer"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
