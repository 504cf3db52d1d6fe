"""Runtime reliability of a PlusEP session.

On a GPU (`gpu` marker; skipped without one), with the demo BERT through plus_ep.InferenceSession and
the original model on the plain CUDA EP as the reference (with the CPU onnxruntime of a lent GPU
machine: PlusEP alone on its GPU device, ORT CPU the reference):
  - bad and edge inputs (wrong dtype, rank, a sequence past the model's limit, empty batch / sequence,
    sizes on every route) give an ORT error or the reference's result, never a crash or garbage;
  - 16 threads x 1,000 runs on one session: no error, bit-identical outputs per input;
  - 10,000 runs: host RSS and GPU memory flat between run 1,000 and run 10,000;
  - a subgraph NVRTC rejects (broken attention template) stays unfused and the session still matches.
Every GPU case runs in a child process, so a crash is a failed test, not a dead pytest.

On the CPU (always), the launcher's run-time input errors through real ORT sessions with the
stand-in driver (tests/native/fake_cuda.c), the cases test_launcher_ort.py does not cover: no route
applies, wrong rank, wrong element type, empty input; each an ORT error naming the node, or a
correct empty result.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from tests.support.launcher_models import PLAN, fake_pack, function, fused_node, launches  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _child_env(extra=None) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FAKE_CUDA_", "PLUS_EP_")) or k == "PLUS_EP_CACHE_DIR"}   # its trust manifest
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.update(extra or {})
    return env


def _child(script: str, args, env=None, timeout=540) -> dict:
    """Run `script` in a fresh interpreter; its last stdout line is JSON. A crash fails the test."""
    r = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True,
                       env=_child_env(env), timeout=timeout, cwd=str(ROOT))
    assert r.returncode == 0, f"child exited with {r.returncode} (a crash is a failure)\n{r.stderr[-4000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


# ==================================================================================== CPU: stand-in


RUNNER = r"""
import json, sys
import numpy as np, onnxruntime as ort
path, lib, feeds = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
so = ort.SessionOptions()
so.register_custom_ops_library(lib)
try:
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
except Exception as e:
    print(json.dumps({"stage": "session", "error": str(e)})); sys.exit(0)
feeds = {k: np.array(v["data"], dtype=v["dtype"]).reshape(v["shape"]) for k, v in feeds.items()}
try:
    out = sess.run(None, feeds)[0]
    print(json.dumps({"out": out.tolist(), "shape": list(out.shape)}))
except Exception as e:
    print(json.dumps({"stage": "run", "error": str(e)}))
"""


def _model(plan=PLAN, x_type=TensorProto.FLOAT, x_shape=("n",), cast_to=None):
    """X (+ Y) -> [Cast] -> fused_add. Graph inputs without a shape let any rank reach the node."""
    nodes, x = [], "X"
    if cast_to is not None:
        nodes.append(helper.make_node("Cast", ["X"], ["Xc"], name="cast", to=cast_to))
        x = "Xc"
    nodes.append(fused_node("fused_add", [x, "Y"], ["Z"], "k1", plan, {"sm_90": fake_pack("sm_90")}))
    vi = [helper.make_tensor_value_info("X", x_type, None if x_shape is None else list(x_shape)),
          helper.make_tensor_value_info("Y", TensorProto.FLOAT, None if x_shape is None else list(x_shape))]
    g = helper.make_graph(nodes, "g", vi, [helper.make_tensor_value_info("Z", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.plus_ep", 1)],
                          functions=[function("k1", ["A", "B"], "Add")], ir_version=10)
    return m


def _feed(x, y):
    return {k: {"data": np.asarray(v).reshape(-1).tolist(), "dtype": str(np.asarray(v).dtype),
                "shape": list(np.asarray(v).shape)} for k, v in (("X", x), ("Y", y))}


def _run_stand_in(tmp_path, library, fake_cuda, m, x, y):
    path = tmp_path / "model.onnx"
    onnx.save(m, path)
    log = tmp_path / "cuda.log"
    res = _child(RUNNER, [path, library, json.dumps(_feed(x, y))],
                 env={"PLUS_EP_CUDA_LIBRARY": str(fake_cuda), "FAKE_CUDA_LOG": str(log)}, timeout=300)
    return res, launches(log)


def test_stand_in_no_route_applies(tmp_path, library, fake_cuda):
    """Every route is conditional and none holds for this size: an ORT error naming the node and the
    symbols, no launch."""
    plan = PLAN.replace("route 1 1\n", "").replace("kernel 1 0 fake_fill s0,256,cdiv 1 1 256 1 1 0\n", "")
    n = 3000
    res, ran = _run_stand_in(tmp_path, library, fake_cuda, _model(plan),
                             np.zeros(n, np.float32), np.ones(n, np.float32))
    assert res["stage"] == "run", res
    assert ("PlusEP node 'fused_add': no route applies (all 1 route expressions are 0) for symbols n=3000"
            in res["error"]), res
    assert ran == []
    # the same session shape within the route still runs the kernel
    res, ran = _run_stand_in(tmp_path, library, fake_cuda, _model(plan),
                             np.zeros(4, np.float32), np.ones(4, np.float32))
    assert res["out"] == [1001.0] * 4 and len(ran) == 1


def test_stand_in_wrong_rank(tmp_path, library, fake_cuda):
    res, ran = _run_stand_in(tmp_path, library, fake_cuda, _model(x_shape=None),
                             np.zeros((2, 3), np.float32), np.ones((2, 3), np.float32))
    assert res["stage"] == "run", res
    assert "PlusEP node 'fused_add': input 0 'X': expected float32[n], got float32[2,3] (rank differs" in res["error"]
    assert ran == []


def test_stand_in_wrong_element_type(tmp_path, library, fake_cuda):
    """A Cast to float64 in front of a node planned for float32: ORT accepts it (the op takes any
    type), the launcher refuses it with the node's name."""
    res, ran = _run_stand_in(tmp_path, library, fake_cuda, _model(cast_to=TensorProto.DOUBLE),
                             np.zeros(5, np.float32), np.ones(5, np.float32))
    assert res["stage"] == "run", res
    assert ("PlusEP node 'fused_add': input 0 'Xc': expected float32[n], got float64[5] (element type differs"
            in res["error"]), res
    assert ran == []


def test_stand_in_wrong_feed_dtype_is_orts_error(tmp_path, library, fake_cuda):
    res, ran = _run_stand_in(tmp_path, library, fake_cuda, _model(),
                             np.zeros(5, np.int32), np.ones(5, np.float32))
    assert res["stage"] == "run" and "X" in res["error"] and "int32" in res["error"], res
    assert ran == []


def test_stand_in_empty_input(tmp_path, library, fake_cuda):
    """n = 0 (an empty batch): the grid is 0, the launch is skipped, the output is empty."""
    res, ran = _run_stand_in(tmp_path, library, fake_cuda, _model(),
                             np.zeros(0, np.float32), np.ones(0, np.float32))
    assert res == {"out": [], "shape": [0]}
    assert ran == []


# ========================================================================================= GPU

GPU_CHILD = textwrap.dedent(r"""
    import hashlib, json, os, shutil, sys, threading, time
    import numpy as np, onnx, onnxruntime as ort
    mode, work, cache = sys.argv[1], sys.argv[2], sys.argv[3]
    from plus_ep.kernels.compile import nvrtc
    if mode == "broken":       # a copy of the family headers whose attention.cuh NVRTC rejects
        t = os.path.join(work, "families")
        for name, path in nvrtc.template_files().items():
            if path.parent.parent == nvrtc.FAMILIES_DIR:
                os.makedirs(os.path.join(t, path.parent.name), exist_ok=True)
                shutil.copy2(path, os.path.join(t, path.parent.name, name))
        with open(os.path.join(t, "flash_attention", "attention.cuh"), "a") as f:
            f.write("\nint plus_injected_failure = ;\n")
        nvrtc.FAMILIES_DIR = __import__("pathlib").Path(t)
    from plus_ep import InferenceSession
    from plus_ep.demo_model import build_bert, sample_inputs
    model = build_bert(layers=2)                    # hidden 256, 4 heads of 64, max_pos 512, vocab 1000
    path = os.path.join(work, "bert.onnx")
    onnx.save(model, path)
    # onnxruntime-gpu: PlusEP beside ORT's CUDA EP, which is the reference; the CPU onnxruntime (the lent
    # GPU machines): PlusEP alone on its GPU device, ORT CPU the reference. Exact fp32 on both sides.
    cuda = "CUDAExecutionProvider" in ort.get_available_providers()
    rest = ["CUDAExecutionProvider"] if cuda else ["CPUExecutionProvider"]
    plus = InferenceSession(path, providers=[("PlusEP", {"cache_dir": cache, "fp32_math": "exact"})] + rest)
    assert getattr(plus, "plus_ep_arch", None), "the PlusEP path did not run (no GPU found?)"
    assert plus.get_providers()[0] == "PlusEP", plus.get_providers()
    ref = ort.InferenceSession(path, providers=[("CUDAExecutionProvider", {"use_tf32": "0"})] if cuda
                               else ["CPUExecutionProvider"])

    def run(sess, feeds):
        try:
            return sess.run(None, feeds)[0], None
        except Exception as e:
            return None, " ".join(str(e).split())[:400] or type(e).__name__

    def compare(feeds):
        want, werr = run(ref, feeds)
        got, gerr = run(plus, feeds)
        rec = {"ref_error": werr, "plus_error": gerr}
        if got is not None:
            rec["finite"] = bool(np.isfinite(got).all())
            rec["shape"] = list(got.shape)
        if got is not None and want is not None:
            rec["same_shape"] = got.shape == want.shape
            rec["maxdiff"] = float(np.max(np.abs(got.astype(np.float64) - want))) if got.size and got.shape == want.shape else 0.0
        return rec

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def gpu_used():
        from cuda.bindings import driver as cu
        cu.cuInit(0)
        _, dev = cu.cuDeviceGet(0)
        _, ctx = cu.cuDevicePrimaryCtxRetain(dev)
        cu.cuCtxSetCurrent(ctx)
        _, free, total = cu.cuMemGetInfo()
        cu.cuDevicePrimaryCtxRelease(dev)
        return int(total) - int(free)

    out = {}
    if mode == "inputs":
        f = sample_inputs(2, 16)
        cases = {
            "b2s16": ("valid", f),
            "b1s1": ("valid", sample_inputs(1, 1)),
            "b64s256-route1": ("valid", sample_inputs(64, 256)),
            "b40s512-last-route": ("valid", sample_inputs(40, 512)),
            "b0-empty-batch": ("edge", {k: v[:0] for k, v in f.items()}),
            "s0-empty-seq": ("edge", {k: v[:, :0] for k, v in f.items()}),
            "ids-int32": ("invalid", {**f, "input_ids": f["input_ids"].astype(np.int32)}),
            "mask-float": ("invalid", {**f, "attention_mask": f["attention_mask"].astype(np.float32)}),
            "ids-rank3": ("invalid", {**f, "input_ids": f["input_ids"][None]}),
            "seq-past-max-pos": ("invalid", sample_inputs(1, 600)),
            "mask-batch-mismatch": ("invalid", {**f, "attention_mask": np.ones((3, 16), np.int64)}),
            # the embedding Gather is fused (layernorm/0) and, like ORT's CUDA Gather, does not check
            # its indices: an error or finite values, and the session must survive it (after-errors)
            "ids-out-of-vocab": ("edge", {**f, "input_ids": f["input_ids"] + 5000}),
        }
        for name, (kind, feeds) in cases.items():
            out[name] = dict(compare(feeds), kind=kind)
        out["after-errors"] = dict(compare(f), kind="valid")     # the session still works
        a, _ = run(plus, f)
        out["after-errors"]["same_as_first"] = bool(np.array_equal(a, run(plus, f)[0]))
    elif mode == "threads":
        shapes = [(2, 16), (4, 64), (8, 128), (1, 512)]
        feeds = [sample_inputs(b, s, seed=k) for k, (b, s) in enumerate(shapes)]
        wants = [ref.run(None, fd)[0] for fd in feeds]
        hashes, errors, firsts = [set() for _ in feeds], [], {}
        lock = threading.Lock()
        def work(t):
            k = t % len(feeds)
            try:
                for i in range(int(sys.argv[4])):
                    o = plus.run(None, feeds[k])[0]
                    h = hashlib.sha256(o.tobytes()).hexdigest()
                    with lock:
                        hashes[k].add(h)
                        firsts.setdefault(k, o)
            except Exception as e:
                with lock:
                    errors.append(f"thread {t}: {e}")
        t0 = time.time()
        ts = [threading.Thread(target=work, args=(t,)) for t in range(16)]
        [t.start() for t in ts]; [t.join() for t in ts]
        out = {"errors": errors[:5], "distinct": [len(h) for h in hashes], "seconds": time.time() - t0,
               "maxdiff": [float(np.max(np.abs(firsts[k].astype(np.float64) - wants[k]))) if k in firsts else None
                           for k in range(len(feeds))]}
    elif mode == "memory":
        f = sample_inputs(2, 16)
        first = plus.run(None, f)[0]
        n1, n2 = int(sys.argv[4]), int(sys.argv[5])
        for i in range(n1):
            plus.run(None, f)
        r1, g1 = rss(), gpu_used()
        same = True
        for i in range(n2 - n1):
            o = plus.run(None, f)[0]
            if i % 997 == 0:
                same = same and bool(np.array_equal(o, first))
        r2, g2 = rss(), gpu_used()
        out = {"rss": [r1, r2], "gpu": [g1, g2], "same": same}
    elif mode == "broken":
        models = [p for p in os.listdir(os.path.join(cache, "models")) if p.endswith(".onnx")]
        m = onnx.load(os.path.join(cache, "models", models[0]))
        out = {"fused": sum(n.domain == "ai.plus_ep" for n in m.graph.node),
               "softmax": sum(n.op_type == "Softmax" for n in m.graph.node),
               "cases": {f"b{b}s{s}": compare(sample_inputs(b, s)) for b, s in ((2, 16), (4, 64), (1, 512))}}
    print(json.dumps(out))
""")

# exact fp32 math on both sides, different summation orders
TOL = 2e-3


@pytest.fixture(scope="module")
def gpu_cache(tmp_path_factory):
    """One PlusEP cache for the GPU tests: the model's kernels compile once."""
    return tmp_path_factory.mktemp("plus_ep_gpu_cache")


@pytest.mark.gpu
def test_gpu_bad_and_edge_inputs(tmp_path, gpu_cache):
    res = _child(GPU_CHILD, ["inputs", tmp_path, gpu_cache])
    problems = []
    for name, r in res.items():
        if r["kind"] == "valid":
            ok = (r["ref_error"] is None and r["plus_error"] is None and r["same_shape"] and r["finite"]
                  and r["maxdiff"] <= TOL)
        elif r["kind"] == "invalid":
            ok = r["plus_error"] is not None             # an exception, not a result
        else:   # edge: the reference's result when it has one, else an error or a finite result
            if r["ref_error"] is None:
                ok = r["plus_error"] is None and r["same_shape"] and r["finite"] and r["maxdiff"] <= TOL
            else:
                ok = r["plus_error"] is not None or r.get("finite", False)
        if r.get("plus_error") and "PlusEP node" in r["plus_error"]:
            ok = ok and "PlusEP node '" in r["plus_error"]    # names the node
        if not ok:
            problems.append((name, r))
    assert res["after-errors"]["same_as_first"]
    assert not problems, json.dumps(problems, indent=1)


@pytest.mark.gpu
def test_gpu_sixteen_threads_thousand_runs_bit_identical(tmp_path, gpu_cache):
    res = _child(GPU_CHILD, ["threads", tmp_path, gpu_cache, 1000])
    assert res["errors"] == [], res
    assert res["distinct"] == [1, 1, 1, 1], res        # every run of one input: the same bits
    assert all(d is not None and d <= TOL for d in res["maxdiff"]), res


@pytest.mark.gpu
def test_gpu_ten_thousand_runs_memory_flat(tmp_path, gpu_cache):
    res = _child(GPU_CHILD, ["memory", tmp_path, gpu_cache, 1000, 10000])
    (r1, r2), (g1, g2) = res["rss"], res["gpu"]
    assert res["same"]
    assert r2 - r1 < 16 << 20, f"host RSS grew {(r2 - r1) / 2**20:.1f} MiB from run 1,000 to 10,000"
    assert g2 - g1 < 16 << 20, f"GPU memory grew {(g2 - g1) / 2**20:.1f} MiB from run 1,000 to 10,000"


@pytest.mark.gpu
def test_gpu_nvrtc_failure_subgraph_runs_unfused(tmp_path):
    res = _child(GPU_CHILD, ["broken", tmp_path, tmp_path / "cache"])   # its own cache: one model in it
    assert res["fused"] > 0 and res["softmax"] == 2, res     # both layers' attention stayed unfused
    for name, r in res["cases"].items():
        assert r["ref_error"] is None and r["plus_error"] is None, (name, r)
        assert r["same_shape"] and r["finite"] and r["maxdiff"] <= TOL, (name, r)
