"""The one-kernel GEMM + LayerNorm through the whole production path: a rewritten f16 model with sm_80 and
sm_90a packs, run by `plus_ep.verify` on the emulated CUDA driver (the launcher binds M, picks the route
and launches the cluster kernel with a plain cuLaunchKernel; on sm_80 the one-launch GEMM whose last CTA
per row tile finishes the rows, its arrival words in launcher-allocated scratch). The residual sum is a graph output too, so the
regression of tests/emulated/test_gemm_residual_output.py is covered for the cluster path."""
from __future__ import annotations

from onnx import TensorProto

import plus_ep
from tests.support.gemm_norm_cases import norm_model


def test_cluster_kernel_through_the_launcher():
    model, _ = norm_model("batch", 200, 64, TensorProto.FLOAT16, sum_out=True)
    r = plus_ep.rewrite_detailed(model, archs=["sm_80", "sm_90a"])
    assert not r.kernels.failures, r.kernels.failures
    (node,) = [n for n in r.model.graph.node if n.domain == "ai.plus_ep"]
    plan = next(a.s.decode() for a in node.attribute if a.name == "plus_plan")
    sm90a = plan.split("arch sm_90a\n")[1]
    # the route model's routes for N = 200: row tiles over clusters of cdiv(200, BN) CTAs (4 at BN 64), one launch
    assert "plus_row" not in sm90a and {ln.split()[4] for ln in sm90a.splitlines() if ln.startswith("kernel")} <= {
        "4", "2", "1"}
    rep = plus_ep.verify(r.model, batch=37, stress=False)     # the model run: launches per arch below
    assert rep["ok"], plus_ep.verify_text(rep)
    runs = {(x["arch"], tuple(x["kernels"]), x["launches"]) for x in rep["nodes"]}
    # sm_80: the GEMM stores the row input to scratch and the last CTA of each row tile finishes those rows in
    # the same launch (route kind "one"); sm_90a: the cluster row tile
    assert runs == {("sm_80", ("plus_gemm",), 1), ("sm_90a", ("plus_gemm",), 1)}, runs
    assert "plus_row" not in plan.split("arch sm_90a\n")[0]
    for x in rep["nodes"]:
        assert x["executed"] and x["n_findings"] == 0 and len(x["outputs"]) == 2, x
