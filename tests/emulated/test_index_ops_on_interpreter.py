"""Ops that lowered but had no C expression (Tile, Trilu, CastLike, Selu, HardSwish, PRelu, Sum,
Mean) rendered into one point-wise kernel, compiled to PTX by NVRTC, run on the CPU PTX interpreter
and compared with onnxruntime."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from plus_ep.kernels.render import render
from plus_ep.rewrite import rewrite_detailed
from plus_ep.kernels.target import Target
from tests.support.run_rendered import run_rendered


def _model():
    n, f = helper.make_node, TensorProto.FLOAT
    nodes = [n("Relu", ["x"], ["r"]), n("Tile", ["r", "reps"], ["t"]), n("Trilu", ["t", "k"], ["l"], upper=0),
             n("Selu", ["l"], ["s"]), n("HardSwish", ["x2"], ["hs"]), n("PRelu", ["hs", "slope"], ["p"]),
             n("Sum", ["s", "p", "x2"], ["a"]), n("Mean", ["a", "s"], ["m"]), n("CastLike", ["m", "like"], ["y"])]
    inits = [numpy_helper.from_array(np.array([2, 1], np.int64), "reps"),
             numpy_helper.from_array(np.array(1, np.int64), "k"),
             numpy_helper.from_array(np.linspace(-0.5, 0.5, 6).astype(np.float32), "slope")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", f, [4, 6]),
                                       helper.make_tensor_value_info("x2", f, [8, 6]),
                                       helper.make_tensor_value_info("like", TensorProto.FLOAT16, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [8, 6])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 10
    return m


def test_new_emitters_run_on_the_interpreter():
    model = _model()
    rng = np.random.default_rng(1)
    feeds = {"x": rng.standard_normal((4, 6)).astype(np.float32) * 3,
             "x2": rng.standard_normal((8, 6)).astype(np.float32) * 4,
             "like": np.zeros(1, np.float16)}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    r = rewrite_detailed(model, archs=None)
    (sg,) = r.subgraphs
    assert {r.view.nodes[i].op_type for i in sg.nodes} >= {"Tile", "Trilu", "CastLike", "Selu", "Sum", "Mean"}
    ins, outs = r.view.graph_index.boundary(sg.nodes)
    rd = render(r.view, sg, ins, outs, Target("sm_80", "exact"), node_name="index_ops")
    inputs = [feeds[t] if t in feeds else numpy_helper.to_array(
        next(i for i in model.graph.initializer if i.name == t)) for t in ins]
    (got,) = run_rendered(rd, inputs, [want], name="index_ops")
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-3, atol=1e-3)


def test_gather_elements_runs_on_the_interpreter():
    """GatherElements (DeBERTa's relative-position gathers) along the last and a middle axis, negative indices
    counted from the end, into one point-wise kernel; an index out of range reads 0 (as Gather)."""
    n, f = helper.make_node, TensorProto.FLOAT
    nodes = [n("Tanh", ["x"], ["t"]), n("GatherElements", ["t", "i"], ["g"], axis=-1),
             n("GatherElements", ["x", "j"], ["h"], axis=1), n("Add", ["g", "h"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", f, [2, 5, 9]),
                                       helper.make_tensor_value_info("i", TensorProto.INT64, [2, 5, 7]),
                                       helper.make_tensor_value_info("j", TensorProto.INT64, [2, 5, 7])],
                          [helper.make_tensor_value_info("y", f, [2, 5, 7])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    rng = np.random.default_rng(2)
    feeds = {"x": rng.standard_normal((2, 5, 9)).astype(np.float32),
             "i": rng.integers(-9, 9, (2, 5, 7)).astype(np.int64), "j": rng.integers(-5, 5, (2, 5, 7)).astype(np.int64)}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    r = rewrite_detailed(model, archs=None)
    (sg,) = r.subgraphs
    assert sum(r.view.nodes[i].op_type == "GatherElements" for i in sg.nodes) == 2
    ins, outs = r.view.graph_index.boundary(sg.nodes)
    rd = render(r.view, sg, ins, outs, Target("sm_80", "exact"), node_name="gather_elements")
    (got,) = run_rendered(rd, [feeds[t] for t in ins], [want], name="gather_elements")
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
