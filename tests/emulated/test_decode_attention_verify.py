"""A KV-cache attention (tests/support/decoder_graphs.py) rewritten with kernels for sm_80 and sm_90a and
run through the launcher on the emulated driver (`plus_ep.verify`): prefill (past 0), decode at past 1
and a decode step long enough to split the keys (the combine kernel runs), fp32 (TF32) and fp16 with the
past copied by cp.async; present comes out of the attention kernel, equal to the graph's, and the output
is within verify's bounds. About 10 s per case on an idle 2-core machine."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto

import plus_ep
from plus_ep.rewrite import rewrite_detailed
from tests.support.decoder_graphs import kv_cache_attention, kv_cache_feeds


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    out = {}
    for name, dtype in (("fp32", TensorProto.FLOAT), ("fp16", TensorProto.FLOAT16)):
        path = tmp_path_factory.mktemp("kv") / f"kv_{name}.plus.onnx"
        res = rewrite_detailed(kv_cache_attention(8, 2, 32, dtype), archs=["sm_80", "sm_90a"])
        assert not res.kernels.failures, res.kernels.failures
        onnx.save(res.model, path)
        out[name] = path
    return out


@pytest.mark.parametrize("name,batch,seq,past,archs", [
    ("fp32", 2, 5, 0, ["sm_80"]),            # prefill: 4 heads per KV head x 5 queries = 20 rows, the general route
    ("fp32", 1, 1, 1, ["sm_90a"]),           # the first decode step
    ("fp32", 2, 1, 150, ["sm_80"]),          # split-KV: 3 splits of 64 keys, then the combine
    ("fp16", 2, 2, 90, ["sm_80", "sm_90a"]),  # f16 mma, past rows by cp.async, 2 splits
])
def test_cache_attention_kernels_on_the_interpreter(models, name, batch, seq, past, archs):
    dt = np.float16 if name == "fp16" else np.float32
    feeds = kv_cache_feeds(8, 2, 32, batch, seq, past, dtype=dt)
    rep = plus_ep.verify(str(models[name]), archs=archs, inputs=feeds)
    text = plus_ep.verify_text(rep)
    assert rep["ok"], text
    rows = [r for r in rep["nodes"] if r["node"] == "plus_ep/attention/0"]
    assert len(rows) == len(archs)
    for r in rows:
        assert r["executed"] and r["n_findings"] == 0, r
        assert "plus_pointwise0" not in r["kernels"], r["kernels"]          # present by the attention kernel
        assert ("plus_attention_combine" in r["kernels"]) == (past >= 90), r["kernels"]
        checked = {o["name"] for o in r["outputs"]}
        assert {"present_key", "present_value", "out"} <= checked, checked
