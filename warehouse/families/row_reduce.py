"""Row reductions with element-wise prologues: softmax, LayerNorm, RMSNorm/T5LayerNorm.

Zero-centred-gamma variants ((1 + gamma) * x) only add an element-wise op: same +Graph.
"""
from ..registry import pattern


@pattern("softmax", allow_prologue=True, template="row_reduce")
def softmax(b):
    return b.Softmax(b.input("x", ["M", "N"]), axis=-1)


@pattern("layernorm", allow_prologue=True, template="row_reduce")
def layernorm(b):
    x = b.input("x", ["M", "N"])
    return b.LayerNormalization(x, b.input("g", ["N"]), b.input("beta", ["N"]), axis=-1)


@pattern("rmsnorm", allow_prologue=True, template="row_reduce")
def rmsnorm(b):
    x = b.input("x", ["M", "N"])
    var = b.ReduceMean(b.Mul(x, x), b.const([-1]), keepdims=1)
    return b.Mul(b.Mul(x, b.Reciprocal(b.Sqrt(b.Add(var, b.const(1e-6, 1))))), b.input("g", ["N"]))
