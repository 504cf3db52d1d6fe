"""The gemm_group family's graph half. Horizontal GEMM groups: sibling GEMM subgraphs that read the same A (a transformer layer's Q, K and V
projections, each with its bias and head reshape/transpose store; N may differ) run as one launch; so do
same-shape GEMMs whose A's come out of one subgraph (DeBERTa's c2p and p2c, A = q and k). The gemm template
sees the group index as an outer batch index (kernels/families/gemm_group/render.py).

Not grown from a seed: the horizontal step of identification merges the subgraphs of the gemm family the
greedy growth found when their union matches, member by member, this pattern's first GEMM (equal M and K),
has one dtype and B layout (`Joins` of the gemm family), stays convex and fits one kernel's inputs and
outputs."""
from __future__ import annotations

from dataclasses import dataclass

from ...graph_rewrites.family import Family, Groups, Roles
from ...graph_rewrites.index import describe_node
from ..registry import pattern
from ..roles import descendants
from .gemm import DOTS, GEMM, GemmOperands


@dataclass(frozen=True)
class GemmGroupRoles(Roles):
    """A horizontal GEMM group: the first member's A and each member GEMM (topological order) with its
    operands; each member's epilogue is what follows its GEMM inside the group."""
    a: str
    members: tuple


def gemm_group_roles(view, members):
    """The roles of a horizontal GEMM group (GemmGroupRoles), or the reason the union is not one."""
    dots = [p for p in members if view.nodes[p].op_type in DOTS]
    if len(dots) < 2:
        return f"a gemm group has at least two MatMul or Gemm nodes (found {len(dots)})"
    ms = set(members)
    inputs = view.graph_index.boundary(members)[0]
    parts, seen = [], set()
    for d in dots:
        own = descendants(view, ms, d)
        if own & seen:
            return (f"{describe_node(view.nodes[min(own & seen)])} reads the results of two GEMMs of the group; "
                    "each member's epilogue reads only its own")
        seen |= own
        node = view.nodes[d]
        if any(q != d and q in descendants(view, ms, d) for q in dots):
            return f"{describe_node(node)} feeds another GEMM of the group; group members are siblings"
        a, b = node.input[0], node.input[1]
        for role, t in (("A", a), ("B", b)):
            if t not in inputs:
                return (f"{describe_node(node)}: operand {role} '{t}' is computed inside the group; the gemm "
                        "template reads its operands from memory")
        parts.append(GemmOperands(d, a, b))
    if len({p.a for p in parts}) != 1:       # second pass: A's from one subgraph, one shape for all
        shapes = {str(view.shape(p.a)) for p in parts}
        if len(shapes) != 1:
            return f"the GEMMs read A tensors of different shapes ({sorted(shapes)})"
    return GemmGroupRoles(parts[0].a, tuple(parts))


GEMM_GROUP = Family("gemm_group", "sibling GEMMs reading one A, one launch with the group index as an outer "
                    "batch index", roles=GemmGroupRoles, find_roles=gemm_group_roles, groups=Groups(member=GEMM))


@pattern("gemm_group", family=GEMM_GROUP, horizontal=True)
def gemm_group(b):
    """Sibling GEMMs over one A [M, K], each with its own weights [K, N] and element-wise epilogue."""
    x = b.input("x", ["M", "K"])
    return [b.MatMul(x, b.input("w0", ["K", "N"])), b.MatMul(x, b.input("w1", ["K", "N"]))]
