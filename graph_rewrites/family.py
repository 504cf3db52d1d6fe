"""The template-family contract: what every stage may know about a family of kernels, as one typed object.

A template family renders the subgraphs of the patterns that name it. It is one name with two halves: the
graph half, ``warehouse/families/<name>.py`` (this module's `Family`, the family's `Roles` dataclass, its
role finder and its patterns), and the kernel half, ``kernels/families/<name>/`` (its renderer, config
menus, shape routes and CUDA templates, registered as a ``kernels.families.KernelFamily`` naming the
`Family`). The generic stages read the `Family` of a subgraph's pattern (identification its role finder,
the horizontal step `joins` and `groups`, the decoder post-pass `decodes`, placement `pointwise`) and never
branch on a family's name.

    GEMM = Family("gemm", "MatMul/Gemm with an element-wise epilogue", roles=GemmRoles, find_roles=gemm_roles,
                  joins=Joins(operand=lambda r: r.a, signature=gemm_signature, anchor=lambda r: r.gemm),
                  decodes=Decodes(weights=gemm_weights, decoded=lambda r, metas: replace(r, nbits=metas[0])))
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol


class Roles:
    """Base of a family's roles: the nodes (GraphView positions) and tensors (names) of a matched subgraph
    that play each part of the family's template. Each family subclasses it as a dataclass; its role finder
    returns one (or the reason the match is refused) and its renderer reads it."""


@dataclass(frozen=True)
class Joins:
    """How subgraphs of a family join horizontal groups (another family's `groups`): siblings that share
    `operand` and one `signature` class become one subgraph of the grouping pattern.

    operand(roles) -> tensor the siblings share (a GEMM's A)
    signature(view, roles, batched) -> (free, klass) or the reason it cannot join: members of one group have
        one `klass` (K, dtype, B layout), `free` may differ (N); `batched` is the second pass, siblings with
        operands of one producer, where a batched operand may join with its batch dims in the class
    describe(klass) -> the class as a refusal names it ("K=64, dtype FLOAT, trans_b False")
    anchor(roles) -> the node naming the member in reports
    """
    operand: Callable[[Roles], str]
    signature: Callable[[Any, Roles, bool], tuple | str]
    describe: Callable[[tuple], str]
    anchor: Callable[[Roles], int]
    what: str = "signature"          # what a class is made of, for refusals ("K, dtype and B layout")


@dataclass(frozen=True)
class Groups:
    """A family that renders horizontal groups of `member`'s subgraphs (its patterns are `horizontal`).
    `candidates(view, subgraphs, ks)`: the siblings `ks` (indices into subgraphs) that may group at all
    (default: all of them)."""
    member: "Family"
    candidates: Callable[[Any, list, list], list] | None = None


@dataclass(frozen=True)
class Decodes:
    """Weight decoders (contrib/decoders.py: MatMulNBits dequantisation chains) move into a family's subgraphs.
    weights(view, roles) -> the tensors a decoder may produce (all of them decoded in one kernel, or none);
        empty when the subgraph takes none (a Gemm node, a combined projection)
    decoded(roles, descriptions) -> the roles with the decoders' descriptions (one per weight, in order)
    """
    weights: Callable[[Any, Roles], list]
    decoded: Callable[[Roles, list], Roles]


@dataclass(frozen=True, eq=False)
class Family:
    """A template family's graph half (see the module doc). `roles`: the Roles dataclass its role finder
    returns (None: its renderer reads none); `find_roles(view, members) -> roles | reason`: the finder its
    patterns use unless they name their own; `pointwise`: its kernels are point-wise only (placement keeps
    a Conv's tail that ONNX Runtime fuses into the Conv); `kernels`: the module of its kernel half."""
    name: str
    doc: str
    roles: type | None = None
    find_roles: Callable | None = None
    joins: Joins | None = None
    groups: Groups | None = None
    decodes: Decodes | None = None
    pointwise: bool = False
    kernels: str = ""

    def __post_init__(self):
        if not self.kernels:
            object.__setattr__(self, "kernels", f"plus_ep.kernels.families.{self.name}")

    def __repr__(self):
        return f"Family({self.name!r})"


class PatternLike(Protocol):
    """What the stages read of a warehouse pattern (warehouse.registry.Pattern)."""
    name: str
    family: Family | None
    horizontal: bool
    roles: Callable | None
