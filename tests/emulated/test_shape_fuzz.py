"""CI smoke run of the shape-adversarial fuzzer (tests/support/shape_fuzz.py; issue 34 item 3): one model
of every template family (point-wise, row, GEMM with epilogues, gated, grouped, nbits, attention with a
mask, past keys and GQA, FusedHost shape tensors), two runs each through both front ends on the emulated
driver with shapes admitted, broadcast and outside what the model admits, in turn. Nothing the
interpreter's checkers report, no crash, no wrong shape or value: every run is ORT CPU's answer or a
refusal naming the node. The long run: `python -m tests.support.shape_fuzz` (bench/results/*-shape-fuzz.json)."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("onnxruntime")

from tests.support import shape_fuzz  # noqa: E402

SMOKE = ["add", "layernorm_sum", "gemm_residual", "gated_pair", "qkv", "gated_nbits", "kv_cache_gqa", "gpt2_chain"]


def test_shape_fuzz_smoke(tmp_path):
    prepared = shape_fuzz.prepare(only=SMOKE)
    assert {p.family for p in prepared} == set(shape_fuzz.FAMILIES) - {"bert"}, [p.family for p in prepared]
    stats = shape_fuzz.fuzz(tmp_path, prepared, runs=2, seed=7, modes=["admitted", "broadcast", "outside"])
    assert not stats["findings"], json.dumps(stats["findings"], indent=1)
    assert stats["runs"] == 2 * 2 * len(SMOKE) and stats["node_runs"] >= 2 * len(SMOKE), stats
    fams = stats["families"]
    assert sum(f["match"] for f in fams.values()) >= len(SMOKE), fams     # most runs compute something
    assert sum(f["refused_as_ort"] for f in fams.values()) >= 1, fams     # and some are refused as ORT refuses
