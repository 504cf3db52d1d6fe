"""`plus-ep verify`'s default inputs fit the model (issue 39): ids that reach a position table through
Reshape/Cast stay inside it, an index into a run-time tensor stays inside its (symbolic) extent, and a
decoder exported with past key/values gets a mask of past + seq columns and positions counting on from the
past whatever its exporter called the dims (Optimum's, onnxruntime-genai's, the dynamo exporter's `s0`...).
Each model here is checked by running it on ONNX Runtime CPU with the default inputs: an index out of its
table fails there exactly as it failed inside verify."""
from __future__ import annotations

import re

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto

from plus_ep.feeds import check_feeds, index_limits, sample_inputs
from tests.support.graphs import Graph

I64 = TensorProto.INT64


def _runs(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def gpt2_embedding(positions: str = "pos") -> object:
    """GPT-2's input embedding with its positions as an input: ids -> wte [50, 8]; positions -> Cast ->
    Reshape [-1, seq] -> wpe [16, 8] (a position table much shorter than the vocabulary)."""
    rng = np.random.default_rng(0)
    g = Graph("gpt2_embedding")
    g.input("input_ids", ["batch", "seq"], I64)
    g.input(positions, ["batch", "seq"], I64)
    g.init("wte", rng.standard_normal((50, 8)).astype(np.float32))
    g.init("wpe", rng.standard_normal((16, 8)).astype(np.float32))
    g.init("shape", np.array([-1, 0], np.int64))
    p = g.op("Reshape", g.op("Cast", positions, to=I64), "shape")
    g.op("Add", g.op("Gather", "wte", "input_ids"), g.op("Gather", "wpe", p), out="Y")
    g.output("Y", ["batch", "seq", 8])
    return g.model()


def test_positions_through_reshape_stay_inside_the_position_table():
    m = gpt2_embedding("pos")
    assert index_limits(m) == {"input_ids": 50, "pos": 16}
    f = sample_inputs(m, batch=2, seq=37)        # a multi-tile sequence: longer than the table
    assert 0 <= f["pos"].min() and f["pos"].max() < 16 and f["input_ids"].max() < 50
    check_feeds(m, f, source="the default inputs")
    _runs(m, f)


def test_named_positions_count_from_zero_and_the_table_bounds_them():
    m = gpt2_embedding("position_ids")
    f = sample_inputs(m, batch=2, seq=9)
    np.testing.assert_array_equal(f["position_ids"], np.broadcast_to(np.arange(9), (2, 9)))
    _runs(m, f)
    with pytest.raises(ValueError, match="indexes a table of 16 rows"):
        check_feeds(m, sample_inputs(m, batch=1, seq=17))     # longer than the table: said, not run


def test_an_index_into_a_run_time_tensor_stays_inside_its_symbolic_extent():
    """Gather(hidden [batch, seq, 4], idx, axis=1) (a last-token pick): idx's limit is seq, whatever seq is."""
    g = Graph("pick")
    g.input("hidden", ["batch", "seq", 4])
    g.input("idx", [3], I64)
    g.op("Gather", "hidden", g.op("Identity", "idx"), axis=1, out="Y")
    g.output("Y", ["batch", 3, 4])
    m = g.model()
    for seq in (2, 5, 40):
        f = sample_inputs(m, batch=2, seq=seq)
        assert f["idx"].max() < seq
        check_feeds(m, f)
        _runs(m, f)
    bad = sample_inputs(m, batch=2, seq=5)
    bad["idx"][:] = 5
    with pytest.raises(ValueError, match="indexes a table of 5 rows"):
        check_feeds(m, bad)


NAMINGS = {   # (batch, seq, past, mask length) as exporters write them
    "optimum": ("batch_size", "sequence_length", "past_sequence_length", "past_sequence_length + sequence_length"),
    "genai": ("batch_size", "sequence_length", "past_sequence_length", "total_sequence_length"),
    "dynamo": ("s0", "s1", "s2", "s1 + s2"),
    "dynamo_free": ("s0", "s1", "s2", "s3"),        # the mask's length a symbol of its own
}


def decoder_io(naming: str):
    """A decoder step's plumbing: the causal mask gathers attention_mask at key positions Range(0, past + seq)
    (transformers' padding mask), present = Concat(past, new) along the keys, position ids gather a rotary
    table of 64 rows."""
    b, s, p, t = NAMINGS[naming]
    rng = np.random.default_rng(1)
    g = Graph("decoder_io")
    g.input("input_ids", [b, s], I64)
    g.input("attention_mask", [b, t], I64)
    g.input("position_ids", [b, s], I64)
    g.input("past_key_values.0.key", [b, 2, p, 4])
    g.init("emb", rng.standard_normal((100, 8)).astype(np.float32))
    g.init("rot", rng.standard_normal((64, 4)).astype(np.float32))
    g.init("zero", np.array(0, np.int64))
    g.init("one", np.array(1, np.int64))
    g.init("two", np.array([2], np.int64))
    g.init("i1", np.array([1], np.int64))
    g.init("shape_new", np.array([0, 2, -1, 4], np.int64))
    e = g.op("Gather", "emb", "input_ids")                              # [b, s, 8]
    new = g.op("Reshape", e, "shape_new")                                 # [b, 2, s, 4]
    g.op("Concat", "past_key_values.0.key", new, axis=2, out="present.0.key")
    past = g.op("Squeeze", g.op("Slice", g.op("Shape", "past_key_values.0.key"), "two", g.op("Add", "two", "i1")))
    seq = g.op("Squeeze", g.op("Slice", g.op("Shape", "input_ids"), "i1", "two"))
    keys = g.op("Range", "zero", g.op("Add", past, seq), "one")
    g.op("Cast", g.op("Gather", "attention_mask", keys, axis=1), to=TensorProto.FLOAT, out="mask")
    g.op("Gather", "rot", "position_ids", out="rope")
    g.output("present.0.key", [b, 2, None, 4])
    g.output("mask", [b, None])
    g.output("rope", [b, s, 4])
    return g.model()


@pytest.mark.parametrize("naming", sorted(NAMINGS))
@pytest.mark.parametrize("past", [0, 1, 4, 20])
def test_decoder_defaults_fit_every_past_whatever_the_dims_are_called(naming, past):
    m = decoder_io(naming)
    f = sample_inputs(m, batch=1, seq=8, past=past)
    assert f["past_key_values.0.key"].shape == (1, 2, past, 4)
    assert f["attention_mask"].shape == (1, past + 8)
    np.testing.assert_array_equal(f["position_ids"], [np.arange(past, past + 8)])
    check_feeds(m, f, source="the default inputs")
    present, mask, _ = _runs(m, f)
    assert present.shape == (1, 2, past + 8, 4) and mask.shape == (1, past + 8)


@pytest.mark.parametrize("naming", sorted(NAMINGS))
def test_a_decode_step_whatever_the_dims_are_called(naming):
    m = decoder_io(naming)
    for past in (1, 20):
        f = sample_inputs(m, batch=2, seq=1, past=past)
        assert f["past_key_values.0.key"].shape == (2, 2, past, 4)
        assert f["attention_mask"].shape == (2, past + 1) and f["position_ids"].tolist() == [[past]] * 2
        check_feeds(m, f, source="the default inputs")
        _runs(m, f)


def test_an_input_dim_that_is_a_sum_of_symbols_renders():
    """A fused node whose input has the dim `s1 + s2` (the mask of a dynamo-exported decoder: past + seq) renders
    (the plan's extent records took `s1,s2,+` for a symbol) and binds from the plain dims."""
    from plus_ep.kernels.render import render
    from plus_ep.kernels.target import Target
    from plus_ep.rewrite import rewrite_detailed
    g = Graph("expr_dim")
    g.input("Z", ["s0", "s1"])
    g.input("P", ["s0", "s2"])
    g.input("X", ["s0", "s1 + s2"])
    g.op("Add", g.op("Concat", "Z", "P", axis=1), g.op("Relu", "X"), out="Y")
    g.output("Y", ["s0", "s1 + s2"])
    r = rewrite_detailed(g.model(), archs=None)
    (sg,) = r.subgraphs
    ins, outs = r.view.graph_index.boundary(sg.nodes)
    rd = render(r.view, sg, ins, outs, Target("sm_80", "exact"), node_name="expr_dim")
    text = rd.plan.text()
    # X's first axis may broadcast at run time (it meets Z's in the Add): its own symbol, checked by a bcast record
    assert re.search(r"^in 2 1 2 s\d+ s1,s2,\+$", text, re.M) and "extent out 0" in text, text


def test_a_row_kernel_over_a_past_plus_seq_axis_renders():
    """Softmax over a mask-like axis of length `seq + past` (Optimum's spelling), the symbols bound by two other
    inputs: the plan binds them from those and records the extents without reading the sum as a symbol."""
    from plus_ep.kernels.render import render
    from plus_ep.kernels.target import Target
    from plus_ep.rewrite import rewrite_detailed
    g = Graph("row_expr_dim")
    g.input("ids", ["batch", "seq"])
    g.input("cache", ["batch", "past"])
    g.input("scores", ["batch", "past + seq"])
    full = g.op("Concat", "cache", "ids", axis=1)
    g.op("Softmax", g.op("Add", "scores", full), axis=-1, out="Y")
    g.output("Y", ["batch", "past + seq"])
    r = rewrite_detailed(g.model(), archs=None)
    for sg in r.subgraphs:
        ins, outs = r.view.graph_index.boundary(sg.nodes)
        rd = render(r.view, sg, ins, outs, Target("sm_80", "exact"), node_name="row_expr_dim")
        assert any("," in tok for _, dims in rd.plan.inputs for tok in dims), rd.plan.text()
