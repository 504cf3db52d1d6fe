"""A small HTTP inference server for a PlusEP-rewritten model: one ONNX Runtime session, many requests.

    pip install -e '.[serve]'                        # in the PlusEP checkout: fastapi + uvicorn
    plus-ep rewrite model.onnx -o model.plus.onnx    # kernels for sm_80 and sm_90a
    python docs/deploy/server.py model.plus.onnx --port 8000
    curl -s localhost:8000/health
    curl -s localhost:8000/infer -H 'content-type: application/json' \
         -d '{"inputs": {"X": {"shape": [1, 8, 64], "dtype": "float32", "data": [0.0, ...]}}}'

The process holds ONE session for its lifetime, with PlusEP's custom-op library registered (the launcher
runs the fused nodes' kernels on the CUDA EP's stream; without a usable CUDA driver it warns once and
the fused nodes run their original subgraphs). ONNX Runtime's `run` is safe to call from several threads
at once, so FastAPI's thread pool serves concurrent requests from the one session; scale out with more
processes (uvicorn --workers N), each holding its own session, or one process per GPU.

`--plugin-ep` uses the "PlusEP" execution provider instead (onnxruntime >= 1.25), which also fuses a
model that was not rewritten (`plus_ep.InferenceSession`).

Trust (docs/guide/trust.md): a model file is data, and the launcher runs its embedded kernels only when
this machine's trust manifest lists them, a key in PLUS_EP_TRUSTED_KEYS signed them, or the operator
opted out. At start the server resolves that once (`plus_ep.rebuild.resolve`): kernels already trusted,
or a whole model signed by a listed key, run as they are; otherwise every fused node is rebuilt here from
its function body and the identical ones are recorded in the manifest (or, where any differs, the local
build is what the session runs). It prints what it did. Never run a server with PLUS_EP_TRUST=any.

Shapes: a request whose tensors do not fit the model's declared inputs (rank, fixed dims, or one
symbolic dim, e.g. `seq`, with two values across inputs) is refused with 400 before it reaches the
session, and so is one the session refuses (ONNX Runtime's checks, the launcher's shape checks); the
server keeps serving.

Requests and responses are JSON: each tensor as {"shape": [...], "dtype": "float32", "data": [flat
values]}. JSON keeps float32 values exact (they round-trip through Python floats); binary payloads
(e.g. numpy's .npy over application/octet-stream) are the next step for large tensors.
"""
from __future__ import annotations

import argparse
import threading

import numpy as np


def trusted_model(model: str):
    """The model the session should load: `model` itself when its kernels are trusted here (or now
    rebuilt here byte-identical, then recorded), else the local build of its fused nodes as bytes; and
    one line saying which (plus_ep/rebuild.py: resolve)."""
    import onnx

    from plus_ep import rebuild
    proto = onnx.load(model)
    resolved, what = rebuild.resolve(proto)
    return (model if resolved is proto else resolved.SerializeToString()), what


def make_session(model: str, plugin_ep: bool = False, providers=None):
    """The one session of the server (its kernels' trust resolved first: trusted_model)."""
    import onnxruntime as ort

    import plus_ep
    providers = list(providers or [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider")
                                   if p in ort.get_available_providers()])
    if plugin_ep:
        return plus_ep.InferenceSession(model, providers=["PlusEP", *providers])
    source, what = trusted_model(model)
    print(f"PlusEP trust: {model}: {what}", flush=True)
    so = ort.SessionOptions()
    so.register_custom_ops_library(plus_ep.get_library_path())
    return ort.InferenceSession(source, so, providers=providers)


def shape_problem(feeds: dict, inputs: dict) -> str | None:
    """Why the request's shapes do not fit the model's declared inputs (rank, fixed dims, one value per
    symbolic dim across all inputs), else None."""
    seen: dict = {}
    for name, a in feeds.items():
        declared = inputs[name].shape
        if declared is None:
            continue
        if a.ndim != len(declared):
            return f"input {name} has rank {a.ndim}, the model declares {len(declared)} ({declared})"
        for k, (got, want) in enumerate(zip(a.shape, declared)):
            if isinstance(want, int) and want >= 0 and got != want:
                return f"input {name} dim {k} is {got}, the model declares {want}"
            if isinstance(want, str) and want:
                first = seen.setdefault(want, (name, k, got))
                if first[2] != got:
                    return (f"inconsistent shapes: input {first[0]} dim {first[1]} ({want}) is {first[2]} but "
                            f"input {name} dim {k} ({want}) is {got}")
    return None


def decode(tensor: dict) -> np.ndarray:
    return np.asarray(tensor["data"], dtype=np.dtype(tensor.get("dtype", "float32"))).reshape(tensor["shape"])


def encode(array: np.ndarray) -> dict:
    a = np.asarray(array)
    return {"shape": list(a.shape), "dtype": str(a.dtype), "data": a.ravel().tolist()}


class Refused(ValueError):
    """A request the client must fix (HTTP 400): its one-line reason is the message."""


def answer(session, body: dict, inputs: dict | None = None) -> dict:
    """The response body {"outputs": {name: tensor}} for one request body {"inputs": {name: tensor}} run on
    `session` (`inputs`: the session's inputs by name, computed once by the caller); raises Refused for
    a body that is malformed, names other inputs than the model's, has shapes that do not fit
    (shape_problem), or that the session refuses (ORT's checks, the launcher's shape checks).

    e.g. answer(session, {"inputs": {"X": encode(np.zeros((1, 3, 32), np.float32))}}) is
    {"outputs": {"Y": {"shape": [1, 3, 16], "dtype": "float32", "data": [...]}}} for a model X -> Y.
    """
    inputs = inputs if inputs is not None else {i.name: i for i in session.get_inputs()}
    try:
        feeds = {name: decode(t) for name, t in body["inputs"].items()}
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise Refused(f"bad request body: {type(e).__name__}: {e}") from None
    unknown = sorted(set(feeds) - set(inputs))
    missing = sorted(set(inputs) - set(feeds))
    if unknown or missing:
        raise Refused(f"inputs: unknown {unknown}, missing {missing}; the model takes {sorted(inputs)}")
    problem = shape_problem(feeds, inputs)
    if problem:
        raise Refused(problem)
    try:
        outs = session.run(None, feeds)
    except Exception as e:  # noqa: BLE001 - ORT's and the launcher's refusals (shapes, dtypes) are the client's
        raise Refused(" ".join(str(e).split())[:500]) from None
    return {"outputs": {o.name: encode(v) for o, v in zip(session.get_outputs(), outs)}}


def create_app(session):
    """A FastAPI app serving `session`: GET /health, GET /metadata, POST /infer."""
    from fastapi import FastAPI, HTTPException

    app = FastAPI(title="PlusEP model server")
    inputs = {i.name: i for i in session.get_inputs()}
    served = {"requests": 0}
    lock = threading.Lock()

    @app.get("/health")
    def health() -> dict:
        return {"ok": True, "requests": served["requests"], "providers": session.get_providers()}

    @app.get("/metadata")
    def metadata() -> dict:
        return {"inputs": [{"name": i.name, "type": i.type, "shape": i.shape} for i in session.get_inputs()],
                "outputs": [{"name": o.name, "type": o.type, "shape": o.shape} for o in session.get_outputs()]}

    @app.post("/infer")
    def infer(body: dict) -> dict:     # a plain def: FastAPI runs it in its thread pool, requests overlap
        try:
            out = answer(session, body, inputs)
        except Refused as e:
            raise HTTPException(400, str(e)) from None
        with lock:
            served["requests"] += 1
        return out

    return app


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="the rewritten .onnx model (plus-ep rewrite)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--plugin-ep", action="store_true", help='use the "PlusEP" execution provider')
    ap.add_argument("--cpu", action="store_true", help="CPUExecutionProvider only (no CUDA EP)")
    args = ap.parse_args(argv)
    import uvicorn
    session = make_session(args.model, args.plugin_ep, ["CPUExecutionProvider"] if args.cpu else None)
    uvicorn.run(create_app(session), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
