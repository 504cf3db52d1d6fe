"""The deployment recipes set up trust (docs/guide/trust.md), so a fresh machine runs their kernels
without PLUS_EP_TRUST=any; on the emulated CUDA driver, whose kernels execute on the PTX interpreter:

- docs/deploy/server.py, started on a machine whose trust manifest is empty, rebuilds the fused nodes at
  start, records them, and serves with the kernels; a request with inconsistent shapes (one symbolic dim,
  two values) and one ONNX Runtime refuses get 400 and the next good request is served right (the
  launcher's own shape refusals, issue 34 item 1, reach the client the same way: any error of the run
  is a 400);
- docs/deploy/triton/make_repository.py ships a manifest of exactly its kernels beside the model: with
  PLUS_EP_TRUST_DIR pointing there, ONNX Runtime with the custom-op library (what Triton's backend does)
  runs them on a fresh machine; without it, the session is refused naming a node.
No PLUS_EP_TRUST anywhere here."""
from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.support.graphs import Graph

ROOT = Path(__file__).resolve().parents[2]
SERVE = ROOT / "docs" / "deploy" / "server.py"

# a process whose launcher runs on the emulated driver, with the model's packs registered, then `argv`
EMULATED = r"""
import runpy, sys
import onnx
from plus_ep.verification.emulator import Emulator
emu = Emulator.get()
emu.set_arch("sm_80")
emu.register_model(onnx.load(sys.argv[1]))
sys.argv = sys.argv[2:]
if sys.argv[0] == "-c":
    code, sys.argv = sys.argv[1], sys.argv[1:]
    exec(compile(code, "<run>", "exec"), {"__name__": "__main__"})
else:
    runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _env(tmp_path, **extra):
    from plus_ep.verification.emulator import library_path
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PLUS_EP_", "FAKE_CUDA_"))}
    env.update(PLUS_EP_CUDA_LIBRARY=library_path(), PLUS_EP_TRUST_DIR=str(tmp_path / "fresh_manifest"),
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), **extra)
    return env


def two_input_model() -> onnx.ModelProto:
    rng = np.random.default_rng(5)
    g = Graph("two")
    g.input("X", ["B", "S", 32])
    g.input("M", ["B", "S", 32])
    g.op("Add", "X", "M", out="xm")
    g.op("LayerNormalization", "xm", g.init("g", (1 + 0.1 * rng.standard_normal(32)).astype(np.float32)),
         g.init("b", (0.1 * rng.standard_normal(32)).astype(np.float32)), out="ln", axis=-1, epsilon=1e-5)
    g.op("MatMul", "ln", g.init("W", (0.2 * rng.standard_normal((32, 32))).astype(np.float32)), out="mm")
    g.op("Add", "mm", g.init("B", (0.1 * rng.standard_normal(32)).astype(np.float32)), out="y")
    g.op("Relu", "y", out="Y")
    g.output("Y", ["B", "S", 32])
    return g.model()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(port, body):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("POST", "/infer", body=json.dumps(body), headers={"content-type": "application/json"})
    r = conn.getresponse()
    return r.status, json.loads(r.read())


def test_the_server_sets_up_trust_and_refuses_bad_shapes_then_serves(tmp_path, monkeypatch):
    pytest.importorskip("fastapi", reason="the server example needs the [serve] extra (fastapi, uvicorn)")
    pytest.importorskip("uvicorn", reason="the server example needs the [serve] extra (fastapi, uvicorn)")
    import onnxruntime as ort

    import plus_ep
    monkeypatch.setenv("PLUS_EP_TRUST_DIR", str(tmp_path / "build_machine"))        # rewritten elsewhere
    model = tmp_path / "two.plus.onnx"
    onnx.save(plus_ep.rewrite(two_input_model(), archs=["sm_80"], fp32_math="exact"), model)
    n_fused = sum(n.domain == "ai.plus_ep" for n in onnx.load(model).graph.node)
    assert n_fused >= 2
    port = free_port()
    log = tmp_path / "server.log"
    with open(log, "w") as logf:
        server = subprocess.Popen([sys.executable, "-c", EMULATED, str(model), str(SERVE), str(model), "--port",
                                   str(port), "--cpu"], stdout=logf, stderr=subprocess.STDOUT, env=_env(tmp_path),
                                  cwd=str(ROOT))
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("GET", "/health")
                assert conn.getresponse().status == 200
                break
            except OSError:
                assert server.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "server did not start: " + log.read_text()
                time.sleep(0.5)
        rng = np.random.default_rng(0)
        x, m = (rng.standard_normal((2, 5, 32)).astype(np.float32) for _ in range(2))

        def enc(a):
            return {"shape": list(a.shape), "dtype": "float32", "data": a.ravel().tolist()}
        status, bad = _post(port, {"inputs": {"X": enc(x), "M": enc(m[:, :3])}})
        assert status == 400 and bad["detail"] == ("inconsistent shapes: input X dim 1 (S) is 5 but input M dim 1 "
                                                   "(S) is 3"), bad
        status, bad = _post(port, {"inputs": {"X": enc(x[..., :16]), "M": enc(m[..., :16])}})
        assert status == 400 and "dim 2 is 16, the model declares 32" in bad["detail"], bad
        status, got = _post(port, {"inputs": {"X": enc(x), "M": enc(m)}})
        assert status == 200, got
        want = ort.InferenceSession(two_input_model().SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, {"X": x, "M": m})[0]
        y = np.asarray(got["outputs"]["Y"]["data"], np.float32).reshape(got["outputs"]["Y"]["shape"])
        assert y.shape == want.shape and np.max(np.abs(y - want)) <= 1e-4
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/health")
        assert json.loads(conn.getresponse().read())["requests"] == 1
    finally:
        server.terminate()
        server.wait(timeout=30)
    text = log.read_text()
    assert f"PlusEP trust: {model}: embedded kernels rebuilt here byte-identical ({n_fused} nodes" in text, text
    assert "run without a trust check" not in text
    assert len([p for p in (tmp_path / "fresh_manifest").rglob("*") if p.is_file()]) == n_fused


RUN = r"""
import json, sys
import numpy as np, onnxruntime as ort
import plus_ep
from plus_ep.demo_model import sample_inputs
so = ort.SessionOptions()
so.register_custom_ops_library(plus_ep.get_library_path())
feeds = sample_inputs(batch=2, seq=7, vocab=100)
try:
    got = ort.InferenceSession(sys.argv[1], so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
except Exception as e:
    print(json.dumps({"error": " ".join(str(e).split())}))
    sys.exit(0)
want = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"]).run(None, feeds)[0]
from plus_ep.verification.emulator import Emulator
print(json.dumps({"launches": len(Emulator.get().records), "maxdiff": float(np.max(np.abs(got - want))),
                  "scale": float(np.max(np.abs(want)))}))
"""


def test_the_triton_repository_ships_its_manifest(tmp_path):
    out = tmp_path / "repo"
    env = _env(tmp_path)
    env["PLUS_EP_TRUST_DIR"] = str(tmp_path / "build_machine")
    r = subprocess.run([sys.executable, str(ROOT / "docs" / "deploy" / "triton" / "make_repository.py"), str(out),
                        "--arch", "sm_80", "--library", "/opt/plus_ep/_launcher.so"], capture_output=True, text=True,
                       env=env, timeout=900, cwd=str(ROOT))
    assert r.returncode == 0, r.stdout + r.stderr
    repo = out / "plus_bert"
    model = repo / "1" / "model.onnx"
    n_fused = sum(n.domain == "ai.plus_ep" for n in onnx.load(model).graph.node)
    assert len([p for p in (repo / "trusted").rglob("*") if p.is_file()]) == n_fused > 0
    assert "-e PLUS_EP_TRUST_DIR=/models/plus_bert/trusted" in r.stdout

    def run(**extra):
        e = _env(tmp_path, PLUS_EP_CACHE_DIR=str(tmp_path / "container_cache"))   # a fresh container
        e.pop("PLUS_EP_TRUST_DIR")
        e.update(extra)
        p = subprocess.run([sys.executable, "-c", EMULATED, str(model), "-c", RUN, str(model)], capture_output=True,
                           text=True, env=e, timeout=600, cwd=str(ROOT))
        assert p.returncode == 0, p.stdout + p.stderr
        return json.loads(p.stdout.strip().splitlines()[-1])
    refused = run()
    assert "refusing its embedded kernel images" in refused.get("error", ""), refused
    ran = run(PLUS_EP_TRUST_DIR=str(repo / "trusted"))
    assert "error" not in ran, ran
    assert ran["launches"] >= n_fused and ran["maxdiff"] <= 2e-2 * max(1.0, ran["scale"]), ran   # TF32 GEMMs
