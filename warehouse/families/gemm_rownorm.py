"""GEMM with a row-normalisation epilogue: (x·W + bias + residual) -> LayerNorm / RMSNorm."""
from ..registry import pattern
from ..roles import gemm_roles


@pattern("gemm_layernorm", template="gemm_rownorm", roles=gemm_roles)
def gemm_layernorm(b):
    """Two reductions over N after the GEMM (mean, variance), then the normalised write."""
    h = b.Add(b.MatMul(b.input("x", ["M", "K"]), b.input("w", ["K", "N"])), b.input("r", ["M", "N"]))
    return b.LayerNormalization(h, b.input("g", ["N"]), b.input("beta", ["N"]), axis=-1)


@pattern("gemm_rmsnorm", template="gemm_rownorm", roles=gemm_roles)
def gemm_rmsnorm(b):
    """One reduction over N (mean of squares) after the GEMM, then the scaled write."""
    h = b.Add(b.MatMul(b.input("x", ["M", "K"]), b.input("w", ["K", "N"])), b.input("r", ["M", "N"]))
    var = b.ReduceMean(b.Mul(h, h), b.const([-1]), keepdims=1)
    return b.Mul(b.Div(h, b.Sqrt(b.Add(var, b.const(1e-6, 1)))), b.input("g", ["N"]))
