"""Issue 34 cases 1-3 rebuilt from their descriptions, through ONNX Runtime with both front ends (the
custom-op library's CPU twin and the PlusEP plugin EP) on the emulated driver: every run either matches
ORT CPU on the original graph or ends in one error line naming the node, and no kernel launch reaches
the PTX interpreter's bounds checker with a finding (a refused run launches nothing at all).

1. GPT-2's TorchScript chain Reshape(X2 @ W + B, Concat(Shape(mask), [96])) with inputs whose
   shape tensor does not describe X2 (6 rows against mask (1, 4) or (2, 100)), in the export that
   ties X2's rows to batch*seq and in the one that does not (`gpt2_like_rows`).
2. The same trusted node copied byte for byte into a graph whose shape input is a constant.
3. The node with its output, or one of its inputs, wired "".
"""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from tests.support.emulated_runs import clean_launches, matches, oracle, run_cases  # noqa: E402
from tests.support.shapev_models import gpt2_like, gpt2_like_rows  # noqa: E402

NODE = "plus_ep/gemm/0"

def _feeds(rows, mask, seed=1):
    rng = np.random.default_rng(seed)
    return {"X2": rng.standard_normal((rows, 32)).astype(np.float32), "mask": np.ones(mask, np.int64)}


def _copied_into_constant_graph(rewritten, shape):
    """Case 2: the rewritten FusedHost1 node and its function, byte for byte, in a new graph whose shape
    input is a constant initializer."""
    node = next(n for n in rewritten.graph.node if n.domain == "ai.plus_ep")
    inits = {i.name: i for i in rewritten.graph.initializer}
    g = helper.make_graph([node], "copied",
                          [helper.make_tensor_value_info("X2", TensorProto.FLOAT, ["r", 32])],
                          [helper.make_tensor_value_info(node.output[0], TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(np.array(shape, np.int64), node.input[0])]
                          + [inits[t] for t in node.input[2:]])
    m = helper.make_model(g, opset_imports=list(rewritten.opset_import), functions=list(rewritten.functions),
                          ir_version=rewritten.ir_version)
    return m


def _rewired(rewritten, where):
    """Case 3: the node with its output (where="out") or its bias input (where="in") wired ""."""
    m = onnx.ModelProto()
    m.CopyFrom(rewritten)
    node = next(n for n in m.graph.node if n.domain == "ai.plus_ep")
    if where == "in":
        node.input[3] = ""
    else:   # the graph keeps an output of its own: the shape tensor
        node.output[0] = ""
        del m.graph.output[:]
        m.graph.output.append(helper.make_tensor_value_info(node.input[0], TensorProto.INT64, [3]))
    from plus_ep import trust      # trust binds the wiring: vouch for the rewired node, so the launcher's own
    trust.record(trust.node_digest(node), "tests: a node rewired to \"\"")   # check is what answers
    return m


@pytest.fixture(scope="module")
def rewritten():
    import plus_ep
    return {name: plus_ep.rewrite_detailed(make(), archs=["sm_80"], fp32_math="exact").model
            for name, make in (("chain", gpt2_like), ("rows", gpt2_like_rows))}


def _refused(res, *words):
    err = res["error"]
    assert err is not None and f"PlusEP node '{NODE}'" in err, res
    ours = err[err.index("PlusEP node"):]
    assert "\n" not in ours.strip(), ours
    assert all(w in ours for w in words), ours
    assert res["launches"] == [], res["launches"]   # refused before any launch


def _ran(res, want):
    assert res["error"] is None, res["error"]
    assert res["launches"] and clean_launches(res), res["launches"]
    assert matches(res["outputs"], want) is None, matches(res["outputs"], want)


def test_cases_1_to_3_refuse_with_the_node_named_or_run_as_ort_does(tmp_path, rewritten):
    chain, rows = rewritten["chain"], rewritten["rows"]
    cases = [   # (model run with PlusEP, original model for the ORT CPU oracle, feeds)
        (chain, gpt2_like(), _feeds(6, (1, 4))),           # 1: 6 rows into a 4-row output
        (chain, gpt2_like(), _feeds(6, (2, 100))),         # 1: 0 rows (6/100)
        (chain, gpt2_like(), _feeds(6, (3, 2))),           # 1: consistent: runs
        (rows, gpt2_like_rows(), _feeds(6, (2, 100))),     # 1, second export: (2, 100, 96) with 6 rows
        (rows, gpt2_like_rows(), _feeds(6, (2, 3))),       # consistent: runs
        (chain, gpt2_like(), _feeds(25, (5, 1))),          # the mask's batch disagrees with X2's 25 rows
        (chain, gpt2_like(), _feeds(5, (0, 1))),           # a 0 the Reshape reads as X2's rows: ORT runs it
        (rows, gpt2_like_rows(), _feeds(5, (0, 1))),
    ]
    for shape in ([1, 4, 96], [2, 3, 96]):                 # 2: the node in a constant-shape graph
        m = _copied_into_constant_graph(chain, shape)
        cases.append((m, m, {"X2": _feeds(6, (1, 1))["X2"]}))
    results = run_cases(tmp_path, [(m, f) for m, _, f in cases])
    for (model, original, feeds), row in zip(cases, results):
        want, why = oracle(original, feeds)
        for how in ("custom_op", "plugin_ep"):
            if want is None:
                assert "cannot be reshaped" in why      # ORT CPU refuses these inputs too
                tied = "mask" in feeds and feeds["mask"].shape == (5, 1)   # refused by the shape tensor's element 0 (its `equal`)
                _refused(row[how], *(["element 0 of shape tensor"] if tied else ["cannot be reshaped"]))
            else:   # the 0s included: the Reshape copies X2's rows there (tests/emulated/test_reshape_zero_emulated.py)
                _ran(row[how], want)


def test_case_3_absent_wiring_is_refused_at_session_creation(tmp_path, rewritten):
    chain = rewritten["chain"]
    cases = [(_rewired(chain, "out"), _feeds(6, (2, 3))), (_rewired(chain, "in"), _feeds(6, (2, 3)))]
    out, inp = run_cases(tmp_path, cases)
    for how in ("custom_op", "plugin_ep"):
        _refused(out[how], 'output 0 is absent (wired "")')
    _refused(inp["plugin_ep"], 'input 3 is absent (wired "")')
    # ORT itself refuses a custom op's absent variadic input while loading, naming the node (the
    # launcher's own check, for a runtime that would not, is in tests/native/test_launch_bounds.py)
    err = inp["custom_op"]["error"]
    assert err and f"Node ({NODE})" in err and "is absent, but not optional" in err and not inp["custom_op"]["launches"]


def test_output_nobody_consumes_gets_a_temporary(tmp_path):
    """A fused node's second output that the rewritten graph no longer reads (nor returns): the plugin EP's
    fused node lacks it, so ONNX Runtime hands over no tensor for it; the launcher gives the kernels a
    temporary of its size (never a NULL dereference) and the other output is ORT's answer."""
    import plus_ep
    from tests.support.broadcast_models import FEEDS, gemm_residual
    original = gemm_residual()
    original.graph.output.append(helper.make_tensor_value_info("biased", TensorProto.FLOAT, None))
    r = plus_ep.rewrite_detailed(original, archs=["sm_80"], fp32_math="exact")
    node = next(n for n in r.model.graph.node if n.domain == "ai.plus_ep")
    assert "biased" in node.output and len(node.output) == 2, list(node.output)
    for model in (r.model, original):
        kept = [o for o in model.graph.output if o.name != "biased"]
        del model.graph.output[:]
        model.graph.output.extend(kept)
    feeds = dict(FEEDS["gemm_residual"])["equal"]
    row = run_cases(tmp_path, [(r.model, feeds)])[0]
    want, _ = oracle(original, feeds)
    for how in ("custom_op", "plugin_ep"):
        _ran(row[how], want)
