"""The launcher's `tmap` records (plus_ep/native/tmap.c, CONTRACT.md §3) in real ONNX Runtime CPU sessions with the
stand-in driver (tests/native/fake_cuda.c, which has no cuTensorMapEncodeTiled): each malformed record refuses
the session naming the node, the plan line and the rule, when the kernel object is created; a good plan parses
(the Python reader agrees) and its launch says the driver lacks the entry point. One child process runs every
case (the launcher reads PLUS_EP_CUDA_LIBRARY once per process). Binding and encoding on the emulated driver:
tests/emulated/test_tma_launcher.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402

from plus_ep.kernels.wire.plan import parse  # noqa: E402
from tests.support.launcher_models import fake_pack, fused_node  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PLAN = """plusplan 1
node tm
sym 0 m
sym 1 k
in 0 10 2 s0 s1
out 0 10 2 s0 s1
extent in 0 s0,s1,*
extent out 0 s0,s1,*
val 0 s0
route 0 1
kernel 0 0 fake_add s1,64,cdiv s0,128,cdiv 1 384 1 1 1024
TMAP
end
"""
GOOD = "tmap 10 2 in 0 0 s1 s0 s1 64 128 128"
BAD = [
    ("tmap 10 2 in 0 0 s1 s0 s1 64 128", "rank 2 takes 12 fields"),
    ("tmap 8 2 in 0 0 s1 s0 s1 64 128 128", "dtype `8` has no tensor-map element type"),
    ("tmap 1 2 in 0 0 s1 s0 s1 64 128 128", "dtype differs from input 0's"),
    ("tmap 10 6 in 0 0 s1 s0 s1 64 128 128", "rank `6` must be 1 to 5"),
    ("tmap 10 2 ins 0 0 s1 s0 s1 64 128 128", "expected `in`, `out` or `scratch`"),
    ("tmap 10 2 in 1 0 s1 s0 s1 64 128 128", "in index `1` names no declared tensor"),
    ("tmap 10 2 in 0 0 s1 s0 s1 64 257 128", "box dim 1 `257` must be 1 to 256"),
    ("tmap 10 2 in 0 0 s1 s0 s1 4 128 0", "not a multiple of 16"),
    ("tmap 10 2 in 0 0 s1 s0 s1 64 128 48", "swizzle `48` must be 0, 32, 64 or 128"),
    ("tmap 10 2 in 0 0 s1 s0 s1 64 128 64", "exceeds the 64-byte swizzle"),
    ("tmap 10 2 in 0 0 s1 s9 s1 64 128 128", "symbol s9"),
    ("\n".join([GOOD] * 9), "more than 8 tmap records for one kernel line"),
]

RUNNER = r"""
import json, sys
import numpy as np, onnxruntime as ort
out = []
for path in sys.argv[2:]:
    so = ort.SessionOptions()
    so.register_custom_ops_library(sys.argv[1])
    so.log_severity_level = 3
    try:
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        sess.run(None, {"X": np.ones((4, 8), np.float16)})
        out.append("no error")
    except Exception as e:
        out.append(str(e))
print(json.dumps(out))
"""


def _model(plan: str) -> onnx.ModelProto:
    node = fused_node("tm", ["X"], ["Z"], "t1", plan, {"sm_90a": fake_pack("sm_90a")})
    fn = helper.make_function("ai.plus_ep", "Fused", ["A"], ["C"], [helper.make_node("Identity", ["A"], ["C"])],
                              [helper.make_opsetid("", 17)], overload="t1")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT16, ["m", "k"])],
                          [helper.make_tensor_value_info("Z", TensorProto.FLOAT16, ["m", "k"])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.plus_ep", 1)],
                             functions=[fn], ir_version=10)


def test_tmap_records_in_sessions(tmp_path, library, fake_cuda):
    good = PLAN.replace("TMAP", GOOD + "\n" + "tmap 10 2 out 0 0 s1 s0 s1 8 4 0")
    assert parse(good).text() == good and len(parse(good).routes[0].launches[0].tmaps) == 2
    plans = [good] + [PLAN.replace("TMAP", rec) for rec, _ in BAD] + [PLAN.replace("kernel 0 0 fake_add s1,64,cdiv "
                                                                                  "s0,128,cdiv 1 384 1 1 1024\nTMAP", GOOD)]
    paths = []
    for k, plan in enumerate(plans):
        p = tmp_path / f"m{k}.onnx"
        onnx.save(_model(plan), p)
        paths.append(str(p))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_CUDA_", "PLUS_EP_CUDA"))}
    env.update(PLUS_EP_CUDA_LIBRARY=str(fake_cuda), PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", RUNNER, library, *paths], capture_output=True, text=True, env=env,
                       cwd=str(ROOT), timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    errors = json.loads(r.stdout.strip().splitlines()[-1])
    assert "needs tensor maps but the CUDA driver lacks cuTensorMapEncodeTiled" in errors[0], errors[0]
    for (rec, why), err in zip(BAD, errors[1:-1]):
        line = 12 + rec.count("\n")            # the last of the records is the one refused
        assert "PlusEP node 'tm'" in err and f"plus_plan line {line} `tmap" in err and why in err, (rec, err)
    assert "belongs to the `kernel` line above it" in errors[-1], errors[-1]
