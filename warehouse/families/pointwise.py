"""The pointwise family's graph half: element-wise / injective chains (any nest of parallel loops without key
operations) as point-wise kernels over the subgraph's outputs. A pattern that names no family is rendered by
this one too."""
from ...graph_rewrites.family import Family
from ..registry import pattern

POINTWISE = Family("pointwise", "point-wise kernels over the subgraph's outputs", pointwise=True)


@pattern("elementwise", allow_prologue=True, family=POINTWISE, any_parallel=True)
def elementwise(b):
    """The definition documents the shape; matching accepts every all-parallel +Graph."""
    return b.Add(b.input("x", ["M", "N"]), b.input("y", ["M", "N"]))
