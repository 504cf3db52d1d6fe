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
  roofline_us        a bound for the arch's reference part (an H100 SXM5 for sm_90/sm_90a images):
                     max(flops / the part's best dense peak, dram_bytes / DRAM bandwidth), as if the kernels
                     filled the machine (perfmodel.roofline_s)
  ctas, waves        CTAs launched, and waves of them on the part's SMs (occupancy, clusters per GPC)
  modelled_us        the wave-aware model's time (kernels/perfmodel.py): per wave the largest of tensor (each
                     instruction class at its own peak: mma.sync below wgmma on an H100), SIMT, instruction
                     issue (4 schedulers per SM), MUFU, L2 and DRAM; never below the roofline floor scaled
                     to the SMs the CTAs occupy (an SM draws at most about twice its fair share)
  finish_us          (a GEMM + row program in one launch) the tail after the GEMM: the last CTA of each row
                     group reads the row input through L2 (ld.global.cg) and finishes the rows; included
                     in modelled_us
  per_kernel         the same per launch: grid, block, cluster, registers, shared memory, L2 bytes, the
                     model's terms (terms_us) and what it was fed (model_inputs; model_kernel re-states it)
and the report's model_totals: launches, kernel time, launch gaps on a stream and from a CUDA graph
(apart), the model's constants and their sources. Every time here is MODELLED.
"""
from __future__ import annotations

from ..kernels import arch as arch_table
from ..kernels import perfmodel
from .check import pack_archs, run_emulated

MODEL_NOTE = ("MODELLED from the PTX interpreter's counts (plus_ep/kernels/perfmodel.py: a wave-aware model of "
              "the arch's reference part); not measurements")


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


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= int(x)
    return out


def model_inputs(c: dict) -> dict:
    """What kernels/perfmodel.py is fed for one launch, from its interpreter counters (scaled by total CTAs /
    CTAs run when CTAs were sampled). Kept in the profile so that a later model can re-state the time
    without re-running the interpreter (`model_kernel`)."""
    s = _scale(c)
    res = c.get("resources", {})
    grid, block = list(c.get("grid", [1, 1, 1])), list(c.get("block", [1, 1, 1]))
    by_class = c.get("thread_instructions_by_class", {})
    # global load / store sectors, and distributed shared memory traffic counted like L2 traffic (the route
    # model does the same, kernels/families/gemm/routes.py gemm_time)
    l2 = (sum(c.get(k, {}).get("sectors", 0) for k in ("global_ld", "global_st")) * 32
          + sum(d.get("bytes", 0) for k, d in c.items() if k.startswith("dsmem") and isinstance(d, dict))) * s
    return {"ctas": _prod(grid), "threads": _prod(block),
            "smem": int(res.get("smem_dynamic", 0)) + int(res.get("smem_static", 0)),
            "registers": int(res.get("registers", 0)), "cluster": _prod(res.get("cluster", [1, 1, 1])),
            "flops": c.get("flops", 0) * s, "tensor": {k: v * s for k, v in c.get("tensor_flops", {}).items()},
            "warp_instructions": c.get("warp_instructions", 0) * s, "mufu": by_class.get("mufu", 0) * s,
            "dram_bytes": c.get("unique_dram_bytes", 0) * s, "l2_bytes": l2,
            # a GEMM + row program in one launch (gemm_hooks.cuh plus_finish_rows): the last CTA of each row
            # group (gridDim.y x gridDim.z of them) reads the row input through L2 (ld.global.cg, counted
            # apart) after the group's other CTAs are done: modelled as a tail after the launch
            "finish_l2_bytes": c.get("global_ld_cg", {}).get("sectors", 0) * 32 * s, "finish_ctas": grid[1] * grid[2]}


def model_kernel(m: dict, arch: str) -> dict:
    """The modelled time of one launch from its `model_inputs`: the perfmodel estimate (as_dict), plus the
    row finish's tail (`finish_us`, included in modelled_us) when the launch has one."""
    est = perfmodel.launch_time(arch, ctas=m["ctas"], threads=m["threads"], smem=m["smem"], flops=m["flops"],
                                tensor=m["tensor"], warp_instructions=m["warp_instructions"], mufu=m["mufu"],
                                dram_bytes=m["dram_bytes"], l2_bytes=m["l2_bytes"], registers=m["registers"],
                                cluster=m["cluster"])
    out = est.as_dict()
    if m.get("finish_l2_bytes"):
        tail = perfmodel.launch_time(arch, ctas=m["finish_ctas"], threads=m["threads"], smem=0, dram_bytes=0,
                                     l2_bytes=m["finish_l2_bytes"]).modelled_us
        out["finish_us"] = round(tail, 3)
        out["modelled_us"] = round(est.modelled_us + tail, 3)
    return out


def kernel_profile(c: dict, arch: str) -> dict:
    """One launch: its geometry, occupancy, counts (scaled when CTAs were sampled), what the model was fed
    (`model_inputs`) and its modelled time."""
    m = model_inputs(c)
    ld, ld_ideal, _ = _sum_mem([c], "global_ld", "sectors")
    st, st_ideal, _ = _sum_mem([c], "global_st", "sectors")
    return {"entry": c.get("entry", ""), "grid": list(c.get("grid", [1, 1, 1])),
            "block": list(c.get("block", [1, 1, 1])), "cluster": m["cluster"],
            "registers": m["registers"], "smem": m["smem"],
            "flops": int(m["flops"]), "dram_bytes": int(m["dram_bytes"]), "l2_bytes": int(m["l2_bytes"]),
            "ld_sectors_per_request": round(ld, 2), "ld_sectors_ideal": round(ld_ideal, 2),
            "st_sectors_per_request": round(st, 2), "st_sectors_ideal": round(st_ideal, 2),
            **model_kernel(m, arch), "model_inputs": m}


def node_profile(row: dict, arch: str | None = None) -> dict:
    arch = arch or row.get("arch") or "sm_90a"
    cs = row.get("counters", [])
    flops = sum(c.get("flops", 0) * _scale(c) for c in cs)
    tc = sum(c.get("tensor_core_flops", 0) * _scale(c) for c in cs)
    dram = sum(c.get("unique_dram_bytes", 0) * _scale(c) for c in cs)
    ld, ld_ideal, _ = _sum_mem(cs, "global_ld", "sectors")
    st, st_ideal, _ = _sum_mem(cs, "global_st", "sectors")
    sm, sm_ideal, _ = _sum_mem(cs, "shared", "wavefronts")
    dsmem = sum(d.get("bytes", 0) * _scale(c) for c in cs for k, d in c.items()
                if k.startswith("dsmem") and isinstance(d, dict))
    t_compute = perfmodel.roofline_s(arch, flops, 0, row["math"])
    t_mem = perfmodel.roofline_s(arch, 0, dram, row["math"])
    kernels = [kernel_profile(c, arch) for c in cs]
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
            "ctas": sum(k["ctas"] for k in kernels), "waves": sum(k["waves"] for k in kernels),
            "modelled_us": round(sum(k["modelled_us"] for k in kernels), 3),
            "per_kernel": kernels,
            "findings": row["n_findings"], "errors": row["errors"]}


def model_totals(nodes: list, arch: str) -> dict:
    """The model's totals over every launch: kernel time, launch gaps with and without CUDA graphs (apart)."""
    launches = sum(len(n["per_kernel"]) for n in nodes)
    kernel_us = sum(n["modelled_us"] for n in nodes)
    gaps = {"stream": perfmodel.gap_us(launches, graphs=False), "cuda_graph": perfmodel.gap_us(launches, graphs=True)}
    p = perfmodel.part(arch)
    return {"launches": launches, "kernel_us": round(kernel_us, 3),
            "floor_us": round(sum(k["floor_us"] for n in nodes for k in n["per_kernel"]), 3),
            "roofline_us": round(sum(n["roofline_us"] for n in nodes), 3),
            "launch_gaps_us": {k: round(v, 3) for k, v in gaps.items()},
            "total_us": {k: round(kernel_us + v, 3) for k, v in gaps.items()},
            "part": p.name,
            "constants": {"dram_bytes_per_s": p.dram_bytes_per_s, "l2_bytes_per_s": p.l2_bytes_per_s,
                          "clock_hz": p.clock_hz, "schedulers_per_sm": perfmodel.SCHEDULERS,
                          "mufu_per_clock_per_sm": perfmodel.MUFU_PER_CLOCK,
                          "peak_flops": {k: v.flops for k, v in sorted(p.peaks.items())},
                          "sources": {k: perfmodel.SOURCES[k] for k in sorted(
                              {v.source for v in p.peaks.values()} | {"sm", "mufu"}
                              | {x.strip() for x in p.source.split(",")})},
                          "dram_latency_us": round(p.dram_latency_s * 1e6, 4),
                          "latency_per_wave_us": round(perfmodel.LATENCY_WAVES * p.dram_latency_s * 1e6, 4),
                          "sm_bandwidth_share": perfmodel.SHARE, "gpcs": p.gpcs,
                          "sms": arch_table.get(arch).sms,
                          "gap_stream_us": perfmodel.GAP_STREAM_S * 1e6,
                          "gap_cuda_graph_us": perfmodel.GAP_GRAPH_S * 1e6}}


def profile(model, arch=None, batch: int = 1, seq: int = 8, inputs=None, sample_ctas=None,
            progress=None, past: int = 0) -> dict:
    """past: the KV-cache length of a decoder exported with past key/values (seq=1: a decode step)."""
    if arch is None:
        from ..validate import load_model
        proto = load_model(model)
        have = pack_archs(proto)
        arch = "sm_90a" if "sm_90a" in have else (have[0] if have else "sm_90a")
    raw = run_emulated(model, [arch], batch, seq, inputs, progress=progress,
                       extra={"profile": True, "sample_ctas": sample_ctas}, past=past)
    rows = [node_profile(r, arch) for r in raw["nodes"]]
    return {"model": raw["model"], "arch": arch, "gpu": perfmodel.part(arch).name + " (model)",
            "inputs": raw.get("inputs", {}), "sample_ctas": sample_ctas, "note": MODEL_NOTE,
            "nodes": rows, "model_totals": model_totals(rows, arch), "errors": raw["errors"], "ok": raw["ok"]}


def _si(x: float) -> str:
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= div:
            return f"{x / div:.2f}{unit}"
    return f"{x:.0f}"


def profile_text(rep: dict) -> str:
    ins = ", ".join(f"{k}{v['shape']}" for k, v in rep.get("inputs", {}).items())
    sampled = f"; {rep['sample_ctas']} CTAs sampled per launch, counts scaled" if rep["sample_ctas"] else ""
    out = [f"profile {rep['model'].rsplit('/', 1)[-1]} [{rep['arch']}] on the PTX interpreter; inputs {ins}{sampled}",
           (f"MODELLED, not a measurement: counts from interpreted execution; times from the wave-aware model of an "
            f"{rep['gpu']} (kernels/perfmodel.py)"),
           (f"{'node':<28} {'pattern':<16} {'flops':>8} {'compulsory':>10} {'dram':>8} {'ld sec/req':>11} "
            f"{'st sec/req':>11} {'smem wf/req':>11} {'tc':>5} {'ctas':>5} {'waves':>5} {'roofline':>9} {'modelled':>9}"),
           "(sec/req, wf/req: actual/ideal; compulsory: every input and output tensor once, whole tables included)"]
    for r in rep["nodes"]:
        out.append(f"{r['node'][:28]:<28} {r['pattern'][:16]:<16} {_si(r['flops']):>8} {_si(r['compulsory_bytes']) + 'B':>10} "
                   f"{_si(r['dram_bytes']) + 'B':>8} {r['ld_sectors_per_request']:>5.2f}/{r['ld_sectors_ideal']:<5.2f} "
                   f"{r['st_sectors_per_request']:>5.2f}/{r['st_sectors_ideal']:<5.2f} "
                   f"{r['smem_wavefronts_per_request']:>5.2f}/{r['smem_wavefronts_ideal']:<5.2f} "
                   f"{r['tensor_core_share']:>5.2f} {r.get('ctas', 0):>5} {r.get('waves', 0):>5} "
                   f"{r['roofline_us']:>7.2f}us {r.get('modelled_us', 0.0):>7.2f}us")
        if len(r.get("per_kernel", [])) > 1:
            for k in r["per_kernel"]:
                out.append(f"    {k['entry']:<24} {k['ctas']:>5} CTAs, {k['waves']} wave(s), {k['per_sm']}/SM, "
                           f"modelled {k['modelled_us']:.2f}us ({k['bound']})")
        if r.get("dsmem_bytes"):
            out.append(f"    {_si(r['dsmem_bytes'])}B through distributed shared memory (thread-block clusters; not DRAM)")
        for e in r["errors"]:
            out.append(f"    error: {e[:300]}")
    t = rep.get("model_totals")
    if t:
        g, tot = t["launch_gaps_us"], t["total_us"]
        out.append(f"modelled: {t['launches']} launches, kernels {t['kernel_us']:.2f}us (roofline {t['roofline_us']:.2f}us); "
                   f"launch gaps {g['stream']:.2f}us on a stream, {g['cuda_graph']:.2f}us from a CUDA graph; "
                   f"total {tot['stream']:.2f}us / {tot['cuda_graph']:.2f}us")
    for e in rep["errors"]:
        out.append(f"error: {e[:400]}")
    return "\n".join(out)
