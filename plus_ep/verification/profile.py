"""`plus-ep profile MODEL --emulate`: per fused node, what its kernels do, from the PTX interpreter's
counters — a model of the hardware, never a measurement.

    from plus_ep.verification.profile import profile, profile_text
    rep = profile("bert.plus.onnx", arch="sm_90a", batch=1, seq=8, sample_ctas=None)

Per node (summed over its launches; with sample_ctas, counts of the CTAs run are scaled by
total CTAs / CTAs run):
  flops              FLOPs executed (tensor-core MACs x 2, fp32 fma x 2, add/sub/mul x 1)
  compulsory_bytes   every input read once + every output written once (tensor sizes)
  dram_bytes         unique 32-byte sectors the kernels touched x 32 (an infinite-L2 lower bound)
  ld/st sectors per request vs ideal   global-memory coalescing (ideal: active lanes x bytes / 32)
  smem wavefronts per request vs ideal bank conflicts (32 banks of 4 bytes)
  dsmem_bytes        bytes moved through distributed shared memory (thread-block clusters; never DRAM)
  tensor_core_share  tensor-core FLOPs / all FLOPs
  roofline           a bound for an H100 SXM: time >= max(flops / peak, dram_bytes / 3.35 TB/s), peak
                     989 TFLOP/s dense fp16/bf16 tensor cores, 494.5 tf32 tensor cores, 67 fp32 SIMT
"""
from __future__ import annotations

from .check import pack_archs, run_emulated

H100_SXM = {"name": "H100 SXM (model)", "dram_bytes_per_s": 3.35e12,
            "peak_flops": {"fp16": 989e12, "bf16": 989e12, "tf32": 494.5e12, "exact": 67e12}}


def _sum_mem(counters: list, prefix: str, unit: str) -> tuple[float, float, int]:
    req = units = ideal = 0
    for c in counters:
        for key, d in c.items():
            if key.startswith(prefix) and isinstance(d, dict) and d.get("requests"):
                req += d["requests"]
                units += d.get(unit, 0)
                ideal += d.get(f"ideal_{unit}", 0)
    return (units / req if req else 0.0), (ideal / req if req else 0.0), req


def _scale(c: dict) -> float:
    grid = c.get("grid", [1, 1, 1])
    total = grid[0] * grid[1] * grid[2]
    return total / max(1, c.get("ctas_run", total))


def node_profile(row: dict, gpu=H100_SXM) -> dict:
    cs = row.get("counters", [])
    flops = sum(c.get("flops", 0) * _scale(c) for c in cs)
    tc = sum(c.get("tensor_core_flops", 0) * _scale(c) for c in cs)
    dram = sum(c.get("unique_dram_bytes", 0) * _scale(c) for c in cs)
    ld, ld_ideal, _ = _sum_mem(cs, "global_ld", "sectors")
    st, st_ideal, _ = _sum_mem(cs, "global_st", "sectors")
    sm, sm_ideal, _ = _sum_mem(cs, "shared", "wavefronts")
    dsmem = sum(d.get("bytes", 0) * _scale(c) for c in cs for k, d in c.items()
                if k.startswith("dsmem") and isinstance(d, dict))
    peak = gpu["peak_flops"][row["math"]]
    t_compute, t_mem = flops / peak, dram / gpu["dram_bytes_per_s"]
    return {"node": row["node"], "pattern": row["pattern"], "arch": row["arch"], "math": row["math"],
            "kernels": row["kernels"], "launches": row["launches"],
            "sampled": any(_scale(c) > 1 for c in cs),
            "flops": int(flops), "compulsory_bytes": row.get("compulsory_bytes", 0), "dram_bytes": int(dram),
            "ld_sectors_per_request": round(ld, 2), "ld_sectors_ideal": round(ld_ideal, 2),
            "st_sectors_per_request": round(st, 2), "st_sectors_ideal": round(st_ideal, 2),
            "smem_wavefronts_per_request": round(sm, 2), "smem_wavefronts_ideal": round(sm_ideal, 2),
            "dsmem_bytes": int(dsmem),
            "tensor_core_share": round(tc / flops, 3) if flops else 0.0,
            "roofline_us": round(max(t_compute, t_mem) * 1e6, 3),
            "bound": "compute" if t_compute >= t_mem else "memory",
            "findings": row["n_findings"], "errors": row["errors"]}


def profile(model, arch=None, batch: int = 1, seq: int = 8, inputs=None, sample_ctas=None,
            progress=None, past: int = 0) -> dict:
    """past: the KV-cache length of a decoder exported with past key/values (seq=1: a decode step)."""
    import onnx
    if arch is None:
        proto = model if isinstance(model, onnx.ModelProto) else onnx.load(model, load_external_data=False)
        have = pack_archs(proto)
        arch = "sm_90a" if "sm_90a" in have else (have[0] if have else "sm_90a")
    raw = run_emulated(model, [arch], batch, seq, inputs, progress=progress,
                       extra={"profile": True, "sample_ctas": sample_ctas}, past=past)
    rows = [node_profile(r) for r in raw["nodes"]]
    return {"model": raw["model"], "arch": arch, "gpu": H100_SXM["name"], "inputs": raw.get("inputs", {}),
            "sample_ctas": sample_ctas,
            "note": "modelled from the PTX interpreter's counts; roofline of an H100 SXM; not measurements",
            "nodes": rows, "errors": raw["errors"], "ok": raw["ok"]}


def _si(x: float) -> str:
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= div:
            return f"{x / div:.2f}{unit}"
    return f"{x:.0f}"


def profile_text(rep: dict) -> str:
    ins = ", ".join(f"{k}{v['shape']}" for k, v in rep.get("inputs", {}).items())
    sampled = f"; {rep['sample_ctas']} CTAs sampled per launch, counts scaled" if rep["sample_ctas"] else ""
    out = [f"profile {rep['model'].rsplit('/', 1)[-1]} [{rep['arch']}] on the PTX interpreter; inputs {ins}{sampled}",
           (f"MODEL, not a measurement: counts from interpreted execution; roofline of an {rep['gpu']} "
            "(3.35 TB/s, 989 dense fp16 TFLOP/s)"),
           (f"{'node':<28} {'pattern':<16} {'flops':>8} {'compulsory':>10} {'dram':>8} {'ld sec/req':>11} "
            f"{'st sec/req':>11} {'smem wf/req':>11} {'tc':>5} {'roofline':>10}"),
           "(sec/req, wf/req: actual/ideal; compulsory: every input and output tensor once, whole tables included)"]
    for r in rep["nodes"]:
        out.append(f"{r['node'][:28]:<28} {r['pattern'][:16]:<16} {_si(r['flops']):>8} {_si(r['compulsory_bytes']) + 'B':>10} "
                   f"{_si(r['dram_bytes']) + 'B':>8} {r['ld_sectors_per_request']:>5.2f}/{r['ld_sectors_ideal']:<5.2f} "
                   f"{r['st_sectors_per_request']:>5.2f}/{r['st_sectors_ideal']:<5.2f} "
                   f"{r['smem_wavefronts_per_request']:>5.2f}/{r['smem_wavefronts_ideal']:<5.2f} "
                   f"{r['tensor_core_share']:>5.2f} {r['roofline_us'] * 1e3:>8.1f}ns {r['bound']}")
        if r.get("dsmem_bytes"):
            out.append(f"    {_si(r['dsmem_bytes'])}B through distributed shared memory (thread-block clusters; not DRAM)")
        for e in r["errors"]:
            out.append(f"    error: {e[:300]}")
    for e in rep["errors"]:
        out.append(f"error: {e[:400]}")
    return "\n".join(out)
