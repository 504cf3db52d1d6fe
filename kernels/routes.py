"""Shape routes: which variant runs for which shapes, chosen by an analytic model, not by tuning.

For a GEMM the model follows Roller's rTile rules: tiles are aligned to the warp/MMA shape by
construction (the menus in gemm_configs.py), the padding waste of a tile on the problem
(cdiv(M,BM)·BM·cdiv(N,BN)·BN / (M·N) − 1) must stay under EPSILON when some tile manages it, and the
estimated time is the number of waves on the target's SMs (wave quantisation) times a tile's work
divided by its data reuse. The symbolic dim (M = batch·seq for most GEMMs) is sampled at powers of
two; neighbouring samples with the same choice form one route `M <= bound`, the last route is `1`.
"""
from __future__ import annotations

import math

from . import arch as arch_table
from .gemm import configs as gemm_configs
from .codegen import symdim
from .codegen.pull import RenderError

ALWAYS = "1"
EPSILON = 0.25
SAMPLES = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 65536]
GUESS = 512                       # a symbolic N/K (rare) is assumed to be this large

class NoConfig(RenderError):
    """Every config of a menu is excluded or does not fit the arch."""


def _usable(menu, target, what):
    """The configs of `menu` the target allows: not excluded (the kernel build excludes configs that
    spilled or exceeded the arch's resources when compiled, so a smaller one replaces them) and
    fitting the arch's shared memory."""
    arch, excluded = target.arch, target.excluded
    room = arch_table.get(arch).smem_per_block - arch_table.RESERVED_SMEM_PER_BLOCK
    out = [c for c in menu if c.name not in excluded and c.smem_bytes <= room]
    if not out:
        raise NoConfig(f"no {what} configuration left for {arch} (excluded after compiling: "
                       f"{', '.join(sorted(excluded & {c.name for c in menu})) or 'none'}; "
                       f"shared memory per block {room} bytes)")
    return out



def sm_count(arch) -> int:
    return arch_table.get(arch).sms


def _value(expr, sample) -> int:
    expr = symdim.parse(expr)
    if expr.is_Integer:
        return int(expr)
    return max(1, int(expr.subs({s: 1 for s in expr.free_symbols if s != _main(expr)}).subs(_main(expr), sample)))


def _main(expr):
    syms = sorted(expr.free_symbols, key=str)
    return syms[-1] if syms else None


# ---- GEMM -------------------------------------------------------------------------------------
def gemm_math(dtype, fp32_math) -> int:
    from onnx import TensorProto
    if dtype in (TensorProto.FLOAT16, TensorProto.BFLOAT16):
        return gemm_configs.MATH_F16
    return gemm_configs.MATH_TF32 if fp32_math == "tf32" else gemm_configs.MATH_SIMT


def gemm_menu(math_, arch):
    if math_ == gemm_configs.MATH_F16 and arch_table.get(arch).wgmma:
        from .gemm import sm90a_configs as gemm_sm90a_configs
        return gemm_sm90a_configs.CONFIGS
    return gemm_configs.configs(math_)


def _is_sm90a(cfg) -> bool:
    return cfg.name.startswith("wg_")


def gemm_header(cfg) -> str:
    return "gemm_sm90a.cuh" if _is_sm90a(cfg) else "gemm.cuh"


def padding_waste(cfg, m, n) -> float:
    return (math.ceil(m / cfg.bm) * cfg.bm * math.ceil(n / cfg.bn) * cfg.bn) / (m * n) - 1.0


def gemm_time(cfg, m, n, k, batch, splitk, arch) -> float:
    """Relative time: waves × per-tile work / reuse, plus the split-K reduction's traffic."""
    tiles = math.ceil(m / cfg.bm) * math.ceil(n / cfg.bn) * batch * splitk
    a = arch_table.get(arch)
    per_sm = max(1, min(a.smem_per_sm // max(cfg.smem_bytes, 1), a.threads_per_sm // cfg.threads, 8))
    waves = math.ceil(tiles / (sm_count(arch) * per_sm))
    k_part = math.ceil(math.ceil(k / splitk) / cfg.bk) * cfg.bk
    reuse = min(1.0, (cfg.bm * cfg.bn / (cfg.bm + cfg.bn)) / 64.0)
    work = waves * per_sm * cfg.bm * cfg.bn * k_part / reuse
    reduce = (m * n * batch * splitk * 8.0) if splitk > 1 else 0.0
    return work + reduce


def best_gemm(m, n, k, batch, menu, target, allow_splitk=True):
    arch = target.arch
    fits = _usable(menu, target, "GEMM")
    ok = [c for c in fits if padding_waste(c, m, n) <= EPSILON] or fits
    splits = [1, 2, 4] if allow_splitk and k >= 1024 else [1]
    cands = [(gemm_time(c, m, n, k, batch, s, arch), c.bm * c.bn, c, s) for c in ok for s in splits
             if math.ceil(k / s) >= 128 or s == 1]
    _, _, cfg, split = min(cands, key=lambda x: (x[0], -x[1]))
    return cfg, split


def gemm_routes(M, N, K, batch, dtype, target, syms, allow_splitk=True, menu=None):
    """[(condition rpn, config, split-K)] in order; the last condition is ALWAYS. `menu`: the configs to
    choose from (default: the arch's menu for the math; gemm/norm_render.py passes its cluster tiles)."""
    arch = target.arch
    menu = gemm_menu(gemm_math(dtype, target.fp32_math), arch) if menu is None else menu
    n, k = _static(N), _static(K)
    b = _static(batch, 1)
    M = symdim.parse(M)
    if M.is_Integer:
        cfg, split = best_gemm(int(M), n, k, b, menu, target, allow_splitk)
        return [(ALWAYS, cfg, split)]
    picks = [(s, *best_gemm(_value(M, s), n, k, b, menu, target, allow_splitk)) for s in SAMPLES]
    routes = []
    for i, (s, cfg, split) in enumerate(picks):
        last = i == len(picks) - 1
        if not last and (picks[i + 1][1], picks[i + 1][2]) == (cfg, split):
            continue
        cond = ALWAYS if last else f"{syms.rpn(M)},{_value(M, s)},<="
        routes.append((cond, cfg, split))
    if routes[-1][0] != ALWAYS:
        routes[-1] = (ALWAYS, *routes[-1][1:])
    return routes


def gemm_defines(cfg, splitk, trans_b, aligned=False) -> dict:
    if _is_sm90a(cfg):
        from .gemm import sm90a_configs as mod
    else:
        mod = gemm_configs
    return mod.defines(cfg, b_trans=int(trans_b), aligned=int(bool(aligned)), splitk=splitk)


def gemm_rows_aligned(K, ldb, dtype) -> bool:
    """Static proof for PLUS_ALIGNED=1: operand bases are 16-byte aligned (CONTRACT §2.1), lda = K and
    ldb are whole 16-byte chunks, and batch offsets are multiples of lda / ldb rows. Symbolic K or ldb:
    no proof (the templates then check alignment at run time)."""
    from onnx import TensorProto
    elem = 4 if dtype == TensorProto.FLOAT else 2
    k, ld = symdim.parse(K), symdim.parse(ldb)
    return bool(k.is_Integer and ld.is_Integer and (int(k) * elem) % 16 == 0 and (int(ld) * elem) % 16 == 0)


def _static(expr, default=GUESS) -> int:
    e = symdim.parse(expr)
    return int(e) if e.is_Integer else default


# ---- attention ----------------------------------------------------------------------------------
def attention_math(dtypes, fp32_math) -> int:
    """PLUS_MATH of an attention whose Q, K and V have these ONNX dtypes: one 16-bit float type -> f16/bf16
    tensor cores (2); fp32 -> TF32 tensor cores (1) under fp32_math "tf32" (the default, as the GEMMs), else
    exact SIMT (0); mixed types -> SIMT."""
    from onnx import TensorProto

    from .attention import configs as ac
    dtypes = set(dtypes)
    if len(dtypes) == 1 and dtypes <= {TensorProto.FLOAT16, TensorProto.BFLOAT16}:
        return ac.MATH_F16
    if dtypes == {TensorProto.FLOAT} and fp32_math == "tf32":
        return ac.MATH_TF32
    return ac.MATH_SIMT


def attention_routes(B, H, Sq, Skv, D, target, syms, math_=0):
    from .attention import configs as ac
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
    from .attention import configs as ac
    return ac.defines(cfg)


__all__ = ["ALWAYS", "attention_defines", "attention_math", "attention_routes", "gemm_defines", "gemm_header", "gemm_routes"]
