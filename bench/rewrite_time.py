"""Time `plus_ep.rewrite` on a model-zoo export (default: BERT-base, 12 layers, hidden 768).

    python bench/rewrite_time.py [--family bert] [--exporter torchscript dynamo] [--size real] [--repeat 5]

Writes bench/results/<date>-rewrite-<family>.json. CPU only: the rewrite needs no GPU.
"""
from __future__ import annotations

import argparse
import datetime
import json
import pathlib
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from bench.env_info import env_info  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="bert")
    ap.add_argument("--exporter", nargs="+", default=["torchscript", "dynamo"])
    ap.add_argument("--size", default="real")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default=str(pathlib.Path(__file__).parent / "results"))
    args = ap.parse_args(argv)

    import onnx

    from plus_ep import zoo
    from plus_ep.report import data_kernels
    from plus_ep.rewrite import rewrite_detailed

    runs = []
    for exporter in args.exporter:
        path = zoo.export(args.family, exporter, args.size)
        model = onnx.load(path)
        times, result = [], None
        for _ in range(args.repeat):
            start = time.perf_counter()
            result = rewrite_detailed(model)
            times.append(time.perf_counter() - start)
        runs.append({"family": args.family, "exporter": exporter, "size": args.size,
                     "nodes": len(model.graph.node), "subgraphs": len(result.subgraphs),
                     "data_kernels_before": data_kernels(model), "data_kernels_after": data_kernels(result.model),
                     "rewrite_s_median": round(statistics.median(times), 3),
                     "rewrite_s_all": [round(t, 3) for t in times]})
        print(f"{args.family}/{exporter}/{args.size}: rewrite median {runs[-1]['rewrite_s_median']} s "
              f"({runs[-1]['data_kernels_before']} -> {runs[-1]['data_kernels_after']} data kernels)")
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = out / f"{datetime.date.today().isoformat()}-rewrite-{args.family}-{args.size}.json"
    name.write_text(json.dumps({"env": env_info(), "runs": runs}, indent=2) + "\n")
    print(f"wrote {name}")


if __name__ == "__main__":
    main()
