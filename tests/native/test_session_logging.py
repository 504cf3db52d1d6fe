"""PlusEP's messages while ONNX Runtime creates a session follow ORT's log severity (plus_ep/ortlog.py and
plus_ep_log / plus_ep_log_once in plus_ep/native/ep_base.c), and the plugin EP's planner reports its
progress through ORT's logger when stderr is no terminal.

Each case runs in a child process (the once-per-process lines and the driver the library loads are per
process): without a CUDA driver for the no-GPU lines; on the emulated driver (a staging PlusEP device,
compute capability 9.0) for the planner, whose session is only created, never run. The planner's models
get fresh random weights, so the rewrite cache misses while the kernel cache (content-keyed) hits."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(
    tuple(int(p) for p in ort.__version__.split(".")[:2]) < (1, 25), reason="plugin EPs by name need onnxruntime >= 1.25")

MODEL = r"""
import numpy as np, onnx
from onnx import helper, TensorProto, numpy_helper
def model(path, seed=None):
    rng = np.random.default_rng(seed)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 32])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8, 16])
    inits = [numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "g"),
             numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b"),
             numpy_helper.from_array(rng.standard_normal((32, 16)).astype(np.float32), "w")]
    nodes = [helper.make_node("LayerNormalization", ["x", "g", "b"], ["n"], axis=-1),
             helper.make_node("MatMul", ["n", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])]
    onnx.save(helper.make_model(helper.make_graph(nodes, "g", [x], [y], inits),
                                opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)
"""

NO_GPU = MODEL + r"""
import sys, onnxruntime as ort, plus_ep
from plus_ep.demo_model import save_bert
if plus_ep.get_ep_devices():
    print("SKIP: PlusEP has a device here"); sys.exit(0)
d = sys.argv[1]
model(f"{d}/m.onnx", 0)
save_bert(f"{d}/bert.onnx", layers=1, hidden=32, heads=2, intermediate=64, vocab=50, max_pos=16)
onnx.save(plus_ep.rewrite(f"{d}/bert.onnx", archs=None), f"{d}/bert.plus.onnx")
def step(name):
    print(f"=== {name}", flush=True); print(f"=== {name}", file=sys.stderr, flush=True)
def custom_ops():
    so = ort.SessionOptions()
    so.register_custom_ops_library(plus_ep.get_library_path())
    ort.InferenceSession(f"{d}/bert.plus.onnx", so, providers=["CPUExecutionProvider"])
def plus_session(level=None):
    so = ort.SessionOptions()
    if level is not None:
        so.log_severity_level = level
    s = plus_ep.InferenceSession(f"{d}/m.onnx", so, providers=["PlusEP", "CPUExecutionProvider"])
    assert s.get_providers() == ["CPUExecutionProvider"], s.get_providers()
step("custom ops, default severity 3"); ort.set_default_logger_severity(3); custom_ops()
ort.set_default_logger_severity(2)
step("session at 3"); plus_session(3)
step("session at default"); plus_session()
step("second session at default"); plus_session()
step("custom ops, default severity 2"); custom_ops()
step("end")
"""

PLANNER = MODEL + r"""
import sys, onnxruntime as ort, plus_ep, plus_ep.ep
plus_ep.ep.LONG_SECONDS = 0.0          # the one line a long rewrite gives at the default severity, at once
d = sys.argv[1]
for k, level in enumerate([1, 2, 3]):
    ort.set_default_logger_severity(level)
    model(f"{d}/m{k}.onnx")
    print(f"=== severity {level}", file=sys.stderr, flush=True)
    s = ort.InferenceSession(f"{d}/m{k}.onnx", providers=["PlusEP", "CPUExecutionProvider"])
    assert s.get_providers()[0] == "PlusEP", s.get_providers()
print("=== end", file=sys.stderr, flush=True)
"""


def _child(code: str, tmp_path, **env) -> tuple[str, str]:
    e = {k: v for k, v in os.environ.items() if k not in ("PLUS_EP_CUDA_LIBRARY", "PLUS_EP_DISABLE")}
    e.update(PYTHONPATH=str(ROOT), **env)
    p = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, env=e,
                       timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    return p.stdout, p.stderr


def _sections(text: str) -> dict[str, list[str]]:
    out, name = {}, None
    for line in text.splitlines():
        if line.startswith("=== "):
            name = line[4:]
            out.setdefault(name, [])
        elif name is not None:
            out[name].append(line)
    return out


@pytest.fixture(scope="module")
def no_gpu(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nogpu")
    out, err = _child(NO_GPU, tmp)
    if out.startswith("SKIP"):
        pytest.skip(out.strip())
    return _sections(out + "\n" + err)


def _plus(lines):
    return [x for x in lines if "PlusEP" in x or "EP Error" in x]


def test_no_gpu_line_of_plus_ep_session_once_at_its_severity(no_gpu):
    """plus_ep.InferenceSession without a PlusEP device: no ORT "EP Error" banner per session; one warning
    per process, hidden by log_severity_level=3 without using up the once."""
    assert _plus(no_gpu["session at 3"]) == []
    shown = _plus(no_gpu["session at default"])
    assert len(shown) == 1 and "no usable NVIDIA GPU" in shown[0] and "[W:onnxruntime" in shown[0], shown
    assert _plus(no_gpu["second session at default"]) == []


def test_custom_op_library_line_follows_ort_default_severity(no_gpu):
    """The custom-op library without a driver: its line goes through ORT's default logger, so
    set_default_logger_severity(3) hides it, and the hidden one does not use up the once-per-process line."""
    assert _plus(no_gpu["custom ops, default severity 3"]) == []
    shown = _plus(no_gpu["custom ops, default severity 2"])
    assert len(shown) == 1 and "Fused nodes run their original subgraphs" in shown[0], shown


@pytest.fixture(scope="module")
def planner(tmp_path_factory):
    emulator = pytest.importorskip("plus_ep.verification.emulator")
    try:
        lib = emulator.library_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    tmp = tmp_path_factory.mktemp("planner")
    _, err = _child(PLANNER, tmp, PLUS_EP_CUDA_LIBRARY=lib)
    return _sections(err)


def test_planner_progress_through_ort_logger_at_info(planner):
    """Off a terminal, at severity 1 the planner's stages and its subgraphs rendered / kernels compiled of N
    come as INFO lines through ORT's logger."""
    info = [x for x in planner["severity 1"] if "[I:onnxruntime" in x and "PlusEP planner" in x]
    text = "\n".join(info)
    assert "basic optimizations" in text and "partitioning" in text, text
    assert "rendering kernels: 2/2 subgraphs" in text and "compiling kernels: 2/2 kernels" in text, text
    assert "-> 2 node groups for sm_90a" in text, text


def test_planner_default_severity_one_line_and_error_severity_none(planner):
    """At the default severity a long rewrite gives one WARNING line and no progress; at 3 nothing."""
    plus = [x for x in planner["severity 2"] if "PlusEP" in x]
    assert len(plus) == 1 and "[W:onnxruntime" in plus[0] and "rewriting" in plus[0], plus
    assert [x for x in planner["severity 3"] if "PlusEP" in x] == []
