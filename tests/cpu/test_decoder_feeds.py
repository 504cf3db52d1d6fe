"""Inputs of a decoder exported with past key/values (Optimum's names): `sample_inputs(..., past=N)` gives
the KV cache N rows, the mask past + seq columns and positions counting on from the past; `plus-ep verify
--past` takes it (and refuses it with --inputs, which fix the shapes)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from plus_ep.cli import main
from plus_ep.feeds import sample_inputs
from tests.support.graphs import Graph


def _decoder_io():
    g = Graph("decoder_io")
    g.input("input_ids", ["batch", "seq"], TensorProto.INT64)
    g.input("attention_mask", ["batch", "past_sequence_length + sequence_length"], TensorProto.INT64)
    g.input("position_ids", ["batch", "seq"], TensorProto.INT64)
    g.input("past_key_values.0.key", ["batch", 2, "past_sequence_length", 16])
    g.op("Identity", "past_key_values.0.key", out="present.0.key")
    g.output("present.0.key", ["batch", 2, "past_sequence_length", 16])
    return g.model()


@pytest.mark.parametrize("batch,seq,past", [(2, 1, 20), (1, 6, 0)])
def test_sample_inputs_of_a_decode_step(batch, seq, past):
    m = _decoder_io()
    f = sample_inputs(m, batch=batch, seq=seq, past=past)
    assert f["input_ids"].shape == (batch, seq)
    assert f["attention_mask"].shape == (batch, past + seq)
    assert f["past_key_values.0.key"].shape == (batch, 2, past, 16)
    np.testing.assert_array_equal(f["position_ids"], np.broadcast_to(np.arange(past, past + seq), (batch, seq)))


def test_verify_past_with_inputs_is_a_usage_error(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    path.write_bytes(_decoder_io().SerializeToString())
    assert main(["verify", str(path), "--past", "3", "--inputs", str(tmp_path / "x.npz")]) == 2
    assert "--inputs fixes the shapes" in capsys.readouterr().err
    assert main(["verify", str(path), "--past", "-1"]) == 2
