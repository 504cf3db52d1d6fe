"""How the shape-adversarial fuzzer's long run shares its time (tests/support/shape_fuzz.py): each model an
equal share of a batch at what its launching runs cost so far (a refused run's cost says nothing), a model
whose run exceeds its share running when its saved shares cover one run; and how it draws symbols (small
ones, at most two one past a tile)."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")

from tests.support import shape_fuzz  # noqa: E402


def _models(*names):
    return [shape_fuzz.Prepared("f", n, None, b"", [], 4096, 1e-4) for n in names]


def test_each_model_gets_an_equal_share_and_a_costly_one_waits():
    prepared = _models("cheap", "mid", "costly")
    stats = shape_fuzz._new_stats()
    assert shape_fuzz.budget_runs(prepared, stats, 30) == {"cheap": 2, "mid": 2, "costly": 2}   # not run yet
    stats["runs_by_model"] = {"cheap": 4, "mid": 2, "costly": 2}
    stats["launching_runs_by_model"] = {"cheap": 4, "mid": 2}
    stats["seconds_by_model"] = {"cheap": 0.4, "mid": 4.0, "costly": 0.001}   # costly: refused twice, nothing launched
    assert shape_fuzz.budget_runs(prepared, stats, 30)["costly"] == 2           # not 40 runs at a refusal's cost
    stats["credit_by_model"] = {}
    stats["runs_by_model"]["costly"] = 3
    stats["launching_runs_by_model"]["costly"] = 1
    stats["seconds_by_model"]["costly"] = 25.0                                    # 0.1 s, 2 s, 25 s a run
    ran = {"cheap": 0, "mid": 0, "costly": 0}
    for _ in range(10):                                       # ten batches of 30 s: 10 s a model each
        for name, n in shape_fuzz.budget_runs(prepared, stats, 30, most=40).items():
            ran[name] += n
    assert ran["cheap"] == 10 * 40                            # capped at `most` a batch
    assert ran["mid"] == 10 * 5
    assert ran["costly"] == 4                                 # 100 s of shares over 25 s runs


def test_symbols_are_small_with_at_most_two_past_a_tile():
    rng = np.random.default_rng(0)
    names = ["a", "b", "c"]
    past = [sum(v in shape_fuzz.PAST_TILE for v in shape_fuzz._symbol_values(names, rng).values())
            for _ in range(2000)]
    assert max(past) <= 2 and 0.2 < np.mean([p > 0 for p in past]) < 0.5, np.bincount(past)
    assert all(set(shape_fuzz._symbol_values(names, rng).values()) <= set(shape_fuzz.SMALL + shape_fuzz.PAST_TILE)
               for _ in range(200))
