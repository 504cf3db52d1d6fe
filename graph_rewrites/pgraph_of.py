"""Lower a whole (small) ONNX model into its +Graph: used for warehouse patterns and tests."""
from __future__ import annotations

import onnx

from .build import build
from .graph import GraphView
from .lowering import lower
from .ploop import PGraph


def pgraph_of_model(model: onnx.ModelProto) -> PGraph:
    """+Graph of every data node of `model` (uncollapsed; call .canonical() for Primitive 4)."""
    view = GraphView.build(model)
    nests = {}
    for i, node in enumerate(view.nodes):
        if not view.is_data_node(i):
            continue
        lowered = lower(view, node)
        if lowered is None:
            raise ValueError(f"pattern uses {view.node_label(i)}, which the lowering does not know")
        nests[i] = lowered
    return build(nests, nests, outputs=[o.name for o in model.graph.output])
