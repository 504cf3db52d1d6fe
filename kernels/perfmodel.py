"""A wave-aware model of a kernel launch's time on a GPU's reference part: MODELLED, never measured.

    from plus_ep.kernels import perfmodel
    est = perfmodel.launch_time("sm_90a", ctas=16, threads=128, smem=99328, registers=168, cluster=8,
                                flops=2 * 128 * 768 * 3072, tensor={"wgmma.fp16": 2 * 128 * 768 * 3072},
                                warp_instructions=2.1e5, dram_bytes=5.9e6, l2_bytes=12.6e6)
    est.modelled_us, est.waves, est.per_sm, est.floor_us, est.bound, est.terms_us

One model for two readers: `plus-ep profile --emulate` (plus_ep/verification/profile.py) feeds it the PTX
interpreter's counts of each launch, and the GEMM route model (kernels/families/gemm/routes.py) feeds it a config's
analytic counts to choose tiles and split-K. The SM count and the per-SM limits come from kernels/arch.py; the
memory, clock and peak figures of the arch's reference part (`PARTS`) are datasheet or published
measurements, each naming its source (`SOURCES`).

The model, per launch:
  * occupancy: resident CTAs per SM = min(32, threads, shared memory (+1 KiB reserved per CTA), registers
    (per warp, rounded up to 256)); a cluster of C CTAs must sit in one GPC: concurrent clusters =
    GPCs x floor(SMs per GPC x CTAs per SM / C). Slots = the CTAs that run at once; waves = ctas / slots
    rounded up.
  * a wave of n CTAs spreads over min(SMs, n) SMs (the block scheduler fills SMs breadth first, clusters
    are spread by default); its busiest SM runs r = ceil(n / SMs) of them. Per CTA: tensor FLOPs by
    instruction class (wgmma, mma.sync) and precision, SIMT FLOPs, warp-level instruction issues, MUFU
    (ex2, rsqrt, ...) thread operations, l bytes through L2 (its global load and store sectors x 32), d DRAM
    bytes (the launch's unique sectors / CTAs). Wave time = the largest of
        tensor  r x sum over classes of FLOPs / (that class's peak / SMs)   (one tensor unit per SM partition)
        simt    r x SIMT FLOPs / (fp32 peak / SMs)
        issue   r x warp instructions / (min(4, r x warps per CTA) x clock)  (4 schedulers per SM, one
                warp instruction per cycle each; a CTA's warps sit on at most that many schedulers)
        mufu    r x MUFU operations / (16 per clock per SM x clock)
        l2      max(n l / L2 bandwidth, r l / (SHARE x L2 bandwidth / SMs))
        dram    max(n d / DRAM bandwidth, r d / (SHARE x DRAM bandwidth / SMs))
    plus LATENCY_WAVES x DRAM latency (the pipeline fills once per wave and drains once).
    SHARE = 2: an SM draws at most about twice its fair share of the memory bandwidth (an
    assumption; by Little's law an SM with two 24-48 KB stages in flight against a ~0.3-0.5 us loaded
    latency sustains about that).
  * the launch never takes less than its roofline floor scaled to the SMs its CTAs can occupy
    (u = min(SMs, ctas) / SMs): max(tensor FLOPs by class / (class peak x u), SIMT FLOPs / (fp32 peak x u),
    DRAM bytes / (DRAM bandwidth x min(1, SHARE x u))).
  * launch gaps are not kernel time: `gap_us(launches, graphs)` gives them separately.

Tensor FLOPs are charged at the peak of the instruction that does them: on an H100 `mma.sync` does not
reach `wgmma`'s peak (PEAKS). Nothing is credited by default: FLOPs not named in `tensor` run on the SIMT
pipes.

What it ignores (so read it as a model with these blind spots): dependent-instruction latency inside a warp
(a scheduler with one or two warps issues less than one instruction per cycle), PTX vs SASS instruction
counts (ptxas expands some PTX instructions, 64-bit division, rcp.rn, into many, and removes others),
shared-memory bank conflicts and wavefronts, barriers, cluster barriers and distributed shared-memory
traffic, the overlap (or not) of a CTA's tensor, SIMT and memory work (the terms are a max, as if perfectly
overlapped), L1 hits, the L2's capacity (every re-read is an L2 hit; a working set over the 50 MB L2 would
spill to DRAM), DRAM page and partition effects, clock changes under power limits, the tail of CTAs of one
wave finishing at different times, and concurrency between kernels.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from . import arch as arch_table

SHARE = 2.0               # an SM draws at most about this multiple of its fair share of a bandwidth
LATENCY_WAVES = 2         # DRAM latencies per wave: the first tile's load, the last stores' drain
MAX_CTAS_PER_SM = 32      # resident blocks per SM (CUDA's limit for compute capability 8.0 to 9.0)
REG_ALLOC_UNIT = 256      # registers are allocated per warp in units of 256 (compute capability 8.x / 9.0)
SCHEDULERS = 4            # warp schedulers per SM, one warp instruction per cycle each (SOURCES["sm"])
MUFU_PER_CLOCK = 16       # MUFU results (ex2, lg2, rsqrt, rcp, sin, cos) per clock per SM (SOURCES["mufu"])
MATHS = ("fp16", "bf16", "tf32", "int8", "fp8", "exact")
UNITS = ("wgmma", "mma")  # tensor-core instruction classes the model charges apart

SOURCES = {
    "H100": "NVIDIA H100 Tensor Core GPU datasheet (SXM5: 3.35 TB/s HBM3; FP16/BF16 tensor 1,979 TFLOP/s with "
            "sparsity = 989.4 dense; TF32 989 with sparsity = 494.7 dense; FP32 66.9 TFLOP/s) and NVIDIA H100 "
            "Tensor Core GPU Architecture whitepaper (GH100: 8 GPCs); 989.4 TFLOP/s = 132 SMs x 4,096 dense "
            "FP16 FLOP per clock per SM x 1,830 MHz (cudnn-frontend PR #650's peak table; the FlashAttention-3 "
            "paper, arXiv:2407.08608, benchmarks at that fixed clock)",
    "H100-mma": "Spector, Singhal, Arora, Re, 'GPUs Go Brrr' (Hazy Research blog, 2024-05-12, "
                "hazyresearch.stanford.edu/blog/2024-05-12-tk): WGMMA instructions are necessary for full "
                "utilization of the H100; without them the GPU tops out around 63 % of its peak. Corroborated "
                "by FlashAttention-3 (arXiv:2407.08608, section 1): FlashAttention-2 (mma.sync) reaches 35 % "
                "of the H100's peak against 80-90 % for GEMMs, partly for not using Hopper-specific "
                "instructions. TF32 mma.sync: the same fraction ASSUMED",
    "A100": "NVIDIA A100 datasheet (SXM4 80 GB: 2,039 GB/s; FP16 tensor 312, TF32 156, FP32 19.5 TFLOP/s "
            "dense) and A100 whitepaper (1,410 MHz boost; 312 = 108 SMs x 2,048 FP16 FLOP per clock x 1.41 GHz)",
    "A40": "NVIDIA A40 datasheet (696 GB/s; FP16 tensor 149.7, TF32 74.8, FP32 37.4 TFLOP/s dense; 1,740 MHz "
           "boost)",
    "4090": "NVIDIA Ada GPU architecture whitepaper, RTX 4090 (1,008 GB/s; FP16 tensor with FP32 accumulate "
            "165.2, TF32 82.6, FP32 82.6 TFLOP/s dense; 2,520 MHz boost)",
    "int8": "8-bit tensor peaks, dense (half the sparse figures): A100 datasheet INT8 624 TOPS; A40 datasheet INT8 "
            "299.3 TOPS; Ada whitepaper RTX 4090 INT8 660.6 TOPS, FP8 with FP32 accumulate 330.3 TFLOP/s; H100 "
            "SXM5 datasheet INT8 and FP8 3,958 with sparsity = 1,979 dense (twice the FP16 rate). mma.sync on "
            "the H100 at the same 63 % of wgmma's rate as FP16 (SOURCES['H100-mma']): ASSUMED",
    "T3": "'Hardware features of different Nvidia GPU architectures', Table 3 of PMC article 10448217 "
          "(pmc.ncbi.nlm.nih.gov/articles/PMC10448217/table/t0015): H100 L2 bandwidth 8,986 GB/s, A100 "
          "7,219 GB/s (5,120 bytes per clock at 1,755 / 1,410 MHz), global-memory latency 400 cycles (0.228 us "
          "at 1,755 MHz, 0.284 us at 1,410 MHz)",
    "sm": "NVIDIA A100 and H100 architecture whitepapers (and the Ada whitepaper): an SM has four partitions, "
          "each with one warp scheduler dispatching one warp instruction per clock",
    "mufu": "CUDA C++ Programming Guide, 'Arithmetic Instructions' throughput table: 16 results per clock per "
            "SM for 32-bit reciprocal, reciprocal square root, base-2 logarithm, base-2 exponential, sine and "
            "cosine on compute capabilities 5.x to 9.0 (the FlashAttention-3 paper's footnote 5 uses it: "
            "3.9 TFLOP/s of exponentials on an H100)",
    "assumed": "ASSUMED (not published): the A40 and RTX 4090 L2 bandwidth as 3x DRAM and their latency as "
               "0.3 us; only their relative route choices read these",
}


@dataclass(frozen=True)
class Peak:
    """A throughput figure of the reference part, with where it comes from."""
    flops: float                # FLOP/s
    source: str                 # a key of SOURCES


@dataclass(frozen=True)
class Part:
    """The memory, clock and peak figures of an arch's reference part (kernels/arch.py `part`).
    `peaks`: {"wgmma.fp16" | "mma.fp16" | "mma.tf32" | "wgmma.tf32" | "simt": Peak} (bf16 runs at fp16's)."""
    name: str
    dram_bytes_per_s: float
    l2_bytes_per_s: float
    dram_latency_s: float
    clock_hz: float                      # the SM clock the tensor peaks are quoted at (issue and MUFU terms)
    peaks: dict = field(default_factory=dict)
    gpcs: int = 0                        # graphics processing clusters (thread-block clusters stay inside one)
    source: str = ""                     # keys of SOURCES for the memory figures

    def unit_peak(self, key: str) -> float:
        """FLOP/s of one instruction class at one precision ("mma.fp16", "wgmma.fp16", "simt", ...)."""
        unit, _, prec = key.partition(".")
        prec = "fp16" if prec == "bf16" else prec
        k = f"{unit}.{prec}" if prec else unit
        if k not in self.peaks:
            raise KeyError(f"{self.name}: no {k} peak (has {', '.join(sorted(self.peaks))})")
        return self.peaks[k].flops

    def peak(self, math_: str) -> float:
        """The part's best dense peak for a math path (the hardware roofline): fp16/bf16 and tf32 on its
        fastest tensor instruction, "exact" on the SIMT pipes."""
        if math_ == "exact":
            return self.peaks["simt"].flops
        prec = "fp16" if math_ in ("fp16", "bf16") else math_
        return max(p.flops for k, p in self.peaks.items() if k.endswith("." + prec))


H100_CLOCK = 1.83e9
H100_FP16 = 132 * 4096 * H100_CLOCK          # 989.4 TFLOP/s dense (SOURCES["H100"])
H100_MMA_FRACTION = 0.63                     # mma.sync tops out at ~63 % of wgmma's peak (SOURCES["H100-mma"])

PARTS = {
    "H100 SXM5": Part("H100 SXM5", 3.35e12, 8.986e12, 400 / 1.755e9, H100_CLOCK, gpcs=8, source="H100, T3", peaks={
        "wgmma.fp16": Peak(H100_FP16, "H100"),
        "wgmma.tf32": Peak(H100_FP16 / 2, "H100"),
        "mma.fp16": Peak(H100_MMA_FRACTION * H100_FP16, "H100-mma"),
        "mma.tf32": Peak(H100_MMA_FRACTION * H100_FP16 / 2, "H100-mma"),
        "wgmma.int8": Peak(2 * H100_FP16, "int8"), "wgmma.fp8": Peak(2 * H100_FP16, "int8"),
        "mma.int8": Peak(H100_MMA_FRACTION * 2 * H100_FP16, "int8"),
        "mma.fp8": Peak(H100_MMA_FRACTION * 2 * H100_FP16, "int8"),
        "simt": Peak(66.9e12, "H100")}),
    "A100": Part("A100 SXM4 80GB", 2.039e12, 7.219e12, 400 / 1.41e9, 1.41e9, source="A100, T3", peaks={
        "mma.fp16": Peak(312e12, "A100"), "mma.tf32": Peak(156e12, "A100"), "mma.int8": Peak(624e12, "int8"),
        "simt": Peak(19.5e12, "A100")}),
    "A40": Part("A40", 0.696e12, 3 * 0.696e12, 0.3e-6, 1.74e9, source="A40, assumed", peaks={
        "mma.fp16": Peak(149.7e12, "A40"), "mma.tf32": Peak(74.8e12, "A40"), "mma.int8": Peak(299.3e12, "int8"),
        "simt": Peak(37.4e12, "A40")}),
    "GeForce RTX 4090": Part("GeForce RTX 4090", 1.008e12, 3 * 1.008e12, 0.3e-6, 2.52e9, source="4090, assumed",
                             peaks={"mma.fp16": Peak(165.2e12, "4090"), "mma.tf32": Peak(82.6e12, "4090"),
                                    "mma.int8": Peak(660.6e12, "int8"), "mma.fp8": Peak(330.3e12, "int8"),
                                    "simt": Peak(82.6e12, "4090")}),
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


TERMS = ("tensor", "simt", "issue", "mufu", "l2", "dram", "latency")


@dataclass
class Estimate:
    ctas: int
    per_sm: int
    slots: int
    waves: int
    sms_used: int
    floor_us: float
    modelled_us: float
    bound: str              # the largest term summed over the waves: one of TERMS
    terms_us: dict          # each term summed over the waves (a wave takes the largest, plus the latency)

    def as_dict(self) -> dict:
        return {"ctas": self.ctas, "per_sm": self.per_sm, "slots": self.slots, "waves": self.waves,
                "sms_used": self.sms_used, "floor_us": round(self.floor_us, 3),
                "modelled_us": round(self.modelled_us, 3), "bound": self.bound,
                "terms_us": {k: round(v, 3) for k, v in self.terms_us.items()}}


def launch_time(arch, *, ctas: int, threads: int, smem: int, dram_bytes: float, l2_bytes: float, flops: float = 0.0,
                tensor: dict | None = None, warp_instructions: float = 0.0, mufu: float = 0.0, registers: int = 0,
                cluster: int = 1, per_sm: int | None = None) -> Estimate:
    """The modelled time of one launch (module docstring). `smem`: dynamic + static shared memory per CTA;
    `flops`: every FLOP of the launch; `tensor`: the tensor-core part of them by instruction class and
    precision ({"wgmma.fp16": F, "mma.tf32": F, ...}; the rest run on the SIMT pipes); `warp_instructions`:
    warp-level instruction issues; `mufu`: thread-level MUFU operations; `l2_bytes`: every global load and
    store sector x 32 of the launch; `dram_bytes`: its unique sectors x 32."""
    p, sms = part(arch), arch_table.get(arch).sms
    ctas = max(1, int(ctas))
    per = per_sm or occupancy(arch, threads, smem, registers)
    n_slots = slots(arch, per, cluster)
    waves = math.ceil(ctas / n_slots)
    tensor = {k: float(v) for k, v in (tensor or {}).items() if v}
    t_flops = sum(tensor.values())
    if t_flops > flops * (1 + 1e-9):
        raise ValueError(f"tensor FLOPs {t_flops:g} exceed the launch's FLOPs {flops:g}")
    # seconds of one SM's tensor units per CTA: each class at its own peak (one tensor unit per partition)
    tensor_s = sum(v / (p.unit_peak(k) / sms) for k, v in tensor.items()) / ctas
    simt_s = max(0.0, flops - t_flops) / (p.unit_peak("simt") / sms) / ctas
    w, mu = warp_instructions / ctas, mufu / ctas
    warps = max(1, -(-int(threads) // 32))
    l, d = l2_bytes / ctas, dram_bytes / ctas
    lat = LATENCY_WAVES * p.dram_latency_s

    def wave(n: int) -> dict:
        """The terms of one wave of n CTAs (r of them per SM on the busiest SMs)."""
        r = -(-n // sms)
        return {"tensor": r * tensor_s, "simt": r * simt_s,
                "issue": r * w / (min(SCHEDULERS, r * warps) * p.clock_hz),
                "mufu": r * mu / (MUFU_PER_CLOCK * p.clock_hz),
                "l2": max(n * l / p.l2_bytes_per_s, r * l / (SHARE * p.l2_bytes_per_s / sms)),
                "dram": max(n * d / p.dram_bytes_per_s, r * d / (SHARE * p.dram_bytes_per_s / sms))}

    # every full wave is alike, so a launch of any size costs two wave evaluations (a 2**40-row GEMM included)
    terms = dict.fromkeys(TERMS, 0.0)
    total = 0.0
    for n, count in ((n_slots, ctas // n_slots), (ctas % n_slots, 1)):
        if n == 0 or count == 0:
            continue
        t = wave(n)
        for k, v in t.items():
            terms[k] += count * v
        terms["latency"] += count * lat
        total += count * (max(t.values()) + lat)
    used = min(sms, ctas)
    u = used / sms
    floor = max(tensor_s * ctas / (sms * u), simt_s * ctas / (sms * u),
                dram_bytes / (p.dram_bytes_per_s * min(1.0, SHARE * u)))
    modelled = max(floor, total)
    bound = max(terms, key=terms.get)
    return Estimate(ctas, per, n_slots, waves, used, floor * 1e6, modelled * 1e6, bound,
                    {k: v * 1e6 for k, v in terms.items()})


def roofline_s(arch, flops: float, dram_bytes: float, math_: str) -> float:
    """The hardware roofline of `flops` and `dram_bytes` on the arch's reference part, whole machine: max(flops /
    the part's best dense peak for `math_`, DRAM bytes / DRAM bandwidth), in seconds."""
    p = part(arch)
    return max(flops / p.peak(math_), dram_bytes / p.dram_bytes_per_s)


__all__ = ["GAP_GRAPH_S", "GAP_STREAM_S", "LATENCY_WAVES", "MUFU_PER_CLOCK", "PARTS", "Part", "Peak", "SCHEDULERS",
           "SHARE", "SOURCES", "TERMS", "Estimate", "gap_us", "launch_time", "occupancy", "part", "roofline_s", "slots"]
