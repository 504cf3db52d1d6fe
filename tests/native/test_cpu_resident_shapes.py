"""CPU-resident shape inputs of the custom op (issue 16 item 3, kernels/CONTRACT.md §3).

A fused node whose plan reads shape tensors on the host (`shapev`) has op type `FusedHost<n>`: its
first n inputs are those tensors, and the CUDA twin declares them OrtMemTypeCPUInput, so ONNX Runtime
hands them over in host memory and a run needs no stream synchronisation and no device-to-host copy.
A `Fused` node of a model rewritten before that still runs, through the old path (one sync and one
copy per run) and one warning naming the node.

tests/native/ortop_host.c drives ort_op.c's ops as ORT's CUDA EP would (its own stand-in OrtApi, the
stand-in driver's stream and counters), in a plain and an ASan/UBSan build; a real ORT CPU session
checks that ORT accepts the op declarations and runs a `FusedHost1` node (CPU twin).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from plus_ep import config, trust

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from tests.support.launcher_models import fake_pack, fused_node  # noqa: E402
from tests.support.launcher_sources import GCC, SANITIZE, build_ortop_host, ortop_node_key  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
NATIVE = ROOT / "plus_ep" / "native"

pytestmark = pytest.mark.skipif(GCC is None, reason="needs a C compiler")

# Z[n, s1] = s1, with s1 element 1 of the int64 shape tensor: the value reaches the kernel only
# through the `shapev` binding (the stand-in kernel fake_fill writes v1 = s1 everywhere).
NEW_PLAN = """plusplan 1
archs sm_90
node shapes
in 0 7 1 2
in 1 1 1 s0
sym 0 n
shapev s1 0 1
out 0 1 2 s0 s1
val 0 s0,s1,*
val 1 s1
route 0 1
kernel 0 0 fake_fill 1 1 1 1 1 1 0
extent in 0 2
extent in 1 s0
extent out 0 s0,s1,*
end
"""
# the same node as the rewriter wrote it before FusedHost<n>: the shape tensor after the data
OLD_PLAN = NEW_PLAN.replace("in 0 7 1 2\nin 1 1 1 s0", "in 0 1 1 s0\nin 1 7 1 2").replace(
    "shapev s1 0 1", "shapev s1 1 1")
SHAPE, DATA = "7:2=4,3", "1:2=1,2"


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    base = tmp_path_factory.mktemp("ortop_host")
    return {"plain": build_ortop_host(base / "plain", []), "asan": build_ortop_host(base / "asan", SANITIZE)}


@pytest.fixture(params=["plain", "asan"])
def host(request, builds, tmp_path):
    exe, fake = builds[request.param]
    pack = tmp_path / "pack.bin"
    pack.write_bytes(fake_pack("sm_90"))

    def run(*args: str, plan: str | None = None) -> tuple[int, str]:
        extra = []
        if plan is not None:
            p = tmp_path / "plan.txt"
            p.write_text(plan)
            extra = [str(p), f"sm_90={pack}"]
            # the test vouches for its stand-in kernels: their digest in its own trust manifest
            key = ortop_node_key(args[1], plan, pack.read_bytes(), args[4:])
            trust.record(trust.digest(key), "tests: stand-in packs", tmp_path)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_CUDA_", "PLUS_EP_"))}
        env.update({"PLUS_EP_CUDA_LIBRARY": str(fake), "ASAN_OPTIONS": "detect_leaks=1",
                    "PLUS_EP_TRUST_DIR": str(trust.trust_dir(tmp_path)),
                    "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"})
        cmd = [str(exe), *args[:3], *extra, *args[3:]]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
        assert r.returncode in (0, 1) and "Sanitizer" not in r.stderr and "runtime error" not in r.stderr, (
            f"{cmd} exited {r.returncode}\n{r.stdout}\n{r.stderr}")
        return r.returncode, r.stdout
    return run


def _counts(out: str) -> dict:
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", out.split("counts:")[1])}


def test_op_types_declare_leading_shape_inputs_cpu_resident(host):
    rc, out = host("describe")
    assert rc == 0, out
    ops = {(ln.split()[0], ln.split()[1]): ln.split()[3:] for ln in out.splitlines()}
    assert ops[("Fused", "CUDAExecutionProvider")] == ["variadic/default"]
    assert ops[("FusedHost1", "CUDAExecutionProvider")] == ["required/cpu_input", "variadic/default"]
    assert ops[("FusedHost16", "CUDAExecutionProvider")] == ["required/cpu_input"] * 16 + ["variadic/default"]
    # the CPU twin declares the same inputs (ORT builds one schema per name); its memory is host anyway
    assert ops[("FusedHost2", "CPU")] == ["required/default"] * 2 + ["variadic/default"]
    assert len(ops) == 2 * 17


def test_new_node_runs_without_sync_or_device_copy(host):
    rc, out = host("run", "FusedHost1", "cuda", "3", SHAPE, DATA, plan=NEW_PLAN)
    assert rc == 0, out
    assert "out: 3 3 3 3 3 3" in out          # [2, s1 = 3] filled with s1 from the host shape tensor
    assert _counts(out) == {"sync": 0, "dtoh": 0, "launch": 3}, out
    assert "log " not in out                   # no warning


def test_old_node_copies_each_run_and_warns_once(host):
    rc, out = host("run", "Fused", "cuda", "3", DATA, SHAPE, plan=OLD_PLAN)
    assert rc == 0, out
    assert "out: 3 3 3 3 3 3" in out
    assert _counts(out) == {"sync": 3, "dtoh": 3, "launch": 3}, out
    warnings = [ln for ln in out.splitlines() if ln.startswith("log 2: ")]
    assert len(warnings) == 1, out
    assert "'plus_ep/test/0'" in warnings[0] and "re-run `plus-ep rewrite`" in warnings[0]


def test_host_op_refuses_a_plan_that_does_not_read_that_input(host):
    rc, out = host("run", "FusedHost1", "cuda", "1", DATA, SHAPE, plan=OLD_PLAN)
    assert rc == 1
    assert "op type FusedHost1 takes input 0 in host memory, but the plan reads no shape tensor there" in out


RUNNER = r"""
import json, sys
import numpy as np, onnxruntime as ort
so = ort.SessionOptions()
so.register_custom_ops_library(sys.argv[2])
sess = ort.InferenceSession(sys.argv[1], so, providers=["CPUExecutionProvider"])
z, = sess.run(None, {"S": np.array([4, 3], np.int64), "X": np.array([1, 2], np.float32)})
print(json.dumps({"shape": list(z.shape), "values": z.ravel().tolist()}))
"""


def _host_model():
    """Z = FusedHost1(S, X). The stand-in kernel fills [n, S[1]] with S[1]; the function body (what runs
    without the launcher) fills it with S[0], so the two paths are told apart."""
    node = fused_node("shapes", ["S", "X"], ["Z"], "k1", NEW_PLAN, {"sm_90": fake_pack("sm_90")},
                      op_type="FusedHost1")
    body = [helper.make_node("Split", ["s"], ["s0", "s1"], axis=0, num_outputs=2),
            helper.make_node("Shape", ["x"], ["n"]),
            helper.make_node("Concat", ["n", "s1"], ["zs"], axis=0),
            helper.make_node("Cast", ["s0"], ["s0f"], to=TensorProto.FLOAT),
            helper.make_node("Expand", ["s0f", "zs"], ["z"])]
    fn = helper.make_function("ai.plus_ep", "FusedHost1", ["s", "x"], ["z"], body,
                              [helper.make_opsetid("", 18)], overload="k1")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("S", TensorProto.INT64, [2]),
                                        helper.make_tensor_value_info("X", TensorProto.FLOAT, ["n"])],
                          [helper.make_tensor_value_info("Z", TensorProto.FLOAT, ["n", None])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("ai.plus_ep", 1)],
                          functions=[fn], ir_version=10)
    onnx.checker.check_model(m)
    return m


@pytest.mark.parametrize("registered", [True, False])
def test_ort_runs_a_host_node(tmp_path, library, fake_cuda, registered):
    """ORT accepts FusedHost1 (n required inputs, then the variadic rest) and runs the launcher's CPU
    twin on the stand-in driver (Z = S[1] = 3, from the kernel); without the launcher the function body
    runs (Z = S[0] = 4)."""
    path = tmp_path / "m.onnx"
    onnx.save(_host_model(), path)
    env = {"PATH": "/usr/bin:/bin", "PLUS_EP_CACHE_DIR": str(config.cache_root())}   # its trust manifest
    if registered:
        env["PLUS_EP_CUDA_LIBRARY"] = str(fake_cuda)
    else:
        env["PLUS_EP_DISABLE"] = "1"
    r = subprocess.run([sys.executable, "-c", RUNNER, str(path), library], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res == {"shape": [2, 3], "values": [3.0 if registered else 4.0] * 6}, res
