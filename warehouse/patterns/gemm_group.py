"""Horizontal GEMM groups: sibling GEMM subgraphs that read the same A (a transformer layer's Q, K and V
projections, each with its bias and head reshape/transpose store) run as one launch. The gemm template
sees the group index as an outer batch index (kernels/gemm/render.py, render_gemm_group).

Not grown from a seed: identification (graph_rewrites/identify.py, Identifier.group_horizontal) merges
the gemm subgraphs the greedy growth found when their union matches, member by member, this pattern's
first GEMM (equal M, N and K), has one dtype and B layout, stays convex and fits one kernel's inputs and
outputs."""
from ..registry import pattern
from ..roles import gemm_group_roles


@pattern("gemm_group", template="gemm_group", roles=gemm_group_roles, horizontal=True)
def gemm_group(b):
    """Sibling GEMMs over one A [M, K], each with its own weights [K, N] and element-wise epilogue."""
    x = b.input("x", ["M", "K"])
    return [b.MatMul(x, b.input("w0", ["K", "N"])), b.MatMul(x, b.input("w1", ["K", "N"]))]
