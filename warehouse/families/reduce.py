"""Plain reductions (sum, mean, max, ...) over trailing axes, with element-wise pro/epilogues."""
from ..registry import pattern


@pattern("row_reduction", allow_prologue=True, template="reduce")
def row_reduction(b):
    """Parallel rows, one reduced axis."""
    return b.ReduceSum(b.input("x", ["M", "N"]), b.const([-1]), keepdims=0)


@pattern("full_reduction", allow_prologue=True, template="reduce")
def full_reduction(b):
    """Everything reduced to one value."""
    return b.ReduceSum(b.input("x", ["N"]), b.const([-1]), keepdims=0)
