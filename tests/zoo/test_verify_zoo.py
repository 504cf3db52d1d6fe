"""Acceptance of `plus-ep verify` on the model zoo (slow: every kernel runs on the CPU PTX interpreter;
skipped unless PLUS_EP_SLOW_TESTS=1, so not in CI — `bench/runs/verify_emulated.py` runs the same matrix and records it in bench/results/):
the 12 small exports at 2 layers, fp32 exact, fp32 with TF32 GEMMs and fp16 (ORT's float16
converter), images for sm_80 and sm_90a: every fused node executes, 0 mismatches, 0 checker findings."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.zoo, pytest.mark.slow]
pytest.importorskip("torch")

from tests.support.zoo_models import CASES  # noqa: E402

MODES = ["exact", "tf32", "fp16"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("family,exporter", CASES)
def test_verify_zoo(family, exporter, mode, tmp_path):
    import json

    from bench.runs.verify_emulated import main
    out = tmp_path / "verify.json"
    main(["--models", f"{family}-{exporter}", "--modes", mode, "--out", str(out)])
    (run,) = json.loads(out.read_text())["runs"]
    assert run.get("error") is None, run.get("error")
    s = run["summary"]
    assert s["rows"] == 2 * run["fused"] and s["executed"] == s["rows"], s
    assert s["mismatches"] == 0 and s["findings"] == 0 and s["output_mismatches"] == 0, s
    assert run["ok"], run["errors"]
