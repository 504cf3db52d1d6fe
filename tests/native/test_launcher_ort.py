"""The launcher library inside real ONNX Runtime CPU sessions (no GPU).

Each case runs in a fresh Python process, because the library reads its environment
(PLUS_EP_CUDA_LIBRARY, PLUS_EP_DISABLE) once per process. With the stand-in driver
(tests/native/fake_cuda.c) the CPU-EP twin of ai.plus_ep::Fused runs the node's "kernels" through
host staging; the stand-in's kernels compute something the function bodies do not, so the
outputs show which one ran.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from tests.support.launcher_models import (  # noqa: E402
    PLAN, SCALE_PLAN, add_model, fake_pack, function, fused_node, launches, model)

ROOT = Path(__file__).resolve().parents[2]


RUNNER = r"""
import json, sys, threading
import numpy as np, onnxruntime as ort
path, mode, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
so = ort.SessionOptions()
so.register_custom_ops_library(sys.argv[4])
try:
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
except Exception as e:
    print(json.dumps({"stage": "session", "error": str(e)})); sys.exit(0)
def feed(tid=0, m=n):
    return {"X": np.arange(m, dtype=np.float32) + tid, "Y": np.full(m, 2, np.float32)}
try:
    if mode == "run":
        print(json.dumps({"out": sess.run(None, feed())[0].tolist()}))
    elif mode == "badshape":
        f = feed(); f["Y"] = np.ones(n + 1, np.float32)
        sess.run(None, f)
        print(json.dumps({"out": "no error"}))
    elif mode == "threads":
        results, errors = {}, []
        def work(tid):
            try:
                outs = [sess.run(None, feed(tid, n + tid))[0] for _ in range(50)]
                results[tid] = (outs, feed(tid, n + tid))
            except Exception as e:
                errors.append(str(e))
        ts = [threading.Thread(target=work, args=(t,)) for t in range(16)]
        [t.start() for t in ts]; [t.join() for t in ts]
        bad = [t for t, (outs, f) in results.items()
               if any(not np.array_equal(o, outs[0]) for o in outs)
               or not np.array_equal(outs[0], f["X"] + f["Y"] + 1000)]
        print(json.dumps({"threads": len(results), "bad": bad, "errors": errors[:3]}))
except Exception as e:
    print(json.dumps({"stage": "run", "error": str(e)}))
"""


def run(tmp_path, library, m, env, mode="run", n=5):
    path = tmp_path / "model.onnx"
    onnx.save(m, path)
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("FAKE_CUDA_", "PLUS_EP_")) or k == "PLUS_EP_CACHE_DIR"}   # its trust manifest
    e.update(env)
    r = subprocess.run([sys.executable, "-c", RUNNER, str(path), mode, str(n), library], capture_output=True,
                       text=True, env=e, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr



# ---------------------------------------------------------------- the library file


def test_library_path_and_exports(library):
    p = Path(library)
    assert p.is_absolute() and p.is_file() and p.parent.name == "plus_ep"
    nm = shutil.which("nm")
    if nm:
        out = subprocess.run([nm, "-D", "--defined-only", library], capture_output=True, text=True, check=True).stdout
        # the custom-op entry point, the plugin-EP entry points, the planner hooks, and the statistics of
        # the device pool and the nodes, the option check (plus_ep/native/ep*.c)
        from tests.support.plugin_host import EXPECTED_EXPORTS      # the list the version script keeps
        names = {ln.split()[-1].split("@")[0] for ln in out.splitlines() if ln.strip() and " A " not in ln}
        assert names == EXPECTED_EXPORTS, sorted(names ^ EXPECTED_EXPORTS)
        undefined = subprocess.run([nm, "-D", "--undefined-only", library], capture_output=True, text=True).stdout
        assert "cuInit" not in undefined and "Ort" not in undefined   # no link-time CUDA or ORT dependency


def test_missing_library_names_the_fix(monkeypatch, tmp_path):
    import plus_ep.library as lib
    monkeypatch.setattr(lib, "_HERE", tmp_path)
    with pytest.raises(FileNotFoundError, match=r"pip install -e \."):
        lib.get_library_path()


# ---------------------------------------------------------------- no driver: function bodies run


@pytest.mark.parametrize("env", [
    {"PLUS_EP_CUDA_LIBRARY": "/nonexistent/libcuda.so.1"},
    {"FAKE_CUDA_DEVICES": "0"},
    {"FAKE_CUDA_INIT_FAIL": "1"},
    {"PLUS_EP_DISABLE": "1"},
], ids=["no-driver", "no-device", "init-fails", "disabled"])
def test_without_driver_the_function_body_runs(tmp_path, library, fake_cuda, env):
    log = tmp_path / "cuda.log"
    env = {"PLUS_EP_CUDA_LIBRARY": str(fake_cuda), "FAKE_CUDA_LOG": str(log), **env}
    res, _ = run(tmp_path, library, add_model(), env)
    assert res == {"out": [2.0, 3.0, 4.0, 5.0, 6.0]}      # X + Y: the model-local function
    assert launches(log) == []


# ---------------------------------------------------------------- the stand-in driver: kernels run


def test_kernels_run_through_host_staging(tmp_path, library, fake_cuda):
    log = tmp_path / "cuda.log"
    env = {"PLUS_EP_CUDA_LIBRARY": str(fake_cuda), "FAKE_CUDA_LOG": str(log)}
    res, stderr = run(tmp_path, library, add_model(), env)
    assert res == {"out": [1002.0, 1003.0, 1004.0, 1005.0, 1006.0]}   # fake_add_marker, not the body
    assert "PlusEP node 'fused_add' runs through host staging" in stderr
    text = log.read_text()
    assert "load dev=0 entries=4 tags=sm_90" in text
    (line,) = launches(log)
    assert "entry=fake_add_marker grid=1,1,1 block=256,1,1 smem=0 stream=null" in line and "v=5,7,0,0" in line
    assert text.count("sync dev=0") == 2
    # A larger input takes route 1.
    res, _ = run(tmp_path, library, add_model(), env, n=3000)
    assert res["out"] == [7.0] * 3000


def test_two_fused_nodes_each_run_their_own_plan(tmp_path, library, fake_cuda):
    p = {"sm_90": fake_pack("sm_90")}
    m = model([fused_node("fused_add", ["X", "Y"], ["T"], "k1", PLAN, p),
               fused_node("fused_scale", ["T"], ["Z"], "k2", SCALE_PLAN, p)],
              [function("k1", ["A", "B"], "Add"), function("k2", ["A"], "Mul", ["A", "A"])])
    res, _ = run(tmp_path, library, m, {"PLUS_EP_CUDA_LIBRARY": str(fake_cuda)})
    assert res == {"out": [3006.0, 3009.0, 3012.0, 3015.0, 3018.0]}   # (x + y + 1000) * 3
    res, _ = run(tmp_path, library, m, {"PLUS_EP_CUDA_LIBRARY": "/nonexistent"})
    assert res == {"out": [4.0, 9.0, 16.0, 25.0, 36.0]}                # bodies: (x + y)^2


def test_archs_line_and_arch_preference(tmp_path, library, fake_cuda):
    log = tmp_path / "cuda.log"
    plan = PLAN.replace("node fused_add\n", "node fused_add\narchs sm_80 sm_90 sm_90a\n")
    packs = {a: fake_pack(a) for a in ("sm_80", "sm_90", "sm_90a")}
    env = {"PLUS_EP_CUDA_LIBRARY": str(fake_cuda), "FAKE_CUDA_LOG": str(log)}
    res, _ = run(tmp_path, library, add_model(plan, packs), env)
    assert res["out"][0] == 1002.0 and "tags=sm_90a" in log.read_text()
    log.unlink()
    res, _ = run(tmp_path, library, add_model(plan, packs), {**env, "FAKE_CUDA_CC": "86"})
    assert res["out"][0] == 1002.0 and "tags=sm_80" in log.read_text()
    # Without an `archs` line the known arch names are probed.
    log.unlink()
    res, _ = run(tmp_path, library, add_model(PLAN, {"sm_80": fake_pack("sm_80")}), {**env, "FAKE_CUDA_CC": "89"})
    assert res["out"][0] == 1002.0 and "tags=sm_80" in log.read_text()


# ---------------------------------------------------------------- errors surface with the node's name


def test_wrong_input_shape(tmp_path, library, fake_cuda):
    res, _ = run(tmp_path, library, add_model(), {"PLUS_EP_CUDA_LIBRARY": str(fake_cuda)}, mode="badshape")
    assert res["stage"] == "run"
    assert ("PlusEP node 'fused_add': input 1 'Y': expected float32[n], got float32[6] "
            "(dim 0 must equal n = 5, bound by an earlier dim; plan line 4)") in res["error"]
    assert "INVALID_ARGUMENT" in res["error"]


def test_unknown_entry(tmp_path, library, fake_cuda):
    m = add_model(PLAN.replace("fake_add_marker", "fake_nope"))
    res, _ = run(tmp_path, library, m, {"PLUS_EP_CUDA_LIBRARY": str(fake_cuda)})
    assert res["stage"] == "run"
    assert "PlusEP node 'fused_add': kernel entry 'fake_nope' not found in image 0 of plus_images_sm_90" in res["error"]


def test_missing_arch(tmp_path, library, fake_cuda):
    res, _ = run(tmp_path, library, add_model(), {"PLUS_EP_CUDA_LIBRARY": str(fake_cuda), "FAKE_CUDA_CC": "80"})
    assert res["stage"] == "run"
    assert ("PlusEP node 'fused_add': no kernel image for the device's arch sm_80 (images present: sm_90); "
            "rebuild the model with `plus-ep rewrite IN -o OUT --arch sm_80`") in res["error"]


@pytest.mark.parametrize("plan,packs,expected", [
    (PLAN.replace("val 1 7", "val 1 7,"), None,
     "PlusEP node 'fused_add': plus_plan line 8 `val 1 7,`: expression `7,`: empty item"),
    (PLAN.replace("end\n", ""), None, "PlusEP node 'fused_add': plus_plan line 15"),
    (PLAN.replace("node fused_add\n", "node fused_add\narchs sm_80\n"), None,
     "PlusEP node 'fused_add': the plan's `archs` line lists sm_80 but the node has no attribute plus_images_sm_80"),
    (PLAN, {"sm_90": b"garbage!"}, "PlusEP node 'fused_add': image pack for sm_90 does not start with PLUSIMG1"),
    (PLAN.replace("kernel 1 0 fake_fill", "kernel 1 1 fake_fill"), None,
     "uses image 1 but plus_images_sm_90 holds 1 images"),
], ids=["bad-expression", "truncated", "archs-without-attribute", "bad-pack", "image-index"])
def test_bad_plans_fail_session_creation(tmp_path, library, fake_cuda, plan, packs, expected):
    res, _ = run(tmp_path, library, add_model(plan, packs), {"PLUS_EP_CUDA_LIBRARY": str(fake_cuda)})
    assert res["stage"] == "session" and expected in res["error"], res


def test_missing_plan_attribute(tmp_path, library, fake_cuda):
    m = add_model()
    del m.graph.node[0].attribute[:]
    res, _ = run(tmp_path, library, m, {"PLUS_EP_CUDA_LIBRARY": str(fake_cuda)})
    assert res["stage"] == "session"
    assert "PlusEP node 'fused_add': reading the STRING attribute plus_plan" in res["error"]


# ---------------------------------------------------------------- threads


def test_sixteen_threads_share_one_session(tmp_path, library, fake_cuda):
    log = tmp_path / "cuda.log"
    res, _ = run(tmp_path, library, add_model(), {"PLUS_EP_CUDA_LIBRARY": str(fake_cuda), "FAKE_CUDA_LOG": str(log)},
                 mode="threads", n=64)
    assert res == {"threads": 16, "bad": [], "errors": []}
    assert len(launches(log)) == 16 * 50
    assert sum(l.startswith("load dev=0") for l in log.read_text().splitlines()) == 1


SHAPEV_PLAN = """plusplan 1
node fused_shapev
in 0 1 1 *
in 1 7 1 1
sym 0 n
shapev s0 1 0
out 0 1 1 s0
val 0 s0
val 1 3
route 0 1
kernel 0 0 fake_scale s0,256,cdiv 1 1 256 1 1 0
extent in 0 s0
extent in 1 1
extent out 0 s0
end
"""


def test_symbol_bound_from_a_shape_tensor_on_the_cpu_twin(tmp_path, library, fake_cuda):
    """n is no input axis the plan binds (`*`): it comes from the values of S = Shape(X), which the
    CPU twin reads in host memory (GPT-2's seq from the Concat TorchScript computes)."""
    from onnx import TensorProto, helper
    node = fused_node("fused_shapev", ["X", "S"], ["Z"], "k1", SHAPEV_PLAN, {"sm_90": fake_pack("sm_90")})
    body = [helper.make_node("Constant", [], ["three"], value=helper.make_tensor("t", TensorProto.FLOAT, [], [3.0])),
            helper.make_node("Mul", ["A", "three"], ["C"])]
    fn = helper.make_function("ai.plus_ep", "Fused", ["A", "B"], ["C"], body, [helper.make_opsetid("", 17)],
                              overload="k1")
    m = model([helper.make_node("Shape", ["X"], ["S"]), node], [fn], inputs=("X", "Y"))
    log = tmp_path / "cuda.log"
    res, _ = run(tmp_path, library, m, {"PLUS_EP_CUDA_LIBRARY": str(fake_cuda), "FAKE_CUDA_LOG": str(log)})
    assert res == {"out": [0.0, 3.0, 6.0, 9.0, 12.0]}          # fake_scale: X * v1 for i < v0 = n
    (line,) = launches(log)
    assert "entry=fake_scale" in line and "v=5,3," in line
