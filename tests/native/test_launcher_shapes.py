"""What ORT's shape inference sees of a Fused node when the launcher is registered (CPU, stand-in driver).

The launcher's InferOutputShapeFn binds the plan's symbols from the inputs: an output dim that is a
symbol of a named input dim keeps that name, a known dim its value, anything else gets a name of its
own. A bare -1 would be stored by ORT as the *value* -1 and flow through shape-data propagation
(Shape -> Gather -> Concat -> Reshape), which broke session creation of a rewritten BERT-TorchScript.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from plus_ep import config  # noqa: E402
from tests.support.launcher_models import add_model  # noqa: E402

RUNNER = r"""
import json, sys
import numpy as np, onnxruntime as ort
so = ort.SessionOptions()
so.register_custom_ops_library(sys.argv[2])
sess = ort.InferenceSession(sys.argv[1], so, providers=["CPUExecutionProvider"])
x = np.arange(6, dtype=np.float32)
outs = sess.run(None, {"X": x, "Y": np.full(6, 2, np.float32)})
print(json.dumps({"shapes": {o.name: o.shape for o in sess.get_outputs()},
                  "values": [o.tolist() for o in outs]}))
"""


def shape_chain_model():
    """Z = Fused(X, Y) (symbolic n); R = Reshape(Z, Concat(Shape(Z)[0:1] // 2, [2])); Z and R are outputs
    with unknown declared dims, so what ORT reports for them is what it inferred."""
    m = add_model()
    g = m.graph
    del g.output[:]
    g.node.extend([
        helper.make_node("Shape", ["Z"], ["s"]),
        helper.make_node("Slice", ["s", "zero", "one"], ["s0"]),
        helper.make_node("Div", ["s0", "two"], ["half"]),
        helper.make_node("Concat", ["half", "two"], ["target"], axis=0),
        helper.make_node("Reshape", ["Z", "target"], ["R"]),
    ])
    for name, v in (("zero", 0), ("one", 1), ("two", 2)):
        g.initializer.append(helper.make_tensor(name, TensorProto.INT64, [1], [v]))
    g.output.extend([helper.make_tensor_value_info("Z", TensorProto.FLOAT, [None]),
                     helper.make_tensor_value_info("R", TensorProto.FLOAT, [None, None])])
    onnx.checker.check_model(m)
    return m


def test_symbolic_output_dims_keep_the_input_name(tmp_path, library, fake_cuda):
    path = tmp_path / "m.onnx"
    onnx.save(shape_chain_model(), path)
    env = {"PLUS_EP_CUDA_LIBRARY": str(fake_cuda), "PATH": "/usr/bin:/bin",
           "PLUS_EP_CACHE_DIR": str(config.cache_root())}   # its trust manifest (launcher_models vouches)
    r = subprocess.run([sys.executable, "-c", RUNNER, str(path), library], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["shapes"]["Z"] == ["n"], res          # not [-1]: the input's dim name carried through
    assert res["shapes"]["R"][1] == 2, res
    # the stand-in kernel ran (x + y + 1000), and the Reshape downstream of it saw the real shape
    z = [v + 2 + 1000 for v in range(6)]
    assert res["values"][0] == z
    assert res["values"][1] == [z[0:2], z[2:4], z[4:6]]
