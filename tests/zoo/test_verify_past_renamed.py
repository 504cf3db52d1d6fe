"""`plus-ep verify --past N` on decoders whose exporter named the dims its own way (issue 39): the zoo's Qwen2
export with past key/values, its dims renamed as Optimum (past_sequence_length + sequence_length), onnxruntime-
genai (total_sequence_length) and the dynamo exporter without renaming (s0, s1, s2, s1 + s2) write them. The
default feeds must give the cache `past` rows, the mask past + seq columns and positions from `past` on, for every
N: the original runs on ORT CPU with them (fast), and verify passes through the kernels (`slow`)."""
from __future__ import annotations

import functools

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from plus_ep.feeds import check_feeds, sample_inputs

pytestmark = pytest.mark.zoo

NAMINGS = {
    "optimum": {"batch": "batch_size", "seq": "sequence_length", "past": "past_sequence_length",
                "past+seq": "past_sequence_length + sequence_length"},
    "genai": {"batch": "batch_size", "seq": "sequence_length", "past": "past_sequence_length",
              "past+seq": "total_sequence_length"},
    "dynamo": {"batch": "s0", "seq": "s1", "past": "s2", "past+seq": "s1 + s2"},
}


@functools.lru_cache(maxsize=None)
def renamed(naming: str) -> onnx.ModelProto:
    decoders = pytest.importorskip("plus_ep.zoo.decoders")
    m = onnx.load(str(decoders.export("qwen2", "torchscript", "small")))
    for vi in list(m.graph.input) + list(m.graph.output):
        for d in vi.type.tensor_type.shape.dim:
            if d.dim_param in NAMINGS[naming]:
                d.dim_param = NAMINGS[naming][d.dim_param]
    del m.metadata_props[:]                     # nothing the zoo wrote helps the feeds
    return m


@pytest.mark.parametrize("naming", sorted(NAMINGS))
def test_default_feeds_run_the_export_at_every_past(naming):
    m = renamed(naming)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for past in (0, 1, 4, 20):
        f = sample_inputs(m, batch=1, seq=8, past=past)
        check_feeds(m, f, source="the default inputs")
        assert f["attention_mask"].shape == (1, past + 8) and f["position_ids"].tolist() == [list(range(past, past + 8))]
        out = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, f)))
        assert out["present.0.key"].shape[2] == past + 8 and np.isfinite(out["logits"]).all()


@pytest.mark.slow
@pytest.mark.parametrize("naming", sorted(NAMINGS))
def test_verify_past_through_the_kernels(naming, tmp_path):
    import plus_ep
    r = plus_ep.rewrite_detailed(renamed(naming), archs=["sm_80"])
    assert not r.kernels.failures, r.kernels.failures
    path = tmp_path / f"qwen2-{naming}.plus.onnx"
    onnx.save(r.model, path)
    for past in (0, 4):
        rep = plus_ep.verify(str(path), past=past)
        assert rep["ok"], plus_ep.verify_text(rep)
