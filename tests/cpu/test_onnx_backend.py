"""ONNX's backend test suite through the rewriter (tests/support/onnx_backend_suite.py): every model is
rewritten, run on ORT's CPU EP and compared with the shipped outputs, and every fused subgraph runs
through the +Graph interpreter. No crash, no mismatch, on every model the original passes on ORT.

The backend node tests come from Debian's libonnx-testdata (`apt-get install libonnx-testdata`);
without it the comprehensive test skips, unless PLUS_EP_REQUIRE_ONNX_TESTDATA=1 (CI), then fails.
The installed onnx's own node tests (generated in memory, newer opsets) and the wheel's model data
run as well. About 1.5 minutes on 2 cores (cases run in parallel processes; PLUS_EP_BACKEND_JOBS).
"""
from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("onnxruntime")

from plus_ep import config  # noqa: E402
from tests.support import onnx_backend_suite as suite  # noqa: E402


def test_backend_suite_rewrites_without_crash_or_mismatch():
    if not suite.debian_present():
        msg = (f"Debian's ONNX backend test data is missing ({suite.DEBIAN_DATA}): "
               "apt-get install libonnx-testdata")
        if config.get("PLUS_EP_REQUIRE_ONNX_TESTDATA") == "1":
            pytest.fail(msg + " (PLUS_EP_REQUIRE_ONNX_TESTDATA=1)")
        pytest.skip(msg)
    summary = suite.run_suite(generated_node=True)
    print("\n" + suite.format_summary(summary))
    c = summary["counts"]
    assert not summary["failures"], (
        f"{c['failed']} of {c['run']} backend cases fail (crashes {c['crashes']}, mismatches "
        f"{c['mismatches']}, interpreter {c['interpreter_failures']}):\n" + suite.format_failures(summary))

    # the suite really ran: enough cases of each source passed, and the rewriter fused things
    by = summary["by_source"]
    assert by["debian/node"]["passed"] > 800, by["debian/node"]
    assert by["onnx/node-generated"]["passed"] > 1200, by["onnx/node-generated"]
    assert by["onnx/real"]["passed"] == 9 and by["onnx/real"]["fused_nodes"] > 300, by["onnx/real"]
    assert by["onnx/pytorch-converted"]["passed"] > 50 and by["onnx/simple"]["passed"] > 10, by
    assert c["rewritten"] > 800 and c["fused_nodes"] > 1500, c
    assert c["subgraphs_passed"] > 0.95 * c["subgraphs"], c


# ---- the runner's own checks: a wrong answer must fail --------------------------------------
def _case_dir(tmp_path: Path, expected_scale: float = 1.0) -> suite.Case:
    """y = Relu(x + b) (fused into one elementwise subgraph), one data set on disk."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal((4,)).astype(np.float32)
    g = helper.make_graph([helper.make_node("Add", ["x", "b"], ["s"]), helper.make_node("Relu", ["s"], ["y"])],
                          "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
                          initializer=[numpy_helper.from_array(b, "b")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    d = tmp_path / "node" / "test_add_relu"
    (d / "test_data_set_0").mkdir(parents=True)
    onnx.save(model, d / "model.onnx")
    (d / "test_data_set_0" / "input_0.pb").write_bytes(numpy_helper.from_array(x).SerializeToString())
    y = np.maximum(x + b, 0) * np.float32(expected_scale)
    (d / "test_data_set_0" / "output_0.pb").write_bytes(numpy_helper.from_array(y).SerializeToString())
    (case,) = suite._cases_in(tmp_path, "tmp", "node")      # discovered like the real data
    return case


def test_compare_outputs_reports_differences():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert suite.compare_outputs([a], [a.copy()], 1e-3, 1e-7) is None
    assert "Mismatched" in suite.compare_outputs([a], [a + 1], 1e-3, 1e-7)
    assert suite.compare_outputs([a], [a.reshape(3, 2)], 1e-3, 1e-7)          # shape
    assert suite.compare_outputs([a], [a.astype(np.float64)], 1e-3, 1e-7)      # dtype
    assert suite.compare_outputs([a, a], [a], 1e-3, 1e-7)                     # count


def test_runner_fails_on_a_wrong_rewrite_and_a_wrong_interpreter(tmp_path, monkeypatch):
    case = _case_dir(tmp_path)
    rec = suite.run_case(case)
    assert rec["status"] == "passed" and rec["fused"] == 1, rec
    assert [s["status"] for s in rec["subgraphs"]] == ["passed"], rec

    # wrong expected output: the original fails too, so the case is a recorded skip
    wrong = _case_dir(tmp_path / "wrong", expected_scale=2.0)
    rec = suite.run_case(wrong)
    assert rec["status"] == "skipped" and rec["reason"].startswith(suite.ORIGINAL_FAILS), rec

    # a rewrite whose fused function computes something else: a mismatch, and the suite fails
    rw = importlib.import_module("plus_ep.rewrite")     # (plus_ep.rewrite is also a function)
    real = rw.rewrite_detailed

    def broken(model, *a, **kw):
        res = real(model, *a, **kw)
        for f in res.model.functions:
            for n in f.node:
                if n.op_type == "Add":
                    n.op_type = "Sub"
        return res
    monkeypatch.setattr(rw, "rewrite_detailed", broken)
    rec = suite.run_case(case)
    assert rec["status"] == "failed" and rec["reason"] == "mismatch: rewritten model", rec
    summary = suite.summarize([rec])
    assert summary["counts"]["failed"] == summary["counts"]["mismatches"] == 1
    assert "mismatch: rewritten model" in suite.format_failures(summary)
    monkeypatch.setattr(rw, "rewrite_detailed", real)

    # an interpreter that returns wrong values (and onnx.reference alone is right): a failure
    import plus_ep.graph_rewrites.interpret as interp
    run_subgraph = interp.run_subgraph
    monkeypatch.setattr(interp, "run_subgraph",
                        lambda *a, **kw: {t: v + 1 for t, v in run_subgraph(*a, **kw).items()})
    rec = suite.run_case(case)
    assert rec["status"] == "failed" and rec["reason"] == "interpreter mismatch", rec

    # an interpreter crash where onnx.reference runs the nodes fine: a failure, not a skip
    def crash(*a, **kw):
        raise KeyError("boom")
    monkeypatch.setattr(interp, "run_subgraph", crash)
    rec = suite.run_case(case)
    assert rec["status"] == "failed" and rec["reason"] == "interpreter crash", rec

    # a rewriter crash on a model ORT runs: a failure
    def raises(*a, **kw):
        raise RuntimeError("lowering bug")
    monkeypatch.setattr(rw, "rewrite_detailed", raises)
    rec = suite.run_case(case)
    assert rec["status"] == "failed" and rec["reason"] == "crash: rewrite raised", rec
