"""The Python server example (docs/deploy/server.py) under load on localhost: one uvicorn process holding
one ORT session with PlusEP's custom-op library, 1,000 requests from 8 concurrent clients, no error,
every output bit-identical to an in-process run of the same model. The model is a small rewritten
LayerNorm -> MatMul -> Gelu block with kernels for sm_80; no CUDA driver here, so the library warns once
(checked) and the fused nodes run their function bodies on ORT CPU: this tests the serving recipe
(session held, library registered, concurrency, exact outputs), not the kernels (plus-ep verify does)."""
from __future__ import annotations

import http.client
import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import pytest

pytest.importorskip("fastapi", reason="the server example needs the [serve] extra (fastapi, uvicorn)")
pytest.importorskip("uvicorn", reason="the server example needs the [serve] extra (fastapi, uvicorn)")

from tests.support.serving_models import block_model, free_port  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CLIENTS, REQUESTS = 8, 1000


def request(conn, method, path, body=None):
    conn.request(method, path, body=None if body is None else json.dumps(body),
                 headers={"content-type": "application/json"})
    r = conn.getresponse()
    return r.status, json.loads(r.read())


def test_server_serves_1000_requests_from_8_clients(tmp_path):
    import onnxruntime as ort

    import plus_ep
    spec = importlib.util.spec_from_file_location("plus_ep_server_example", ROOT / "docs" / "deploy" / "server.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    decode, encode = example.decode, example.encode

    model = tmp_path / "block.plus.onnx"
    onnx.save(plus_ep.rewrite(block_model(), archs=["sm_80"]), model)
    assert any(n.domain == "ai.plus_ep" for n in onnx.load(model).graph.node)

    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((1 + k % 2, 3 + k, 32)).astype(np.float32) for k in range(CLIENTS)]
    ref = ort.InferenceSession(plus_ep.rewrite(block_model()).SerializeToString(), providers=["CPUExecutionProvider"])
    want = [ref.run(None, {"X": x})[0] for x in inputs]

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLUS_EP_") or k == "PLUS_EP_CACHE_DIR"}
    env.update(PLUS_EP_CUDA_LIBRARY="/nonexistent/libcuda.so.1", PYTHONPATH=os.pathsep.join([str(ROOT),
                                                                                             env.get("PYTHONPATH", "")]))
    log = tmp_path / "server.log"
    with open(log, "w") as logf:
        server = subprocess.Popen([sys.executable, str(ROOT / "docs" / "deploy" / "server.py"), str(model),
                                   "--port", str(port), "--cpu"], stdout=logf, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                status, health = request(conn, "GET", "/health")
                break
            except OSError:
                assert server.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "server did not start: " + log.read_text()
                time.sleep(0.2)
        assert status == 200 and health["ok"], health

        errors, outputs, done = [], [[] for _ in range(CLIENTS)], [0] * CLIENTS

        def client(k: int) -> None:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            body = {"inputs": {"X": encode(inputs[k])}}
            try:
                for _ in range(REQUESTS // CLIENTS):
                    status, got = request(conn, "POST", "/infer", body)
                    if status != 200:
                        errors.append((k, status, got))
                        return
                    outputs[k].append(decode(got["outputs"]["Y"]))
                    done[k] += 1
            except Exception as e:  # noqa: BLE001 - reported below with the client's number
                errors.append((k, type(e).__name__, str(e)))
            finally:
                conn.close()

        t0 = time.perf_counter()
        threads = [threading.Thread(target=client, args=(k,)) for k in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        seconds = time.perf_counter() - t0
        assert errors == [], errors[:3]
        assert sum(done) == REQUESTS, done
        for k in range(CLIENTS):            # every response bit-identical to the in-process run
            for got in outputs[k]:
                assert got.dtype == np.float32 and got.shape == want[k].shape
                assert np.array_equal(got, want[k])
        status, health = request(http.client.HTTPConnection("127.0.0.1", port, timeout=5), "GET", "/health")
        assert health["requests"] == REQUESTS and health["providers"] == ["CPUExecutionProvider"]
        status, bad = request(http.client.HTTPConnection("127.0.0.1", port, timeout=5), "POST", "/infer",
                              {"inputs": {"Z": encode(inputs[0])}})
        assert status == 400 and "unknown ['Z'], missing ['X']" in bad["detail"], bad
        print(f"{REQUESTS} requests from {CLIENTS} clients in {seconds:.1f}s")
    finally:
        server.terminate()
        server.wait(timeout=30)
    text = log.read_text()
    # the loud warning of the custom-op library without a driver, once
    assert text.count("PlusEP: WARNING: cannot load the CUDA driver") == 1, text
