"""Compiled nodes of several parts (plus_ep/native/ep_chain.c) on the stand-in driver: a planned group run
by a kernel part reading a constant the group carries, a host part (an ONNX model ONNX Runtime runs on the
CPU in the compiled node) and a second kernel part, in order, through intermediates: in host memory
(staging) and in "device" memory (PLUS_EP_VIRTUAL_GPU=1: allocations, uploads and copies through the
driver API); and the same group as an EPContext node a new process runs without the planner. The
stand-in's kernels: fake_add_marker x + y + 1000, fake_scale x * 3, so Z shows every part ran:
Z = ((X + K + 1000) + Y) * 3."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
N = 4
K = np.array([10, 20, 30, 40], np.float32)

pytestmark = pytest.mark.skipif(
    tuple(int(p) for p in ort.__version__.split(".")[:2]) < (1, 25), reason="plugin EPs need onnxruntime >= 1.25")

RUNNER = r"""
import json, sys
spec = json.loads(sys.argv[1])
import numpy as np, onnx, onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
if spec.get("stub"):
    import plus_ep.ep as E
    from tests.support.launcher_models import PLAN, SCALE_PLAN, fake_pack
    host = helper.make_model(helper.make_graph(
        [helper.make_node("Add", ["T", "Y"], ["U"])], "host",
        [helper.make_tensor_value_info("T", TensorProto.FLOAT, [None]),
         helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None])],
        [helper.make_tensor_value_info("U", TensorProto.FLOAT, [None])]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=10).SerializeToString()
    E.plan_groups = lambda path, opts: [{
        "node": "chain", "members": ["T", "U", "Z"], "inputs": ["X", "Y", "three"], "outputs": ["Z"],
        "parts": [{"kind": "kernel", "node": "k_add", "inputs": ["X", "K"], "outputs": ["T"], "plan": PLAN,
                   "packs": {"sm_90": fake_pack("sm_90")}, "op_type": "Fused",
                   "attributes": ["plus_plan", "plus_images_sm_90"], "strings": {}},
                  {"kind": "host", "node": "h_add", "inputs": ["T", "Y"], "outputs": ["U"], "model": host},
                  {"kind": "kernel", "node": "k_scale", "inputs": ["U"], "outputs": ["Z"], "plan": SCALE_PLAN,
                   "packs": {"sm_90": fake_pack("sm_90")}, "op_type": "Fused",
                   "attributes": ["plus_plan", "plus_images_sm_90"], "strings": {}}],
        "constants": {"K": numpy_helper.from_array(np.array(spec["K"], np.float32), "K")}}]
import plus_ep
so = ort.SessionOptions()
so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
out = {}
try:
    if spec.get("compile"):
        so.add_provider_for_devices(plus_ep.get_ep_devices(), {})
        ort.ModelCompiler(so, spec["model"], embed_compiled_data_into_model=True).compile_to_file(spec["compile"])
        out["compiled"] = True
    else:
        s = ort.InferenceSession(spec["model"], so, providers=["PlusEP", "CPUExecutionProvider"])
        X = np.arange(spec["n"], dtype=np.float32)
        Y = np.full(spec["n"], 2, np.float32)
        out["Z"] = s.run(None, {"X": X, "Y": Y})[0].tolist()
        out["assigned"] = sorted((sg.ep_name, n.op_type) for sg in s.get_provider_graph_assignment_info()
                                 for n in sg.get_nodes())
        out["planned"] = plus_ep.ep.planned()
except Exception as e:
    out["error"] = str(e)
print(json.dumps(out))
"""


def _model(path: Path) -> Path:
    vi = [helper.make_tensor_value_info(i, TensorProto.FLOAT, [N]) for i in ("X", "Y")]
    g = helper.make_graph([helper.make_node("Add", ["X", "Y"], ["T"], name="n1"),
                           helper.make_node("Add", ["T", "Y"], ["U"], name="n2"),
                           helper.make_node("Mul", ["U", "three"], ["Z"], name="n3")], "g", vi,
                          [helper.make_tensor_value_info("Z", TensorProto.FLOAT, [N])],
                          [numpy_helper.from_array(np.array(3, np.float32), "three")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10), path)
    return path


def _child(spec: dict, env: dict) -> dict:
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("FAKE_CUDA_", "PLUS_EP_")) or k == "PLUS_EP_CACHE_DIR"}   # its trust manifest
    e.update(env)
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT), e.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, "-c", RUNNER, json.dumps({"n": N, "K": K.tolist(), **spec})],
                       capture_output=True, text=True, env=e, timeout=300, cwd=str(ROOT))
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


WANT = (((np.arange(N, dtype=np.float32) + K + 1000) + 2) * 3).tolist()


@pytest.mark.parametrize("virtual_gpu", ["", "1"], ids=["staging", "device-memory"])
def test_three_parts_with_a_constant_and_a_host_part(tmp_path, fake_cuda, virtual_gpu):
    log = tmp_path / "fake.log"
    res = _child({"model": str(_model(tmp_path / "m.onnx")), "stub": True},
                 {"PLUS_EP_CUDA_LIBRARY": str(fake_cuda), "PLUS_EP_VIRTUAL_GPU": virtual_gpu, "FAKE_CUDA_LOG": str(log)})
    assert "error" not in res, res
    assert res["Z"] == WANT, res                                    # both kernels, the constant, the host part
    assert res["assigned"] == [["PlusEP", "Add"], ["PlusEP", "Add"], ["PlusEP", "Mul"]], res
    entries = [ln.split("entry=")[1].split()[0] for ln in log.read_text().splitlines() if ln.startswith("launch ")]
    assert entries == ["fake_add_marker", "fake_scale"], entries   # in order, once each


def test_chain_as_an_epcontext_node_runs_without_the_planner(tmp_path, fake_cuda):
    from tests.support.launcher_models import PLAN, SCALE_PLAN, fake_pack, fused_node
    # what this installation's rewriter records when it builds them: the digests of the Fused nodes they were
    fused_node("k_add", ["X", "K"], ["T"], "k", PLAN, {"sm_90": fake_pack("sm_90")})
    fused_node("k_scale", ["U"], ["Z"], "k", SCALE_PLAN, {"sm_90": fake_pack("sm_90")})
    env = {"PLUS_EP_CUDA_LIBRARY": str(fake_cuda)}
    out = tmp_path / "m_ctx.onnx"
    assert _child({"model": str(_model(tmp_path / "m.onnx")), "stub": True, "compile": str(out)}, env).get("compiled")
    from plus_ep import epcontext
    m = onnx.load(str(out))
    [(name, parts)] = epcontext.payloads(m, out).items()
    assert [p.node for p in parts] == ["k_add", "h_add", "k_scale"], parts
    assert parts[0].inputs == ["#0", "K"] and parts[1].inputs == ["T", "#1"] and parts[2].outputs == ["#0"], parts
    res = _child({"model": str(out)}, env)                         # a new process, no stub, no planner
    assert res.get("Z") == WANT and res["planned"] == {}, res
    res = _child({"model": str(out)}, {**env, "PLUS_EP_VIRTUAL_GPU": "1"})
    assert res.get("Z") == WANT, res


def test_a_part_reading_what_nothing_provides_is_refused(tmp_path, fake_cuda):
    """A part input that is neither the node's input, a constant nor an earlier part's output: Compile
    names it (the session fails) rather than running a kernel on a missing tensor."""
    code_fix = RUNNER.replace('"inputs": ["U"], "outputs": ["Z"], "plan": SCALE_PLAN',
                              '"inputs": ["nowhere"], "outputs": ["Z"], "plan": SCALE_PLAN')
    e = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_CUDA_", "PLUS_EP_")) or k == "PLUS_EP_CACHE_DIR"}
    e.update({"PLUS_EP_CUDA_LIBRARY": str(fake_cuda), "PYTHONPATH": str(ROOT)})
    r = subprocess.run([sys.executable, "-c", code_fix, json.dumps({"n": N, "K": K.tolist(), "stub": True,
                                                                   "model": str(_model(tmp_path / "m.onnx"))})],
                       capture_output=True, text=True, env=e, timeout=300, cwd=str(ROOT))
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert "input 'nowhere' of part 'k_scale' is not an input of the node" in res.get("error", ""), res


# ---------------------------------------------------------------- float16 models: the planner's view


def _fp16_mlp(path: Path) -> Path:
    """X -> MatMul(W) -> x * Sigmoid(x): float16, which ONNX Runtime's CPU provider computes in float32 for
    Sigmoid and Mul (its InsertCastTransformer adds casts and renames the outputs after partitioning)."""
    r = np.random.default_rng(0)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["h"], name="mm"),
         helper.make_node("Sigmoid", ["h"], ["s"], name="sig"),
         helper.make_node("Mul", ["h", "s"], ["Y"], name="mul")], "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT16, ["n", 32])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT16, ["n", 32])],
        [numpy_helper.from_array((r.standard_normal((32, 32)) / 6).astype(np.float16), "W")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10), path)
    return path


def test_planner_view_of_a_float16_model_is_what_getcapability_sees(tmp_path):
    """ep.ort_basic_graph: no cast or rename ORT adds after partitioning for float16 on the CPU, so every
    planned group's members are nodes of the graph GetCapability walks (before, none of them matched)."""
    from plus_ep.ep import ort_basic_graph
    path = _fp16_mlp(tmp_path / "mlp16.onnx")
    basic = ort_basic_graph(str(path))
    names = {t for n in basic.graph.node for t in list(n.input) + list(n.output)}
    assert not any(t.startswith("InsertedPrecisionFreeCast_") for t in names), sorted(names)
    assert [n.output[0] for n in basic.graph.node] == ["h", "s", "Y"], [n.output[0] for n in basic.graph.node]


def test_float16_model_planned_and_claimed(tmp_path, fake_cuda):
    """The real planner (kernels built with NVRTC, cached) on the float16 model: its group is claimed by
    PlusEP (the stand-in runs no real cubin: the partition is what is checked)."""
    pytest.importorskip("cuda.bindings")
    code = RUNNER.replace('out["Z"] = s.run(None, {"X": X, "Y": Y})[0].tolist()', 'pass')
    e = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_CUDA_", "PLUS_EP_")) or k == "PLUS_EP_CACHE_DIR"}
    e.update({"PLUS_EP_CUDA_LIBRARY": str(fake_cuda), "PYTHONPATH": str(ROOT)})
    r = subprocess.run([sys.executable, "-c", code, json.dumps({"n": N, "K": K.tolist(),
                                                               "model": str(_fp16_mlp(tmp_path / "mlp16.onnx"))})],
                       capture_output=True, text=True, env=e, timeout=600, cwd=str(ROOT))
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert "error" not in res, res
    assert res["assigned"] == [["PlusEP", "MatMul"], ["PlusEP", "Mul"], ["PlusEP", "Sigmoid"]], res
