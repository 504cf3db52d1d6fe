"""The Triton model repository (docs/deploy/triton/make_repository.py) opened the way Triton's onnxruntime
backend opens it, on the emulated CUDA driver: the model file resolved from the repository as the backend
does (<model>/<version>/<default_model_filename or model.onnx>), the custom-op library taken from
config.pbtxt's model_operations.op_library_filename, and the backend's session options for a config
without `optimization` or `parameters` (graph optimization ORT_ENABLE_ALL, ORT_SEQUENTIAL, ORT's default
thread pools, every op library registered on the options), trust from the repository's own manifest
(-e PLUS_EP_TRUST_DIR=/models/<name>/trusted). The fused nodes' kernels run on the PTX interpreter and the
outputs match the original model on ORT CPU. (No Triton server here: no container engine; the CUDA EP the
backend adds for KIND_GPU instances is not available on this machine either.)"""
from __future__ import annotations

import json
import subprocess
import sys

import onnx

from tests.support.emulated_models import ROOT, child_env
from tests.support.triton_config import parse

OPEN = r"""
import json, os, sys
import numpy as np, onnx, onnxruntime as ort
from plus_ep.verification.emulator import Emulator
from tests.support.triton_config import parse
repo, version = sys.argv[1], sys.argv[2]
cfg = parse(open(os.path.join(repo, "config.pbtxt")).read())
path = os.path.join(repo, version, cfg.default_model_filename or "model.onnx")
emu = Emulator.get()
emu.set_arch("sm_80")
emu.register_model(onnx.load(path))
so = ort.SessionOptions()                       # the backend's defaults for this config
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
for lib in cfg.model_operations.op_library_filename:
    so.register_custom_ops_library(lib)
from plus_ep.demo_model import sample_inputs
feeds = sample_inputs(batch=2, seq=7, vocab=100)
sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
got = sess.run([o.name for o in cfg.output], {i.name: feeds[i.name] for i in cfg.input})[0]
want = ort.InferenceSession(sys.argv[3], providers=["CPUExecutionProvider"]).run(None, feeds)[0]
print(json.dumps({"launches": len(emu.records), "nodes": sorted({r.node for r in emu.records}),
                  "errors": [r.error for r in emu.records if r.error], "shape": list(got.shape),
                  "maxdiff": float(np.max(np.abs(got - want))), "scale": float(np.max(np.abs(want)))}))
"""


def test_the_repository_opens_as_tritons_backend_opens_it(tmp_path):
    import plus_ep
    from plus_ep.demo_model import save_bert
    original = tmp_path / "original.onnx"
    save_bert(str(original), layers=1, hidden=64, heads=2, intermediate=128, vocab=100, max_pos=64)
    env = child_env({"PLUS_EP_TRUST_DIR": str(tmp_path / "build_machine")})
    r = subprocess.run([sys.executable, str(ROOT / "docs" / "deploy" / "triton" / "make_repository.py"),
                        str(tmp_path / "models"), "--model", str(original), "--arch", "sm_80",
                        "--library", plus_ep.get_library_path()], capture_output=True, text=True, env=env,
                       timeout=900, cwd=str(ROOT))
    assert r.returncode == 0, r.stdout + r.stderr
    repo = tmp_path / "models" / "plus_bert"
    cfg = parse((repo / "config.pbtxt").read_text())
    assert list(cfg.model_operations.op_library_filename) == [plus_ep.get_library_path()]
    assert not cfg.default_model_filename and (repo / "1" / "model.onnx").exists()
    n_fused = sum(n.domain == "ai.plus_ep" for n in onnx.load(repo / "1" / "model.onnx").graph.node)

    env = child_env({"PLUS_EP_TRUST_DIR": str(repo / "trusted"),                  # as the container is started
                     "PLUS_EP_CACHE_DIR": str(tmp_path / "container_cache")})
    env.pop("PLUS_EP_TRUST", None)
    p = subprocess.run([sys.executable, "-c", OPEN, str(repo), "1", str(original)], capture_output=True, text=True,
                       env=env, timeout=600, cwd=str(ROOT))
    assert p.returncode == 0, p.stdout + p.stderr[-4000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["shape"] == [2, 7, 64] and not out["errors"], out
    assert len(out["nodes"]) == n_fused > 0, out                                      # every fused node launched
    assert out["maxdiff"] <= 2e-2 * max(1.0, out["scale"]), out                       # TF32 GEMMs (the default)

