"""A row kernel stores a reduction's own result (one value per row, keepdims 0 or 1, or an element-wise
function of it) besides row-shaped outputs: before, such a subgraph stayed unfused ("output 'S' of shape
[M] is not laid out like the rows"). Kernels verified on the CPU interpreter through the launcher."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from plus_ep.rewrite import rewrite_detailed
from plus_ep.verification.check import verify


def _model(axis):
    n = helper.make_node
    x_shape, row = (["M", 64], ["M"]) if axis == -1 else ([48, "M"], ["M"])
    keep = ["M", 1] if axis == -1 else [1, "M"]
    nodes = [n("ReduceSum", ["X", "ax"], ["S"], keepdims=0), n("ReduceMean", ["X", "ax"], ["mu"], keepdims=1),
             n("Abs", ["mu"], ["mu2"]), n("Sqrt", ["mu2"], ["R"]), n("Sub", ["X", "mu"], ["C"])]
    g = helper.make_graph(nodes, "row_outputs", [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("S", TensorProto.FLOAT, row),
                           helper.make_tensor_value_info("R", TensorProto.FLOAT, keep),
                           helper.make_tensor_value_info("C", TensorProto.FLOAT, x_shape)],
                          [numpy_helper.from_array(np.array([axis], np.int64), "ax")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


@pytest.mark.parametrize("axis", [-1, 0])
def test_per_row_outputs_are_stored_once_per_row(axis, tmp_path):
    r = rewrite_detailed(_model(axis), archs=["sm_80"], progress=False)
    assert r.kernels.failures == []
    fused = [nd for nd in r.model.graph.node if nd.domain == "ai.plus_ep"]
    assert {o for nd in fused for o in nd.output} >= {"S", "R", "C"}
    path = tmp_path / "m.onnx"
    onnx.save(r.model, path)
    feeds = {"X": np.random.default_rng(1).standard_normal((5, 64) if axis == -1 else (48, 5)).astype(np.float32)}
    rep = verify(path, inputs=feeds, progress=False)
    assert rep["ok"], rep
    assert rep["summary"]["executed"] == len(fused) and rep["summary"]["findings"] == 0
    assert {o["name"] for o in rep["outputs"]} == {"S", "R", "C"}
