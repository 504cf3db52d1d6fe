"""Attention routes: the attention template's config per shape (kernels/families/flash_attention/configs.py menus),
chosen by an analytic model, not by tuning. Where ISSUES times every tile of the menu (f16/bf16 at head dims 64 and
128), the modelled fastest (`attention_time`, kernels/perfmodel.py) wins; within MODEL_TIE of it, the tile padding
the fewest query rows, then the larger query tile. Elsewhere (no counts) the tile whose waves of CTAs over the arch's
SMs do the least padded work (waves x query tile x key length) wins, ties to the larger query tile; where the target
excludes every tensor-core config the SIMT menu serves. A symbolic query length is sampled at the shared SAMPLES
(kernels/routes.py); neighbouring samples with the same choice form one route, the last route is ALWAYS.

On an arch with wgmma, for f16/bf16 operands the sm_90a body can serve (`wgmma=True`: plain [B, H, S, D] tensors
the TMA reads, render.py `_wgmma_operands`), its configs join the timed menu (or, for an untimed menu, are compared
with the waves rule's pick and taken when modelled faster).

    routes = attention_routes(1, 32, 4096, 4096, 64, Target("sm_80"), syms, math_=MATH_F16)
    # [("1", tc_d64_q128_kv64_w8)]: modelled 695 us against the one-warp q16 tile's 1880 us
"""
from __future__ import annotations

import math

from ... import arch as arch_table
from ... import perfmodel
from ...codegen import symdim
from ...routes import ALWAYS, SAMPLES, NoConfig, _static, _usable, _value, sm_count
from . import configs as ac


def attention_math(dtypes, fp32_math) -> int:
    """PLUS_MATH of an attention whose Q, K and V have these ONNX dtypes: one 16-bit float type -> f16/bf16
    tensor cores (2); fp32 -> TF32 tensor cores (1) under fp32_math "tf32" (the default, as the GEMMs), else
    exact SIMT (0); mixed types -> SIMT."""
    from onnx import TensorProto
    dtypes = set(dtypes)
    if len(dtypes) == 1 and dtypes <= {TensorProto.FLOAT16, TensorProto.BFLOAT16}:
        return ac.MATH_F16
    if dtypes == {TensorProto.FLOAT} and fp32_math == "tf32":
        return ac.MATH_TF32
    return ac.MATH_SIMT


# Per CTA of an f16 tile: (warp instructions, MUFU operations) = (a, b) for a + b x key tiles, from the PTX
# interpreter at 2 and 4 key tiles of one CTA with the benchmark's score hook (the exporters' scale). The mma.sync
# tiles: bench/results/2026-11-28-attention-route-evidence.json (K a materialised Kᵀ); the sm_90a tiles:
# bench/results/2026-11-29-attention-sm90a.json (bench/runs/attention_sm90a.py).
ISSUES = {
    "tc_d64_q128_kv64_w8": ((9064, 5968), (0, 8704)), "tc_d64_q64_kv64_w4": ((4516, 3736), (0, 4352)),
    "tc_d64_q32_kv64_w2": ((2242, 2620), (0, 2176)), "tc_d64_q16_kv32_w1": ((1183, 1078.5), (0, 576)),
    "tc_d128_q128_kv64_w8": ((18296, 8780), (0, 8704)), "tc_d128_q64_kv64_w4": ((9148, 5882), (0, 4352)),
    "tc_d128_q32_kv64_w2": ((4542, 4445), (0, 2176)), "tc_d128_q16_kv32_w1": ((2082, 1989.5), (0, 576)),
    "wg_d64_q128_kv128_s2": ((3944, 4460), (0, 16896)), "wg_d128_q128_kv128_s2": ((6174, 6185), (0, 16896)),
}


# Modelled times within this fraction of the fastest count as a tie (the tile padding fewer query rows wins): the
# model's terms are coarse, and a memory-bound decode should not take a 128-row tile on a rounding.
MODEL_TIE = 0.02


def key_tiles(cfg, sq: int, skv: int, causal: int | None = None) -> int:
    """Key tiles the query tiles of one (batch, head) visit: all of them, or under a causal mask of diagonal offset
    `causal` (key j visible to query i when j <= i + causal, attention.cuh PLUS_HAS_ATTN_CAUSAL) each query tile's
    up to its last row's last visible key.

        key_tiles(tc_d64_q64_kv64_w4, 256, 256, causal=0)   # 1 + 2 + 3 + 4 = 10 of 16"""
    n, qtiles = math.ceil(skv / cfg.bkv), math.ceil(sq / cfg.bq)
    if causal is None:
        return qtiles * n
    total = 0
    for qt in range(qtiles):
        jmax = min((qt + 1) * cfg.bq, sq) - 1 + causal
        total += 0 if jmax < 0 else min(n, jmax // cfg.bkv + 1)
    return total


def attention_time(cfg, b: int, h: int, sq: int, skv: int, arch, causal: int | None = None) -> float | None:
    """Modelled microseconds of one f16 attention launch of `cfg` (perfmodel.launch_time) at batch b, h heads,
    sq queries and skv keys: the visited tiles' (`key_tiles`, a causal skip's with `causal`) tensor FLOPs on the
    tile's instruction class (wgmma for the sm_90a body, mma.sync otherwise), its instructions and MUFU operations
    (ISSUES), every CTA reading its Q tile and its K/V tiles through L2 and writing its O tile, Q, K, V and O once
    from DRAM. Causal CTAs are averaged (the model's waves take equal CTAs). None when ISSUES has no entry for the
    config."""
    if cfg.name not in ISSUES:
        return None
    (wa, wb), (ua, ub) = ISSUES[cfg.name]
    d = cfg.head_dim
    ctas = math.ceil(sq / cfg.bq) * h * b
    tiles = key_tiles(cfg, sq, skv, causal) * h * b
    flops = 4.0 * cfg.bq * tiles * cfg.bkv * d
    unit = "wgmma" if cfg.wgmma else "mma"
    return perfmodel.launch_time(
        arch, ctas=ctas, threads=cfg.threads, smem=cfg.smem_bytes, flops=flops, tensor={f"{unit}.fp16": flops},
        warp_instructions=ctas * wa + wb * tiles, mufu=ctas * ua + ub * tiles,
        dram_bytes=b * h * (2 * sq + 2 * skv) * d * 2,
        l2_bytes=(ctas * 2 * cfg.bq + tiles * 2 * cfg.bkv) * d * 2).modelled_us


def wgmma_menu(D, target, math_) -> list:
    """The sm_90a body's usable configs for head dim D (none off wgmma archs, for other head dims or maths)."""
    if math_ != ac.MATH_F16 or not arch_table.get(target.arch).wgmma or D not in ac.WGMMA_CONFIGS:
        return []
    try:
        return _usable(list(ac.WGMMA_CONFIGS[D]), target, f"sm_90a attention (head dim {D})")
    except NoConfig:
        return []


def attention_routes(B, H, Sq, Skv, D, target, syms, math_=0, wgmma=False, causal=None):
    arch = target.arch
    dp = _padded(D)
    def menu_of(m):
        return list(ac.CONFIGS.get((m, dp)) or [ac.make_config(m, dp, *e[:3], None, *e[3:]) for e in ac.entries(m, dp)])
    try:
        menu = _usable(menu_of(math_), target, f"attention (head dim {D})")
    except NoConfig:
        if math_ == ac.MATH_SIMT:
            raise
        # every tensor-core config spilled or does not fit: the SIMT fp32 path reads the same hooks
        # (plus_qkv_t is then unused) and needs other registers, so the subgraph keeps a kernel
        menu = _usable(menu_of(ac.MATH_SIMT), target, f"attention (head dim {D}, SIMT)")
    b, h = _static(B, 1), _static(H, 1)
    Sq = symdim.parse(Sq)

    wg = wgmma_menu(dp, target, math_) if wgmma and dp == D else []

    def best(sq, skv):
        timed = [(attention_time(c, b, h, sq, skv, arch, causal), c) for c in menu]
        if all(t is not None for t, _ in timed):
            # every tile has counts: the modelled fastest; within MODEL_TIE of it, the least padded query rows,
            # then the larger query tile, then mma.sync
            timed += [(t, c) for t, c in ((attention_time(c, b, h, sq, skv, arch, causal), c) for c in wg)
                      if t is not None]
            fastest = min(t for t, _ in timed)
            return min((c for t, c in timed if t <= fastest * (1 + MODEL_TIE)),
                       key=lambda c: (math.ceil(sq / c.bq) * c.bq, -c.bq, c.wgmma))
        def cost(c):
            blocks = math.ceil(sq / c.bq) * b * h
            per_sm = max(1, arch_table.get(arch).threads_per_sm // (c.warps * 32))
            waves = math.ceil(blocks / (sm_count(arch) * per_sm))
            return waves * c.bq * skv, -c.bq
        pick = min(menu, key=cost)
        today = attention_time(pick, b, h, sq, skv, arch) if wg else None
        if today is not None:
            timed = [(attention_time(c, b, h, sq, skv, arch), c) for c in wg]
            us, c = min(((t, c) for t, c in timed if t is not None), key=lambda x: x[0], default=(None, None))
            if us is not None and us < today:
                return c
        return pick
    if Sq.is_Integer:
        return [(ALWAYS, best(int(Sq), _static(Skv, int(Sq))))]
    picks = [(s, best(_value(Sq, s), _value(Skv, s) if not symdim.parse(Skv).is_Integer else int(Skv)))
             for s in SAMPLES]
    routes = []
    for i, (s, cfg) in enumerate(picks):
        last = i == len(picks) - 1
        if not last and picks[i + 1][1] == cfg:
            continue
        routes.append((ALWAYS if last else f"{syms.rpn(Sq)},{_value(Sq, s)},<=", cfg))
    return routes


def _padded(d) -> int:
    return max(16, int(math.ceil(int(d) / 16) * 16))


def attention_defines(cfg, D) -> dict:
    return ac.defines(cfg)


__all__ = ["ISSUES", "attention_defines", "attention_math", "attention_routes", "attention_time", "key_tiles",
           "wgmma_menu"]
