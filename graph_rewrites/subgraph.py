"""A fused subgraph as identification finds it (identify.py) and the horizontal step groups it (horizontal.py)."""
from __future__ import annotations

from dataclasses import dataclass, field

from .ir import PGraph


@dataclass
class Subgraph:
    nodes: tuple                         # indices into GraphView.nodes, topological order
    pattern: object                      # warehouse Pattern
    pgraph: PGraph                       # canonical +Graph
    seed: int                            # the skeleton / root node it grew from
    outputs: list = field(default_factory=list)
    roles: dict | None = None            # what the template reads where (the pattern's roles())
    parts: list = field(default_factory=list)   # a horizontal group's member Subgraphs (else empty)
