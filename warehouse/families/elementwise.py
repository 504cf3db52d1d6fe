"""Element-wise / injective chains: any nest of parallel loops without key operations."""
from ..registry import pattern


@pattern("elementwise", allow_prologue=True, template="elementwise", any_parallel=True)
def elementwise(b):
    """The definition documents the shape; matching accepts every all-parallel +Graph."""
    return b.Add(b.input("x", ["M", "N"]), b.input("y", ["M", "N"]))
