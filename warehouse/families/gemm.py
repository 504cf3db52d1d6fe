"""GEMM + any element-wise epilogue (bias, GELU erf/tanh, ReLU, SiLU, scale, residual add).

Element-wise ops merge into the N loop by Primitive 1, so one +Graph covers every epilogue chain.
"""
from ..registry import pattern
from ..roles import gemm_roles


@pattern("gemm", template="gemm", roles=gemm_roles)
def gemm(b):
    """Row-major activations [M, K] times weights [K, N]."""
    return b.MatMul(b.input("x", ["M", "K"]), b.input("w", ["K", "N"]))


@pattern("batched_gemm", template="gemm", roles=gemm_roles)
def batched_gemm(b):
    """Both operands batched [B, M, K] x [B, K, N]."""
    return b.MatMul(b.input("x", ["B", "M", "K"]), b.input("w", ["B", "K", "N"]))
