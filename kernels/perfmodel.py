"""A wave-aware model of a kernel launch's time on a GPU's reference part: MODELLED, never measured.

    from plus_ep.kernels import perfmodel
    est = perfmodel.launch_time("sm_90a", ctas=16, threads=128, smem=99328, registers=168, cluster=8,
                                flops=2 * 128 * 768 * 3072, dram_bytes=5.9e6, l2_bytes=12.6e6, math="fp16")
    est.modelled_us, est.waves, est.per_sm, est.floor_us, est.bound

One model for two readers: `plus-ep profile --emulate` (plus_ep/verification/profile.py) feeds it the PTX
interpreter's counts of each launch, and the GEMM route model (kernels/gemm/routes.py) feeds it a config's analytic
counts to choose tiles and split-K. The SM count and the per-SM limits come from kernels/arch.py; the
memory and peak figures of the arch's reference part (`PARTS`) are datasheet or published
microbenchmark figures, each with its source below.

The model, per launch:
  * occupancy: resident CTAs per SM = min(32, threads, shared memory (+1 KiB reserved per CTA), registers
    (per warp, rounded up to 256)); a cluster of C CTAs must sit in one GPC: concurrent clusters =
    GPCs x floor(SMs per GPC x CTAs per SM / C). Slots = the CTAs that run at once; waves = ctas / slots
    rounded up.
  * a wave of n CTAs spreads over min(SMs, n) SMs (the block scheduler fills SMs breadth first, clusters
    are spread by default); its busiest SM runs r = ceil(n / SMs) of them. Per CTA: f FLOPs, l bytes
    through L2 (its global load and store sectors x 32), d DRAM bytes (the launch's unique sectors / CTAs).
    Wave time = max(r f / (peak / SMs),
                    max(n l / L2 bandwidth, r l / (SHARE x L2 bandwidth / SMs)),
                    max(n d / DRAM bandwidth, r d / (SHARE x DRAM bandwidth / SMs)))
                + LATENCY_WAVES x DRAM latency (the pipeline fills once per wave and drains once).
    SHARE = 2: an SM draws at most about twice its fair share of the memory bandwidth (issue 24's
    assumption; by Little's law an SM with two 24-48 KB stages in flight against a ~0.3-0.5 us loaded
    latency sustains about that).
  * the launch never takes less than its roofline floor scaled to the SMs its CTAs can occupy
    (u = min(SMs, ctas) / SMs): max(flops / (peak x u), DRAM bytes / (DRAM bandwidth x min(1, SHARE x u))).
  * launch gaps are not kernel time: `gap_us(launches, graphs)` gives them separately.

What it ignores (so read it as a model with these blind spots): instruction issue and latency inside a
CTA (index math, shared-memory bank conflicts and wavefronts, barriers, cluster barriers and distributed
shared-memory traffic), L1 hits, the L2's capacity (every re-read is an L2 hit; a working set over the
50 MB L2 would spill to DRAM), DRAM page and partition effects, clock changes under power limits, the
tail of CTAs of one wave finishing at different times, and concurrency between kernels.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from . import arch as arch_table

SHARE = 2.0               # an SM draws at most about this multiple of its fair share of a bandwidth (issue 24)
LATENCY_WAVES = 2         # DRAM latencies per wave: the first tile's load, the last stores' drain
MAX_CTAS_PER_SM = 32      # resident blocks per SM (CUDA's limit for compute capability 8.0 to 9.0)
REG_ALLOC_UNIT = 256      # registers are allocated per warp in units of 256 (compute capability 8.x / 9.0)
MATHS = ("fp16", "bf16", "tf32", "exact")


@dataclass(frozen=True)
class Part:
    """The memory and peak figures of an arch's reference part (kernels/arch.py `part`)."""
    name: str
    dram_bytes_per_s: float
    l2_bytes_per_s: float
    peak_flops: tuple           # (fp16/bf16 tensor cores dense, tf32 tensor cores dense, fp32 SIMT) FLOP/s
    dram_latency_s: float
    gpcs: int = 0               # graphics processing clusters (thread-block clusters stay inside one); 0: none
    source: str = ""

    def peak(self, math_: str) -> float:
        i = {"fp16": 0, "bf16": 0, "tf32": 1, "exact": 2}[math_]
        return self.peak_flops[i]


# Sources: [H100] NVIDIA H100 Tensor Core GPU datasheet (SXM5: 3.35 TB/s HBM3; FP16/BF16 tensor 1,979 TFLOP/s
# with sparsity = 989.4 dense; TF32 989 with sparsity = 494.7 dense; FP32 67 TFLOP/s) and the NVIDIA H100
# Tensor Core GPU Architecture whitepaper (GH100: 8 GPCs). [A100] NVIDIA A100 datasheet (SXM4 80 GB: 2,039 GB/s;
# FP16 tensor 312, TF32 156, FP32 19.5 TFLOP/s dense). [A40] NVIDIA A40 datasheet (696 GB/s; FP16 tensor
# 149.7, TF32 74.8, FP32 37.4 TFLOP/s dense). [4090] NVIDIA Ada GPU architecture whitepaper, RTX 4090
# (1,008 GB/s; FP16 tensor with FP32 accumulate 165.2, TF32 82.6, FP32 82.6 TFLOP/s dense).
# [T3] "Hardware features of different Nvidia GPU architectures", Table 3 of PMC article 10448217
# (pmc.ncbi.nlm.nih.gov/articles/PMC10448217/table/t0015): H100 L2 bandwidth 8,986 GB/s, A100 7,219 GB/s
# (5,120 bytes per clock at 1,755 / 1,410 MHz), global-memory latency 400 cycles (0.228 us at 1,755 MHz,
# 0.284 us at 1,410 MHz). The A40 and RTX 4090 L2 bandwidths are not published there: ASSUMED 3x DRAM, and
# their latency ASSUMED 0.3 us (only their relative route choices read these).
PARTS = {
    "H100 SXM5": Part("H100 SXM5", 3.35e12, 8.986e12, (989.4e12, 494.7e12, 66.9e12), 400 / 1.755e9, gpcs=8,
                      source="H100 datasheet and whitepaper; L2 bandwidth and latency: [T3]"),
    "A100": Part("A100 SXM4 80GB", 2.039e12, 7.219e12, (312e12, 156e12, 19.5e12), 400 / 1.41e9,
                 source="A100 datasheet; L2 bandwidth and latency: [T3]"),
    "A40": Part("A40", 0.696e12, 3 * 0.696e12, (149.7e12, 74.8e12, 37.4e12), 0.3e-6,
                source="A40 datasheet; L2 bandwidth and latency ASSUMED"),
    "GeForce RTX 4090": Part("GeForce RTX 4090", 1.008e12, 3 * 1.008e12, (165.2e12, 82.6e12, 82.6e12), 0.3e-6,
                             source="Ada whitepaper; L2 bandwidth and latency ASSUMED"),
}

# Launch gaps (kernel end to the next kernel's start on one stream, the host keeping ahead), from NVIDIA's
# "Getting Started with CUDA Graphs" (developer.nvidia.com/blog/cuda-graphs, 2019, a V100): kernels of 2.9 us
# took 3.8 us each launched back to back on a stream and 3.4 us each replayed from a graph. Not re-measured
# on an H100; with a host slower than the kernels (no CUDA graph) the gaps grow to the host's cost per launch.
GAP_STREAM_S = 0.9e-6
GAP_GRAPH_S = 0.5e-6


def part(arch) -> Part:
    return PARTS[arch_table.get(arch).part]


def gap_us(launches: int, graphs: bool) -> float:
    """Modelled launch gaps of `launches` kernels in a row (stream launches, or one CUDA-graph replay)."""
    return launches * (GAP_GRAPH_S if graphs else GAP_STREAM_S) * 1e6


def occupancy(arch, threads: int, smem: int, registers: int = 0) -> int:
    """Resident CTAs per SM (at least 1): threads, shared memory (dynamic + static, +1 KiB reserved per
    CTA) and registers (0: unknown, not limiting)."""
    a = arch_table.get(arch)
    per = min(MAX_CTAS_PER_SM, a.threads_per_sm // max(1, threads),
              a.smem_per_sm // (max(0, smem) + arch_table.RESERVED_SMEM_PER_BLOCK))
    if registers:
        warps = -(-threads // 32)
        per_warp = -(-registers * 32 // REG_ALLOC_UNIT) * REG_ALLOC_UNIT
        per = min(per, a.registers_per_sm // (warps * per_warp))
    return max(1, per)


def slots(arch, per_sm: int, cluster: int = 1) -> int:
    """CTAs that run at once: SMs x per_sm, or for clusters of `cluster` CTAs, whole clusters per GPC."""
    sms = arch_table.get(arch).sms
    if cluster <= 1:
        return sms * per_sm
    gpcs = part(arch).gpcs or 1
    per_gpc = (sms // gpcs) * per_sm // cluster
    return max(1, gpcs * per_gpc) * cluster


@dataclass
class Estimate:
    ctas: int
    per_sm: int
    slots: int
    waves: int
    sms_used: int
    floor_us: float
    modelled_us: float
    bound: str              # "compute", "l2", "dram" or "latency": the largest term over the waves

    def as_dict(self) -> dict:
        return {"ctas": self.ctas, "per_sm": self.per_sm, "slots": self.slots, "waves": self.waves,
                "sms_used": self.sms_used, "floor_us": round(self.floor_us, 3),
                "modelled_us": round(self.modelled_us, 3), "bound": self.bound}


def launch_time(arch, *, ctas: int, threads: int, smem: int, flops: float, dram_bytes: float, l2_bytes: float,
                math_: str = "fp16", registers: int = 0, cluster: int = 1, per_sm: int | None = None) -> Estimate:
    """The modelled time of one launch (module docstring). `smem`: dynamic + static shared memory per CTA;
    `l2_bytes`: every global load and store sector x 32 of the launch; `dram_bytes`: its unique sectors x 32."""
    p, sms = part(arch), arch_table.get(arch).sms
    ctas = max(1, int(ctas))
    per = per_sm or occupancy(arch, threads, smem, registers)
    n_slots = slots(arch, per, cluster)
    waves = math.ceil(ctas / n_slots)
    peak = p.peak(math_)
    f, l, d = flops / ctas, l2_bytes / ctas, dram_bytes / ctas
    lat = LATENCY_WAVES * p.dram_latency_s
    total, terms = 0.0, {"compute": 0.0, "l2": 0.0, "dram": 0.0, "latency": 0.0}
    left = ctas
    while left > 0:
        n = min(n_slots, left)
        left -= n
        r = -(-n // sms)
        t = {"compute": r * f / (peak / sms),
             "l2": max(n * l / p.l2_bytes_per_s, r * l / (SHARE * p.l2_bytes_per_s / sms)),
             "dram": max(n * d / p.dram_bytes_per_s, r * d / (SHARE * p.dram_bytes_per_s / sms))}
        top = max(t.values())
        for k, v in t.items():
            terms[k] += v if v == top else 0.0
        terms["latency"] += lat
        total += top + lat
    used = min(sms, ctas)
    u = used / sms
    floor = max(flops / (peak * u), dram_bytes / (p.dram_bytes_per_s * min(1.0, SHARE * u)))
    modelled = max(floor, total)
    bound = max(terms, key=terms.get)
    return Estimate(ctas, per, n_slots, waves, used, floor * 1e6, modelled * 1e6, bound)


__all__ = ["GAP_GRAPH_S", "GAP_STREAM_S", "LATENCY_WAVES", "PARTS", "Part", "SHARE", "Estimate", "gap_us",
           "launch_time", "occupancy", "part", "slots"]
