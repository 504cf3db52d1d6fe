"""Named tile configurations of the fused attention template (`attention.cuh`, CONTRACT §2.2).

    from plus_ep.kernels.families.flash_attention.configs import configs_for, defines
    for cfg in configs_for(math=2, head_dim=64):      # largest query tile first
        print(cfg.name, cfg.bq, cfg.smem_bytes)
    defs = defines(cfg)                               # {"PLUS_HEAD_DIM": 64, "PLUS_BQ": 128, ...}

A config fixes the schedule (math path, head dim, query / key tile, warps) and the dynamic shared memory the
launch needs; everything problem-specific (causal masking, the element type, strided operand loads, the
hooks) is added by the codegen on top of `defines(cfg)`. The route chooser picks a config per shape:
large query tiles for long sequences (more reuse of each K/V tile), small ones when Sq is short (decode,
short prompts) or when B * H * cdiv(Sq, BQ) would leave SMs idle. `suggest()` is a simple version of that
rule.

Math paths: 0 = exact fp32 SIMT (fp32 models with `fp32_math=exact`), 1 = TF32 tensor cores (fp32 models,
the default `fp32_math=tf32`), 2 = f16/bf16 tensor cores (`plus_qkv_t` half or bf16). Head dims 32, 64, 80,
96, 128 and 256 have menus; others are padded to a multiple of 16 by the route chooser and get the default
entries (kernels/families/flash_attention/routes.py). Every menu config fits the 99 KB opt-in shared memory of sm_86 / sm_89 (a
config whose tiles would not is given smaller key tiles, `_fit`), and compiles without spills on every arch
of kernels/arch.py (tests/cpu/test_attention_menu_spills.py; registers: tests/cpu/test_template_attention_compile.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from ... import arch as arch_table

HEAD_DIMS = (32, 64, 80, 96, 128, 256)
MATHS = (0, 1, 2)
MATH_SIMT, MATH_TF32, MATH_F16 = 0, 1, 2

# Mirrors of the padding constants in attention.cuh.
_TC_PAD_BYTES = 16   # PLUS_ATTN_TC_PAD_BYTES: bytes added to each shared row (MATH 1 and 2)
_SIMT_KPAD = 4       # PLUS_ATTN_SIMT_KPAD: floats added to each K row (MATH 0)
# the smallest opt-in shared memory per block of the archs we build for (sm_86 / sm_89), less the system
# reservation, as routes.py counts it
_FIT_LIMIT = (min(a.smem_per_block for a in arch_table.TABLE.values())
              - arch_table.RESERVED_SMEM_PER_BLOCK)


def attn_smem_bytes(math: int, head_dim: int, bq: int, bkv: int) -> int:
    """Dynamic shared memory of one block: the Python mirror of PLUS_ATTN_SMEM_BYTES."""
    if math in (1, 2):
        return (bq + 2 * bkv) * (head_dim * (4 if math == 1 else 2) + _TC_PAD_BYTES)
    if math == 0:
        pstr = bkv + (16 if bkv % 32 == 0 else 0)  # PLUS_ATTN_SIMT_PSTR
        return 4 * (bq * head_dim + bkv * (head_dim + _SIMT_KPAD) + bkv * head_dim + bq * pstr)
    raise ValueError(f"attention has math paths 0 (fp32 SIMT), 1 (tf32 mma) and 2 (f16/bf16 mma), not {math}")


def wgmma_smem_bytes(head_dim: int, bq: int, bkv: int, stages: int) -> int:
    """Dynamic shared memory of the sm_90a body (attention_sm90a.cuh): the Python mirror of its
    PLUS_ATTN_SMEM_BYTES (Q, the K/V stages, the mbarriers, the consumers' key-bias terms, 1 KiB of realignment)."""
    return (2 * bq + 4 * stages * bkv) * head_dim + 8 * (1 + 2 * stages) + (bq // 64) * bkv * 4 + 1024


@dataclass(frozen=True)
class AttnConfig:
    name: str
    math: int          # PLUS_MATH
    head_dim: int      # PLUS_HEAD_DIM
    bq: int            # PLUS_BQ: query rows per block
    bkv: int           # PLUS_BKV: key/value rows per tile
    warps: int         # PLUS_WARPS
    smem_bytes: int    # dynamic shared memory of the launch (PLUS_ATTN_SMEM_BYTES)
    min_blocks: int = 0  # PLUS_ATTN_MIN_BLOCKS for __launch_bounds__ (0: not given, ptxas's own register target)
    stages: int = 0      # PLUS_ATTN_STAGES of the sm_90a body (attention_sm90a.cuh); 0: the mma.sync / SIMT body

    @property
    def wgmma(self) -> bool:
        """The sm_90a body: wgmma, TMA, one producer and bq / 64 consumer warpgroups."""
        return self.stages > 0

    @property
    def threads(self) -> int:
        return 32 * self.warps

    def grid(self, batch: int, heads: int, seq_q: int) -> tuple[int, int, int]:
        """Launch grid (cdiv(Sq, BQ), H, B)."""
        return (-(-seq_q // self.bq), heads, batch)


def _check(math: int, head_dim: int, bq: int, bkv: int, warps: int) -> None:
    """The template's static_asserts, so that a bad config fails here and not in NVRTC."""
    if math not in MATHS:
        raise ValueError(f"attention math must be one of {MATHS}, got {math}")
    if head_dim % 16 or not 16 <= head_dim <= 256:
        raise ValueError(f"head_dim must be a multiple of 16 in [16, 256], got {head_dim}")
    if bkv % 16 or bkv < 16:
        raise ValueError(f"bkv must be a positive multiple of 16, got {bkv}")
    if not 1 <= warps <= 16:
        raise ValueError(f"warps must be 1..16, got {warps}")
    if math in (1, 2) and bq != 16 * warps:
        raise ValueError(f"math {math}: each warp owns 16 query rows, bq must be 16 * warps ({16 * warps}), got {bq}")
    if math == 0 and bq % (2 * warps):
        raise ValueError(f"math 0: bq must be a multiple of 2 * warps ({2 * warps}), got {bq}")


def make_config(math: int, head_dim: int, bq: int, bkv: int, warps: int, name: str | None = None,
                min_blocks: int = 0) -> AttnConfig:
    """A config outside the menu (checked like the template checks it)."""
    _check(math, head_dim, bq, bkv, warps)
    prefix = {0: "simt", 1: "tf32", 2: "tc"}[math]
    suffix = f"_b{min_blocks}" if min_blocks else ""
    return AttnConfig(name or f"{prefix}_d{head_dim}_q{bq}_kv{bkv}_w{warps}{suffix}", math, head_dim, bq, bkv, warps,
                      attn_smem_bytes(math, head_dim, bq, bkv), min_blocks)


WGMMA_HEAD_DIMS = (64, 128)
# The sm_90a body's tiles (bq, bkv, stages) per head dim, as FlashAttention-3 picks them for its forward kernel
# (two consumer warpgroups of 64 query rows, 128-key tiles, a two-stage K/V ring).
_WGMMA_MENU = {64: ((128, 128, 2),), 128: ((128, 128, 2),)}


def make_wgmma_config(head_dim: int, bq: int, bkv: int, stages: int) -> AttnConfig:
    """A config of the sm_90a body (attention_sm90a.cuh's static_asserts checked here)."""
    if head_dim not in WGMMA_HEAD_DIMS or bq % 64 or not 64 <= bq <= 192 or bkv not in (64, 128) \
            or not 1 <= stages <= 4:
        raise ValueError(f"no sm_90a attention tile d{head_dim} q{bq} kv{bkv} s{stages}")
    return AttnConfig(f"wg_d{head_dim}_q{bq}_kv{bkv}_s{stages}", MATH_F16, head_dim, bq, bkv, 4 * (1 + bq // 64),
                      wgmma_smem_bytes(head_dim, bq, bkv, stages), 0, stages)


WGMMA_CONFIGS: dict[int, tuple[AttnConfig, ...]] = {
    d: tuple(make_wgmma_config(d, *e) for e in _WGMMA_MENU[d]) for d in WGMMA_HEAD_DIMS}
"""head dim -> the sm_90a body's configs (f16/bf16 only)."""


# (bq, bkv, warps[, min_blocks]) per math path, largest query tile first. `_fit` halves the key tile of an entry whose
# shared memory would exceed the 99 KB opt-in limit of sm_86 / sm_89 (D = 256, tf32 D >= 128); every
# config compiles without spills on every arch (see the tests).
_MENU = {
    # Tensor cores: one warp per 16 query rows.
    #   q128: long prefill sequences (K/V reuse over 128 rows, 8 warps)
    #   q64:  the general choice (4 warps; several blocks per SM)
    #   q32:  short queries, or long ones when B * H * cdiv(Sq, 64) would not fill the GPU
    #   q16:  decode-like queries (Sq <= 16): one warp per block, so B * H blocks spread over the SMs.
    #         32-key tiles: fewer registers (with 64, ptxas spills a few bytes at D = 128 on sm_80).
    2: ((128, 64, 8), (64, 64, 4), (32, 64, 2), (16, 32, 1)),
    # SIMT fp32: K/V tiles of 32 keys keep shared memory and registers moderate for D = 128.
    #   q64: long sequences; q32: medium; q16: short or decode-like queries. 32-key tiles for q16 too: with
    #   64, the mask hooks of BERT-base's later layers (D = 64) spilled 8 bytes on sm_90 and every such
    #   attention stayed unfused (found by `python -m bench.harness.fusion --size real --compile-arch sm_90`).
    0: ((64, 32, 4), (32, 32, 4), (16, 32, 4)),
    # TF32 tensor cores: the f16 schedule with fp32 tiles (twice the shared memory per row).
    1: ((128, 64, 8), (64, 64, 4), (32, 64, 2), (16, 32, 1)),
}
# Per (math, head dim) replacements of the default entries where registers decide:
#   D = 256 on tensor cores (f16/bf16 and tf32): 128 fp32 accumulators per thread for O; Q is reloaded from
#   shared memory per k-step (attention.cuh, Q_REGS) and the key tiles are 16: with 32, a score hook (scale
#   + mask) took the f16 path to 255 registers and 72-108 spilled bytes (tf32: 44-56) on sm_80 and sm_90.
#   SIMT D = 256: o[RL][16] per lane, so few rows per lane (8 warps at q32); q64 does not fit 99 KB.
#   SIMT D = 32: q32 with 2 warps (4 warps spilled 12 bytes on sm_80 under a causal mask at 72 registers).
#   SIMT D = 80: 8 warps at q64 and q32 (with 4 warps ptxas spilled 4-12 bytes at 72 or 128 registers on
#   sm_80/86/89 or sm_90/90a with the hooks on; 2 warps at q32 too).
#   TF32 D = 64, 80 at q16 (one warp): PLUS_ATTN_MIN_BLOCKS 12 (a 170-register budget); ptxas's own target
#   (96-128 registers) spilled 16-20 bytes on sm_90 / sm_90a.
#   TF32 D = 80, 96, 128: no q128 (8 warps of q128 spilled 8-20 bytes at 128 registers on sm_80/86/89 at
#   D = 128, hooks on).
#   Tensor cores D = 32: 32-key tiles (with 64, ptxas put 8 bytes on a stack frame at 80-128 registers in
#   some (arch, causal, cp.async) combinations, f16 and tf32 alike).
_MENU_BY_DIM = {
    (0, 32): ((64, 32, 4), (32, 32, 2), (16, 32, 4)),
    (1, 32): ((128, 32, 8), (64, 32, 4), (32, 32, 2), (16, 32, 1)),
    (2, 32): ((128, 32, 8), (64, 32, 4), (32, 32, 2), (16, 32, 1)),
    (2, 256): ((64, 16, 4), (32, 16, 2), (16, 16, 1)),
    (1, 256): ((64, 16, 4), (32, 16, 2), (16, 16, 1)),
    (0, 256): ((32, 16, 8), (16, 32, 4)),
    (0, 80): ((64, 32, 8), (32, 32, 8), (16, 32, 4)),
    (1, 64): ((128, 64, 8), (64, 64, 4), (32, 64, 2), (16, 32, 1, 12)),
    (1, 80): ((64, 64, 4), (32, 64, 2), (16, 32, 1, 12)),
    (1, 96): ((64, 64, 4), (32, 64, 2), (16, 32, 1)),
    (1, 128): ((64, 64, 4), (32, 64, 2), (16, 32, 1)),
}


def _fit(math: int, head_dim: int, bq: int, bkv: int) -> int:
    """The largest key tile <= bkv (halving, at least 16) whose block fits sm_86's shared memory."""
    while bkv > 16 and attn_smem_bytes(math, head_dim, bq, bkv) > _FIT_LIMIT:
        bkv //= 2
    return bkv


def entries(math: int, head_dim: int) -> tuple[tuple[int, ...], ...]:
    """(bq, bkv, warps[, min_blocks]) of the menu of (math, head_dim), largest query tile first, without
    duplicates."""
    out = []
    for bq, bkv, w, *mb in _MENU_BY_DIM.get((math, head_dim), _MENU[math]):
        e = (bq, _fit(math, head_dim, bq, bkv), w, *mb)
        if e not in out and attn_smem_bytes(math, head_dim, e[0], e[1]) <= _FIT_LIMIT:
            out.append(e)
    return tuple(out)


def _menu() -> dict[tuple[int, int], tuple[AttnConfig, ...]]:
    out = {}
    for math in _MENU:
        for d in HEAD_DIMS:
            out[(math, d)] = tuple(make_config(math, d, *e[:3], None, *e[3:]) for e in entries(math, d))
    return out


CONFIGS: dict[tuple[int, int], tuple[AttnConfig, ...]] = _menu()
"""(math, head_dim) -> configs, largest query tile first."""


def configs_for(math: int, head_dim: int) -> tuple[AttnConfig, ...]:
    """The menu for one math path and head dimension (largest query tile first)."""
    try:
        return CONFIGS[(math, head_dim)]
    except KeyError:
        raise ValueError(f"no attention configs for math {math}, head_dim {head_dim}; "
                         f"head dims: {HEAD_DIMS}, maths: {MATHS}") from None


def all_configs() -> list[AttnConfig]:
    """The mma.sync / SIMT menus (every arch); the sm_90a body's are WGMMA_CONFIGS."""
    return [c for cfgs in CONFIGS.values() for c in cfgs]


def by_name(name: str) -> AttnConfig:
    for c in all_configs() + [c for cfgs in WGMMA_CONFIGS.values() for c in cfgs]:
        if c.name == name:
            return c
    raise KeyError(f"no attention config named {name!r}")


def defines(cfg: AttnConfig) -> dict[str, int]:
    """The PLUS_* macros of a config, in the order the codegen writes them."""
    out = {
        "PLUS_HEAD_DIM": cfg.head_dim,
        "PLUS_BQ": cfg.bq,
        "PLUS_BKV": cfg.bkv,
        "PLUS_WARPS": cfg.warps,
        "PLUS_MATH": cfg.math,
    }
    if cfg.min_blocks:
        out["PLUS_ATTN_MIN_BLOCKS"] = cfg.min_blocks
    if cfg.wgmma:
        out["PLUS_ATTN_WGMMA"] = 1
        out["PLUS_ATTN_STAGES"] = cfg.stages
    return out


def suggest(math: int, head_dim: int, batch: int, heads: int, seq_q: int, sm_count: int = 132,
            smem_limit: int | None = None) -> AttnConfig:
    """A reasonable default pick: the largest query tile that does not exceed the (16-rounded) query length
    and still gives at least one block per SM; else the smallest tile. `smem_limit` drops configs that do
    not fit the device (bytes per block)."""
    menu = [c for c in configs_for(math, head_dim) if smem_limit is None or c.smem_bytes <= smem_limit]
    if not menu:
        raise ValueError(f"no attention config for math {math}, head_dim {head_dim} fits {smem_limit} bytes")
    rows = -(-max(seq_q, 1) // 16) * 16
    for c in menu:  # largest first
        blocks = batch * heads * (-(-seq_q // c.bq))
        if c.bq <= rows and blocks >= sm_count:
            return c
    fitting = [c for c in menu if c.bq <= rows]
    return fitting[-1] if fitting else menu[-1]


def source(cfg: AttnConfig, qkv_type: str, *, causal: bool = False, strided: bool = False,
           hooks: str = "", extra_defines: dict[str, int] | None = None, skip_tiles: bool = False) -> str:
    """A complete generated source for `cfg` (the layout of CONTRACT §2): used by tests and benchmarks;
    the real codegen writes its own with the hooks of the fused subgraph. `qkv_type` is the C type of
    Q/K/V ("float", "half" or "__nv_bfloat16"). `causal`: key j masked for query i when j > i + (Skv - Sq)
    (bottom-right, as a decoder's mask), through the score hook as a model's causal mask reaches the
    template (composed with a score hook in `hooks`: its logit, then the mask). `skip_tiles` (with `causal`): also
    declare the mask's diagonal (PLUS_HAS_ATTN_CAUSAL, offset Skv - Sq), so each block stops at its last visible
    key tile."""
    defs = dict(defines(cfg))
    defs["PLUS_QKV_STRIDED"] = int(bool(strided))
    defs.update(extra_defines or {})
    lines = [f"// attention {cfg.name} {qkv_type} causal={int(bool(causal))} strided={int(bool(strided))}",
             '#include "plus_common.cuh"']
    lines += [f"#define {k} {v}" for k, v in defs.items()]
    lines.append(f"typedef {qkv_type} plus_qkv_t;")
    if hooks:
        lines.append(hooks.rstrip("\n") if not causal else hooks.replace("plus_score(", "plus_score_base(").rstrip("\n"))
    if causal:
        base = "plus_score_base(args, b, h, i, j, s)" if "PLUS_HAS_SCORE" in hooks else "s"
        shape = "" if "PLUS_HAS_ATTN_SHAPE" in hooks else \
            "PLUS_DEV PlusAttnShape plus_attn_shape(const PlusArgs& args);\n"
        lines.append(("" if "PLUS_HAS_SCORE" in hooks else "#define PLUS_HAS_SCORE 1\n") + shape +
                     "PLUS_DEV float plus_score(const PlusArgs& args, long long b, long long h, long long i, "
                     "long long j, float s) {\n"
                     "  const PlusAttnShape sh = plus_attn_shape(args);\n"
                     f"  return j <= i + (sh.Skv - sh.Sq) ? {base} : -CUDART_INF_F;\n}}")
        if skip_tiles:
            lines.append("#define PLUS_HAS_ATTN_CAUSAL 1\n"
                         "PLUS_DEV long long plus_attn_causal(const PlusArgs& args) {\n"
                         "  const PlusAttnShape sh = plus_attn_shape(args);\n  return sh.Skv - sh.Sq;\n}")
    lines.append('#include "attention.cuh"')
    return "\n".join(lines) + "\n"
