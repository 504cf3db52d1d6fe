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


def _fused_embedding_model(rows: int = 7):
    """ids -> a model-local function (as a fused node's body) whose Gather reads a table of `rows` rows."""
    import numpy as np
    from onnx import numpy_helper
    body = helper.make_function("ai.test", "Embed", ["x0", "x1"], ["y0"],
                                [helper.make_node("Gather", ["x0", "x1"], ["y0"])],
                                [helper.make_opsetid("", 17)])
    node = helper.make_node("Embed", ["table", "ids"], ["Y"], domain="ai.test")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(np.ones((rows, 4), np.float32), "table")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.test", 1)],
                             functions=[body], ir_version=10)


def test_ids_stay_inside_a_table_gathered_inside_a_function_body():
    from plus_ep.feeds import index_limits
    m = _fused_embedding_model(rows=7)
    assert index_limits(m) == {"ids": 7}
    ids = sample_inputs(m, batch=4, seq=50)["ids"]
    assert ids.min() >= 0 and ids.max() < 7 and len(set(ids.ravel().tolist())) == 7


@pytest.mark.parametrize("feeds,message", [
    ({"idz": [[1, 2]]}, r"unknown input\(s\) idz; missing input\(s\) ids \(the model's inputs: ids\)"),
    ({"ids": [[1.0, 2.0]]}, r"input ids is float64, the model takes int64"),
    ({"ids": [1, 2]}, r"input ids has shape \[2\] \(rank 1\), the model takes rank 2 \(\[batch, seq\]\)"),
    ({"ids": [[1, 9]]}, r"input ids holds indices 1..9, but the graph indexes a table of 7 rows with it"),
])
def test_bad_feeds_are_one_line_naming_the_input(feeds, message):
    import numpy as np

    from plus_ep.feeds import check_feeds
    m = _fused_embedding_model(rows=7)
    with pytest.raises(ValueError, match=message):
        check_feeds(m, {k: np.asarray(v) for k, v in feeds.items()})


def test_a_symbol_with_two_sizes_is_refused():
    import numpy as np

    from plus_ep.feeds import check_feeds
    m = _model(("A", TensorProto.FLOAT, ["batch", "seq"]), ("B", TensorProto.FLOAT, ["batch", 3]))
    with pytest.raises(ValueError, match=r"dim 'batch' is 2 in input A \(axis 0\) but 5 in input B \(axis 0\)"):
        check_feeds(m, {"A": np.zeros((2, 4), np.float32), "B": np.zeros((5, 3), np.float32)})
