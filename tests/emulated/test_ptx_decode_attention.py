"""The attention template's KV-cache forms on the PTX interpreter (cases in
tests/support/decode_attention_cases.py): present written by the kernel (bit-exact copies of past and new
rows), grouped-query packing, split-KV with the combine kernel, past rows by cp.async, prefill and decode
shapes, a padded batch row whose keys are all masked; against a float64 reference within the bounds of
the plain attention tests, 0 checker findings."""
from __future__ import annotations

import numpy as np
import pytest

from tests.support.decode_attention_cases import CASES, run


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_decode_attention_on_interpreter(case):
    got, ref, bound, pres_k, k, pres_v, v, results = run(case)
    for r in results:
        assert not r.findings, "\n".join(map(str, r.findings[:5]))
    assert np.array_equal(pres_k, k), f"present K differs at {np.argwhere(pres_k != k)[:3].tolist()}"
    assert np.array_equal(pres_v, v), f"present V differs at {np.argwhere(pres_v != v)[:3].tolist()}"
    err = np.abs(got - ref)
    assert np.isfinite(got).all() and (err <= bound).all(), \
        f"max err {err.max()} (bound there {bound.flat[np.argmax(err - bound)]})"
    if case.dead_row:
        assert (got[1] == 0).all()
