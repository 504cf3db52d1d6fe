"""`plus-ep verify` with its defaults on a GPT-2-style embedding whose positions reach a 16-row position table
through Cast and Reshape (issue 39: the default feeds drew position ids from the vocabulary, index 850 of 512, and
verify crashed), and on a model its default shapes cannot run, which it says in one line."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

import plus_ep
from tests.support.graphs import Graph

I64 = TensorProto.INT64


def gpt2_embedding_ln(positions_input: bool = True):
    rng = np.random.default_rng(0)
    g = Graph("gpt2_embedding")
    g.input("input_ids", ["batch", "seq"], I64)
    g.init("wte", rng.standard_normal((50, 32)).astype(np.float32))
    g.init("wpe", rng.standard_normal((16, 32)).astype(np.float32))
    g.init("gamma", (1 + 0.1 * rng.standard_normal(32)).astype(np.float32))
    g.init("beta", (0.1 * rng.standard_normal(32)).astype(np.float32))
    if positions_input:
        g.input("pos", ["batch", "seq"], I64)
        g.init("shape", np.array([-1, 0], np.int64))
        p = g.op("Reshape", g.op("Cast", "pos", to=I64), "shape")
    else:                     # positions Range(0, seq): the table bounds the sequence itself
        g.init("zero", np.array(0, np.int64))
        g.init("one", np.array(1, np.int64))
        g.init("i1", np.array([1], np.int64))
        g.init("i2", np.array([2], np.int64))
        seq = g.op("Squeeze", g.op("Slice", g.op("Shape", "input_ids"), "i1", "i2"))
        p = g.op("Range", "zero", seq, "one")
    h = g.op("Add", g.op("Gather", "wte", "input_ids"), g.op("Gather", "wpe", p))
    g.op("LayerNormalization", h, "gamma", "beta", axis=-1, epsilon=1e-5, out="Y")
    g.output("Y", ["batch", "seq", 32])
    return g.model()


def _rewrite(model):
    r = plus_ep.rewrite_detailed(model, archs=["sm_80"], fp32_math="exact")
    assert not r.kernels.failures and r.subgraphs, r.kernels.failures
    return r.model


def test_verify_defaults_on_positions_through_reshape():
    rep = plus_ep.verify(_rewrite(gpt2_embedding_ln()))
    assert rep["ok"], plus_ep.verify_text(rep)
    assert rep["inputs"]["pos"]["shape"] == [1, 8]


def test_verify_defaults_stop_at_the_position_table():
    """Positions Range(0, seq) into 16 rows: the multi-tile stress shapes end before seq 17 instead of crashing,
    and a sequence the table cannot hold is one line naming the model's refusal, not an internal error."""
    model = _rewrite(gpt2_embedding_ln(positions_input=False))
    rep = plus_ep.verify(model)
    assert rep["ok"], plus_ep.verify_text(rep)
    rep = plus_ep.verify(model, batch=1, seq=40)
    assert not rep["ok"]
    (err,) = rep["errors"]
    assert "does not run on these inputs" in err and "--inputs" in err, err
