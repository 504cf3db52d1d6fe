"""Dims of static-shape models bind (issue 23): shape arithmetic that ONNX Runtime's symbolic inference
leaves unknown (Mod, torch's reversed-pads Slice/Transpose before a Pad, as TorchScript exports Swin's
window padding) is folded from the static dims (graph_rewrites/shape_fold.py), so nothing after the Pad
carries an invented dim ('Pad_12_o0__d1', 'unk__9') and every subgraph renders. Without the fold the GEMM
after the Pad stayed unfused ("cannot read dimension 'floor(Pad_12_o0__d0*...')")."""
import numpy as np
import onnx
import onnxruntime as ort

from plus_ep.graph_rewrites.graph import GraphView
from plus_ep.graph_rewrites.shape_fold import fold
from plus_ep.kernels.render import render
from plus_ep.kernels.target import Target
from plus_ep.rewrite import rewrite_detailed
from plus_ep.report import data_kernels
from tests.support.static_shape_models import batch_size_leak_model, padded_window_model


def test_invented_dims_become_numbers():
    v = GraphView.build(padded_window_model())
    assert v.shape("padded") == ["batch", 6, 6, 8]
    assert v.shape("windows") == ["4*batch", 3, 3, 8] and v.shape("Y") == ["4*batch", 3, 3, 16]
    assert v.const("pads").tolist() == [0] * 8          # the folded pads, as a constant the codegen can read


def test_fold_keeps_what_depends_on_a_symbol():
    """Shape(x)[0] is the batch size: never folded (its value differs between samples of `batch`)."""
    m = padded_window_model()
    v = GraphView.build(m)
    consts = fold(m, onnx.shape_inference.infer_shapes(m))
    assert "pad_w" in consts and consts["pad_w"].tolist() == [0]
    assert "s" not in consts      # [batch, 6, 6, 8]
    assert v.const("w").tolist() == [6]


def test_every_subgraph_renders_and_the_rewrite_runs():
    m = padded_window_model()
    r = rewrite_detailed(m)
    assert r.subgraphs
    for k, sg in enumerate(r.subgraphs):
        ins, outs = r.view.graph_index.boundary(sg.nodes)
        render(r.view, sg, ins, outs, Target("sm_80"), node_name=f"sg{k}")
    x = np.random.default_rng(0).standard_normal((2, 6, 6, 8)).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString()).run(None, {"X": x})[0]
    got = ort.InferenceSession(r.model.SerializeToString()).run(None, {"X": x})[0]
    assert np.abs(want - got).max() <= 1e-5


def test_shape_values_outside_read_the_graph_inputs_shapes():
    """The batch size a GEMM subgraph's support nodes compute (Gather(Shape(inner), 0)) is read by a Reshape
    outside too: that reader gets it from Shape(X) instead of waiting for the fused node's output (which
    made its shape Concat a data kernel), and the rewrite computes the same."""
    m = batch_size_leak_model()
    r = rewrite_detailed(m)
    assert [sg.pattern.name for sg in r.subgraphs] == ["gemm"]
    concat = next(n for n in r.model.graph.node if n.op_type == "Unsqueeze" and "bu2" in n.output)
    assert concat.input[0].startswith("plus_ep/shape/b/")
    assert data_kernels(r.model) == 1
    rng = np.random.default_rng(1)
    feeds = {"X": rng.standard_normal((3, 4, 8)).astype(np.float32), "X2": rng.standard_normal((3, 3, 5)).astype(np.float32)}
    want = ort.InferenceSession(m.SerializeToString()).run(None, feeds)
    got = ort.InferenceSession(r.model.SerializeToString()).run(None, feeds)
    assert all(np.abs(a - b).max() <= 1e-5 for a, b in zip(want, got))
