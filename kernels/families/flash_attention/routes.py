"""Attention routes: the attention template's config per shape (kernels/families/flash_attention/configs.py menus), chosen
by an analytic model, not by tuning: the tile whose waves of CTAs over the arch's SMs do the least padded
work (waves x query tile x key length) wins, ties to the larger query tile; where the target excludes every tensor-core config
the SIMT menu serves. A symbolic query length is sampled at the shared SAMPLES (kernels/routes.py);
neighbouring samples with the same choice form one route, the last route is ALWAYS.
"""
from __future__ import annotations

import math

from ... import arch as arch_table
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


def attention_routes(B, H, Sq, Skv, D, target, syms, math_=0):
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

    def best(sq, skv):
        def cost(c):
            blocks = math.ceil(sq / c.bq) * b * h
            per_sm = max(1, arch_table.get(arch).threads_per_sm // (c.warps * 32))
            waves = math.ceil(blocks / (sm_count(arch) * per_sm))
            return waves * c.bq * skv, -c.bq
        return min(menu, key=cost)
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


__all__ = ["attention_defines", "attention_math", "attention_routes"]
