"""graph_rewrites/shape_reads.py: Shape nodes read through copies (Identity, a Concat of one input, Cast,
Dropout), so a copy inside a fusable chain no longer orders the Shape's readers after it; nothing else
changes and the model computes the same."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto

from plus_ep.graph_rewrites.shape_reads import read_shapes_through_copies
from tests.support.graphs import Graph


def _model():
    g = Graph("copies")
    x = g.input("X", ["B", "T", 8])
    c = g.op("Concat", x, axis=1, out="copy")              # transformers' cache: cat with an empty tensor
    i = g.op("Identity", c, out="copy2")
    f = g.op("Cast", i, to=TensorProto.FLOAT, out="copy3")
    s = g.op("Shape", f, out="shape")
    y = g.op("Relu", f, out="y")
    g.op("Reshape", y, s, out="Y")
    g.op("Shape", y, out="S2")                              # reads a computed tensor: stays
    g.output("Y", ["B", "T", 8])
    g.output("S2", [3], TensorProto.INT64)
    return g.model()


def test_shape_reads_the_source_of_copies():
    m = _model()
    out, n = read_shapes_through_copies(m)
    assert n == 1 and out is not m
    shapes = [nd for nd in out.graph.node if nd.op_type == "Shape"]
    assert [s.input[0] for s in shapes] == ["X", "y"]
    assert [nd.input[0] for nd in m.graph.node if nd.op_type == "Shape"] == ["copy3", "y"]   # input untouched
    feeds = {"X": np.random.default_rng(0).standard_normal((2, 5, 8)).astype(np.float32)}
    run = lambda mm: ort.InferenceSession(mm.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)  # noqa: E731
    for a, b in zip(run(m), run(out)):
        np.testing.assert_array_equal(a, b)
    assert read_shapes_through_copies(out) == (out, 0)
