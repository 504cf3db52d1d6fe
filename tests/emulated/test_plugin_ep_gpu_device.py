"""PlusEP as a plugin EP on a GPU device (PLUS_EP_VIRTUAL_GPU=1: the emulated driver's device described
as an NVIDIA GPU), the only ONNX Runtime path that keeps tensors in device memory with the CPU
onnxruntime, as on the lent H100 machine. Regression tests for the bug of issue 20: ORT inserts
MemcpyFromHost before a PlusEP node whose graph input a CPU node also reads (BERT's input_ids feeds a
Shape), and its CPU-EP fallback Memcpy kernel left the copy in host memory, so the fused node got a
host pointer. PlusEP's own Memcpy kernels (ep_memory.c) put it in device memory.

The emulated driver makes the mistake visible: a kernel parameter that points into host memory outside
every device allocation fails the launch (CUDA_ERROR_ILLEGAL_ADDRESS), and launches on PlusEP's stream
run only when something waits for the stream, so a missing synchronisation reads poisoned memory.
Checked per session: PlusEP is on the GPU device, every claimed node ran its kernels with no error or
checker finding, no input reached a node in host memory (the EP's fallback copy would warn), nothing is
left queued on a stream after the run, the outputs match the original model on ORT CPU (exact fp32
kernels: 1e-4), and the device memory is released with the last session. Padded batch 2, odd sequence
length 7. Also: CUDA-graph capture and replay through IOBinding, and the custom-op library path
(`plus-ep verify`) on the same padded inputs."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from tests.support.emulated_models import ROOT, child_env  # noqa: E402

pytestmark = pytest.mark.skipif(
    tuple(int(p) for p in ort.__version__.split(".")[:2]) < (1, 26), reason="the GPU path's graph hooks need onnxruntime >= 1.26")

RUNNER = r"""
import json, sys
spec = json.loads(sys.argv[1])
import numpy as np, onnx, onnxruntime as ort
from plus_ep.verification.emulator import Emulator
emu = Emulator.get()
import plus_ep
from plus_ep.verification.tolerances import compare, tolerance
emu.set_arch("sm_90a")
feeds = dict(np.load(spec["feeds"]))
want = ort.InferenceSession(spec["reference"], providers=["CPUExecutionProvider"]).run(None, feeds)
out = {"devices": [{k: v for k, v in d.items() if k != "device"} for d in plus_ep.ep.devices()], "runs": {}}
for path in spec["models"]:
    emu.register_model(onnx.load(path))
    emu.reset_records()
    so = ort.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    sess = ort.InferenceSession(path, so, providers=[("PlusEP", {"fp32_math": "exact"}), "CPUExecutionProvider"])
    got = sess.run(None, feeds)
    claimed = [[n.name or n.op_type for n in sg.get_nodes()] for sg in sess.get_provider_graph_assignment_info()
               if sg.ep_name == "PlusEP"]
    out["runs"][path] = {
        "providers": sess.get_providers(),
        "claimed": len(claimed),
        "nodes_ran": len({r.module for r in emu.records}),
        "launches": len(emu.records),
        "bad": [[r.entry, r.node, r.error, r.findings[:1]] for r in emu.records if r.error or r.findings],
        "pending": emu.pending(),
        "compare": [dict(compare(g, w), tol=tolerance("exact", w.dtype, kind="model")) for g, w in zip(got, want)],
    }
    del sess
out["live_allocations"] = emu.live_allocations()
print(json.dumps(out, default=float))
"""

GRAPH_RUNNER = r"""
import json, sys
import numpy as np, onnx, onnxruntime as ort
from plus_ep.verification.emulator import Emulator
emu = Emulator.get()
import plus_ep
plus, raw = sys.argv[1], sys.argv[2]
emu.register_model(onnx.load(plus))
rng = np.random.default_rng(1)
xs = [rng.standard_normal((2, 7, 32)).astype(np.float32) for _ in range(3)]
ref = ort.InferenceSession(raw, providers=["CPUExecutionProvider"])
def dev(shape):
    return ort.OrtValue.ortvalue_from_shape_and_type(list(shape), np.float32, "gpu", 0, 0x10DE)
xd, yd = dev(xs[0].shape), dev(xs[0].shape)
sess = ort.InferenceSession(plus, providers=[("PlusEP", {"cuda_graph": "1", "fp32_math": "exact"}), "CPUExecutionProvider"])
io = sess.io_binding()
io.bind_ortvalue_input("X", xd)
io.bind_ortvalue_output("Y", yd)
runs = []
for i in range(4):
    x = xs[min(i, 2)]
    ort.copy_tensors([ort.OrtValue.ortvalue_from_numpy(x)], [xd], None)   # new data, same device buffer
    emu.reset_records()
    sess.run_with_iobinding(io)
    y = ort.OrtValue.ortvalue_from_numpy(np.zeros_like(x))
    ort.copy_tensors([yd], [y], None)
    want = ref.run(None, {"X": x})[0]
    runs.append({"launches": len(emu.records), "max_abs": float(np.abs(y.numpy() - want).max()),
                 "pending": emu.pending()})
del sess, io, xd, yd
print(json.dumps({"runs": runs, "live_allocations": emu.live_allocations()}))
"""


def _child(script, args, timeout=600):
    env = child_env({"PLUS_EP_VIRTUAL_GPU": "1"})
    r = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True, check=False,
                       env=env, timeout=timeout, cwd=str(ROOT))
    assert r.returncode == 0, f"child exited with {r.returncode}\n{r.stderr[-4000:]}"
    assert "arrived in host memory" not in r.stderr, r.stderr[-2000:]   # never the EP's fallback copy
    return json.loads(r.stdout.strip().splitlines()[-1])


def _check(res: dict, models) -> None:
    assert res["devices"][0]["mode"] == "gpu", res["devices"]
    for path in models:
        run = res["runs"][str(path)]
        assert run["providers"][0] == "PlusEP", run
        assert run["claimed"] > 0 and run["nodes_ran"] >= run["claimed"], run   # every claimed node launched
        assert not run["bad"], run["bad"]                                      # no error, no checker finding
        assert run["pending"] == 0, run                                        # nothing left queued
        for c in run["compare"]:
            assert c["rel"] <= c["tol"], c
    assert res["live_allocations"] == 0                                        # pool emptied with the last EP


def _padded_feeds(tmp_path, feeds: dict):
    assert feeds["attention_mask"][-1, -1] == 0 and feeds["attention_mask"].shape == (2, 7)   # padded, odd
    path = tmp_path / "feeds.npz"
    np.savez(path, **feeds)
    return path


def _rewrite(raw, out, **kw):
    import plus_ep
    r = plus_ep.rewrite_detailed(str(raw), archs=["sm_90a"], fp32_math="exact", **kw)
    assert not r.kernels.failures, r.kernels.failures
    onnx.save(r.model, out)
    return out


@pytest.fixture(scope="module")
def demo_bert(tmp_path_factory):
    pytest.importorskip("cuda.bindings")
    from plus_ep.demo_model import sample_inputs, save_bert
    d = tmp_path_factory.mktemp("gpu_bert")
    raw = d / "bert.onnx"
    save_bert(str(raw), layers=1, hidden=32, heads=2, intermediate=64, vocab=50, max_pos=16)
    feeds = sample_inputs(batch=2, seq=7, vocab=50)
    feeds["attention_mask"][1, :] = 1
    feeds["attention_mask"][-1, 5:] = 0
    return raw, _rewrite(raw, d / "bert.plus.onnx"), feeds


def test_demo_bert_raw_and_rewritten_on_gpu_device(demo_bert, tmp_path):
    """The issue's reproduction: input_ids feeds a CPU Shape and the embedding's fused node."""
    raw, plus, feeds = demo_bert
    res = _child(RUNNER, [json.dumps({"models": [str(plus), str(raw)], "reference": str(raw),
                                      "feeds": str(_padded_feeds(tmp_path, feeds))})])
    _check(res, [plus, raw])


def test_custom_op_library_path_same_inputs(demo_bert, tmp_path):
    """The custom-op library (RegisterCustomOps, host staging on ORT CPU) on the same padded inputs:
    `plus-ep verify`, every node against its function body, 0 checker findings."""
    import plus_ep
    _, plus, feeds = demo_bert
    rep = plus_ep.verify(str(plus), archs=["sm_90a"], inputs=str(_padded_feeds(tmp_path, feeds)))
    assert rep["ok"], rep
    assert rep["nodes"] and all(n["executed"] and not n["n_findings"] and not n["errors"] for n in rep["nodes"])


def test_cuda_graph_capture_and_replay(tmp_path):
    """A model whose every node PlusEP runs (LayerNorm -> MatMul + Add + Relu, one fused node), inputs and
    outputs bound in device memory: ORT runs one warm-up and the captured run in the first Run call
    (two launches each), then replays the graph (one launch each) on new data written into the same
    input buffer; every output matches ORT CPU."""
    pytest.importorskip("cuda.bindings")
    from tests.support.emulated_models import rewritten_tiny, tiny_model
    raw, plus = tmp_path / "tiny.onnx", tmp_path / "tiny.plus.onnx"
    onnx.save(tiny_model(), raw)
    onnx.save(rewritten_tiny(archs=("sm_90a",)), plus)
    res = _child(GRAPH_RUNNER, [plus, raw])
    per_run = res["runs"][1]["launches"]
    assert per_run >= 1 and res["runs"][0]["launches"] == 2 * per_run, res        # warm-up + captured run
    assert all(r["launches"] == per_run for r in res["runs"][1:]), res            # replays
    assert all(r["max_abs"] <= 1e-4 and r["pending"] == 0 for r in res["runs"]), res
    assert res["live_allocations"] == 0


@pytest.mark.zoo
@pytest.mark.parametrize("family,exporter", [pytest.param("bert", "torchscript", marks=pytest.mark.slow),
                                             ("gpt2", "dynamo")])
def test_zoo_exports_raw_and_rewritten_on_gpu_device(family, exporter, tmp_path):
    """Torch exports (2 layers, small width; cached after their first export), raw through the planner
    and rewritten, exact fp32 kernels, padded batch 2 x 7, about a minute each: GPT-2 (dynamo) in CI, BERT
    (TorchScript; the demo BERT above has its graph) with PLUS_EP_SLOW_TESTS=1."""
    pytest.importorskip("cuda.bindings")
    pytest.importorskip("torch")
    from plus_ep import zoo
    from plus_ep.feeds import sample_inputs
    raw = zoo.export(family, exporter, "small", layers=2)
    plus = _rewrite(raw, tmp_path / "model.plus.onnx")
    feeds = _padded_feeds(tmp_path, sample_inputs(str(raw), batch=2, seq=7))
    res = _child(RUNNER, [json.dumps({"models": [str(plus), str(raw)], "reference": str(raw), "feeds": str(feeds)})])
    _check(res, [plus, raw])
