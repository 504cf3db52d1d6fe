"""The Ray Serve recipe (docs/deploy/ray/plus_ep_serve.py) on one machine: a local Ray cluster on loopback,
2 replicas each holding an ORT session with PlusEP's custom-op library, M client threads posting at least
N requests through Serve's HTTP proxy, and one replica killed mid-run (its actor, `ray.kill`) so that
Serve's controller starts a new one. Checked: every request answered 200 (a retry only as the recipe
documents it: `post_with_retry`, and only after the kill), every answer equal to ORT CPU's on the original
model, both replicas served, the replacement replica served after the restart, and the trust line of
each replica's session.

It runs in the clients' interpreter (PLUS_EP_CLIENTS_PYTHON, where `ray[serve]` is installed: the
`clients` extra) and skips saying so where that interpreter lacks ray. No CUDA driver: the launcher
warns once per replica and the fused nodes run their function bodies on ORT CPU, so this tests the
serving (sessions per replica, trust, routing, restart, exact outputs), not the kernels (plus-ep verify
does)."""
from __future__ import annotations

import json
import os
import subprocess

import onnx
import pytest

from tests.support import client_models
from tests.support.serving_models import block_model, free_port

PY = client_models.clients_python()
CLIENTS, REQUESTS = 6, 240

DRIVE = r"""
import json, sys, threading, time
import numpy as np, onnxruntime as ort, ray
sys.path[:0] = [sys.argv[1] + "/docs/deploy/ray", sys.argv[1] + "/docs/deploy"]
import plus_ep_serve
from server import decode, encode
model, original, port, clients, requests = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
t0 = time.monotonic()
plus_ep_serve.start(model, replicas=2, port=port, cpu=True, num_cpus=2, cpus_per_replica=0.5)

def replicas():
    return sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                  if a["name"].startswith("SERVE_REPLICA::"))

refusals = []
while True:                                      # both replicas answer, refusing a request without X
    try:
        answers = [plus_ep_serve.post_with_retry("127.0.0.1", port, "/infer", {"inputs": {}}, attempts=1)
                   for _ in range(8)]
        refusals = sorted({(a[0], a[1].get("detail", "")) for a in answers})
        if len(replicas()) == 2 and len({a[2] for a in answers}) == 2:
            break
    except OSError:
        pass
    assert time.monotonic() - t0 < 60, "the replicas did not start"
    time.sleep(0.3)
started = time.monotonic() - t0

rng = np.random.default_rng(0)
inputs = [rng.standard_normal((1 + k % 2, 3 + k, 32)).astype(np.float32) for k in range(clients)]
ref = ort.InferenceSession(original, providers=["CPUExecutionProvider"])
want = [ref.run(None, {"X": x})[0] for x in inputs]
lock, done, killed, restarted = threading.Lock(), [0], threading.Event(), threading.Event()
log = []          # (client, status, equal, maxdiff, replica, [retried statuses], the kill came before the answer)

def client(k):
    body = {"inputs": {"X": encode(inputs[k])}}
    n = 0
    while n < requests // clients or not restarted.is_set():
        try:
            status, got, replica, retries = plus_ep_serve.post_with_retry("127.0.0.1", port, "/infer", body,
                                                                          timeout=15)
        except Exception as e:
            log.append((k, f"{type(e).__name__}: {e}", False, None, None, None, killed.is_set()))
            return
        y = decode(got["outputs"]["Y"]) if status == 200 else None
        eq = y is not None and y.dtype == want[k].dtype and np.array_equal(y, want[k])
        diff = float(np.max(np.abs(y - want[k]))) if y is not None and y.shape == want[k].shape else None
        with lock:
            log.append((k, status, eq, diff, replica, retries, killed.is_set()))
            done[0] += 1
        n += 1
        if n > 500 * requests // clients:
            return

before = replicas()
threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
t1 = time.monotonic()
for t in threads:
    t.start()
while done[0] < requests // 4 and any(t.is_alive() for t in threads):
    time.sleep(0.02)
victim = before[0]
ray.kill(ray.get_actor(victim, namespace="serve"), no_restart=True)
killed.set()
t_kill = time.monotonic()
while time.monotonic() - t_kill < 240:           # Serve's controller starts a replacement (5-8 s idle,
    # a minute and more on a loaded 2-core machine)
    now = replicas()
    # a replica that is neither of the two first ones has answered (an answer the victim gave just before
    # the kill can be logged after it, so "two replicas answered since the kill" is not enough)
    fresh = [name for name in now if name not in before]
    served_fresh = any(r[4] and any(name.endswith(r[4]) for name in fresh) for r in log[:])
    if len(now) == 2 and victim not in now and served_fresh:
        break
    time.sleep(0.1)
restarted.set()
for t in threads:
    t.join(timeout=300)
after = replicas()
print(json.dumps({"started_s": started, "run_s": time.monotonic() - t1, "restart_s": time.monotonic() - t_kill,
                  "before": before, "after": after, "victim": victim, "log": log,
                  "alive": [t.is_alive() for t in threads], "refusals": refusals}), flush=True)
ray.shutdown()                                   # stops Serve's actors with the local cluster
"""


def test_ray_serve_two_replicas_one_restarted_mid_run(tmp_path):
    if (why := client_models.missing(PY, "ray.serve")):
        pytest.skip(f"{PY} lacks ray[serve] ({why}): install the clients extra (docs/developer/testing.md)")
    import plus_ep
    from plus_ep import trust
    from tests.support.emulated_models import ROOT
    model, original = tmp_path / "block.plus.onnx", tmp_path / "block.onnx"
    onnx.save(block_model(), original)
    onnx.save(plus_ep.rewrite(block_model(), archs=["sm_80"]), model)     # recorded in this run's trust dir
    fused = trust.kernel_nodes(onnx.load(model))
    assert fused

    env = {k: v for k, v in os.environ.items() if not k.startswith("PLUS_EP_") or k == "PLUS_EP_CACHE_DIR"}
    env.update(PLUS_EP_CUDA_LIBRARY="/nonexistent/libcuda.so.1", RAY_DISABLE_USAGE_STATS="1", RAY_DEDUP_LOGS="0",
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p))
    r = subprocess.run([PY, "-c", DRIVE, str(ROOT), str(model), str(original), str(free_port()), str(CLIENTS),
                        str(REQUESTS)], capture_output=True, text=True, env=env, timeout=600, cwd=str(ROOT))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    out = json.loads([ln for ln in r.stdout.splitlines() if ln.startswith('{"started_s"')][-1])
    log = out["log"]
    print({k: v for k, v in out.items() if k != "log"}, f"{len(log)} requests")

    assert not any(out["alive"]), out["alive"]
    failed = [row for row in log if row[1] != 200]
    assert failed == [], failed[:5]
    assert len(log) >= REQUESTS
    wrong = [row for row in log if not row[2]]
    assert wrong == [], wrong[:5]                       # bit-identical to ORT CPU on the original model
    assert all(not row[5] for row in log if not row[6]), "a retry before any replica failed"
    retried = [row[5] for row in log if row[5]]
    print(f"{len(retried)} requests retried: {retried}")
    # only requests running on the killed replica fail (module docstring): at most one per client
    assert len(retried) <= CLIENTS, retried
    assert len(out["before"]) == len(out["after"]) == 2 and out["victim"] in out["before"]
    assert out["victim"] not in out["after"]             # replaced by Serve's controller
    served_before = {row[4] for row in log if not row[6]}
    new = set(out["after"]) - set(out["before"])
    assert len(served_before) == 2, served_before
    assert any(row[4] and any(name.endswith(row[4]) for name in new) for row in log), "the new replica never served"
    assert out["refusals"] == [[400, "inputs: unknown [], missing ['X']; the model takes ['X']"]], out["refusals"]
    # every replica (the two, then the replacement) resolved trust at start: the kernels this run's rewrite
    # recorded, passed on to the replicas with the driver's PLUS_EP_CACHE_DIR
    text = r.stdout + r.stderr
    assert text.count(f"PlusEP trust: {model.resolve()}: embedded kernels trusted") >= 3, text[-4000:]
    assert "PLUS_EP_TRUST" not in env
