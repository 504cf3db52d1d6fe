"""Run-time broadcasting through the kernels (issue 37, item 4): dims the rewrite took as equal (one symbol
after ONNX Runtime's shape inference merged them) where ONNX broadcasts a size-1 dim against N at run time.
Each model of tests/support/broadcast_models.py is rewritten with real kernels and run through both front
ends on the emulated driver (kernels on the PTX interpreter, bounds and race checkers on): every run gives
ORT CPU's answer on the original graph, shape and values, or, where ORT refuses the inputs, one error line
naming the node and nothing is launched. Element-wise (`x + z`, `Concat(p, q) + z`), GEMM-epilogue (a
residual) and row (LayerNorm, Softmax) subgraphs; 0 against 1 gives an empty output and no launch.
`gemm_concat` and a Concat over batch 1 in `concat_add` hold the one kind the kernels refuse although ORT
runs it: a computed operand (the GEMM's result over 1 row, the Concat) broadcast against a larger one
(kernels/CONTRACT.md §3); that refusal names the node and the `--disable` way out, does not say ORT
refuses, and launches nothing."""
from __future__ import annotations

import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from plus_ep.kernels.wire.plan import parse  # noqa: E402
from tests.support.broadcast_models import FEEDS, MODELS  # noqa: E402
from tests.support.emulated_runs import FRONT_ENDS, clean_launches, matches, oracle, run_cases  # noqa: E402

# which input axes each model's fused node reads with stride 0 when they are 1 ({node pattern: {(input, axis)}})
BROADCAST_AXES = {"add": {(0, 0), (0, 1), (1, 0), (1, 1)}, "add_same": {(0, 0), (0, 1), (1, 0), (1, 1)},
                  "concat_add": {(2, 0), (2, 1)}, "gemm_concat": set(), "gemm_residual": {(3, 0), (3, 1)},
                  "layernorm_sum": {(0, 0), (0, 1), (1, 0), (1, 1)},
                  "softmax_sum": {(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)}}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    import plus_ep
    rewritten, cases = {}, []
    for name, make in MODELS.items():
        r = plus_ep.rewrite_detailed(make(), archs=["sm_80"], fp32_math="exact")
        assert not r.kernels.failures, r.kernels.failures
        rewritten[name] = r.model
        cases.append((r.model, [f for _, f in FEEDS[name]]))
    results = run_cases(tmp_path_factory.mktemp("broadcast"), cases)
    return rewritten, dict(zip(MODELS, results))


def _fused(model):
    nodes = [n for n in model.graph.node if n.domain == "ai.plus_ep"]
    assert len(nodes) == 1, [n.op_type for n in model.graph.node]
    return nodes[0], parse(next(a.s.decode() for a in nodes[0].attribute if a.name == "plus_plan"))


@pytest.mark.parametrize("name", list(MODELS))
def test_broadcast_runs_as_ort_or_is_refused_as_ort_refuses(runs, name):
    rewritten, results = runs
    node, plan = _fused(rewritten[name])
    assert {(i, d) for i, d, _ in plan.bcast} == BROADCAST_AXES[name], plan.text()
    for (label, feeds), row in zip(FEEDS[name], results[name]):
        want, why = oracle(MODELS[name](), feeds)
        for how in FRONT_ENDS:
            res = row[how]
            if want is None or label.endswith("(refused)"):   # refused, naming the node, before any launch
                assert want is not None or "Attempting to broadcast" in why, why
                err = res["error"] or ""
                assert f"PlusEP node '{node.name}'" in err, (label, how, res)
                assert "\n" not in err[err.index("PlusEP node"):].strip() and not res["launches"], (label, how, res)
                if want is None:
                    assert ("neither equal nor 1" if plan.bcast else "as one dim") in err, err
                else:   # ORT runs these: the refusal names the way out and does not say ORT refuses them
                    assert "--disable" in err and "ONNX Runtime too" not in err and "refuses these inputs" not in err, err
            else:
                assert res["error"] is None, (label, how, res["error"])
                empty = all(w.size == 0 for w in want)        # 0 against 1 broadcasts to 0: nothing to launch
                assert bool(res["launches"]) != empty and clean_launches(res), (label, how, res["launches"])
                assert matches(res["outputs"], want) is None, (label, how, matches(res["outputs"], want))
