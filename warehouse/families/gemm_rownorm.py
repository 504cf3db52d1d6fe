"""The gemm_rownorm family's graph half: GEMM with a row-normalisation epilogue, (x·W + bias + residual) ->
LayerNorm / RMSNorm (or any row program after a GEMM, e.g. a user's GEMM + Softmax); roles and weight
decoders as the gemm family's; its patterns come before the gemm family's."""
from ...graph_rewrites.family import Family
from ..registry import pattern
from .gemm import GEMM, GemmRoles, gemm_roles, quantized_a_roles

GEMM_ROWNORM = Family("gemm_rownorm", "GEMM whose epilogue feeds a row normalisation", roles=GemmRoles,
                      find_roles=gemm_roles, decodes=GEMM.decodes)


@pattern("gemm_layernorm", family=GEMM_ROWNORM, before=GEMM)
def gemm_layernorm(b):
    """Two reductions over N after the GEMM (mean, variance), then the normalised write."""
    h = b.Add(b.MatMul(b.input("x", ["M", "K"]), b.input("w", ["K", "N"])), b.input("r", ["M", "N"]))
    return b.LayerNormalization(h, b.input("g", ["N"]), b.input("beta", ["N"]), axis=-1)


@pattern("gemm_rmsnorm", family=GEMM_ROWNORM, before=GEMM)
def gemm_rmsnorm(b):
    """One reduction over N (mean of squares) after the GEMM, then the scaled write."""
    h = b.Add(b.MatMul(b.input("x", ["M", "K"]), b.input("w", ["K", "N"])), b.input("r", ["M", "N"]))
    var = b.ReduceMean(b.Mul(h, h), b.const([-1]), keepdims=1)
    return b.Mul(b.Div(h, b.Sqrt(b.Add(var, b.const(1e-6, 1)))), b.input("g", ["N"]))


@pattern("gemm_layernorm_quantized_a", allow_prologue=True, family=GEMM_ROWNORM, roles=quantized_a_roles,
         before=GEMM)
def gemm_layernorm_quantized_a(b):
    """gemm_layernorm with A quantized in the kernel."""
    h = b.Add(b.MatMul(b.input("x", ["M", "K"]), b.input("w", ["K", "N"])), b.input("r", ["M", "N"]))
    return b.LayerNormalization(h, b.input("g", ["N"]), b.input("beta", ["N"]), axis=-1)
