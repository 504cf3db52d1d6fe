"""Host costs (issue 24), CPU time on this machine, each in a fresh process:

  * `import plus_ep` against `import onnxruntime` (process CPU time of the import statement, median of runs);
  * the zoo's small BERT (TorchScript export, 12 layers) rewritten with sm_90a kernels: cold (an empty kernel
    cache: every kernel compiled), then warm in the same process (kernels cached, renders kept by the
    subgraph's canonical form), and warm in a new process (the kernel cache on disk, nothing rendered yet).

    python -m bench.runs.host_costs [--runs 5] [--out bench/results/DATE-host-costs.json]
"""
from __future__ import annotations

import argparse
import datetime
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile

from bench.harness.env_info import env_info

IMPORT = ("import resource, time\n"
          "t = time.process_time()\n"
          "import {mod}\n"
          "print(time.process_time() - t)\n")

REWRITE = r"""
import json, resource, sys
def cpu():
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime
from plus_ep import zoo
model = zoo.load("bert", "torchscript", "small")
from plus_ep.rewrite import rewrite_detailed
from plus_ep.kernels.compile.cache import KernelCache
cache = KernelCache(sys.argv[1])
out = []
for i in range(int(sys.argv[2])):
    t = cpu()
    r = rewrite_detailed(model, archs=["sm_90a"], cache=cache)
    out.append({"cpu_s": round(cpu() - t, 3), "compiled": r.kernels.compiled, "cached": r.kernels.cached,
                "subgraphs": len(r.subgraphs)})
print(json.dumps(out))
"""


def _py(code: str, *args) -> str:
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                          check=True).stdout.strip().splitlines()[-1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    imports = {m: [float(_py(IMPORT.format(mod=m))) for _ in range(a.runs)] for m in ("onnxruntime", "plus_ep")}
    med = {m: round(statistics.median(v), 3) for m, v in imports.items()}
    with tempfile.TemporaryDirectory() as tmp:
        first = json.loads(_py(REWRITE, tmp, 3))          # cold, then warm twice in the same process
        again = json.loads(_py(REWRITE, tmp, 1))          # a new process, the kernel cache warm
    cold, warm = first[0]["cpu_s"], min(x["cpu_s"] for x in first[1:])
    out = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "what": "issue 24 host costs, CPU seconds on this machine (2 cores shared with other work)",
           "env": env_info(),
           "import_cpu_s": {"onnxruntime": imports["onnxruntime"], "plus_ep": imports["plus_ep"], "median": med,
                            "ratio": round(med["plus_ep"] / med["onnxruntime"], 2), "criterion_ratio": 2.0},
           "rewrite_zoo_bert_small": {"cold_then_warm_same_process": first, "warm_new_process": again,
                                      "warm_over_cold": round(warm / cold, 3),
                                      "warm_new_process_over_cold": round(again[0]["cpu_s"] / cold, 3),
                                      "criterion": 0.25}}
    if a.out:
        pathlib.Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "env"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
