"""The row_reduce family's graph half: row programs, one block per row (softmax, LayerNorm, RMSNorm/T5LayerNorm
with element-wise prologues, and plain reductions (sum, mean, max, ...) over trailing axes with element-wise
pro/epilogues).

Zero-centred-gamma variants ((1 + gamma) * x) only add an element-wise op: same +Graph.
"""
from ...graph_rewrites.family import Family
from ..registry import pattern

ROW_REDUCE = Family("row_reduce", "one block per row: softmax, LayerNorm, RMSNorm, plain reductions over "
                    "trailing axes, and their element-wise neighbours")


@pattern("softmax", allow_prologue=True, family=ROW_REDUCE)
def softmax(b):
    return b.Softmax(b.input("x", ["M", "N"]), axis=-1)


@pattern("layernorm", allow_prologue=True, family=ROW_REDUCE)
def layernorm(b):
    x = b.input("x", ["M", "N"])
    return b.LayerNormalization(x, b.input("g", ["N"]), b.input("beta", ["N"]), axis=-1)


@pattern("rmsnorm", allow_prologue=True, family=ROW_REDUCE)
def rmsnorm(b):
    x = b.input("x", ["M", "N"])
    var = b.ReduceMean(b.Mul(x, x), b.const([-1]), keepdims=1)
    return b.Mul(b.Mul(x, b.Reciprocal(b.Sqrt(b.Add(var, b.const(1e-6, 1))))), b.input("g", ["N"]))


@pattern("row_reduction", allow_prologue=True, family=ROW_REDUCE)
def row_reduction(b):
    """Parallel rows, one reduced axis."""
    return b.ReduceSum(b.input("x", ["M", "N"]), b.const([-1]), keepdims=0)


@pattern("full_reduction", allow_prologue=True, family=ROW_REDUCE)
def full_reduction(b):
    """Everything reduced to one value."""
    return b.ReduceSum(b.input("x", ["N"]), b.const([-1]), keepdims=0)
