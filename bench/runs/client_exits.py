"""Acceptance run: consecutive client-library runs with PlusEP on the emulated CUDA driver each exit 0
(issue 38: the emulated driver crashed at interpreter exit after sentence-transformers runs). Cycles
sentence-transformers, Optimum feature extraction, Optimum generate with past KV and onnxruntime-genai on
the tiny local models of tests/support/client_models.py, each run a fresh process
(tests/support/client_runs.py), in the clients' environment (PLUS_EP_CLIENTS_PYTHON, see
docs/developer/testing.md).

    PLUS_EP_CLIENTS_PYTHON=.venv-clients/bin/python python -m bench.runs.client_exits [--runs 20]
        [--out bench/results/DATE-client-exits.json]

Records per run: kind, exit status, seconds, kernels launched, fused nodes that launched, whether the
outputs matched ORT's CPU provider (tokens identical; embeddings within the model tolerance).
"""
from __future__ import annotations

import argparse
import datetime
import json
import pathlib
import sys
import tempfile
import time

from bench.harness.env_info import env_info
from tests.support import client_models

KINDS = ["st", "optimum", "generate", "genai"]


def matched(res: dict | None) -> bool:
    if not res:
        return False
    if "tokens" in res:
        return res["tokens"] == res["want"]
    return res["max_abs"] <= res["tol"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--out", default=f"bench/results/{datetime.date.today()}-client-exits.json")
    args = ap.parse_args(argv)
    py = client_models.clients_python()
    rec = {"what": "consecutive client runs with PlusEP on the emulated CUDA driver (PTX interpreter), each a "
                   "fresh process; exit status of each", "python": py, "env": env_info(), "runs": []}
    with tempfile.TemporaryDirectory() as d:
        out = pathlib.Path(d)
        t0 = time.perf_counter()
        rec["models"] = {k: pathlib.Path(v).name for k, v in client_models.build(out, py).items()}
        rec["build_seconds"] = round(time.perf_counter() - t0, 1)
        for i in range(args.runs):
            kind = KINDS[i % len(KINDS)]
            t0 = time.perf_counter()
            r, res = client_models.run(kind, out, py)
            row = {"run": i + 1, "kind": kind, "exit": r.returncode, "seconds": round(time.perf_counter() - t0, 1),
                   "launches": (res or {}).get("launches"), "nodes": len((res or {}).get("nodes", [])),
                   "errors": (res or {}).get("errors"), "matched": matched(res)}
            if r.returncode:
                row["stderr_tail"] = r.stderr[-2000:]
            rec["runs"].append(row)
            print(json.dumps(row), flush=True)
            pathlib.Path(args.out).write_text(json.dumps(rec, indent=1) + "\n")
    rec["summary"] = {"runs": len(rec["runs"]), "exit_0": sum(r["exit"] == 0 for r in rec["runs"]),
                      "matched": sum(r["matched"] for r in rec["runs"])}
    pathlib.Path(args.out).write_text(json.dumps(rec, indent=1) + "\n")
    print(json.dumps(rec["summary"]))
    return 0 if rec["summary"]["exit_0"] == len(rec["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
