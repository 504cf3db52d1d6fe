"""Lower a whole (small) ONNX model into its +Graph: used for warehouse patterns and tests."""
from __future__ import annotations

import onnx

from .build import build
from .graph import GraphView
from .lowering import lower_all
from .ploop import PGraph


def pgraph_of_model(model: onnx.ModelProto) -> PGraph:
    """+Graph of every data node of `model` (uncollapsed; call .canonical() for Primitive 4)."""
    nests = lower_all(GraphView.build(model), strict=True)
    return build(nests, nests, outputs=[o.name for o in model.graph.output])
