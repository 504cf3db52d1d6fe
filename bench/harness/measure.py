"""Measurements: latency percentiles, GPU kernels per inference, memory, numerical difference.

Latency is host wall time of one inference *including* a device synchronisation (``bound.sync()``):
ORT runs on its own CUDA stream, so CUDA events recorded on torch's stream would not bracket it;
synchronising after every run times torch and ORT the same way.

Kernels are counted from a profiler trace of a few inferences:
* ``torch.profiler`` with the CUDA activity (CUPTI, process wide): it sees the kernels of torch and of
  ONNX Runtime (CUDA EP, PlusEP's launcher) alike, CUDA-graph replays included. Events with
  ``cat == "kernel"`` are GPU kernels; memcpy/memset events are not counted.
* ONNX Runtime's own profile (``SessionOptions.enable_profiling``): GPU kernel events
  (``cat == "Kernel"``) exist only in ORT builds with CUDA profiling; the PyPI wheels write node events
  (``cat == "Node"``, ``*_kernel_time``) only, which are counted separately and never called kernels.
"""
from __future__ import annotations

import ctypes
import gc
import json
import os
import time

import numpy as np


# ------------------------------------------------------------------------------------ latency

def time_runs(bound, warmup_runs=10, warmup_s=0.5, min_runs=30, max_runs=1000, max_s=2.0) -> dict:
    """Warm up (at least ``warmup_runs`` and ``warmup_s``), then time single inferences until
    ``max_runs`` or ``max_s`` (never fewer than ``min_runs``)."""
    t0, n_warm = time.perf_counter(), 0
    while n_warm < warmup_runs or time.perf_counter() - t0 < warmup_s:
        bound.run()
        bound.sync()
        n_warm += 1
    warm_s = time.perf_counter() - t0
    times, start = [], time.perf_counter()
    while len(times) < min_runs or (len(times) < max_runs and time.perf_counter() - start < max_s):
        t = time.perf_counter()
        bound.run()
        bound.sync()
        times.append(time.perf_counter() - t)
    ms = np.asarray(times) * 1e3
    return {"p50_ms": float(np.percentile(ms, 50)), "p90_ms": float(np.percentile(ms, 90)),
            "mean_ms": float(ms.mean()), "min_ms": float(ms.min()), "runs": len(times),
            "warmup_runs": n_warm, "warmup_s": round(warm_s, 3)}


# ------------------------------------------------------------------------------ trace parsing

def load_events(src) -> list:
    """Events of a chrome trace: a path, a JSON list (ORT) or a ``{"traceEvents": [...]}`` (torch)."""
    if isinstance(src, (str, os.PathLike)):
        with open(src) as f:
            src = json.load(f)
    if isinstance(src, dict):
        src = src.get("traceEvents", [])
    if not isinstance(src, list):
        raise ValueError("not a chrome trace: expected a list of events or {'traceEvents': [...]}")
    return [e for e in src if isinstance(e, dict)]


def trace_counts(src) -> dict:
    """GPU kernel events (``cat`` "kernel"/"Kernel"), ORT node events and ORT ``model_run`` events."""
    kernels = nodes = runs = 0
    for e in load_events(src):
        cat = str(e.get("cat", ""))
        if cat.lower() == "kernel":
            kernels += 1
        elif cat == "Node" and str(e.get("name", "")).endswith("_kernel_time"):
            nodes += 1
        elif cat == "Session" and e.get("name") == "model_run":
            runs += 1
    return {"kernel_events": kernels, "node_events": nodes, "model_runs": runs}


def ort_profile_counts(path, runs: int | None = None) -> dict:
    """Per-inference counts from an ORT profile; ``runs`` defaults to its ``model_run`` events."""
    c = trace_counts(path)
    n = runs or c["model_runs"]
    if not n:
        raise ValueError(f"{path}: no model_run events and no run count given")
    return {"runs": n, "kernels_per_run": c["kernel_events"] / n if c["kernel_events"] else None,
            "nodes_per_run": c["node_events"] / n,
            "source": "ort profile: GPU kernel events" if c["kernel_events"] else
                      "ort profile: node events only (this ORT build records no GPU kernels)"}


def count_kernels(bound, runs: int, trace_path, cuda: bool) -> dict:
    """GPU kernels per inference over ``runs`` inferences under torch.profiler (CUPTI when ``cuda``)."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    bound.run()
    bound.sync()
    with profile(activities=acts) as prof:
        for _ in range(runs):
            bound.run()
            bound.sync()
        if cuda:
            torch.cuda.synchronize()
    prof.export_chrome_trace(os.fspath(trace_path))
    c = trace_counts(trace_path)
    out = {"kernel_events": c["kernel_events"], "kernel_runs": runs,
           "kernel_source": "torch.profiler (CUPTI)" if cuda else "torch.profiler (CPU only)"}
    if c["kernel_events"]:
        out["kernels_per_run"] = c["kernel_events"] / runs
    else:
        out["kernels_per_run"] = None
        out["kernels_reason"] = "no GPU kernel events in the trace" + ("" if cuda else " (CPU run)")
    return out


# ---------------------------------------------------------------------------------- memory

def release() -> None:
    """Collect garbage, give freed heap back to the OS and empty torch's CUDA cache."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    import sys
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def gpu_used_mb() -> float | None:
    """Device memory in use (all processes; this one alone on a bench machine), via cudaMemGetInfo."""
    import sys
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    free, total = torch.cuda.mem_get_info()
    return (total - free) / 2**20


# ------------------------------------------------------------------------------- numerics

def diff(got: list, ref: list) -> dict:
    """Worst max |got - ref| over all outputs, absolute and relative to max |ref|."""
    if len(got) != len(ref):
        raise ValueError(f"{len(got)} outputs, reference has {len(ref)}")
    worst_abs, worst_rel = 0.0, 0.0
    for g, r in zip(got, ref):
        g, r = np.asarray(g, np.float64), np.asarray(r, np.float64)
        if g.shape != r.shape:
            raise ValueError(f"output shape {g.shape} != reference {r.shape}")
        if not g.size:
            continue
        d = float(np.max(np.abs(g - r)))
        if not np.isfinite(d):                       # inf or nan: reported as such
            return {"max_abs_diff": d, "max_rel_diff": d}
        scale = float(np.max(np.abs(r))) or 1.0
        worst_abs, worst_rel = max(worst_abs, d), max(worst_rel, d / scale)
    return {"max_abs_diff": worst_abs, "max_rel_diff": worst_rel}
