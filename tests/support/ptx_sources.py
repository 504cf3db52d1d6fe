"""Every kernel source the PTX interpreter must cover, built with the project's own source builders
(tests/support/gemm_variants.py, kernels/families/flash_attention/configs.py, the golden sources), and compiled to PTX
through the PTX cache (plus_ep.kernels.compile.ptx).

The matrix: every GEMM config x dtype on sm_80, sm_90 and sm_90a (B layout and alignment rotate over the configs
so that every (math, dtype, B layout, alignment) occurs on every arch), split-K, hooked and gated variants; every
wgmma config x dtype on sm_90a (all four B layout x alignment pairs on the 64-row config, two on the others); every attention config x dtype on sm_80 and one
per (math, head dim, dtype) on sm_90 / sm_90a with causal / strided rotating, plus the BSHD hooks and the
KV-cache forms (tests/support/decode_attention_cases.py); the golden sources on all three archs (those of
sm_90a-only templates on sm_90a).
"""
from __future__ import annotations

import os
import pathlib
from concurrent.futures import ThreadPoolExecutor

from plus_ep.kernels.families.flash_attention import configs as ac
from plus_ep.kernels.families.gemm import configs as gc
from plus_ep.kernels.families.gemm import sm90a_configs as gc90
from plus_ep.kernels.compile.ptx import compile_ptx
from tests.support import gemm_variants
from tests.support.gemm_variants import Variant

ARCHS = ("sm_80", "sm_90", "sm_90a")
GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "golden"
GEMM_DTYPES = {gc.MATH_F16: ("half", "__nv_bfloat16"), gc.MATH_TF32: ("float",), gc.MATH_SIMT: ("float",),
               gc.MATH_INT8: ("signed char",)}
ATTN_DTYPES = {2: ("half", "__nv_bfloat16"), 1: ("float",), 0: ("float",)}
COMBOS = ((0, 1), (1, 0), (1, 1), (0, 0))      # (b_trans, aligned)
# split-K and hooked GEMM variants (census on every arch, executed by test_ptx_gemm.py on sm_80: the
# same sources, so the census's compiles are the kernel tests' cache hits)
GEMM_EXTRAS = (Variant("f16_128x64x32_w64x32_s3", "half", 0, 1, splitk=2),
               Variant("simt_64x64x8_w32x32", "float", 1, 0, splitk=2),
               Variant("f16_64x64x32_w32x32_s4", "__nv_bfloat16", 1, 1, hooks="fused"),
               Variant("simt_32x64x16_w16x32", "float", 0, 1, hooks="fused"),
               Variant("tf32_64x64x32_w32x32_s3", "float", 0, 1, splitk=3, hooks="fused"),
               Variant("f16_16x128x64_w16x32_s4", "half", 1, 1, hooks="strided"))
WGMMA_EXTRAS = (Variant("wg_64x128x64_w64x128_s4", "half", 1, 0, splitk=3, hooks="fused"),
                Variant("wg_64x128x64_w64x128_s4", "__nv_bfloat16", 0, 1, hooks="strided"),
                # split-K inside a cluster (partials summed through distributed shared memory)
                Variant("wg_128x128x64_w64x128_s5", "half", 0, 1, hooks="fused", csplit=4),
                Variant("wg_64x128x64_w64x128_s4", "__nv_bfloat16", 1, 0, csplit=8))
# gated products (PLUS_GATED 1) and ragged groups (PLUS_HAS_GROUP_N): census on every arch (gemm.cuh) / sm_90a
# (wgmma), executed by test_ptx_gemm_gated.py (tests/support/ptx_gated_cases.py) with the same sources
V = Variant
GATED_EXTRAS = (V("simt_64x64x8_w32x32", "float", 0, 0, hooks="gated"),
                V("simt_32x64x16_w16x32", "float", 1, 0, splitk=2, hooks="gated_default"),
                V("tf32_64x64x32_w32x32_s3", "float", 0, 1, hooks="gated_default"),
                V("tf32_32x64x32_w16x32_s4", "float", 1, 0, hooks="gated"),
                V("f16_64x64x32_w32x32_s4", "half", 0, 1, hooks="gated"),
                V("f16_128x64x32_w64x32_s3", "__nv_bfloat16", 1, 0, splitk=2, hooks="gated_default"),
                V("f16_16x128x64_w16x32_s4", "half", 0, 0, hooks="gated_default"))
RAGGED = (V("tf32_32x64x32_w16x32_s4", "float", 0, 0, hooks="ragged"),
          V("f16_64x64x32_w32x32_s4", "half", 1, 1, splitk=2, hooks="ragged"),
          V("simt_32x64x16_w16x32", "float", 0, 1, splitk=3, hooks="ragged"))
RAGGED_WGMMA = (V("wg_64x128x64_w64x128_s4", "__nv_bfloat16", 0, 0, splitk=2, hooks="ragged"),
                V("wg_64x128x64_w64x128_s4", "half", 1, 1, hooks="ragged"))
GATED_WGMMA = (V("wg_64x128x64_w64x128_s4", "half", 0, 1, hooks="gated"),
               V("wg_64x128x64_w64x128_s4", "__nv_bfloat16", 1, 0, splitk=2, hooks="gated_default"),
               V("wg_128x128x64_w64x128_s5", "half", 0, 0, hooks="gated_default"),
               V("wg_128x256x64_w64x256_s4", "__nv_bfloat16", 1, 1, hooks="gated"))


def gemm_combo(i: int, arch_index: int = 0):
    """(b_trans, aligned) of the i-th GEMM config x dtype on the arch_index-th arch."""
    return COMBOS[(i + arch_index) % 4]


def wgmma_combos(j: int, d: int, bm: int):
    """(b_trans, aligned) pairs of wgmma config j x dtype d in the census; the first is the one
    test_ptx_gemm.py executes."""
    if bm == 64:
        return [COMBOS[(j + 2 * d + k) % 4] for k in range(4)]
    return [COMBOS[(j + 2 * d + k) % 4] for k in range(2)]


# A key-padding mask as the renderer splits it off the score (kernels/families/flash_attention/render.py): plus_key_bias reads
# an int64 [B, Skv] attention mask (in[3]) and gives (1 - m) * -10000; plus_attn_side stores that extended mask
# as fp32 [B, Skv] to out[1] from the attention kernel's own threads (no launch of its own).
KEY_BIAS_HOOKS = r"""
#define PLUS_HAS_KEY_BIAS 1
PLUS_DEV float plus_key_bias(const PlusArgs& a, long long b, long long h, long long j) {
  return (1.0f - (float)plus_load<long long>(a.in[3], b * a.v[4] + j)) * -10000.0f;
}
#define PLUS_HAS_ATTN_SIDE 1
PLUS_DEV void plus_attn_side(const PlusArgs& a, long long first, long long stride) {
  for (long long q = first; q < a.v[0] * a.v[4]; q += stride)
    plus_store<float>(a.out[1], q, (1.0f - (float)plus_load<long long>(a.in[3], q)) * -10000.0f);
}
"""



def _attn_hooks():
    """The BSHD hooks of tests/support/template_attention_cases.py (read as text: that module needs a GPU
    fixture chain we do not want to import here)."""
    text = (pathlib.Path(__file__).resolve().parent / "template_attention_cases.py").read_text()
    hooks = text.split('HOOKS_BSHD = r"""', 1)[1].split('"""', 1)[0]
    return hooks, {"PLUS_Q_STRIDED": 0, "PLUS_K_STRIDED": 1, "PLUS_V_STRIDED": 1}


def gemm_source(v: Variant) -> str:
    return gemm_variants.source(v, gc, "gemm.cuh")


def wgmma_source(v: Variant) -> str:
    return gemm_variants.source(v, gc90, "gemm_sm90a.cuh")


def census_sources() -> list[tuple[str, str, str]]:
    """[(name, source, arch)]"""
    out = []
    for ai, arch in enumerate(ARCHS):
        i = 0
        for math, cfgs in gc.CONFIGS.items():
            for cfg in cfgs:
                for dtype in GEMM_DTYPES[math]:
                    bt, al = gemm_combo(i, ai)
                    v = Variant(cfg.name, dtype, bt, al)
                    out.append((f"gemm-{v.id}", gemm_source(v), arch))
                    i += 1
        for v in GEMM_EXTRAS + GATED_EXTRAS + RAGGED:
            out.append((f"gemm-{v.id}", gemm_source(v), arch))
    for j, cfg in enumerate(gc90.BY_NAME.values()):
        for d, dtype in enumerate(("half", "__nv_bfloat16")):
            for bt, al in wgmma_combos(j, d, cfg.bm):
                v = Variant(cfg.name, dtype, bt, al)
                out.append((f"wgmma-{v.id}", wgmma_source(v), "sm_90a"))
    for v in WGMMA_EXTRAS + GATED_WGMMA + RAGGED_WGMMA + (Variant("wg_128x256x64_w64x256_s4", "half", 0, 1, hooks="fused"),
                                           Variant("wg_256x128x64_w128x128_s4", "__nv_bfloat16", 0, 1, splitk=2)):
        out.append((f"wgmma-{v.id}", wgmma_source(v), "sm_90a"))
    # the 8-bit TMA GEMM (gemm_sm90a_ws.cuh, PLUS_MATH 3): every config (B [N, K], or [K, N] transposed in shared
    # memory), the four signedness pairs, both epilogues
    from tests.support import ws8_gemm_cases as W8
    for i, cfg in enumerate(gc90.WS8_CONFIGS + gc90.WS8T_CONFIGS):
        at, bt = (("s8", "s8"), ("u8", "s8"), ("s8", "u8"), ("u8", "u8"))[i % 4]
        c = W8.Case(cfg.name, at, bt, hooks=("default", "requant")[i % 2], m_fastest=int(i % 3 == 2),
                    b_trans=int(not gc90.transposes_b(cfg)))
        out.append((f"ws8-{cfg.name}-{at}{bt}-{c.hooks}-m{c.m_fastest}", W8.source(c), "sm_90a"))
    # the key-bias and side-output hooks (a padding mask split off the score, the extended mask stored by
    # the attention kernel itself) on the tensor-core and SIMT paths
    for cfg, dtype in ((ac.by_name("tc_d64_q64_kv64_w4"), "half"), (ac.by_name("simt_d64_q32_kv32_w4"), "float")):
        for arch in ("sm_80", "sm_90a"):
            out.append((f"attn-keybias-{cfg.name}-{dtype}", ac.source(cfg, dtype, hooks=KEY_BIAS_HOOKS), arch))
    hooks, hook_defs = _attn_hooks()
    # the tuned menu (SIMT and f16/bf16 at head dims 64-128) in full; of the other entries (TF32, head dims
    # 32 and 256) the smallest config of each menu
    attn = [c for c in ac.all_configs() if (c.math in (0, 2) and c.head_dim in (64, 80, 96, 128))
            or c is ac.configs_for(c.math, c.head_dim)[-1]]
    for i, cfg in enumerate(attn):
        for j, dtype in enumerate(ATTN_DTYPES[cfg.math]):
            causal, strided = (i + j) % 2, (i // 2 + j) % 2
            out.append((f"attn-{cfg.name}-{dtype}-c{causal}s{strided}",
                        ac.source(cfg, dtype, causal=causal, strided=strided), "sm_80"))
            if cfg is ac.configs_for(cfg.math, cfg.head_dim)[-1]:
                for arch in ("sm_90", "sm_90a"):
                    out.append((f"attn-{cfg.name}-{dtype}-c{1 - causal}s{strided}",
                                ac.source(cfg, dtype, causal=1 - causal, strided=strided), arch))
    for math, dtype in ((2, "half"), (2, "__nv_bfloat16"), (0, "float")):
        cfg = ac.configs_for(math, 64)[1]
        for arch in ("sm_80", "sm_90"):
            out.append((f"attn-hooks-{cfg.name}-{dtype}", ac.source(cfg, dtype, causal=1, strided=0, hooks=hooks,
                                                                    extra_defines=hook_defs), arch))
    # the KV-cache forms (present stores, past cp.async, GQA packing, split-KV + combine): every case on
    # sm_80 (where tests/emulated/test_ptx_decode_attention.py executes them), the first two on sm_90/sm_90a
    from tests.support.decode_attention_cases import CASES as DECODE_CASES, source as decode_source
    for k, c in enumerate(DECODE_CASES):
        for arch in ("sm_80",) + (("sm_90", "sm_90a") if k < 2 else ()):
            out.append((f"attn-decode-{c.id}", decode_source(c), arch))
    for p in sorted(GOLDEN.glob("*.cu")):
        text = p.read_text()
        # a source that includes an sm_90a-only template (wgmma, TMA: its #error says so) compiles there only
        only_90a = any(f'#include "{h}"' in text for h in ("gemm_sm90a.cuh", "gemm_sm90a_ws.cuh")) \
            or "#define PLUS_ATTN_WGMMA 1" in text         # attention.cuh then includes attention_sm90a.cuh
        for arch in (("sm_90a",) if only_90a else ARCHS):
            out.append((f"golden-{p.stem}", text, arch))
    return out


def compile_all(sources, workers: int | None = None) -> list:
    """PTX text per (name, source, arch), or the exception, in order (NVRTC releases the GIL)."""
    workers = workers or max(1, min(4, os.cpu_count() or 1))

    def one(job):
        name, src, arch = job
        try:
            return compile_ptx(src, arch, name=f"{name}.cu")
        except Exception as e:  # reported by the caller with the job's name
            return e
    with ThreadPoolExecutor(max_workers=workers) as ex:
        return list(ex.map(one, sources))
