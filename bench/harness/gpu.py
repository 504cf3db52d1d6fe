"""The GPU benchmark: every contender on the same weights and inputs, in one process, within a budget.

    python -m bench gpu [--budget-s 1200] [--out bench/results] [--models bert gpt2 ...]
                        [--dtypes fp16 fp32] [--exporters dynamo torchscript] [--contenders ...]
    python -m bench gpu --device cpu --smoke          # the same code paths on a CPU, small models

Writes ``<out>/<date>-gpu-<device>.json`` after every unit (a cut-off run leaves a valid, partial
file with ``complete: false``), then the markdown table and PNG chart beside it (bench/charts/gpu_table.py).
Units run most important first (bench/harness/run_order.py); a unit that does not fit in what is left of the
budget is recorded as skipped with the reason. A CPU smoke result is flagged ``gpu_run: false``,
goes to a new temporary folder unless ``--out`` is given, and is never a speed result.
"""
from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import os
import pathlib
import re
import socket
import sys
import tempfile
import time

from bench import RESULTS
from bench.harness import measure
from bench.harness import model_set
from bench.harness import run_order
from bench.harness.contenders import CONTENDERS, warm_process
from bench.harness.env_info import env_info

SCHEMA = "plus_ep.bench.gpu/1"
ONNX_PROFILED = ("ort", "ort_optimizer", "plus_ep")
NOTES = {"cpu-smoke": "CPU smoke run of the GPU harness (ORT CPU EP, torch CPU, size-small models, few runs): "
                      "exercises the code paths only; NOT a GPU result, no speed claim",
         "gpu-smoke": "GPU smoke run (size-small models, few runs): checks the harness on a GPU; "
                      "not a benchmark result, no goal is measured"}
TIMING = {"warmup_runs": 10, "warmup_s": 0.5, "min_runs": 30, "max_runs": 1000, "max_s": 2.0}
SMOKE_TIMING = {"warmup_runs": 2, "warmup_s": 0.0, "min_runs": 5, "max_runs": 10, "max_s": 0.2}


def _shape(s: str) -> tuple:
    b, _, q = s.partition("x")
    return int(b), int(q)


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="python -m bench gpu", description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--smoke", action="store_true", help="size-small models, 2 layers, tiny shapes, few runs")
    ap.add_argument("--budget-s", type=float, default=None, help="wall-clock budget (default 1200, smoke 300)")
    ap.add_argument("--out", default=None, help="results folder (default bench/results; smoke: a temp folder)")
    ap.add_argument("--workdir", default=None, help="scratch folder for profiles and optimized models")
    ap.add_argument("--models", nargs="+", choices=model_set.NAMES, default=None,
                    help="bench models, most important first (default: all, BERT first)")
    ap.add_argument("--dtypes", nargs="+", choices=("fp16", "fp32"), default=["fp16", "fp32"])
    ap.add_argument("--exporters", nargs="+", choices=("torchscript", "dynamo"), default=["torchscript", "dynamo"],
                    help="the first is the main one (default TorchScript: faster to export, and the graphs "
                         "ORT's transformers optimizer is tuned for)")
    ap.add_argument("--contenders", nargs="+", default=None, help=f"default: all of {list(CONTENDERS)}")
    ap.add_argument("--size", choices=("real", "small"), default=None)
    ap.add_argument("--layers", type=int, default=None, help="override every model's layer count")
    ap.add_argument("--shapes", nargs="+", type=_shape, default=None, help="BxS, default 1x128 16x128")
    ap.add_argument("--sweep-batches", nargs="*", type=int, default=None)
    ap.add_argument("--sweep-seqs", nargs="*", type=int, default=None)
    ap.add_argument("--sweep-dtypes", nargs="+", choices=("fp16", "fp32"), default=None)
    ap.add_argument("--no-sweep", action="store_true")
    ap.add_argument("--kernel-runs", type=int, default=3, help="inferences under the profiler")
    ap.add_argument("--no-report", action="store_true", help="JSON only, no markdown/PNG")
    a = ap.parse_args(argv)
    smoke = a.smoke
    a.explicit_contenders = a.contenders is not None
    a.contenders = a.contenders or list(CONTENDERS)
    a.models = a.models or (["bert"] if smoke else list(model_set.NAMES))
    a.size = a.size or ("small" if smoke else "real")
    a.layers = a.layers or (2 if smoke else None)
    a.shapes = a.shapes or ([(1, 16), (2, 16)] if smoke else [(1, 128), (16, 128)])
    if a.no_sweep:
        a.sweep_batches, a.sweep_seqs = [], []
    a.sweep_batches = a.sweep_batches if a.sweep_batches is not None else ([1, 2] if smoke else [1, 4, 16, 64])
    a.sweep_seqs = a.sweep_seqs if a.sweep_seqs is not None else ([8, 16] if smoke else [32, 128, 512])
    a.budget_s = a.budget_s or (300.0 if smoke else 1200.0)
    a.timing = SMOKE_TIMING if smoke else TIMING
    # a shared CPU: one torch thread keeps torch's OpenMP barriers from spinning against other jobs
    a.torch_threads = 1 if smoke and a.device == "cpu" else None
    return a


def out_dir(a) -> pathlib.Path:
    """``--out``, else bench/results for a GPU run and a new temporary folder for a smoke run."""
    if a.out:
        return pathlib.Path(a.out)
    return pathlib.Path(tempfile.mkdtemp(prefix="plus_ep_bench_smoke_")) if a.smoke else RESULTS


def _check_device(device):
    if device != "cuda":
        return
    import torch                       # first: its CUDA libraries are then found by ONNX Runtime too
    import onnxruntime as ort
    if not torch.cuda.is_available():
        raise SystemExit("bench gpu: torch sees no CUDA GPU (use --device cpu --smoke on a CPU machine)")
    torch.backends.cuda.matmul.allow_tf32 = False      # torch's default, stated: fp32 means fp32
    torch.backends.cudnn.allow_tf32 = False
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        print(f"bench gpu: onnxruntime {ort.__version__} has no CUDAExecutionProvider (a CPU build, as on a lent "
              "GPU machine): the ORT contenders are skipped, PlusEP runs as the plugin EP on its GPU device",
              file=sys.stderr)
        return
    try:
        ort.preload_dlls()             # CUDA/cuDNN from the nvidia-* wheels, where torch did not load them
    except Exception as exc:           # noqa: BLE001 - the session creation will say what is missing
        print(f"bench gpu: onnxruntime.preload_dlls() failed: {exc}", file=sys.stderr)


def _clean(x):
    """JSON-safe: non-finite floats become strings."""
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def _write(doc, path):
    from plus_ep.kernels.compile.files import write_atomic
    write_atomic(path, (json.dumps(_clean(doc), indent=1) + "\n").encode())


def _result_path(out, kind, device_name):
    slug = re.sub(r"[^A-Za-z0-9]+", "-", device_name or "unknown").strip("-").lower()[:40]
    base = f"{datetime.datetime.now(datetime.timezone.utc).date().isoformat()}-{kind}-{slug}"
    path, k = out / f"{base}.json", 2
    while path.exists():
        path, k = out / f"{base}-{k}.json", k + 1
    return path


def _why(exc) -> str:
    text = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {text[:400]}"


class Run:
    def __init__(self, a, process, t0):
        from bench.harness.store import Store
        self.a, self.process, self.t0 = a, process, t0
        self.workdir = pathlib.Path(a.workdir or tempfile.mkdtemp(prefix="plus_ep_bench_work_"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.store = Store(a.size, a.layers, a.device, self.workdir)
        self.rows = []

    def left(self):
        return self.a.budget_s - (time.perf_counter() - self.t0)

    def log(self, msg):
        print(f"[{time.perf_counter() - self.t0:7.1f}s] {msg}", file=sys.stderr, flush=True)

    def skip_reason(self, unit):
        c = CONTENDERS[unit.contender]
        why = c.skip_reason(self.store.context(unit.model, unit.dtype, unit.exporter))
        if why:
            return why
        if (self.a.device == "cpu" and self.a.smoke and unit.contender == "torch_compile"
                and not self.a.explicit_contenders):
            return ("skipped in a CPU smoke run: Inductor's C++ compile is too slow for a smoke test; "
                    "name it in --contenders to run it")
        if self.left() < unit.start_with_s():
            return (f"over budget: {max(self.left(), 0):.0f} s left of {self.a.budget_s:.0f} s; "
                    f"this unit starts only with >= {unit.start_with_s():.0f} s left")
        return None

    def unit(self, unit):
        cfg = self.store.config(unit.model)
        spec, n_layers = model_set.SPECS[unit.model], model_set.layers(model_set.SPECS[unit.model], cfg)
        rows = [{"model": unit.model, "title": spec.title, "dtype": unit.dtype, "exporter": unit.exporter,
                 "contender": unit.contender, "batch": b, "seq": model_set.tokens(spec, cfg, s), "sweep": unit.sweep,
                 "layers": n_layers, "status": "skipped", "reason": None, "gpu_run": False,
                 "process": self.process} for b, s in unit.shapes]
        self.rows.extend(rows)
        why = self.skip_reason(unit)
        if why:
            for r in rows:
                r["reason"] = why
            return
        runner = None
        try:
            refs = self.store.references(unit.model, unit.shapes)
            feeds = {s: model_set.make_feeds(spec, cfg, *s, dtype=unit.dtype) for s in unit.shapes}
            outs = {s: {name: r.shape for name, r in zip(spec.outputs, refs[s])} for s in unit.shapes}
            measure.release()
            gpu0, rss0 = measure.gpu_used_mb(), measure.rss_mb()
            ctx = self.store.context(unit.model, unit.dtype, unit.exporter)
            runner = CONTENDERS[unit.contender].prepare(ctx, feeds[unit.shapes[0]], outs[unit.shapes[0]])
        except Exception as exc:           # noqa: BLE001 - recorded, the run goes on
            for r in rows:
                r.update(status="error", reason=_why(exc))
            self.log(f"{unit.model} {unit.dtype} {unit.exporter} {unit.contender}: {_why(exc)}")
            return
        for i, (shape, row) in enumerate(zip(unit.shapes, rows)):
            if i and self.left() <= 0:
                row["reason"] = f"over budget: the {self.a.budget_s:.0f} s budget ran out inside this unit"
                continue
            try:
                bound = runner.first_bound if i == 0 else runner.bind(feeds[shape], outs[shape])
                self.measure(unit, row, runner, bound, refs[shape], feeds[shape], outs[shape], gpu0, rss0)
                if i == 0:
                    row.update(create_cold_s=runner.create_cold_s, create_warm_s=runner.create_warm_s)
                del bound
            except Exception as exc:       # noqa: BLE001
                row.update(status="error", reason=_why(exc))
            self.log(f"{unit.model} {unit.dtype} {unit.exporter or '-'} {unit.contender} b{row['batch']} "
                     f"s{row['seq']}: {row['status']} p50={row.get('p50_ms')} kernels={row.get('kernels_per_run')}"
                     + (f" ({row['reason']})" if row["reason"] else ""))
        runner.first_bound = None
        runner.close()
        del runner
        measure.release()

    def measure(self, unit, row, runner, bound, ref, feeds, outs, gpu0, rss0):
        row.update(measure.time_runs(bound, **self.a.timing))
        row.update(gpu_mem_mb=None if gpu0 is None else measure.gpu_used_mb() - gpu0,   # before any
                   rss_delta_mb=measure.rss_mb() - rss0)                                  # profiling
        row.update(measure.diff(bound.outputs(), ref))
        trace = self.workdir / "torch_trace.json"
        row.update(measure.count_kernels(bound, self.a.kernel_runs, trace, self.a.device == "cuda"))
        trace.unlink(missing_ok=True)
        if row["kernels_per_run"] is not None:
            row["kernels_per_layer"] = row["kernels_per_run"] / row["layers"]
        if not unit.sweep and unit.contender in ONNX_PROFILED:
            prof = runner.ort_profile(feeds, outs, self.a.kernel_runs, self.workdir / "ortprof")
            row["ort_profile"] = measure.ort_profile_counts(prof)
            os.unlink(prof)
        row.update(status="ok", gpu_run=bool(runner.gpu_run), provider=runner.provider, note=runner.note)


def run(argv=None) -> pathlib.Path:
    t0 = time.perf_counter()           # the budget counts from here, imports included
    a = parse_args(argv)
    if a.device == "cpu" and not a.smoke:
        raise SystemExit("bench gpu: --device cpu is only a smoke test of the harness; add --smoke")
    _check_device(a.device)
    env = env_info(gpu=True)
    if a.torch_threads:
        import torch
        torch.set_num_threads(a.torch_threads)
    out = out_dir(a)
    out.mkdir(parents=True, exist_ok=True)
    kind = ("gpu" if a.device == "cuda" else "cpu") + ("-smoke" if a.smoke else "")
    path = _result_path(out, kind, env["device"])
    units = run_order.build(a.models, a.dtypes, a.exporters, a.contenders, a.shapes, a.sweep_batches,
                       a.sweep_seqs, sweep_dtypes=a.sweep_dtypes)
    r = Run(a, f"{socket.gethostname()}:{os.getpid()}:{env['date']}", t0)
    doc = {"schema": SCHEMA, "kind": kind, "gpu_run": a.device == "cuda", "note": NOTES.get(kind),
           "date": env["date"], "device": env["device"], "env": env, "process": r.process,
           "args": {k: v for k, v in vars(a).items() if k not in ("timing",)}, "timing": a.timing,
           "budget_s": a.budget_s, "complete": False, "units": len(units),
           "models": {}, "exports": r.store.exports, "ort_optimizer": r.store.optimizer, "results": r.rows}
    r.log(f"{len(units)} units, budget {a.budget_s:.0f} s, writing {path}")
    _write(doc, path)
    warm_process(a.device)
    gc.freeze()     # the imported modules are no garbage: keep every later gc.collect() short
    try:
        _run_units(r, units, doc, path)
    finally:
        gc.unfreeze()
    if not a.no_report:
        from bench.charts import gpu_table
        for p in gpu_table.write(path):
            r.log(f"wrote {p}")
    return path


def _run_units(r, units, doc, path):
    for unit in units:
        if unit.model not in doc["models"]:
            doc["models"][unit.model] = model_set.describe(unit.model, r.store.config(unit.model))
        r.unit(unit)
        doc["elapsed_s"] = round(time.perf_counter() - r.t0, 1)
        _write(doc, path)
    doc["complete"] = True
    doc["counts"] = {s: sum(1 for x in r.rows if x["status"] == s) for s in ("ok", "skipped", "error")}
    _write(doc, path)
    r.log(f"done: {doc['counts']}; {path}")


def main(argv=None) -> int:
    path = run(argv)
    doc = json.loads(path.read_text())
    return 0 if doc["counts"]["ok"] else 1
