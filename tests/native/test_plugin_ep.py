"""PlusEP as an ONNX Runtime plugin execution provider, through the stock onnxruntime.InferenceSession,
SessionOptions.add_provider_for_devices and a C host (no Python); ORT CPU wheel, no GPU.

Each case runs in a fresh process: the library reads PLUS_EP_CUDA_LIBRARY once per process and ORT
registers a plugin library once per process. Device modes (plus_ep/native/ep.h):
- no CUDA driver: no PlusEP device (one warning through ORT's logger); sessions run on the other EPs;
- the stand-in driver (tests/native/fake_cuda.c) named by PLUS_EP_CUDA_LIBRARY: a GPU-typed device runs
  the nodes' kernels through host staging (the stand-in's kernels add 1000, so outputs show who ran);
- the same with PLUS_EP_VIRTUAL_GPU=1: a GPU device on the driver API (allocator, data transfer).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from tests.support.launcher_models import add_model  # noqa: E402
from tests.support.plugin_host import SANITIZE, build_host, run_host  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.skipif(
    tuple(int(p) for p in ort.__version__.split(".")[:2]) < (1, 25), reason="plugin EPs by name need onnxruntime >= 1.25")

RUNNER = r"""
import json, sys, warnings
spec = json.loads(sys.argv[1])
warnings.simplefilter("always")
import numpy as np, onnxruntime as ort
if spec.get("stub_planner"):       # the planner's answer for the raw Add model, with stand-in kernels
    import plus_ep.ep as E
    from tests.support.launcher_models import PLAN, fake_pack
    E.plan_groups = lambda path, opts: [{"node": "planned_add", "members": ["Z"], "inputs": ["X", "Y"],
        "outputs": ["Z"], "parts": [{"kind": "kernel", "node": "planned_add", "inputs": ["X", "Y"], "outputs": ["Z"],
                                      "plan": PLAN, "packs": {"sm_90": fake_pack("sm_90")}}]}]
import plus_ep
so = ort.SessionOptions()
so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
out = {"devices": [{k: v for k, v in d.items() if k != "device"} for d in plus_ep.ep.devices()],
       "reason": plus_ep.ep.no_device_reason()}
try:
    if spec["how"] == "devices":
        devs = [d for d in ort.get_ep_devices() if d.ep_name == "PlusEP"]
        so.add_provider_for_devices(devs, spec.get("options", {}))
        sess = ort.InferenceSession(spec["model"], sess_options=so)
    else:
        provs = [("PlusEP", spec["options"]) if spec.get("options") else "PlusEP", *spec.get("rest", ["CPUExecutionProvider"])]
        sess = ort.InferenceSession(spec["model"], so, providers=provs)
except Exception as e:
    out["error"] = str(e); print(json.dumps(out)); sys.exit(0)
for _ in range(spec.get("sessions", 1) - 1):   # more sessions in the same process
    ort.InferenceSession(spec["model"], so, providers=[("PlusEP", spec["options"]) if spec.get("options") else "PlusEP",
                                                       *spec.get("rest", ["CPUExecutionProvider"])])
out["providers"] = sess.get_providers()
out["assigned"] = {}
for sg in sess.get_provider_graph_assignment_info():
    out["assigned"].setdefault(sg.ep_name, []).extend([n.op_type for n in sg.get_nodes()])
if spec.get("feeds") == "add":
    n = spec["n"]
    feeds = {"X": np.arange(n, dtype=np.float32), "Y": np.full(n, 2, np.float32)}
elif spec.get("feeds") == "bert":
    from plus_ep.demo_model import sample_inputs
    feeds = sample_inputs(batch=2, seq=16, vocab=100)
else:
    feeds = None
if feeds is not None:
    got = sess.run(None, feeds)
    want = ort.InferenceSession(spec["reference"], providers=["CPUExecutionProvider"]).run(None, feeds) \
        if spec.get("reference") else None
    out["out"] = got[0].ravel()[:8].tolist()
    if want is not None:
        out["maxdiff"] = max(float(np.max(np.abs(a.astype(np.float64) - b))) for a, b in zip(got, want))
print(json.dumps(out))
"""


def child(spec: dict, env: dict | None = None) -> tuple[dict, str]:
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("FAKE_CUDA_", "PLUS_EP_")) or k == "PLUS_EP_CACHE_DIR"}
    e["PLUS_EP_CUDA_LIBRARY"] = "/nonexistent/libcuda.so.1"    # no driver unless the case names one
    e.update(env or {})
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT), e.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, "-c", RUNNER, json.dumps(spec)], capture_output=True, text=True, env=e,
                       timeout=600, cwd=str(ROOT))
    assert r.returncode == 0, r.stderr[-3000:]
    # ORT's Python fallback banner ("EP Error ... Falling back") goes to stdout: hand it back with stderr
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr + "\n".join(r.stdout.strip().splitlines()[:-1])


def raw_add_model():
    vi = [helper.make_tensor_value_info(i, TensorProto.FLOAT, ["n"]) for i in ("X", "Y")]
    g = helper.make_graph([helper.make_node("Add", ["X", "Y"], ["Z"], name="add")], "g", vi,
                          [helper.make_tensor_value_info("Z", TensorProto.FLOAT, ["n"])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


@pytest.fixture(scope="module")
def demo_models(tmp_path_factory):
    """A small demo BERT, raw and rewritten with kernels for sm_90a (NVRTC runs on the CPU)."""
    pytest.importorskip("cuda.bindings")
    import plus_ep
    from plus_ep.demo_model import save_bert
    d = tmp_path_factory.mktemp("demo")
    raw = d / "bert.onnx"
    save_bert(str(raw), layers=1, hidden=64, heads=2, intermediate=128, vocab=100, max_pos=64)
    plus = d / "bert.plus.onnx"
    onnx.save(plus_ep.rewrite(str(raw), archs=["sm_90a"]), plus)
    return raw, plus


def ep_warnings(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if "PlusEP" in ln and ("[W:" in ln or "Warning" in ln)]


# ---------------------------------------------------------------- no driver: no PlusEP device


def test_no_gpu_no_device_one_warning_original_runs(demo_models):
    """No usable GPU: PlusEP offers no device (ORT's device policies never pick it); a session naming it
    gets ORT's own fallback to the other providers and the original's outputs; `import plus_ep` says why
    at INFO only (a client's own registration warns: tests/native/test_plugin_ep_packaging.py), the reason stays
    available (plus_ep.ep.no_device_reason)."""
    raw, plus = demo_models
    for model in (plus, raw):
        res, err = child({"model": str(model), "how": "names", "feeds": "bert", "reference": str(raw), "sessions": 3})
        assert "error" not in res and res["devices"] == [], res
        assert res["providers"] == ["CPUExecutionProvider"], res
        assert res["maxdiff"] <= 1e-4, res
        assert "PlusEP" not in res["assigned"], res       # the original nodes / function bodies on the CPU EP
        ours = [ln for ln in err.splitlines() if "] PlusEP: " in ln]     # PlusEP's own lines (ORT's logger)
        assert ours == [], err
        assert "no usable NVIDIA GPU" in res["reason"] and "libcuda" in res["reason"], res


def test_import_registers_once_and_old_ort_is_a_clear_error(monkeypatch):
    import plus_ep
    import plus_ep.ep as E
    first = plus_ep.register()
    assert plus_ep.register() == first == plus_ep.get_library_path()
    monkeypatch.setattr(E, "_state", {"path": None, "lib": None, "planner": None})
    monkeypatch.setattr(ort, "__version__", "1.24.4")
    with pytest.raises(RuntimeError, match=r"onnxruntime >= 1\.25 as a plugin execution provider \(this is 1\.24\.4\)"):
        E.register()


# ---------------------------------------------------------------- the stand-in driver: kernels run


@pytest.mark.parametrize("how", ["names", "devices"])
@pytest.mark.parametrize("virtual_gpu", ["", "1"])
def test_fused_nodes_run_on_plus_ep(tmp_path, fake_cuda, how, virtual_gpu):
    path = tmp_path / "add.onnx"
    onnx.save(add_model(), path)      # a Fused node with a model-local function: GetCapability runs twice
    log = tmp_path / "fake.log"
    res, err = child({"model": str(path), "how": how, "feeds": "add", "n": 6},
                     {"PLUS_EP_CUDA_LIBRARY": str(fake_cuda), "FAKE_CUDA_LOG": str(log),
                      "PLUS_EP_VIRTUAL_GPU": virtual_gpu})
    assert "error" not in res, res
    assert res["devices"][0]["mode"] == ("gpu" if virtual_gpu else "staging"), res
    assert res["devices"][0]["compute_capability"] == "9.0"
    assert res["providers"][0] == "PlusEP"
    assert res["assigned"]["PlusEP"] == ["Fused"], res
    assert res["out"] == [1002.0 + i for i in range(6)], res          # the stand-in's kernel ran
    assert sum(ln.startswith("launch entry=fake_add_marker") for ln in log.read_text().splitlines()) == 1
    assert not ep_warnings(err), err


def test_unclaimable_fused_node_runs_its_body(tmp_path, fake_cuda):
    """A node without an image for the device's arch stays with the next EP (one warning)."""
    from tests.support.launcher_models import fake_pack
    path = tmp_path / "add80.onnx"
    onnx.save(add_model(packs={"sm_80": fake_pack("sm_80")}), path)
    res, err = child({"model": str(path), "how": "names", "feeds": "add", "n": 3},
                     {"PLUS_EP_CUDA_LIBRARY": str(fake_cuda)})
    assert res["out"] == [2.0, 3.0, 4.0] and "PlusEP" not in res["assigned"], res
    warns = ep_warnings(err)
    assert len(warns) == 1 and "no kernel image for the device's arch sm_90" in warns[0], err


def test_raw_model_through_the_planner(tmp_path, fake_cuda):
    """No Fused node in the graph: the EP asks the (here stubbed) Python planner and claims its group."""
    path = tmp_path / "raw_add.onnx"
    onnx.save(raw_add_model(), path)
    res, err = child({"model": str(path), "how": "names", "feeds": "add", "n": 5, "stub_planner": True},
                     {"PLUS_EP_CUDA_LIBRARY": str(fake_cuda)})
    assert res["assigned"] == {"PlusEP": ["Add"]}, res
    assert res["out"] == [1002.0, 1003.0, 1004.0, 1005.0, 1006.0], res


def test_raw_demo_model_planned_by_the_rewriter(demo_models, fake_cuda):
    """The real planner on the raw demo BERT: rewrite + kernels (cached), groups claimed by PlusEP. The
    stand-in cannot run real cubins, so only the partition is checked here (the emulated driver runs it)."""
    raw, _ = demo_models
    res, err = child({"model": str(raw), "how": "names"}, {"PLUS_EP_CUDA_LIBRARY": str(fake_cuda)})
    assert "error" not in res, res
    ops = res["assigned"].get("PlusEP", [])
    assert ops.count("LayerNormalization") >= 2 and ops.count("MatMul") >= 4, res
    assert "Softmax" in ops, res          # the attention group too (planned on ORT's basic-optimized graph)


def test_bytes_model_is_not_planned(tmp_path, fake_cuda):
    """A raw model ORT gets as bytes has no path for the planner: unfused, one warning."""
    path = tmp_path / "raw_add.onnx"
    onnx.save(raw_add_model(), path)
    code = RUNNER.replace('spec["model"], so', 'open(spec["model"], "rb").read(), so')
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("FAKE_CUDA_", "PLUS_EP_")) or k == "PLUS_EP_CACHE_DIR"}   # its trust manifest
    e.update({"PLUS_EP_CUDA_LIBRARY": str(fake_cuda), "PYTHONPATH": str(ROOT)})
    r = subprocess.run([sys.executable, "-c", code, json.dumps({"model": str(path), "how": "names", "feeds": "add",
                                                                 "n": 3})],
                       capture_output=True, text=True, env=e, timeout=300, cwd=str(ROOT))
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["out"] == [2.0, 3.0, 4.0] and "PlusEP" not in res["assigned"], res
    warns = ep_warnings(r.stderr)
    assert len(warns) == 1 and "not loaded from a file" in warns[0], r.stderr


# ---------------------------------------------------------------- provider options


def test_options_reach_the_ep_and_unknown_ones_are_named(tmp_path, fake_cuda):
    path = tmp_path / "add.onnx"
    onnx.save(add_model(), path)
    env = {"PLUS_EP_CUDA_LIBRARY": str(fake_cuda)}
    ok, _ = child({"model": str(path), "how": "names", "feeds": "add", "n": 2,
                   "options": {"fp32_math": "tf32", "verify": "0", "arch": "sm_90", "cache_dir": str(tmp_path)}}, env)
    assert ok["out"] == [1002.0, 1003.0], ok
    off, _ = child({"model": str(path), "how": "names", "feeds": "add", "n": 2,
                    "options": {"disable": "all"}}, env)
    assert off["out"] == [2.0, 3.0] and "PlusEP" not in off["assigned"], off
    for opts, needle in (({"bogus": "1"}, "unknown PlusEP provider option 'bogus'"),
                         ({"fp32_math": "fast"}, "fp32_math='fast'")):
        res, err = child({"model": str(path), "how": "devices", "feeds": "add", "n": 2, "options": opts}, env)
        assert needle in res.get("error", "") + err, (res, err)


# ---------------------------------------------------------------- C host (no Python) and sanitizers


@pytest.mark.parametrize("flags", [[], SANITIZE], ids=["plain", "asan-ubsan"])
def test_c_host(tmp_path, flags):
    host, lib, fake = build_host(tmp_path / "build", flags)
    model = tmp_path / "add.onnx"
    onnx.save(add_model(), model)
    cases = [({"PLUS_EP_CUDA_LIBRARY": str(fake)}, "staging", "Z: 1002 1003 1004 1005"),
             ({"PLUS_EP_CUDA_LIBRARY": str(fake), "PLUS_EP_VIRTUAL_GPU": "1"}, "gpu", "Z: 1002 1003 1004 1005")]
    for env, mode, want in cases:
        r = run_host(host, lib, model, 4, env, "fp32_math=exact")
        assert r.returncode == 0 and f"mode {mode}" in r.stdout and want in r.stdout, (r.stdout, r.stderr[-2000:])
    r = run_host(host, lib, model, 4, {"PLUS_EP_CUDA_LIBRARY": "/nonexistent/libcuda.so.1"})   # no device at all
    assert r.returncode == 1 and "error: no PlusEP device" in r.stdout and "mode" not in r.stdout, r.stdout
    assert "PlusEP: no usable NVIDIA GPU" in r.stderr + r.stdout, r.stderr[-2000:]   # through ORT's logger
    r = run_host(host, lib, model, 4, {"PLUS_EP_CUDA_LIBRARY": str(fake)}, "bogus=1")
    assert r.returncode == 1 and "unknown PlusEP provider option 'bogus'" in r.stdout, r.stdout


def test_c_host_on_the_emulated_driver_is_a_clear_error(tmp_path):
    """The emulated driver runs kernels on the PTX interpreter, which is Python: a C host (no Python in
    the process) gets the staging device, then an ORT error naming the node at its first launch; never
    a crash, never outputs that no kernel computed. C hosts run real kernels on a GPU only."""
    pytest.importorskip("cuda.bindings")
    import plus_ep
    from plus_ep.verification.emulator import library_path
    try:
        emu = library_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    host, lib, _ = build_host(tmp_path / "build", [])
    vi = [helper.make_tensor_value_info(i, TensorProto.FLOAT, ["n"]) for i in ("X", "Y")]
    g = helper.make_graph([helper.make_node("Add", ["X", "Y"], ["s"], name="add"),
                           helper.make_node("Relu", ["s"], ["r"], name="relu"),
                           helper.make_node("Mul", ["r", "Y"], ["Z"], name="mul")], "g", vi,
                          [helper.make_tensor_value_info("Z", TensorProto.FLOAT, ["n"])])
    rewritten = plus_ep.rewrite(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10),
                                archs=["sm_90a"])
    fused = [n.name for n in rewritten.graph.node if n.op_type == "Fused"]
    assert len(fused) == 1, [n.op_type for n in rewritten.graph.node]
    model = tmp_path / "elementwise.plus.onnx"
    onnx.save(rewritten, model)
    r = run_host(host, lib, model, 4, {"PLUS_EP_CUDA_LIBRARY": emu})
    assert r.returncode == 1 and "mode staging" in r.stdout, (r.stdout, r.stderr[-2000:])
    assert "Z:" not in r.stdout, r.stdout
    assert f"PlusEP node '{fused[0]}'" in r.stdout, r.stdout
    assert "no PTX interpreter is attached to the emulated CUDA driver" in r.stdout, r.stdout


def test_installed_library_exports_both_paths(library):
    r = subprocess.run(["nm", "-D", "--defined-only", library], capture_output=True, text=True)
    if r.returncode:
        pytest.skip("no nm")
    syms = {ln.split()[-1].split("@")[0] for ln in r.stdout.splitlines() if " T " in ln}   # name@@VERSION
    assert {"RegisterCustomOps", "CreateEpFactories", "ReleaseEpFactory", "PlusEP_SetPlanner"} <= syms, syms
