"""The axis_softmax family (softmax / log-softmax over a middle axis, one thread per column): its kernels,
compiled by NVRTC and executed on the CPU PTX interpreter, against float64 numpy and ONNX Runtime CPU on the
original graph (outputs poisoned first, so an element the kernel leaves unwritten fails); and a model using it
rewritten with kernels and run through the launcher on the emulated driver (`plus-ep verify`)."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from plus_ep.kernels.render import render
from plus_ep.kernels.target import Target
from plus_ep.rewrite import rewrite_detailed
from plus_ep.verification.check import verify
from tests.support.axis_softmax_models import F16, F32, NP, axis_model, reference
from tests.support.run_rendered import run_rendered

def _run(model, feeds, name):
    r = rewrite_detailed(model)
    assert [s.pattern.family.name for s in r.subgraphs] == ["axis_softmax"], [s.pattern.name for s in r.subgraphs]
    (sg,) = r.subgraphs
    ins, outs = r.view.graph_index.boundary(sg.nodes)
    rd = render(r.view, sg, ins, outs, Target("sm_80", "exact"), node_name=name)
    assert [lc.entry for lc in rd.plan.routes[0].launches][0] == "plus_axis_softmax"
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(outs, feeds)
    inputs = [feeds[t] if t in feeds else np.asarray(r.view.const(t)) for t in ins]
    return run_rendered(rd, inputs, want, name=name), want, outs


CASES = [("Softmax", (2, 8, 3, 5), 1, F32, False), ("LogSoftmax", (2, 4, 16, 7), 2, F32, False),
         ("Softmax", (6, 33), 0, F32, False), ("Softmax", (3, 40, 9), 1, F32, True),
         ("LogSoftmax", (2, 5, 6, 4), 1, F16, True)]


@pytest.mark.parametrize("op,shape,axis,dtype,neighbours", CASES,
                         ids=["channels", "dfl-log", "leading", "neighbours", "f16-log-neighbours"])
def test_kernel_matches_float64_and_ort(op, shape, axis, dtype, neighbours):
    x = (np.random.default_rng(len(shape) + axis).standard_normal(shape) * 3).astype(NP[dtype])
    (got,), (want,), _ = _run(axis_model(op, shape, axis, dtype, neighbours), {"X": x}, f"axis_{op}_{axis}")
    ref = reference(op, x, axis, neighbours)
    assert got.shape == ref.shape and got.dtype == NP[dtype]
    if dtype == F32:     # three fp32 roundings per element (exp, sum, divide or log) on values of size ~10
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    else:                # fp16 input and output: the float64 result rounded once, plus fp32 math before it
        np.testing.assert_allclose(got.astype(np.float64), ref, rtol=2 ** -10, atol=2 ** -9)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_non_finite_columns_as_ort(op):
    """A column holding NaN, one of -inf, one with a single +inf and one with a single -inf: what ORT CPU gives,
    NaN where it gives NaN (the outputs start poisoned, so an unwritten NaN would fail)."""
    x = np.random.default_rng(7).standard_normal((2, 6, 4)).astype(np.float32)
    x[0, 2, 1] = np.nan
    x[0, :, 3] = -np.inf
    x[1, 4, 0] = np.inf
    x[1, 1, 2] = -np.inf
    (got,), (want,), _ = _run(axis_model(op, x.shape, 1), {"X": x}, f"axis_{op}_nonfinite")
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got[~np.isnan(want)], want[~np.isnan(want)], rtol=1e-5, atol=1e-6)
    assert np.isnan(got[0, :, 1]).all() and np.isnan(got[0, :, 3]).all()


def test_model_runs_through_the_launcher_on_the_emulated_driver(tmp_path):
    """A symbolic-batch channel softmax with neighbours and a side output, rewritten with kernels for sm_80 and
    run through the launcher on the emulated driver: every fused node matches ORT CPU (plus-ep verify)."""
    model = axis_model("Softmax", ["batch", 12, 5, 7], 1, neighbours=True, side=True)
    r = rewrite_detailed(model, archs=["sm_80"], progress=False)
    assert r.kernels.failures == []
    fused = [nd for nd in r.model.graph.node if nd.domain == "ai.plus_ep"]
    assert [nd.name.split("/")[1] for nd in fused] == ["axis_softmax"]
    path = tmp_path / "axis.onnx"
    onnx.save(r.model, path)
    feeds = {"X": np.random.default_rng(3).standard_normal((3, 12, 5, 7)).astype(np.float32)}
    rep = verify(path, inputs=feeds, progress=False)
    assert rep["ok"], rep
    assert rep["summary"]["executed"] == len(fused) and rep["summary"]["findings"] == 0
    assert {o["name"] for o in rep["outputs"]} == {"Y", "Xh"}
