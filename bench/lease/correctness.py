"""The lease's kernel-correctness step: every carried model (`.gpu/models/*`, bench/lease/prepare.py) runs
through stock onnxruntime + PlusEP on the GPU device, inputs and outputs in device memory, twice.
Per fused node and output:

  interpreter   the share of elements bit-identical to the CPU PTX interpreter's output and the largest
                difference (the GPU's SASS may round differently: reported, not judged)
  reference     max |out - ref| / max |ref| against the node's function body in float64, within the
                node's math-mode tolerance (plus_ep/verification/tolerances.py)
  finite        no NaN or infinity where the reference is finite
  repeat        the second run bit-identical to the first
  launched      PlusEP ran the node through its launcher (PlusEP_NodeStats counts it)

A carried model has no function bodies: if PlusEP does not claim a node (no usable driver, the launcher
not registered), the session cannot be created and the model FAILS, never a comparison of the model with
itself. Writes correctness.json (or, with --sanitizer, runs the named models quietly for
compute-sanitizer and checks only that they ran).

    python -m bench.lease.correctness CARRY OUT_JSON [--only CASE...] [--sanitizer]
"""
from __future__ import annotations

import json
import pathlib
import sys
import time

import numpy as np
import onnx

from bench.lease import env as lease_env
from bench.lease.prepare import as_float, run_model


def check_model(d: pathlib.Path, sanitizer: bool = False) -> dict:
    from plus_ep.verification.tolerances import compare
    meta = json.loads((d / "meta.json").read_text())
    res = {"model": d.name, "case": meta["case"], "arch": meta["arch"], "covers": meta["covers"], "nodes": []}
    t0 = time.perf_counter()
    model = onnx.load(str(d / "nodes.onnx"))
    lease_env.register(model)
    emu = lease_env.emulator()
    if emu is not None:
        emu.reset_records()
    feeds = dict(np.load(d / "inputs.npz"))
    types = {k: int(v) for k, v in meta["input_types"].items()}
    lease_env.reset_stats()
    try:
        shapes = {o["name"]: (o["shape"], o["onnx_type"]) for n in meta["nodes"] for o in n["outputs"]}
        runs, sess = run_model(d / "nodes.onnx", feeds, types, runs=1 if sanitizer else 2, custom_ops=True,
                               optimize=False, out_shapes=shapes)
        on_plus = lease_env.on_plus(sess)
        del sess
    except Exception as e:  # noqa: BLE001 - a model PlusEP cannot run fails loudly, with ORT's words
        res.update(ok=False, error=" ".join(str(e).split())[:800], seconds=round(time.perf_counter() - t0, 2))
        return res
    stats = lease_env.node_stats()
    expected = dict(np.load(d / "expected.npz"))
    refs = dict(np.load(d / "reference.npz"))
    findings = {}
    if emu is not None:
        for r in emu.records:
            findings.setdefault(r.node, []).extend(r.findings + ([r.error] if r.error else []))
    for row in meta["nodes"]:
        st = stats.get(row["node"], {})
        node = {"node": row["node"], "pattern": row["pattern"], "math": row["math"], "runs": st.get("runs", 0),
                "on_plus": row["node"] in on_plus, "findings": findings.get(row["node"], [])[:3], "outputs": []}
        for o in row["outputs"]:
            got = runs[0][o["name"]]
            exp = expected[o["name"]]
            f_got, f_exp = _num(got, o["onnx_type"]), _num(exp, o["onnx_type"])
            same = got.shape == exp.shape
            out = {"name": o["name"], "shape": list(got.shape), "tol": o["tol"]}
            if not sanitizer:
                c_ref = compare(f_got, refs[o["name"]])
                out.update(
                    bitwise_fraction=_bitwise(got, exp),
                    interp_max_abs=float(np.max(np.abs(f_got - f_exp))) if same and got.size else float("inf"),
                    ref_rel=c_ref["rel"], ref_max_abs=c_ref["max_abs"],
                    interp_ref_rel=o["interpreter_vs_ref"]["rel"],
                    finite=bool(np.all(np.isfinite(f_got) | ~np.isfinite(refs[o["name"]]))),
                    repeat_identical=bool(np.array_equal(got, runs[1][o["name"]])))
                out["ok"] = bool(out["finite"] and out["repeat_identical"] and out["ref_rel"] <= o["tol"])
            node["outputs"].append(out)
        node["ok"] = bool(node["runs"] > 0 and node["on_plus"] and not node["findings"]
                          and all(o.get("ok", True) for o in node["outputs"]))
        res["nodes"].append(node)
    res["ok"] = bool(res["nodes"]) and all(n["ok"] for n in res["nodes"])
    res["seconds"] = round(time.perf_counter() - t0, 2)
    return res


def _num(a: np.ndarray, onnx_type: int) -> np.ndarray:
    """float64 values of any output (bf16 bits widened; integers and booleans as numbers)."""
    a = as_float(a, onnx_type)
    return a if a.dtype == np.float64 else a.astype(np.float64)


def _bitwise(a: np.ndarray, b: np.ndarray) -> float:
    """The share of elements whose bits are identical."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return 0.0
    if not a.size:
        return 1.0
    eq = a.view(np.uint8).reshape(a.size, -1) == b.view(np.uint8).reshape(b.size, -1)
    return float(eq.all(axis=1).mean())


def summary(results: list) -> str:
    nodes = [n for r in results for n in r.get("nodes", [])]
    bad_models = [r["model"] for r in results if not r["ok"]]
    worst = max((o.get("ref_rel", 0) / o["tol"] for n in nodes for o in n["outputs"] if o.get("tol")), default=0)
    bits = [o["bitwise_fraction"] for n in nodes for o in n["outputs"] if "bitwise_fraction" in o]
    text = (f"{len(results) - len(bad_models)}/{len(results)} models ok, {sum(n['ok'] for n in nodes)}/{len(nodes)} "
            f"nodes within tolerance of float64 (worst {worst:.2f} of its tolerance)")
    if bits:
        text += f"; bit-identical to the interpreter: {np.mean(bits) * 100:.1f}% of elements (min {min(bits) * 100:.1f}%)"
    if bad_models:
        text += f"; FAILED: {', '.join(bad_models[:6])}"
    return text


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    sanitizer = "--sanitizer" in argv
    only = argv[argv.index("--only") + 1:] if "--only" in argv else None
    carry, out = pathlib.Path(argv[0]), argv[1]
    st = lease_env.Status("sanitized run" if sanitizer else "correctness")
    dirs = sorted(p for p in (carry / "models").iterdir() if (p / "meta.json").exists()) \
        if (carry / "models").is_dir() else []
    if only:
        dirs = [d for d in dirs if any(d.name.startswith(o) for o in only)]
    if not dirs:
        st.set("failed", f"no carried models in {carry}/models (run bash bench/lease/gpu_lease.sh --prepare)")
        return 1
    results = []
    for d in dirs:
        if lease_env.deadline_left() < 5:
            results.append({"model": d.name, "ok": False, "error": "not run: the step's time ran out"})
            continue
        try:
            r = check_model(d, sanitizer)
        except Exception as e:  # noqa: BLE001 - one model's surprise is its failure, the others still run
            r = {"model": d.name, "ok": False, "error": f"{type(e).__name__}: {' '.join(str(e).split())[:600]}"}
        results.append(r)
        lease_env.say(f"{d.name}: {'ok' if r['ok'] else 'FAILED'} ({r.get('seconds', 0)}s)"
                      + (f" {r['error'][:300]}" if r.get("error") else ""))
        if not sanitizer:
            lease_env.write_json(out, {"mode": lease_env.mode(), "models": results, "summary": summary(results)})
    if sanitizer:
        lease_env.write_json(out, {"mode": lease_env.mode(), "models": results})
    ok = all(r["ok"] for r in results)
    st.set("ok" if ok else "failed", summary(results) if not sanitizer else
           f"{sum(r['ok'] for r in results)}/{len(results)} models ran")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
