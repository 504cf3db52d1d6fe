"""A node that binds a dim from a shape tensor (`shapev`), end to end on the emulated CUDA driver.

The rewriter puts the shape tensor first and names the node `FusedHost1` (its first input CPU-resident,
kernels/CONTRACT.md §3); ONNX Runtime loads the model with the launcher's custom ops (CPU twin) and
with the PlusEP plugin EP, and the node's GEMM kernel runs on the PTX interpreter. The CUDA twin's
memory declaration and its zero synchronisations are checked in tests/native/test_cpu_resident_shapes.py.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from tests.support.emulated_models import run_child  # noqa: E402
from tests.support.shapev_models import feeds, gpt2_like  # noqa: E402

RUNNER = r"""
import json, sys
import numpy as np, onnx, onnxruntime as ort
from plus_ep.verification.emulator import Emulator
emu = Emulator.get()
import plus_ep
path, feeds_path = sys.argv[1], sys.argv[2]
emu.set_arch("sm_80")
emu.register_model(onnx.load(path))
feeds = dict(np.load(feeds_path))
out = {}
so = ort.SessionOptions()
so.register_custom_ops_library(plus_ep.get_library_path())
for how in ("custom_op", "plugin_ep"):
    emu.reset_records()
    if how == "custom_op":
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    else:
        eso = ort.SessionOptions()
        eso.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
        sess = ort.InferenceSession(path, eso, providers=["PlusEP", "CPUExecutionProvider"])
    y, = sess.run(None, feeds)
    assigned = ([[sg.ep_name, [n.op_type for n in sg.get_nodes()]] for sg in sess.get_provider_graph_assignment_info()]
                if how == "plugin_ep" else [])
    out[how] = {"y": y.tolist(), "launches": [[r.entry, r.error, len(r.findings)] for r in emu.records],
                "assigned": assigned}
print(json.dumps(out))
"""


def test_host_shape_node_runs_on_the_interpreter(tmp_path):
    import plus_ep
    res = plus_ep.rewrite_detailed(gpt2_like(), archs=["sm_80"], fp32_math="exact")
    fused = [n for n in res.model.graph.node if n.domain == "ai.plus_ep"]
    assert [n.op_type for n in fused] == ["FusedHost1"], fused
    assert list(fused[0].input)[0] == "shape"            # the Concat's output, read on the host
    plan = next(a.s.decode() for a in fused[0].attribute if a.name == "plus_plan")
    assert "\nin 0 7 1 3\n" in plan and "\nshapev s1 0 1 96\n" in plan, plan   # a 0 there: X2 @ W's 96
    fn = next(f for f in res.model.functions if f.overload == fused[0].overload)
    assert fn.name == "FusedHost1"                       # the body ORT inlines without the launcher

    path, fpath = tmp_path / "m.onnx", tmp_path / "feeds.npz"
    onnx.save(res.model, path)
    x = feeds()
    np.savez(fpath, **x)
    want = ort.InferenceSession(gpt2_like().SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)[0]
    out = json.loads(run_child(RUNNER, [path, fpath], timeout=600))
    for how in ("custom_op", "plugin_ep"):
        run = out[how]
        assert run["launches"] and all(e is None and f == 0 for _, e, f in run["launches"]), run["launches"]
        y = np.array(run["y"], np.float32)
        assert y.shape == want.shape == (2, 3, 96)
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    assert ["PlusEP", ["FusedHost1"]] in out["plugin_ep"]["assigned"], out["plugin_ep"]["assigned"]
