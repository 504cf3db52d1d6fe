"""NaN and infinity in row kernels (kernels/codegen/row.py) against onnxruntime 1.31 CPU, on the CPU PTX interpreter.

What onnxruntime does with a row [.., NaN, ..] (checked for every position of rows of 8 to 1000, reducing
the last, first, middle and several axes):
- ReduceMax / ReduceMin: NaN when the row's first element is NaN (and so for an all-NaN row); a NaN
  anywhere else is skipped (nanmax/nanmin) in almost every position; in a few its vectorised loop
  returns another element (implementation-defined), which no kernel can follow. The row kernel skips NaN
  in its passes (fmaxf/fminf) and lets the first element decide.
- ReduceLogSumExp: NaN for any NaN; an infinite max is replaced by 0 (all -inf -> -inf, a +inf -> +inf,
  where max + log(sum(exp(x - max))) gives NaN).
- Softmax / LogSoftmax: any NaN or +inf makes the row NaN (the sum of exponentials carries it).
The warehouse has no ReduceMax/ReduceMin pattern today, so the subgraph is rendered with the row
template directly (as the `row_reduction` pattern's would be) and run on the interpreter."""
from __future__ import annotations

import types

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from plus_ep.kernels.render import render
from plus_ep.rewrite import rewrite_detailed
from plus_ep.warehouse import default_warehouse
from plus_ep.kernels.target import Target
from tests.support.run_rendered import run_rendered

R, L = 6, 40
OUT = ("A", "B", "C", "D")


def _model(axis):
    """A = X - max, B = X - min, C = X - logsumexp, D = softmax, reducing `axis` of X ([R, L] for the last
    axis, [L, R] for axis 0: a strided row)."""
    n = helper.make_node
    shape = [R, L] if axis == -1 else [L, R]
    nodes = [n("ReduceMax", ["X", "ax"], ["mx"], keepdims=1), n("ReduceMin", ["X", "ax"], ["mn"], keepdims=1),
             n("ReduceLogSumExp", ["X", "ax"], ["lse"], keepdims=1),
             n("Sub", ["X", "mx"], ["A"]), n("Sub", ["X", "mn"], ["B"]), n("Sub", ["X", "lse"], ["C"]),
             n("Softmax", ["X"], ["D"], axis=axis)]
    g = helper.make_graph(nodes, "nan_rows", [helper.make_tensor_value_info("X", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info(t, TensorProto.FLOAT, shape) for t in OUT],
                          [numpy_helper.from_array(np.array([axis], np.int64), "ax")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


def _rows() -> np.ndarray:
    x = np.random.default_rng(0).standard_normal((R, L)).astype(np.float32)
    x[0, 0] = np.nan                      # first element NaN: max/min NaN
    x[1, 17] = np.nan                     # NaN inside the row: skipped by max/min
    x[2, :] = np.nan                      # all NaN
    x[3, :] = -np.inf                     # all -inf: logsumexp -inf
    x[4, 0], x[4, 3] = np.inf, -np.inf    # +inf: logsumexp +inf, softmax NaN
    return x                              # row 5: finite


@pytest.mark.parametrize("axis", [-1, 0])
def test_row_reductions_follow_onnxruntime_on_nan_and_inf(axis):
    model = _model(axis)
    r = rewrite_detailed(model, archs=None)
    pattern = next(p for p in default_warehouse().patterns if p.name == "row_reduction")
    sg = types.SimpleNamespace(nodes=tuple(range(len(r.view.nodes))), pattern=pattern, pgraph=None, roles=None)
    ins, outs = r.view.graph_index.boundary(sg.nodes)
    assert (ins, outs) == (["X", "ax"], list(OUT))
    rd = render(r.view, sg, ins, outs, Target("sm_80", "exact"), node_name="nan_rows")
    assert [e for v in rd.variants for e in v.entries] == ["plus_row"]      # one row kernel computes all four

    x = _rows()                                     # row i is x[i] (axis -1) or x[:, i] (axis 0)
    feed = x if axis == -1 else np.ascontiguousarray(x.T)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"X": feed})
    got = run_rendered(rd, [feed, np.array([axis], np.int64)], want, name=f"nan_rows{axis}")
    got, want = ({t: (a if axis == -1 else a.T) for t, a in zip(OUT, arrs)} for arrs in (got, want))

    # onnxruntime's well-defined rows: everything but A/B of row 1 (NaN inside the row)
    well_defined = {"A": [0, 2, 3, 4, 5], "B": [0, 2, 3, 4, 5], "C": range(R), "D": range(R)}
    for t, rows in well_defined.items():
        for i in rows:
            np.testing.assert_allclose(got[t][i], want[t][i], rtol=1e-5, atol=1e-5, equal_nan=True,
                                       err_msg=f"output {t}, row {i}")
    # the NaN first: the whole row of x - max(x) is NaN (fmaxf alone gave x - nanmax)
    assert np.isnan(got["A"][0]).all() and np.isnan(got["B"][0]).all()
    # a NaN inside the row is skipped (what onnxruntime gives in almost every position)
    for t, f in (("A", np.nanmax), ("B", np.nanmin)):
        np.testing.assert_allclose(got[t][1], x[1] - f(x[1]), rtol=1e-6, atol=1e-6, equal_nan=True)
        assert np.isnan(got[t][1]).sum() == 1
    # +inf in the row: logsumexp is +inf, so x - lse is -inf for the finite x (NaN before the fix)
    assert np.isneginf(got["C"][4][1:3]).all() and np.isnan(got["D"][4]).all()
