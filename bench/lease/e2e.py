"""The lease's end-to-end step: 12-layer BERT-base (bench/lease/bert.py, built here on the machine, seeded
weights) rewritten by PlusEP (kernels from the carried cache) and run by stock
onnxruntime.InferenceSession(providers=[("PlusEP", ...), "CPUExecutionProvider"]) on the GPU device,
inputs and outputs bound in device memory; per-run latency (Run returns after PlusEP waited for its
stream) p50 / p90, with and without CUDA-graph replay (cuda_graph=1; ONNX Runtime refuses the capture when
nodes outside PlusEP compute data on the CPU: then that is what is recorded), against the same network on
the same weights in torch eager and torch.compile. fp16 first (batch 1 and 16 x seq 128), then fp32 (TF32
both sides) while time is left. The outputs are compared with torch's.

In the rehearsal (emulated driver): 2 layers of a 64-wide BERT, batch 1 x seq 8, two runs, no torch.

    python -m bench.lease.e2e CARRY OUT_JSON [--short]
"""
from __future__ import annotations

import pathlib
import sys
import tempfile
import time

import numpy as np
import onnx

from bench.lease import bert as lease_bert
from bench.lease import env as lease_env


def percentiles(ms: list) -> dict:
    return {"p50_ms": float(np.percentile(ms, 50)), "p90_ms": float(np.percentile(ms, 90)), "runs": len(ms)}


def time_runs(fn, sync, max_runs: int, max_s: float, warmup: int) -> list:
    for _ in range(warmup):
        fn()
    sync()
    out, t_end = [], time.perf_counter() + max_s
    while len(out) < max_runs and (len(out) < 3 or time.perf_counter() < t_end):
        t = time.perf_counter()
        fn()
        sync()
        out.append((time.perf_counter() - t) * 1e3)
    return out


def plus_run(path, feeds, options, runs, max_s, warmup):
    """(latencies or None, output, note) of one PlusEP session on device-bound inputs and outputs."""
    try:
        sess = lease_env.session(path, options)
    except Exception as e:  # noqa: BLE001 - ORT's refusal (e.g. of a graph capture) is the result
        return None, None, " ".join(str(e).split())[:400]
    claimed = len(lease_env.on_plus(sess))
    io = sess.io_binding()
    keep = {k: lease_env.device_value(v) for k, v in feeds.items()}
    for k, v in keep.items():
        io.bind_ortvalue_input(k, v)
    out_v = lease_env.empty_device(tuple(feeds["input_ids"].shape) + (_hidden(sess),), _out_dtype(sess))
    io.bind_ortvalue_output(sess.get_outputs()[0].name, out_v)
    ms = time_runs(lambda: sess.run_with_iobinding(io), lambda: None, runs, max_s, warmup)
    return ms, lease_env.to_host(out_v), f"{claimed} nodes on PlusEP"   # the session goes with this frame


def _hidden(sess) -> int:
    return int(sess.get_outputs()[0].shape[-1])


def _out_dtype(sess):
    return np.float16 if sess.get_outputs()[0].type == "tensor(float16)" else np.float32


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    import plus_ep
    carry, out, st, p, torch, why, cache = lease_bert.step_setup("e2e", argv)
    emulated = lease_env.mode() == "emulated"
    size, layers, shapes = p["size"], p["layers"], p["shapes"]
    runs, max_s, warmup = (2, 0.0, 0) if emulated else (200, 2.0, 10)
    rows, notes, failed = [], [], []
    if why:
        notes.append(f"torch contenders skipped: {why}")
    result = {"mode": lease_env.mode(), "layers": layers, "size": size, "rows": rows, "notes": notes, "table": []}
    work = pathlib.Path(tempfile.mkdtemp(prefix="plus_ep_e2e_"))
    for dtype in p["dtypes"]:
        if lease_env.deadline_left() < 30:
            notes.append(f"{dtype}: not measured, the step's time ran out")
            continue
        t0 = time.perf_counter()
        m = lease_bert.onnx_model(layers=layers, dtype=dtype, size=size)
        r = plus_ep.rewrite_detailed(m, archs=["sm_90a"], cache=cache)
        path = work / f"bert{layers}-{dtype}.plus.onnx"
        onnx.save(r.model, path)
        lease_env.register(r.model)
        notes.append(f"{dtype}: built and rewritten in {time.perf_counter() - t0:.1f}s "
                     f"({sum(n.domain == 'ai.plus_ep' for n in r.model.graph.node)} fused nodes)")
        tmodel = None
        if torch is not None:
            tdt = torch.float16 if dtype == "fp16" else torch.float32
            torch.backends.cuda.matmul.allow_tf32 = dtype == "fp32"
            tmodel, _ = lease_bert.torch_bert(m, layers, size["heads"], "cuda", tdt)
        compiled = None
        for b, s in shapes:
            feeds = lease_bert.feeds(b, s, size["vocab"])
            row = {"dtype": dtype, "batch": b, "seq": s}
            for name, opts in (("plus_ep", {}), ("plus_ep_cuda_graph", {"cuda_graph": 1})):
                if lease_env.deadline_left() < 15:
                    row[name] = {"note": "not measured: the step's time ran out"}
                    continue
                ms, y, note = plus_run(path, feeds, opts, runs, max_s, warmup)
                row[name] = {**(percentiles(ms) if ms else {}), "note": note}
                if ms is None and name == "plus_ep":
                    failed.append(f"{dtype} b{b}: {note}")
                if y is not None:
                    row[name]["finite"] = bool(np.isfinite(y.astype(np.float32)).all())
                    if name == "plus_ep":
                        row["plus_out"] = y
            if tmodel is not None and lease_env.deadline_left() > 15:
                ids = torch.from_numpy(feeds["input_ids"]).cuda()
                mask = torch.from_numpy(feeds["attention_mask"]).cuda()
                with torch.inference_mode():
                    ms = time_runs(lambda: tmodel(ids, mask), torch.cuda.synchronize, runs, max_s, warmup)
                    row["torch_eager"] = percentiles(ms)
                    ref = tmodel(ids, mask).float().cpu().numpy()
                    if "plus_out" in row:
                        d = np.abs(row["plus_out"].astype(np.float32) - ref)
                        row["max_abs_vs_torch"] = float(d.max())
                        row["rel_vs_torch"] = float(d.max() / max(np.abs(ref).max(), 1e-30))
                    if lease_env.deadline_left() > 45:
                        t1 = time.perf_counter()
                        if compiled is None:
                            compiled = torch.compile(tmodel)
                        compiled(ids, mask)
                        c_s = time.perf_counter() - t1
                        ms = time_runs(lambda: compiled(ids, mask), torch.cuda.synchronize, runs, max_s, warmup)
                        row["torch_compile"] = {**percentiles(ms), "compile_s": round(c_s, 1)}
                    else:
                        row["torch_compile"] = {"note": "not measured: the step's time ran out"}
            row.pop("plus_out", None)
            rows.append(row)
            lease_env.write_json(out, _with_table(result))
    lease_env.write_json(out, _with_table(result))
    measured = [r for r in rows if r.get("plus_ep", {}).get("p50_ms")]
    if failed or not measured:
        st.set("failed", "; ".join(failed[:3]) or "nothing measured")
        return 1
    bad = [r for r in measured if not r["plus_ep"].get("finite", True)]
    if bad:
        st.set("failed", f"non-finite outputs: {[(r['dtype'], r['batch']) for r in bad]}")
        return 1
    first = measured[0]
    text = (f"{len(measured)} dtype x shape units; {first['dtype']} b{first['batch']}x{first['seq']}: PlusEP p50 "
            f"{first['plus_ep']['p50_ms']:.3f} ms")
    if first.get("torch_eager"):
        text += f", torch eager {first['torch_eager']['p50_ms']:.3f} ms"
    g = first.get("plus_ep_cuda_graph", {})
    text += f", CUDA graph {g['p50_ms']:.3f} ms" if g.get("p50_ms") else f", CUDA graph: {g.get('note', '-')[:160]}"
    st.set("ok", text + (" (PTX-interpreter time: rehearsal)" if emulated else ""))
    return 0


def _with_table(result: dict) -> dict:
    head = ["dtype", "batch x seq", "PlusEP p50 / p90 ms", "PlusEP + CUDA graph", "torch eager", "torch.compile",
            "max rel vs torch"]

    def cell(d):
        return f"{d['p50_ms']:.3f} / {d['p90_ms']:.3f}" if d and d.get("p50_ms") else (d or {}).get("note", "-")[:80]
    rows = [head, ["---"] * len(head)]
    for r in result["rows"]:
        rows.append([r["dtype"], f"{r['batch']}x{r['seq']}", cell(r.get("plus_ep")), cell(r.get("plus_ep_cuda_graph")),
                     cell(r.get("torch_eager")), cell(r.get("torch_compile")),
                     f"{r['rel_vs_torch']:.1e}" if r.get("rel_vs_torch") is not None else "-"])
    result["table"] = ["| " + " | ".join(map(str, x)) + " |" for x in rows]
    return result


if __name__ == "__main__":
    sys.exit(main())
