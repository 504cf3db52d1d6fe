"""Rewritten models run through ONNX Runtime with PlusEP's two front ends on the emulated driver (every
kernel on the PTX interpreter, its bounds and race checkers on), many runs in one child process; ORT CPU
on the original graph is the oracle.

    results = run_cases(tmp_path, [(rewritten, feeds), ...])      # one child process for the batch
    results[k]["custom_op"]  # {"outputs": [arrays] | None, "error": str | None, "launches": [launch, ...],
                             #  "seconds": the run's wall-clock time}
                             # launch: [entry, interpreter error | None, checker findings, grid, node]
    want, why = oracle(original, feeds)                          # ORT CPU: ([arrays], None) or (None, its error)

Front ends: "custom_op" (the custom-op library's CPU twin: host staging) and "plugin_ep" (the PlusEP
plugin EP). A model is registered with the emulator once (cubin -> PTX) and loaded once per front end;
each feed dict is one run. Used by the bounds tests (issue 34) and the shape-adversarial fuzzer.
"""
from __future__ import annotations

import json
import pickle

import numpy as np

from tests.support.emulated_models import run_child

FRONT_ENDS = ("custom_op", "plugin_ep")

RUNNER = r"""
import json, pickle, sys, time
import numpy as np, onnx, onnxruntime as ort
from plus_ep.verification.emulator import Emulator
emu = Emulator.get()
import plus_ep
spec = json.loads(open(sys.argv[1]).read())
emu.set_arch(spec["arch"])
so = ort.SessionOptions()
so.log_severity_level = 3
so.register_custom_ops_library(plus_ep.get_library_path())
out = []
for model_path, feeds_path, fronts in spec["cases"]:
    emu.register_model(onnx.load(model_path))
    runs = pickle.loads(open(feeds_path, "rb").read())
    rows = [{} for _ in runs]
    for how in fronts:
        sess, err = None, None
        try:
            if how == "custom_op":
                sess = ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])
            else:
                po = ort.SessionOptions()
                po.log_severity_level = 3
                sess = ort.InferenceSession(model_path, po, providers=["PlusEP", "CPUExecutionProvider"])
        except Exception as e:
            err = str(e)
        for k, feeds in enumerate(runs):
            emu.reset_records()
            res = {"outputs": None, "error": err}
            t0 = time.perf_counter()
            if sess is not None:
                try:
                    res["outputs"] = sess.run(None, feeds)
                except Exception as e:
                    res["error"] = str(e)
            res["seconds"] = time.perf_counter() - t0
            res["launches"] = [[r.entry, r.error, len(r.findings), list(r.grid), r.node] for r in emu.records]
            rows[k][how] = res
    out.append(rows)
open(spec["result"], "wb").write(pickle.dumps(out))
print("done")
"""


def run_cases(tmp_path, cases, arch="sm_80", fronts=FRONT_ENDS, timeout=900) -> list:
    """[(model, feeds or [feeds, ...])] -> per case, per run, {front end: result} (module docstring); a case
    with one feed dict gets one row (a dict) instead of a list."""
    files = []
    for k, (model, feeds) in enumerate(cases):
        path, fpath = tmp_path / f"m{k}.onnx", tmp_path / f"f{k}.pkl"
        model_bytes = model if isinstance(model, bytes) else model.SerializeToString()
        path.write_bytes(model_bytes)
        fpath.write_bytes(pickle.dumps(feeds if isinstance(feeds, list) else [feeds]))
        files.append([str(path), str(fpath), list(fronts)])
    spec = tmp_path / "cases.json"
    result = tmp_path / "results.pkl"
    spec.write_text(json.dumps({"arch": arch, "cases": files, "result": str(result)}))
    run_child(RUNNER, [spec], timeout=timeout)
    rows = pickle.loads(result.read_bytes())
    return [r if isinstance(feeds, list) else r[0] for r, (_, feeds) in zip(rows, cases)]


_ORACLE_SESSIONS: dict = {}   # serialized model -> ORT CPU session (or its creation error); the last few


def oracle(model, feeds):
    """ORT CPU on the original graph (no PlusEP, no graph optimisations: ONNX's semantics, not those of
    ORT's own fusions, e.g. SkipLayerNormalization refusing a skip that broadcasts): (outputs, None) or
    (None, ORT's error). The session of a model is kept for its next runs (the last 16 models)."""
    import onnxruntime as ort
    key = model if isinstance(model, bytes) else model.SerializeToString()
    sess = _ORACLE_SESSIONS.pop(key, None)
    if sess is None:
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        try:
            sess = ort.InferenceSession(key, so, providers=["CPUExecutionProvider"])
        except Exception as e:   # noqa: BLE001 - ORT's own refusal is an answer
            sess = str(e)
    _ORACLE_SESSIONS[key] = sess
    while len(_ORACLE_SESSIONS) > 16:
        _ORACLE_SESSIONS.pop(next(iter(_ORACLE_SESSIONS)))
    if isinstance(sess, str):
        return None, sess
    try:
        return sess.run(None, feeds), None
    except Exception as e:   # noqa: BLE001 - ORT's own refusal is an answer
        return None, str(e)


def clean_launches(res) -> bool:
    """Every launch of a run finished with no interpreter error and no checker finding."""
    return all(ln[1] is None and ln[2] == 0 for ln in res["launches"])


def matches(got, want, rtol=1e-4, atol=1e-4) -> str | None:
    """None when every output has ORT's shape and values (within tolerance), else what differs."""
    if len(got) != len(want):
        return f"{len(got)} outputs, ORT gives {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape:
            return f"output {k} has shape {list(g.shape)}, ORT gives {list(w.shape)}"
        if g.dtype.kind == "f" or w.dtype.kind == "f":
            bad = ~np.isclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True)
        else:
            bad = g != w
        if bad.any():
            i = np.unravel_index(int(np.argmax(bad)), bad.shape)
            return f"output {k} differs at {list(i)}: {g[i]!r} vs ORT {w[i]!r} ({int(bad.sum())} elements)"
    return None
