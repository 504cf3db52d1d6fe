"""The client libraries people already use, with PlusEP on the emulated CUDA driver, on tiny local models
(tests/support/client_models.py: random weights from transformers configs, exported by Optimum; no hub
download): sentence-transformers (`backend="onnx"`, `model_kwargs={"provider": "PlusEP"}`), Optimum
(`ORTModelForFeatureExtraction`; `ORTModelForCausalLM.generate` with past key values, left padding) and
onnxruntime-genai (`register_execution_provider_library`, `Config.append_provider("PlusEP")`).

Each run is a fresh process of the clients' interpreter (PLUS_EP_CLIENTS_PYTHON: Optimum caps transformers
below 4.58, so CI installs the clients in their own virtual environment, see docs/developer/testing.md, "Client libraries")
that runs the client on ORT's CPU provider, then through PlusEP, and must exit 0 with nothing but warnings
on stderr (the emulated driver once crashed at interpreter exit after such runs). Checked: kernels ran on
the PTX interpreter (its launch records) without error or checker finding; embeddings within the model
tolerance of the launched kernels' math (plus_ep/verification/tolerances.py); generated tokens identical.
Each run takes tens of seconds on a 2-core machine (imports, the planner's rewrite, the interpreter);
PLUS_EP_SLOW_TESTS=1 adds 20 consecutive runs."""
from __future__ import annotations

import pytest

from tests.support import client_models

PY = client_models.clients_python()


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    gaps = {m: why for m in ("optimum.onnxruntime", "sentence_transformers") if (why := client_models.missing(PY, m))}
    if gaps:
        pytest.skip(f"{PY} lacks the client libraries ({gaps}); see docs/developer/testing.md (Client libraries)")
    out = tmp_path_factory.mktemp("clients")
    client_models.build(out, PY)
    return out


def _run(kind: str, out) -> dict:
    if (why := client_models.missing(PY, client_models.KINDS[kind])):
        pytest.skip(f"{PY}: {why}")
    r, res = client_models.run(kind, out, PY)
    assert r.returncode == 0, f"exit {r.returncode} (a crash at exit is a failure)\n{r.stderr[-5000:]}"
    bad = [ln for ln in r.stderr.splitlines() if any(w in ln for w in ("Exception ignored", "Traceback",
                                                                        "Segmentation", "Fatal Python"))]
    assert not bad, r.stderr[-5000:]
    assert res and res["launches"] > 0 and res["nodes"], res      # PlusEP's kernels ran on the interpreter
    assert not res["errors"], res["errors"]
    return res


def test_sentence_transformers_onnx_backend(models):
    res = _run("st", models)
    assert res["shape"] == [len(client_models.SENTENCES), 32]
    assert res["max_abs"] <= res["tol"] and res["min_cos"] > 0.9999, res
    assert len(res["nodes"]) >= 5, res["nodes"]   # LayerNorm, QKV, attention, out-proj+LN, FFN (+LN)


def test_optimum_feature_extraction(models):
    res = _run("optimum", models)
    assert res["shape"][0] == len(client_models.SENTENCES) and res["shape"][2] == 32
    assert res["max_abs"] <= res["tol"], res
    assert len(res["nodes"]) >= 5, res["nodes"]


def test_optimum_causal_lm_generate_with_past(models):
    res = _run("generate", models)
    assert res["tokens"] == res["want"], res
    assert all(len(row) == 6 + 8 for row in res["tokens"])
    # each of the 8 decode steps runs through every node's kernels (the prefill may skip a launch over an empty
    # past: zero-size tensors launch nothing)
    assert all(n >= 8 for n in res["per_node"].values()), res["per_node"]


def test_onnxruntime_genai_append_provider(models):
    res = _run("genai", models)
    assert res["tokens"] == res["want"], res
    assert len(res["tokens"]) == 6 + 8


@pytest.mark.slow
def test_twenty_consecutive_client_runs_exit_0(models):
    kinds = ["st", "optimum", "generate", "genai"] * 5
    for i, kind in enumerate(kinds):
        r, res = client_models.run(kind, models, PY)
        assert r.returncode == 0 and res is not None, f"run {i + 1} ({kind}): exit {r.returncode}\n{r.stderr[-3000:]}"
