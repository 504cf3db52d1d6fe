"""GEMM template test variants shared by test_template_gemm.py and test_template_gemm_sm90a.py:
the hooks a fused GEMM's codegen would write, and the generated source of one variant."""
from __future__ import annotations

from dataclasses import dataclass

# Strided operands: lda = v[4], A batch stride = v[5], ldb = v[6], B batch stride = v[7] (0: broadcast B).
STRIDED_HOOKS = r"""
#define PLUS_HAS_GEMM_SHAPE
PLUS_DEV PlusGemmShape plus_gemm_shape(const PlusArgs& a) { return PlusGemmShape{a.v[0], a.v[1], a.v[2], a.v[3]}; }
#define PLUS_HAS_A_PTR
PLUS_DEV const plus_ab_t* plus_a_ptr(const PlusArgs& a, long long b) { return (const plus_ab_t*)a.in[0] + b * a.v[5]; }
#define PLUS_HAS_LDA
PLUS_DEV long long plus_lda(const PlusArgs& a) { return a.v[4]; }
#define PLUS_HAS_B_PTR
PLUS_DEV const plus_ab_t* plus_b_ptr(const PlusArgs& a, long long b) { return (const plus_ab_t*)a.in[1] + b * a.v[7]; }
#define PLUS_HAS_LDB
PLUS_DEV long long plus_ldb(const PlusArgs& a) { return a.v[6]; }
"""

# Strided operands + an A prologue (affine, like a folded normalisation) + an epilogue with a bias vector
# in in[2], a leaky ReLU and a float output.
FUSED_HOOKS = STRIDED_HOOKS + r"""
#define PLUS_HAS_PROLOGUE_A
PLUS_DEV float plus_prologue_a(const PlusArgs& a, long long b, long long m, long long k, float x) {
  return x * 0.5f + 0.25f;
}
#define PLUS_HAS_EPILOGUE
PLUS_DEV void plus_epilogue(const PlusArgs& a, long long b, long long m, long long n, float acc) {
  const float y = acc + plus_load<float>(a.in[2], n);
  plus_store<float>(a.out[0], (b * a.v[1] + m) * a.v[2] + n, y > 0.f ? y : 0.1f * y);
}
"""

# Gated products (PLUS_GATED 1), two weights: B0 = in[1], B1 = in[3] (both [K, N], or [N, K] with B_TRANS 1,
# contiguous, ldb = v[6]); the epilogue is a SwiGLU with a bias on the first product:
# out[0] = silu(acc0 + bias[n]) * acc1 (float).
GATED_HOOKS = r"""
#define PLUS_GATED 1
#define PLUS_HAS_LDB
PLUS_DEV long long plus_ldb(const PlusArgs& a) { return a.v[6]; }
#define PLUS_HAS_B1_PTR
PLUS_DEV const plus_ab_t* plus_b1_ptr(const PlusArgs& a, long long b) { return (const plus_ab_t*)a.in[3] + b * a.v[7]; }
#define PLUS_HAS_B_PTR
PLUS_DEV const plus_ab_t* plus_b_ptr(const PlusArgs& a, long long b) { return (const plus_ab_t*)a.in[1] + b * a.v[7]; }
#define PLUS_HAS_EPILOGUE_GATED
PLUS_DEV void plus_epilogue_gated(const PlusArgs& a, long long b, long long m, long long n, float acc0, float acc1) {
  const float g = acc0 + plus_load<float>(a.in[2], n);
  plus_store<float>(a.out[0], (b * a.v[1] + m) * a.v[2] + n, g / (1.0f + expf(-g)) * acc1);
}
"""

# Gated products with the default hooks: one combined weight in[1] [batch, K, 2N] ([batch, 2N, K] with
# B_TRANS 1), both products stored (out[0] = A·B0, out[1] = A·B1, of plus_ab_t).
GATED_DEFAULT_HOOKS = r"""
#define PLUS_GATED 1
"""

# A ragged group (PLUS_HAS_GROUP_N): batch index b is member b of up to 3, N = v[8 + b] columns (plus_gemm_shape's
# N, v[2], is the largest), B = in[1] + v[11 + b] ([K, N_b] or [N_b, K], contiguous); the default epilogue
# stores into out[0] [batch, M, v[2]] (columns past a member's N untouched).
RAGGED_HOOKS = r"""
#define PLUS_HAS_B_PTR
PLUS_DEV const plus_ab_t* plus_b_ptr(const PlusArgs& a, long long b) { return (const plus_ab_t*)a.in[1] + a.v[11 + b]; }
#define PLUS_HAS_GROUP_N 1
PLUS_DEV long long plus_group_n(const PlusArgs& a, long long b) { return a.v[8 + b]; }
PLUS_DEV long long plus_group_ldb(const PlusArgs& a, long long b) { return PLUS_B_TRANS ? a.v[3] : a.v[8 + b]; }
"""

HOOKS = {"": "", "strided": STRIDED_HOOKS, "fused": FUSED_HOOKS, "gated": GATED_HOOKS,
         "gated_default": GATED_DEFAULT_HOOKS, "ragged": RAGGED_HOOKS}


@dataclass(frozen=True)
class Variant:
    cfg: str
    dtype: str
    b_trans: int
    aligned: int
    splitk: int = 1
    hooks: str = ""  # "", "strided", "fused", "gated", "gated_default" or "ragged"
    csplit: int = 1  # split-K inside a thread-block cluster (sm_90a template, PLUS_SPLITK_CLUSTER)

    @property
    def id(self) -> str:
        s = f"{self.cfg}-{self.dtype.strip('_')}-T{self.b_trans}-A{self.aligned}"
        if self.splitk > 1:
            s += f"-sk{self.splitk}"
        if self.csplit > 1:
            s += f"-csk{self.csplit}"
        return s + (f"-{self.hooks}" if self.hooks else "")


@dataclass(frozen=True)
class Problem:
    """One GEMM launch of a test: the variant and C[batch, m, n] = A[batch, m, k] @ B[batch, k, n]."""
    v: Variant
    batch: int
    m: int
    n: int
    k: int

    @property
    def id(self) -> str:
        return f"{self.v.id}-{self.batch}x{self.m}x{self.n}x{self.k}"


def round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def source(v: Variant, configs, header: str) -> str:
    """A generated source as the codegen writes it, plus compile-time checks that the config module's
    `threads` / `smem_bytes` mirror the template's PLUS_THREADS / PLUS_SMEM_BYTES."""
    cfg = configs.BY_NAME[v.cfg]
    mod = configs.__name__.rsplit(".", 1)[-1]
    lines = [f"// test variant {v.id}", '#include "plus_common.cuh"']
    extra = {"splitk_cluster": v.csplit} if v.csplit > 1 else {}
    lines += [f"#define {k} {val}" for k, val in configs.defines(cfg, b_trans=v.b_trans, aligned=v.aligned,
                                                                splitk=v.splitk, **extra).items()]
    lines += [f"typedef {v.dtype} plus_ab_t;", HOOKS[v.hooks], f'#include "{header}"',
              f'static_assert(PLUS_THREADS == {cfg.threads}, "{mod}.threads mirrors PLUS_THREADS");',
              f'static_assert(PLUS_SMEM_BYTES == {cfg.smem_bytes}, "{mod}.smem_bytes mirrors PLUS_SMEM_BYTES");']
    return "\n".join(lines) + "\n"
