"""Serve a PlusEP-rewritten model with Ray Serve: several replicas, each holding one ONNX Runtime session
with PlusEP's custom-op library, behind Ray Serve's HTTP proxy.

    pip install -e '.[gpu]' 'ray[serve]'              # in the PlusEP checkout (or .[cpu] without a GPU)
    plus-ep rewrite model.onnx -o model.plus.onnx     # kernels for sm_80 and sm_90a
    python docs/deploy/ray/plus_ep_serve.py model.plus.onnx --replicas 2 --port 8000
    curl -s localhost:8000/health
    curl -s localhost:8000/infer -H 'content-type: application/json' \\
         -d '{"inputs": {"X": {"shape": [1, 8, 64], "dtype": "float32", "data": [0.0, ...]}}}'

Each replica is a Ray actor that builds its session once, with the Python server's code
(docs/deploy/server.py: `make_session` resolves trust first, `answer` checks and runs a request) and
serves the same JSON as that server: POST /infer with {"inputs": {name: tensor}} answers {"outputs":
{name: tensor}} or 400 {"detail": reason} for a request the client must fix; GET /health. The response
header `x-plus-ep-replica` names the replica that answered. `--gpus-per-replica 1` gives each replica a
GPU (Ray sets CUDA_VISIBLE_DEVICES; the CUDA EP and PlusEP's launcher use it).

Trust (docs/guide/trust.md): every replica resolves its model's kernels on its own machine when it
starts (`plus_ep.rebuild.resolve`: trusted kernels or a model signed whole by a listed key run as they
are; otherwise the fused nodes are rebuilt from their function bodies and the identical ones recorded).
The driver passes its PLUS_EP_TRUST_DIR, PLUS_EP_TRUSTED_KEYS, PLUS_EP_CACHE_DIR and PLUS_EP_CUDA_LIBRARY
to the replicas (Ray's runtime_env), so a cluster whose image holds a trust dir filled at build time
(`PLUS_EP_TRUST_DIR=/etc/plus_ep/trusted plus-ep trust model.plus.onnx`) starts without rebuilding.
The recipe refuses to start with PLUS_EP_TRUST set: a server never runs whatever kernels a file carries.

Replica failures: Ray Serve's controller replaces a replica that dies (its actor killed, its process or
node lost) or fails its health check, and routes new requests to the live replicas meanwhile. A request
that was running on the replica when it died fails: Serve's proxy answers it with a 5xx status (500,
or 503 while no replica is reachable), or, rarely, not at all (seen once in six test runs: no answer
within 60 s). Inference is idempotent, so clients retry exactly those (`post_with_retry`: 500, 502,
503, 504, a dropped connection and no answer within `timeout`, a few times with a short backoff) and
never a 400, which names what to fix in the request.
"""
from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEPLOY = HERE.parent                                 # docs/deploy: server.py, the FastAPI recipe
FORWARDED = ("PLUS_EP_TRUST_DIR", "PLUS_EP_TRUSTED_KEYS", "PLUS_EP_CACHE_DIR", "PLUS_EP_CUDA_LIBRARY")
RETRIED = (500, 502, 503, 504)


def replica_env(environ=os.environ) -> dict:
    """Environment variables for the replicas (Ray's runtime_env env_vars): this file's folder and
    docs/deploy on PYTHONPATH (the replicas import this module and server.py), and the driver's FORWARDED
    PlusEP settings. Raises SystemExit when PLUS_EP_TRUST is set (never on a server)."""
    if environ.get("PLUS_EP_TRUST"):
        raise SystemExit(f"error: PLUS_EP_TRUST={environ['PLUS_EP_TRUST']!r} is set: a server runs only trusted "
                         "kernels; unset it and trust the model (docs/guide/trust.md)")
    path = [str(HERE), str(DEPLOY), *[p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    return {"PYTHONPATH": os.pathsep.join(path), **{k: environ[k] for k in FORWARDED if environ.get(k)}}


class PlusEPModel:
    """One replica: one ORT session with PlusEP's custom-op library for `model` (a path every replica's
    machine can read), serving POST /infer and GET /health."""

    def __init__(self, model: str, cpu: bool = False):
        import server          # docs/deploy/server.py (on the replicas' PYTHONPATH: replica_env)
        from ray import serve
        self.server = server
        self.session = server.make_session(model, providers=["CPUExecutionProvider"] if cpu else None)
        self.inputs = {i.name: i for i in self.session.get_inputs()}
        self.replica = serve.get_replica_context().replica_id.unique_id
        self.served = 0

    async def __call__(self, request):
        from starlette.responses import JSONResponse
        headers = {"x-plus-ep-replica": self.replica}
        if request.url.path.rstrip("/").endswith("/health"):
            return JSONResponse({"ok": True, "replica": self.replica, "requests": self.served,
                                 "providers": self.session.get_providers()}, headers=headers)
        if request.method != "POST" or not request.url.path.rstrip("/").endswith("/infer"):
            return JSONResponse({"detail": "POST /infer or GET /health"}, status_code=404, headers=headers)
        try:
            body = await request.json()
        except ValueError as e:
            return JSONResponse({"detail": f"bad request body: {e}"}, status_code=400, headers=headers)
        try:    # ORT's run releases the GIL: requests on one replica overlap in threads
            out = await asyncio.to_thread(self.server.answer, self.session, body, self.inputs)
        except self.server.Refused as e:
            return JSONResponse({"detail": str(e)}, status_code=400, headers=headers)
        self.served += 1
        return JSONResponse(out, headers=headers)


def deployment(replicas: int = 2, cpus_per_replica: float = 1.0, gpus_per_replica: float = 0.0,
               max_ongoing_requests: int = 8):
    """PlusEPModel as a Ray Serve deployment with `replicas` replicas."""
    from ray import serve
    return serve.deployment(PlusEPModel, name="PlusEPModel", num_replicas=replicas,
                            max_ongoing_requests=max_ongoing_requests, health_check_period_s=2,
                            ray_actor_options={"num_cpus": cpus_per_replica, "num_gpus": gpus_per_replica})


def start(model: str, replicas: int = 2, port: int = 8000, host: str = "127.0.0.1", cpu: bool = False,
          address: str | None = None, num_cpus: int | None = None, cpus_per_replica: float = 1.0,
          gpus_per_replica: float = 0.0) -> str:
    """Start (or join, with `address`) a Ray cluster and Serve's HTTP proxy on host:port, deploy the
    model with `replicas` replicas and wait until they all serve; the application's name."""
    import ray
    from ray import serve
    ray.init(address=address, num_cpus=num_cpus, include_dashboard=False, runtime_env={"env_vars": replica_env()},
             **({} if address else {"object_store_memory": 128 << 20}))
    serve.start(http_options={"host": host, "port": port})
    app = deployment(replicas, cpus_per_replica, gpus_per_replica).bind(str(Path(model).resolve()), cpu)
    serve.run(app, name="plus_ep", route_prefix="/", blocking=False)
    return "plus_ep"


def post_with_retry(host: str, port: int, path: str, body: dict, attempts: int = 5, backoff_s: float = 0.2,
                    timeout: float = 30.0):
    """POST `body` as JSON, retrying what the module docstring says a replica failure causes (RETRIED
    statuses, a dropped connection, no answer within `timeout` seconds) up to `attempts` times:
    (status, response JSON, replica, [what each retried attempt got: a status or an exception's name]).

    e.g. (200, {"outputs": {...}}, "k3j2x9ab", []) or, after a replica died mid-request, (200, ..., [500])
    """
    retried: list = []
    while True:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
        try:
            conn.request("POST", path, body=json.dumps(body), headers={"content-type": "application/json"})
            r = conn.getresponse()
            status, data, replica = r.status, r.read(), r.getheader("x-plus-ep-replica")
        except (ConnectionError, TimeoutError, http.client.HTTPException) as e:
            if len(retried) + 1 >= attempts:
                raise
            retried.append(type(e).__name__)
            time.sleep(backoff_s * len(retried))
            continue
        finally:
            conn.close()
        if status in RETRIED and len(retried) + 1 < attempts:
            retried.append(status)
            time.sleep(backoff_s * len(retried))
            continue
        try:
            return status, json.loads(data), replica, retried
        except ValueError:
            return status, {"detail": data.decode(errors="replace")}, replica, retried


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="the rewritten .onnx model (plus-ep rewrite), readable on every node")
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--address", help="an existing Ray cluster (ray start --head ...); default: start one here")
    ap.add_argument("--cpus-per-replica", type=float, default=1.0)
    ap.add_argument("--gpus-per-replica", type=float, default=0.0)
    ap.add_argument("--cpu", action="store_true", help="CPUExecutionProvider only (no CUDA EP)")
    args = ap.parse_args(argv)
    start(args.model, args.replicas, args.port, args.host, args.cpu, args.address,
          cpus_per_replica=args.cpus_per_replica, gpus_per_replica=args.gpus_per_replica)
    print(f"serving {args.model} with {args.replicas} replicas on http://{args.host}:{args.port}/infer "
          "(Ctrl-C stops)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        from ray import serve
        serve.shutdown()
    return 0


if __name__ == "__main__":
    sys.path[:0] = [str(HERE), str(DEPLOY)]
    sys.exit(main())
