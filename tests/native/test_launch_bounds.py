"""Issue 34 cases 1-3 at the launcher's boundary, with the stand-in driver (tests/native/fake_cuda.c):
the stand-in kernel `fake_fill` writes v0 = rows x 96 floats, exactly what the GEMM of GPT-2's chain
Reshape(X2 @ W + B, Concat(Shape(mask), [96])) writes, so a launch that the bounds checks let through
with the wrong shapes overflows the output (AddressSanitizer in the `asan` builds).

- custom op: tests/native/ortop_host.c plays ORT's CUDA and CPU twins, including absent inputs and
  outputs ORT hands over as NULL (what the real runtime never exercises);
- plugin EP: a real ORT session in a child process on the stand-in driver (host staging).
Each run either gives ORT's answer or ends in one error line naming the node, with no launch.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from plus_ep import trust

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from tests.support.launcher_sources import SANITIZE, build_ortop_host as _build, ortop_counts as _counts  # noqa: E402
from tests.support.launcher_sources import ortop_node_key  # noqa: E402
from tests.support.launcher_models import fake_pack, fused_node  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
NODE = "plus_ep/test/0"   # ortop_host names its node so; the plugin-EP model does too

# As the rewriter writes case 1's node (the shape tensor first, X2 [batch*seq, 32] -> s0), with the
# stand-in kernel writing the GEMM's s0 x 96 outputs.
CHAIN = f"""plusplan 1
node {NODE}
archs sm_90
sym 0 batch_seq
sym 1 seq
in 0 7 1 3
in 1 1 2 s0 32
shapev s1 0 1
out 0 1 3 s0,s1,/ s1 96
extent in 0 3
extent in 1 32,s0,*
extent out 0 96,s0,*
exact out 0 0
val 0 s0,96,*
val 1 7
route 0 1
kernel 0 0 fake_fill 1 1 1 1 1 1 0
end
"""
# The second export: X2's rows a dim of their own, the output bound from the shape tensor alone.
ROWS = f"""plusplan 1
node {NODE}
archs sm_90
sym 0 rows
sym 1 batch
sym 2 seq
in 0 7 1 3
in 1 1 2 s0 32
shapev s1 0 0
shapev s2 0 1
out 0 1 3 s1 s2 96
extent in 0 3
extent in 1 32,s0,*
extent out 0 96,s1,*,s2,*
extent out 0 96,s0,*
val 0 s0,96,*
val 1 7
route 0 1
kernel 0 0 fake_fill 1 1 1 1 1 1 0
end
"""
# As the rewriter writes them now: each `shapev` line says what a 0 there means (ONNX Reshape, allowzero
# 0: its input's dim, X2 @ W's [s0, 96]); `infer` where the shape also holds a -1 the Reshape infers.
ROWS_ZERO = ROWS.replace("shapev s1 0 0\n", "shapev s1 0 0 s0\n").replace("shapev s2 0 1\n", "shapev s2 0 1 96\n")
CHAIN_ZERO = CHAIN.replace("shapev s1 0 1\n", "shapev s1 0 1 96\nshapev s2 0 0 s0\n").replace(
    "sym 1 seq\n", "sym 1 seq\nsym 2 shape0_0\n").replace("exact out 0 0\n", "exact out 0 0\nequal s2 s0,s1,/ element 0\n")
X2 = "1:6x32="


def _shape(*dims) -> str:
    return "7:3=" + ",".join(map(str, dims))


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    base = tmp_path_factory.mktemp("bounds_host")
    return {"plain": _build(base / "plain", []), "asan": _build(base / "asan", SANITIZE)}


@pytest.fixture(params=["plain", "asan"])
def host(request, builds, tmp_path):
    exe, fake = builds[request.param]
    pack = tmp_path / "pack.bin"
    pack.write_bytes(fake_pack("sm_90"))

    def run(twin, plan, *specs, output=""):
        p = tmp_path / "plan.txt"
        p.write_text(plan)
        key = ortop_node_key("FusedHost1", plan, pack.read_bytes(), specs, output)
        trust.record(trust.digest(key), "tests: stand-in packs", tmp_path)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_CUDA_", "PLUS_EP_", "ORTOP_"))}
        env.update({"PLUS_EP_CUDA_LIBRARY": str(fake), "ASAN_OPTIONS": "detect_leaks=1",
                    "PLUS_EP_TRUST_DIR": str(trust.trust_dir(tmp_path)), "ORTOP_OUTPUT": output,
                    "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"})
        cmd = [str(exe), "run", "FusedHost1", twin, str(p), f"sm_90={pack}", "1", *specs]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
        assert r.returncode in (0, 1) and "Sanitizer" not in r.stderr and "runtime error" not in r.stderr, (
            f"{cmd} exited {r.returncode}\n{r.stdout}\n{r.stderr}")
        return r.returncode, r.stdout
    return run


def _error_line(out: str) -> str:
    errs = [ln for ln in out.splitlines() if ln.startswith("error: ")]
    assert len(errs) == 1, out
    return errs[0]


@pytest.mark.parametrize("twin", ["cuda", "cpu"])
@pytest.mark.parametrize("plan,shape,words", [
    (CHAIN, (1, 4, 96), ["output 0 dim 0 is (s0)/(s1) = 6/4", "batch_seq=6 seq=4", "cannot be reshaped"]),
    (CHAIN, (2, 100, 96), ["6/100", "cannot be reshaped"]),
    (ROWS, (2, 100, 96), ["output 0 would be {2,100,96} (19200 elements", "the kernels write 576",
                          "cannot be reshaped"]),
    (ROWS, (1, 4, 96), ["output 0 would be {1,4,96} (384 elements"]),
    (ROWS, (0, 1, 96), ["element 0 of input 0 is 0, which a Reshape reads as its input's own dim", "--disable"]),
], ids=["chain-1x4", "chain-2x100", "rows-2x100", "rows-1x4", "rows-0x1"])
def test_case_1_inconsistent_shape_tensor_is_refused(host, twin, plan, shape, words):
    rc, out = host(twin, plan, _shape(*shape), X2)
    line = _error_line(out)
    assert rc == 1 and f"PlusEP node '{NODE}'" in line and all(w in line for w in words), line
    assert 0 not in shape or "cannot be reshaped" not in line, line   # ORT's Reshape copies X2's rows for the 0
    assert _counts(out)["launch"] == 0, out


@pytest.mark.parametrize("twin", ["cuda", "cpu"])
@pytest.mark.parametrize("plan,shape", [(CHAIN, (3, 2, 96)), (ROWS, (2, 3, 96)), (CHAIN, (1, 6, 96))],
                         ids=["chain-3x2", "rows-2x3", "chain-1x6"])
def test_case_1_consistent_inputs_run(host, twin, plan, shape):
    rc, out = host(twin, plan, _shape(*shape), X2)
    assert rc == 0, out
    assert out.split("out:")[1].split("counts:")[0].split() == ["7"] * 576 and _counts(out)["launch"] == 1, out


@pytest.mark.parametrize("twin", ["cuda", "cpu"])
@pytest.mark.parametrize("plan,shape,x2,want", [
    (ROWS_ZERO, (0, 1, 96), X2, [6, 1, 96]),         # ORT: [0 -> 6 rows, 1, 96]
    (CHAIN_ZERO, (0, 1, 96), X2, [6, 1, 96]),
    (CHAIN_ZERO, (2, 0, 96), "1:192x32=", [2, 96, 96]),   # [2, 0 -> 96, 96] from 192 rows
    (ROWS_ZERO, (0, 5, 96), "1:0x32=", [0, 5, 96]),  # an empty batch
], ids=["rows-0x1", "chain-0x1", "chain-2x0", "rows-empty"])
def test_zero_element_is_the_reshape_input_dim(host, twin, plan, shape, x2, want):
    rc, out = host(twin, plan, _shape(*shape), x2)
    assert rc == 0, out
    n = want[0] * want[1] * want[2]
    assert out.split("out:")[1].split("counts:")[0].split() == ["7"] * n and _counts(out)["launch"] == (n > 0), out


@pytest.mark.parametrize("twin", ["cuda", "cpu"])
@pytest.mark.parametrize("plan,shape,x2,words", [
    # issue 34's open finding: X2 [0, 32], mask [65, 0] asked ORT for [65, 96, 96] from 0 elements
    (ROWS_ZERO, (65, 0, 96), "1:0x32=", ["output 0 would be {65,96,96}", "element 1 of input 0 is 0, which the "
                                          "Reshape (allowzero 0) reads as its input's dim there: seq (s2) = 96",
                                          "cannot be reshaped"]),
    (CHAIN_ZERO, (65, 0, 96), "1:0x32=", ["(s2) = 65 and (s0,s1,/) = 0", "element 1 of input 0 is 0"]),
    (CHAIN_ZERO, (6, 0, 96), X2, ["6/96, which does not divide exactly", "element 1 of input 0 is 0"]),
    (CHAIN_ZERO.replace("shapev s2 0 0 s0\n", "shapev s2 0 0 s0 infer\n"), (0, 5, 96), "1:0x32=",
     ["element 0 is 0, which the original graph's Reshape reads as its input's dim 0, also 0, leaving the -1"]),
    (ROWS_ZERO.replace("shapev s2 0 1 96\n", "shapev s2 0 1 -\n"), (6, 0, 96), X2,
     ["element 1 is 0, which the original graph's Reshape cannot take there", "--disable"]),
], ids=["rows-65x0", "chain-65x0", "chain-6x0", "infer", "refused"])
def test_zero_element_refused_as_ort_refuses(host, twin, plan, shape, x2, words):
    rc, out = host(twin, plan, _shape(*shape), x2)
    line = _error_line(out)
    assert rc == 1 and f"PlusEP node '{NODE}'" in line and all(w in line for w in words), line
    assert _counts(out)["launch"] == 0, out


@pytest.mark.parametrize("twin", ["cuda", "cpu"])
def test_inexact_quotient_alone_is_refused(host, twin):
    # an output [batch] with batch = batch_seq/seq: the element counts agree for any seq (the extent is
    # the same quotient), only the exact-division record tells ORT's Reshape error from a result
    plan = CHAIN.replace("out 0 1 3 s0,s1,/ s1 96", "out 0 1 1 s0,s1,/").replace(
        "extent out 0 96,s0,*", "extent out 0 s0,s1,/").replace("val 0 s0,96,*", "val 0 s0,s1,/")
    rc, out = host(twin, plan, _shape(1, 4, 96), X2)
    assert rc == 1 and "output 0 dim 0 is (s0)/(s1) = 6/4, which does not divide exactly" in _error_line(out), out
    rc, out = host(twin, plan, _shape(3, 2, 96), X2)
    assert rc == 0 and out.split("out:")[1].split("counts:")[0].split() == ["7"] * 3, out


@pytest.mark.parametrize("twin", ["cuda", "cpu"])
def test_input_read_through_a_view_is_checked(host, twin):
    # X2 of any row count, read by the kernels as [batch, seq, 32] (its Reshape by the shape tensor)
    plan = f"""plusplan 1
node {NODE}
archs sm_90
sym 0 batch
sym 1 seq
in 0 7 1 3
in 1 1 2 * 32
shapev s0 0 0
shapev s1 0 1
out 0 1 3 s0 s1 96
extent in 1 32,s0,*,s1,*
extent out 0 96,s0,*,s1,*
val 0 s0,s1,*,96,*
val 1 7
route 0 1
kernel 0 0 fake_fill 1 1 1 1 1 1 0
extent in 0 3
end
"""
    rc, out = host(twin, plan, _shape(2, 100, 96), X2)
    line = _error_line(out)
    assert rc == 1 and "input 1 'in1' {6,32} has 192 elements but the kernels read 6400" in line, out
    rc, out = host(twin, plan, _shape(2, 3, 96), X2)
    assert rc == 0 and _counts(out)["launch"] == 1, out


@pytest.mark.parametrize("twin", ["cuda", "cpu"])
def test_zero_size_output_skips_the_launch(host, twin):
    rc, out = host(twin, CHAIN, _shape(0, 5, 96), "1:0x32=")
    assert rc == 0 and _counts(out)["launch"] == 0, out


@pytest.mark.parametrize("twin", ["cuda", "cpu"])
def test_case_3_absent_output_refused_at_creation(host, twin):
    rc, out = host(twin, CHAIN, _shape(3, 2, 96), X2, output="absent")
    line = _error_line(out)
    assert rc == 1 and f"PlusEP node '{NODE}': output 0 is absent (wired \"\")" in line, line
    assert "counts:" not in out   # refused by CreateKernelV2: no run at all


@pytest.mark.parametrize("twin", ["cuda", "cpu"])
def test_case_3_absent_input_refused_at_creation(host, twin):
    rc, out = host(twin, CHAIN, _shape(3, 2, 96), "absent")
    line = _error_line(out)
    assert rc == 1 and f"PlusEP node '{NODE}': input 1 is absent (wired \"\")" in line, line


@pytest.mark.parametrize("twin", ["cuda", "cpu"])
def test_plan_without_extents_is_refused_at_creation(host, twin):
    # a node rewritten before the bounds records: nothing proves its launches in bounds
    rc, out = host(twin, CHAIN.replace("extent out 0 96,s0,*\n", ""), _shape(3, 2, 96), X2)
    line = _error_line(out)
    assert rc == 1 and f"PlusEP node '{NODE}'" in line and "no `extent out 0` record" in line, line
    assert "re-run `plus-ep rewrite`" in line and "counts:" not in out, out


def test_case_3_output_handed_over_as_null_is_never_dereferenced(host):
    # a named output for which ORT hands over no tensor: the CUDA twin has no allocator for a temporary
    # (a clear refusal), the CPU twin runs into a temporary; neither dereferences NULL
    rc, out = host("cuda", CHAIN, _shape(3, 2, 96), X2, output="null")
    assert rc == 1 and f"PlusEP node '{NODE}'" in _error_line(out) and _counts(out)["launch"] == 0, out
    rc, out = host("cpu", CHAIN, _shape(3, 2, 96), X2, output="null")
    assert rc == 0 and _counts(out)["launch"] == 1, out


# ------------------------------------------------------------------ plugin EP: a real ORT session

RUNNER = r"""
import json, sys
import numpy as np, onnxruntime as ort
import plus_ep
spec = json.loads(sys.argv[1])
out = {}
try:
    sess = ort.InferenceSession(spec["model"], providers=["PlusEP", "CPUExecutionProvider"])
    feeds = {"S": np.array(spec["shape"], np.int64), "X2": np.ones((spec["rows"], 32), np.float32),
             "B": np.zeros(96, np.float32)}
    feeds = {k: v for k, v in feeds.items() if k in {i.name for i in sess.get_inputs()}}
    y, = sess.run(None, feeds)
    out["y"] = [list(y.shape), float(y.ravel()[0]) if y.size else None]
except Exception as e:
    out["error"] = str(e)
print(json.dumps(out))
"""


def _ep_model(plan, path, wire_b=True, shape=None):
    """Y = FusedHost1(S, X2, B) with `plan` (+ an input 2 the stand-in kernel does not read); the function
    body reshapes X2 @ ones(32, 96) to S. wire_b=False: B wired "" (the body never reads it, so ORT
    loads the model and leaves the refusal to PlusEP)."""
    plan = plan.replace("in 1 1 2 s0 32\n", "in 1 1 2 s0 32\nin 2 1 1 96\n").replace("\nend\n", "\nextent in 2 96\nend\n")
    node = fused_node(NODE, ["S", "X2", "B" if wire_b else ""], ["Y"], "k1", plan, {"sm_90": fake_pack("sm_90")},
                      op_type="FusedHost1")
    body = [helper.make_node("Constant", [], ["w"], value=helper.make_tensor("w", TensorProto.FLOAT, [32, 96],
                                                                             [1.0] * 32 * 96)),
            helper.make_node("MatMul", ["x", "w"], ["m"]),
            helper.make_node("Reshape", ["m", "s"], ["y"])]
    fn = helper.make_function("ai.plus_ep", "FusedHost1", ["s", "x", "b"], ["y"], body, [helper.make_opsetid("", 18)],
                              overload="k1")
    inputs = [helper.make_tensor_value_info("S", TensorProto.INT64, [3]),
              helper.make_tensor_value_info("X2", TensorProto.FLOAT, ["r", 32]),
              helper.make_tensor_value_info("B", TensorProto.FLOAT, [96])]
    consts = []
    if shape is not None:   # case 2: the same node in a graph whose shape input is a constant
        inputs = inputs[1:]
        consts = [helper.make_tensor("S", TensorProto.INT64, [3], shape)]
    g = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], consts)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("ai.plus_ep", 1)],
                          functions=[fn], ir_version=10)
    onnx.save(m, path)
    return path


def _ep_run(fake_cuda, model, shape, rows=6, log=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_CUDA_", "PLUS_EP_"))
           or k == "PLUS_EP_CACHE_DIR"}
    env.update({"PLUS_EP_CUDA_LIBRARY": str(fake_cuda), "PYTHONPATH": str(ROOT)})
    if log is not None:
        env["FAKE_CUDA_LOG"] = str(log)
    r = subprocess.run([sys.executable, "-c", RUNNER, json.dumps({"model": str(model), "shape": shape, "rows": rows})],
                       capture_output=True, text=True, env=env, timeout=300, cwd=str(ROOT))
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_plugin_ep_cases_1_to_3(tmp_path, fake_cuda):
    chain, rows = _ep_model(CHAIN, tmp_path / "chain.onnx"), _ep_model(ROWS, tmp_path / "rows.onnx")
    for model, shape in ((chain, [1, 4, 96]), (chain, [2, 100, 96]), (rows, [2, 100, 96])):
        res = _ep_run(fake_cuda, model, shape)
        assert f"PlusEP node '{NODE}'" in res.get("error", "") and "cannot be reshaped" in res["error"], res
    for model, shape in ((chain, [3, 2, 96]), (rows, [2, 3, 96])):
        assert _ep_run(fake_cuda, model, shape) == {"y": [shape, 7.0]}      # the stand-in kernel's fill
    for shape, ok in (([1, 4, 96], False), ([3, 2, 96], True)):   # case 2
        res = _ep_run(fake_cuda, _ep_model(CHAIN, tmp_path / "const.onnx", shape=shape), shape)
        assert res == {"y": [shape, 7.0]} if ok else "cannot be reshaped" in res.get("error", ""), res
    res = _ep_run(fake_cuda, _ep_model(CHAIN, tmp_path / "absent.onnx", wire_b=False), [3, 2, 96])
    assert f"PlusEP node '{NODE}': input 2 is absent (wired \"\")" in res.get("error", ""), res


def test_plugin_ep_zero_element_is_the_reshape_input_dim(tmp_path, fake_cuda):
    rows = _ep_model(ROWS_ZERO, tmp_path / "rows.onnx")
    assert _ep_run(fake_cuda, rows, [0, 1, 96]) == {"y": [[6, 1, 96], 7.0]}      # ORT's [0 -> 6, 1, 96]
    res = _ep_run(fake_cuda, rows, [65, 0, 96], rows=0)                         # ORT: [65, 96, 96] from 0
    assert f"PlusEP node '{NODE}'" in res.get("error", "") and "output 0 would be {65,96,96}" in res["error"], res


def test_plugin_ep_zero_size_output_launches_nothing(tmp_path, fake_cuda):
    # every output empty (0 rows): ORT's answer is an empty tensor, and no kernel is queued; the stand-in
    # kernel would "run" on a grid of 1 whatever the sizes, so only the launcher's skip keeps the log clean
    log = tmp_path / "cuda.log"
    res = _ep_run(fake_cuda, _ep_model(CHAIN, tmp_path / "chain.onnx"), [0, 5, 96], rows=0, log=log)
    assert res == {"y": [[0, 5, 96], None]}, res
    lines = log.read_text().splitlines() if log.exists() else []
    assert lines and not [ln for ln in lines if ln.startswith("launch")], lines   # the node ran, launching nothing
    res = _ep_run(fake_cuda, _ep_model(CHAIN, tmp_path / "chain.onnx"), [3, 2, 96], log=log)
    assert res == {"y": [[3, 2, 96], 7.0]} and [ln for ln in log.read_text().splitlines() if ln.startswith("launch")]
