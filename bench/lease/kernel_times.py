"""The lease's kernel-time step: PlusEP's fused kernels of one BERT-base layer (bench/lease/bert.py: the
embedding LayerNorm, the Q/K/V GEMM group, attention, GEMM + residual + LayerNorm, GEMM + GELU, GEMM +
residual + LayerNorm), fp16 and fp32 (TF32), batch 1 and 16 x seq 128, against what torch runs for the
same node on the same weights (cuBLAS addmm, scaled_dot_product_attention, F.layer_norm, F.gelu), and
the whole layer in torch eager and torch.compile.

PlusEP's times are device times: with the provider option kernel_times=1 the EP records CUDA events on
its stream around each node's launches and reads them after the run (PlusEP_NodeStats); runs go
through stock onnxruntime with inputs and outputs bound in device memory. torch's are CUDA-event
medians of 20 runs after 5 warm-ups. In the rehearsal (emulated driver) the model is a 64-wide BERT,
seq 8, one run, torch is skipped, and the "device times" are the PTX interpreter's seconds (they only
prove the path works).

    python -m bench.lease.kernel_times CARRY OUT_JSON [--short]
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

PATTERNS = ("layernorm", "gemm_group", "attention", "gemm_layernorm", "gemm", "gemm_layernorm_ffn")


def _plus_nodes(model) -> dict:
    """node name -> torch op key (the second gemm_layernorm is the FFN's)."""
    out, seen = {}, set()
    for n in model.graph.node:
        if n.domain != "ai.plus_ep":
            continue
        p = n.name.split("/")[1]
        key = "gemm_layernorm_ffn" if p == "gemm_layernorm" and p in seen else p
        seen.add(p)
        out[n.name] = key
    return out


def torch_time(torch, fn, reps=20, warmup=5) -> float:
    """Median milliseconds of fn() on the current stream (CUDA events)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return float(np.median(times))


def plus_times(path, feeds, runs: int) -> dict:
    """{node: (mean ms, min ms, runs)} of PlusEP's device times over `runs` runs after warm-ups."""
    sess = lease_env.session(path, {"kernel_times": 1})
    io = sess.io_binding()
    keep = {k: lease_env.device_value(v) for k, v in feeds.items()}
    for k, v in keep.items():
        io.bind_ortvalue_input(k, v)
    b, s = feeds["input_ids"].shape
    out = sess.get_outputs()[0]
    keep["out"] = lease_env.empty_device((b, s, int(out.shape[-1])),
                                         np.float16 if out.type == "tensor(float16)" else np.float32)
    io.bind_ortvalue_output(out.name, keep["out"])
    for _ in range(2 if runs > 1 else 0):
        sess.run_with_iobinding(io)
    lease_env.reset_stats()
    for _ in range(runs):
        sess.run_with_iobinding(io)
    stats = lease_env.node_stats()
    on = set(lease_env.on_plus(sess))
    del sess
    return {n: (s["ms_sum"] / s["timed"] if s["timed"] else None, s["ms_min"] if s["timed"] else None, s["runs"])
            for n, s in stats.items() if n in on}


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    import plus_ep
    carry, out, st, p, torch, why, cache = lease_bert.step_setup("kernels", argv)
    emulated = lease_env.mode() == "emulated"
    size, shapes, runs = p["size"], p["shapes"], p["runs"]
    rows, notes, table = [], [], []
    if why:
        notes.append(f"torch comparisons skipped: {why}")
    result = {"mode": lease_env.mode(), "size": size, "shapes": shapes, "rows": rows, "notes": notes, "table": table}
    work = pathlib.Path(tempfile.mkdtemp(prefix="plus_ep_kernels_"))
    failed = []
    for dtype in p["dtypes"]:
        if lease_env.deadline_left() < 20:
            notes.append(f"{dtype}: not measured, the step's time ran out")
            continue
        t0 = time.perf_counter()
        m = lease_bert.onnx_model(layers=1, dtype=dtype, size=size)
        r = plus_ep.rewrite_detailed(m, archs=["sm_90a"], cache=cache)
        path = work / f"bert-{dtype}.plus.onnx"
        onnx.save(r.model, path)
        lease_env.register(r.model)
        nodes = _plus_nodes(r.model)
        notes.append(f"{dtype}: rewrite {time.perf_counter() - t0:.1f}s, {len(nodes)} fused nodes, kernels "
                     f"{r.kernels.cached} from the carried cache, {r.kernels.compiled} compiled here")
        W = ops = None
        if torch is not None:
            tdt = torch.float16 if dtype == "fp16" else torch.float32
            torch.backends.cuda.matmul.allow_tf32 = dtype == "fp32"   # PlusEP's fp32 default is TF32 too
            _, W = lease_bert.torch_bert(m, 1, size["heads"], "cuda", tdt)
        for b, s in shapes:
            if lease_env.deadline_left() < 10:
                notes.append(f"{dtype} b{b}: not measured, the step's time ran out")
                continue
            feeds = lease_bert.feeds(b, s, size["vocab"])
            try:
                times = plus_times(path, feeds, runs)
            except Exception as e:  # noqa: BLE001 - recorded, the step fails
                failed.append(f"{dtype} b{b}x{s}: {type(e).__name__}: {' '.join(str(e).split())[:300]}")
                continue
            if torch is not None:
                ops = lease_bert.torch_node_ops(W, b, s, size["heads"], "cuda", tdt)
            for node, key in nodes.items():
                mean, mn, nruns = times.get(node, (None, None, 0))
                if nruns == 0:
                    failed.append(f"{dtype} b{b}x{s}: node {node} did not run on PlusEP")
                tt = torch_time(torch, ops[key]) if ops else None
                rows.append({"dtype": dtype, "batch": b, "seq": s, "node": node, "pattern": key, "plus_ms": mean,
                             "plus_min_ms": mn, "torch_eager_ms": tt,
                             "speedup": tt / mean if tt and mean else None})
            if torch is not None:
                layer, _ = lease_bert.torch_bert(m, 1, size["heads"], "cuda", tdt)
                ids = torch.from_numpy(feeds["input_ids"]).cuda()
                mask = torch.from_numpy(feeds["attention_mask"]).cuda()
                with torch.inference_mode():
                    eager = torch_time(torch, lambda: layer(ids, mask))
                    compiled, c_s = None, None
                    if lease_env.deadline_left() > 40:
                        t1 = time.perf_counter()
                        cl = torch.compile(layer)
                        cl(ids, mask)
                        c_s = time.perf_counter() - t1
                        compiled = torch_time(torch, lambda: cl(ids, mask))
                plus_sum = sum(r["plus_ms"] or 0 for r in rows if r["dtype"] == dtype and r["batch"] == b)
                rows.append({"dtype": dtype, "batch": b, "seq": s, "node": "(embeddings + 1 layer)", "pattern": "sum",
                             "plus_ms": plus_sum, "torch_eager_ms": eager, "torch_compile_ms": compiled,
                             "torch_compile_s": c_s})
            lease_env.write_json(out, _with_table(result))
    lease_env.write_json(out, _with_table(result))
    timed = [r for r in rows if r.get("plus_ms")]
    if failed or not timed:
        st.set("failed", "; ".join(failed[:4]) or "no PlusEP node time measured")
        return 1
    what = "PTX-interpreter seconds (rehearsal)" if emulated else "device times"
    best = [r for r in rows if r.get("speedup")]
    st.set("ok", f"{len(timed)} node times ({what})" + (
        f"; PlusEP vs torch eager per node: {min(r['speedup'] for r in best):.2f}x .. "
        f"{max(r['speedup'] for r in best):.2f}x" if best else f"; {notes[0] if why else ''}"))
    return 0


def _with_table(result: dict) -> dict:
    head = ["dtype", "batch x seq", "node", "PlusEP ms (mean / min)", "torch eager ms", "torch.compile ms",
            "eager / PlusEP"]
    rows = [head, ["---"] * len(head)]
    for r in result["rows"]:
        rows.append([r["dtype"], f"{r['batch']}x{r['seq']}", r["node"],
                     f"{r['plus_ms']:.4f} / {r['plus_min_ms']:.4f}" if r.get("plus_min_ms") is not None else
                     (f"{r['plus_ms']:.4f}" if r.get("plus_ms") is not None else "-"),
                     f"{r['torch_eager_ms']:.4f}" if r.get("torch_eager_ms") else "-",
                     f"{r['torch_compile_ms']:.4f}" if r.get("torch_compile_ms") else "-",
                     f"{r['speedup']:.2f}x" if r.get("speedup") else "-"])
    result["table"] = ["| " + " | ".join(map(str, r)) + " |" for r in rows]
    return result


if __name__ == "__main__":
    sys.exit(main())
