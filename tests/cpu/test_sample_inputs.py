"""Random feeds for `plus-ep verify` / the zoo: symbolic dims, including arithmetic ones the rewriter writes."""
import pytest
from onnx import TensorProto, helper

from plus_ep.feeds import sample_inputs


def _model(*inputs):
    ins = [helper.make_tensor_value_info(n, t, dims) for n, t, dims in inputs]
    out = helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)
    nodes = [helper.make_node("Identity", [inputs[0][0]], ["Y"])]
    return helper.make_model(helper.make_graph(nodes, "g", ins, [out]))


def test_arithmetic_dims_follow_their_symbols():
    m = _model(("X2", TensorProto.FLOAT, ["batch*seq", 32]), ("ids", TensorProto.INT64, ["batch", "seq"]),
               ("P", TensorProto.FLOAT, ["batch", "seq + 1"]), ("D", TensorProto.FLOAT, ["dec_seq*2", 4]))
    f = sample_inputs(m, batch=2, seq=7, dec_seq=3)
    assert f["X2"].shape == (14, 32)
    assert f["ids"].shape == (2, 7)
    assert f["P"].shape == (2, 8)
    assert f["D"].shape == (6, 4)


def test_plain_symbols_keep_their_rule():
    m = _model(("X", TensorProto.FLOAT, ["batch", "sequence_length", "hidden_unknown"]))
    assert sample_inputs(m, batch=3, seq=5)["X"].shape == (3, 5, 3)


def test_a_dim_that_is_not_a_whole_number_names_itself():
    m = _model(("X", TensorProto.FLOAT, ["seq/2", 4]))
    with pytest.raises(ValueError, match=r"seq/2.*--inputs"):
        sample_inputs(m, batch=1, seq=7)
