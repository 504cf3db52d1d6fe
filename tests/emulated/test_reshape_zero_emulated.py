"""A 0 in the shape tensor of a fused Reshape follows ONNX (issue 34's open finding): with allowzero 0
the Reshape copies its input's dim there, with allowzero 1 the 0 stays. GPT-2's TorchScript chain
Reshape(X2 @ W + B, Concat(Shape(mask), tail)) in both exports (X2's rows tied to batch*seq or not),
a 0 in each position of the shape tensor, allowzero both ways, a -1 the Reshape infers beside a 0, and
a 0 where the Reshape's input has no dim to copy; through ONNX Runtime with both front ends on the
emulated driver, ORT CPU on the original graph the oracle. Every run gives ORT's answer or one error
line naming the node with no launch; where ORT refuses, PlusEP refuses too.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from tests.support.emulated_runs import FRONT_ENDS, clean_launches, matches, oracle, run_cases  # noqa: E402
from tests.support.shapev_models import gpt2_like, gpt2_like_rows  # noqa: E402

NODE = "plus_ep/gemm/0"
WIDTH = 8            # the GEMM is [rows, 8] x [8, 24]: the Reshape's input is [rows, 24]

# (export, gpt2_like variant, [(X2 rows, mask shape, what PlusEP must do)]): "ran" = ORT's answer,
# "refused" = ORT refuses and so does PlusEP, "either" = ORT runs it and PlusEP gives ORT's answer or
# refuses naming the node and `--disable` (the rewrite took the -1 as 24 from X2's declared batch*seq).
CASES = [
    ("chain", {}, [(0, (65, 0), "refused"),    # the finding: [65, 0 -> 24, 24] from 0 elements
                   (5, (0, 1), "ran"),         # 0 -> X2 @ W's 5 rows: [5, 1, 24]
                   (48, (2, 0), "ran"),        # 0 -> 24: [2, 24, 24] from 48 rows
                   (0, (0, 5), "ran"),         # an empty batch: [0, 5, 24]
                   (0, (0, 0), "ran"),         # [0, 24, 24], empty
                   (6, (0, 6), "refused"), (6, (6, 0), "refused"), (6, (2, 3), "ran")]),
    ("rows", {}, [(0, (65, 0), "refused"), (5, (0, 1), "ran"), (48, (2, 0), "ran"), (6, (6, 0), "refused")]),
    ("chain", {"allowzero": 1}, [(0, (0, 5), "ran"), (5, (0, 1), "refused"), (48, (2, 0), "refused"),
                                 (0, (65, 0), "either")]),
    ("rows", {"allowzero": 1}, [(0, (65, 0), "ran"), (0, (0, 0), "ran"), (5, (0, 1), "refused")]),
    ("chain", {"tail": [-1]}, [(5, (0, 1), "ran"), (48, (2, 0), "ran"), (0, (0, 5), "refused"),
                               (6, (6, 0), "either"), (0, (65, 0), "either")]),
    ("rows", {"tail": [-1]}, [(5, (0, 1), "ran"), (48, (2, 0), "ran"), (6, (6, 0), "ran"), (0, (0, 5), "refused")]),
    ("rows", {"tail": [-1], "allowzero": 1}, [(6, (2, 3), "ran"), (0, (0, 0), "either"), (5, (0, 1), "refused")]),
    ("rows", {"tail": [], "mask_rank": 3}, [(5, (0, 1, 24), "ran"), (5, (5, 1, 0), "refused")]),
]


def _feeds(rows, mask, seed=1):
    rng = np.random.default_rng(seed)
    return {"X2": rng.standard_normal((rows, WIDTH)).astype(np.float32), "mask": np.ones(mask, np.int64)}


def _models(export, variant):
    make = gpt2_like if export == "chain" else gpt2_like_rows
    return make(WIDTH, **variant)


def test_a_zero_in_the_shape_tensor_is_what_onnx_reshape_makes_of_it(tmp_path):
    import plus_ep
    batches, originals = [], []
    for export, variant, runs in CASES:
        original = _models(export, variant)
        rewritten = plus_ep.rewrite_detailed(original, archs=["sm_80"], fp32_math="exact").model
        assert [n.op_type for n in rewritten.graph.node if n.domain == "ai.plus_ep"] == ["FusedHost1"], export
        batches.append((rewritten, [_feeds(rows, mask) for rows, mask, _ in runs]))
        originals.append(original)
    results = run_cases(tmp_path, batches)
    for (export, variant, runs), original, rows in zip(CASES, originals, results):
        for (n, mask, expect), row in zip(runs, rows):
            want, why = oracle(original, _feeds(n, mask))
            label = f"{export} {variant} X2 [{n}, {WIDTH}] mask {list(mask)}"
            assert (want is None) == (expect == "refused"), f"{label}: ORT says {why or 'runs'}"
            for how in FRONT_ENDS:
                res = row[how]
                if res["error"] is None:       # a result is ORT's, launched cleanly
                    assert expect != "refused" and matches(res["outputs"], want) is None, (
                        f"{label} {how}: {matches(res['outputs'], want) if want else 'ORT refuses: ' + why}")
                    assert clean_launches(res), (label, how, res["launches"])
                    continue
                err = res["error"]
                assert expect != "ran", f"{label} {how}: refused where ORT runs: {err}"
                ours = err[err.index(f"PlusEP node '{NODE}'"):]
                assert "\n" not in ours.strip() and res["launches"] == [], (label, how, ours)
                if expect == "either":
                    assert "--disable" in ours, (label, how, ours)
                if 0 in mask[:2] and variant.get("allowzero") != 1 and len(mask) == 2:
                    said = rf"element {mask.index(0)}( of input 0)? is 0, which the (original graph's )?Reshape"
                    assert re.search(said, ours), (label, how, ours)
                if len(mask) == 3:
                    assert "its input has no dim 2 to copy" in ours, (label, how, ours)
