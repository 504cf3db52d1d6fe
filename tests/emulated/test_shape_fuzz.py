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


def test_out_of_range_gather_index_gives_cuda_zeros_not_a_silent_row(tmp_path):
    """ORT CPU refuses a Gather index past the data; ORT's CUDA Gather and PlusEP's kernels read zeros
    there. The fuzzer counts such a run only when its outputs are ORT CPU's on the model whose data has
    a zero row the out-of-range indices are sent to (shape_fuzz.zero_row_oracle); any other value is a
    finding."""
    import numpy as np
    from tests.support.emulated_runs import run_cases
    (p,) = shape_fuzz.prepare(only=["t5_rmsnorm"])
    rows = p.gather_range["ids"]
    feeds = [{"ids": np.array([[3, rows], [rows + 1, 0]], np.int64)}, {"ids": np.array([[1, rows - 1]], np.int64)}]
    (results,) = run_cases(tmp_path, [(p.rewritten, feeds)])
    for f, row in zip(feeds, results):
        want, why = shape_fuzz.oracle(p.original, f)
        zero_want, _ = shape_fuzz.zero_row_oracle(p, f)
        assert (want is None) == (zero_want is not None), (why, f)
        if zero_want is not None:
            assert "out of data bounds" in why, why
            assert not np.any(zero_want[0][0, 1]) and np.any(zero_want[0][0, 0]), zero_want[0]   # zeros where out of range
        for how, res in row.items():
            cat, detail = shape_fuzz.classify(p, f, res, want, why, zero_want)
            assert cat == ("gather_oob_as_cuda" if want is None else "match"), (how, cat, detail)
