"""Bad models (readable protobuf, wrong content): huge or negative dims, missing or dataless
initializers, unsupported opsets, missing external data, cycles. Each is one ModelError naming the
tensor and the node through the API, exit 2 with one line through the CLI (rewrite, inspect), the
same ModelError from plus_ep.InferenceSession's PlusEP path, and never a partial output file.

Decisions (see plus_ep/validate.py check_model):
- a negative dim in a graph input / output / value_info is read as a dynamic dim, as ONNX Runtime
  does: the model rewrites and runs like the original;
- a declared shape or an initializer whose element count overflows int64, a negative initializer
  dim, an initializer whose data does not match its dims, a Reshape/Expand to a constant shape no
  tensor can have: ModelError;
- default-domain opset < 7 (pre-broadcasting semantics) or newer than the installed onnx knows
  (semantics unknown), or default-domain nodes without a default-domain opset import (invalid, but
  ONNX Runtime loads it with its newest opset): the model is left as it is, every node unfused, with
  a warning naming the opset and why (ONNX Runtime runs many opset-6 models). Nodes of an unknown
  but imported domain stay untouched too (test_bad_input.py).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from plus_ep.graph_rewrites.index import ModelError
from plus_ep import cli
from plus_ep.rewrite import rewrite, rewrite_detailed

F = TensorProto.FLOAT
N = 16
ROOT = Path(__file__).resolve().parents[2]


def _w(n=N, name="W"):
    return numpy_helper.from_array(np.random.default_rng(0).standard_normal((n, n)).astype(np.float32), name)


def _b(n=N):
    return numpy_helper.from_array(np.random.default_rng(1).standard_normal(n).astype(np.float32), "B")


def mlp(x_shape=(2, 4, N), w=None, extra_nodes=(), extra_inits=(), opset=17, tail="Y"):
    nodes = [helper.make_node("MatMul", ["X", "W"], ["m"], name="mm"),
             helper.make_node("Add", ["m", "B"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], [tail], name="relu"), *extra_nodes]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", F, list(x_shape))],
                          [helper.make_tensor_value_info("Y", F, None)],
                          [w if w is not None else _w(), _b(), *extra_inits])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def dataless(dims, name="W"):
    t = TensorProto(name=name, data_type=F)
    t.dims.extend(dims)
    return t


def reshape_to(shape, op="Reshape"):
    s = numpy_helper.from_array(np.array(shape, np.int64), "S")
    return mlp(extra_nodes=[helper.make_node(op, ["r", "S"], ["Y"], name="reshape")], extra_inits=[s], tail="r")


def _cycle():
    m = mlp()
    m.graph.node[0].input[0] = "a"         # MatMul reads the Add that reads it
    m.graph.node.append(helper.make_node("Identity", ["X"], ["unused"], name="id"))
    return m


def _short_raw():
    w = _w()
    w.raw_data = w.raw_data[:100]
    return mlp(w=w)


def _constant_without_data():
    c = helper.make_node("Constant", [], ["c"], name="const", value=dataless([N], "cv"))
    m = mlp()
    m.graph.node.insert(0, c)
    m.graph.node[2].input[1] = "c"         # Add reads the Constant
    return m


def _no_default_opset():
    m = mlp()
    del m.opset_import[:]
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    return m


def _duplicate_output():
    m = mlp()
    m.graph.node[1].output[0] = "m"        # Add writes MatMul's output again
    return m


def _missing_graph_output():
    m = mlp()
    m.graph.output[0].name = "nowhere"
    return m


def _missing_initializer():
    m = mlp()
    del m.graph.initializer[0]
    return m


# case -> (model builder, substrings the one-line error names)
CASES = {
    "cycle": (_cycle, ["cycle", "node '"]),
    "missing-initializer": (_missing_initializer, ["MatMul node 'mm'", "'W'", "missing initializer"]),
    "initializer-without-data": (lambda: mlp(w=dataless([N, N])), ["initializer 'W'", "MatMul node 'mm'", "0 values"]),
    "initializer-short-raw-data": (_short_raw, ["initializer 'W'", "100 bytes"]),
    "initializer-huge-dims": (lambda: mlp(w=dataless([2**40, 2**40])), ["initializer 'W'", "overflow int64"]),
    "initializer-negative-dim": (lambda: mlp(w=dataless([-N, N])), ["initializer 'W'", "negative dim"]),
    "constant-without-data": (_constant_without_data, ["Constant node 'const'", "0 values"]),
    "input-dim-2**62": (lambda: mlp(x_shape=(2, 2**62, N)), ["graph input 'X'", "overflow int64"]),
    "input-dims-2**62-2**62": (lambda: mlp(x_shape=(2**62, 2**62, N)), ["graph input 'X'", "overflow int64"]),
    "reshape-negative": (lambda: reshape_to([2, -5, N]), ["Reshape node 'reshape'", "-5"]),
    "reshape-two-minus-ones": (lambda: reshape_to([-1, -1, N]), ["Reshape node 'reshape'", "more than one -1"]),
    "reshape-overflow": (lambda: reshape_to([2**62, 2**62, N]), ["Reshape node 'reshape'", "int64"]),
    "expand-negative": (lambda: reshape_to([2, -1, N], op="Expand"), ["Expand node 'reshape'", "-1"]),
    "duplicate-output": (_duplicate_output, ["tensor 'm'", "MatMul node 'mm'", "Add node 'add'"]),
    "graph-output-undefined": (_missing_graph_output, ["graph output 'nowhere'"]),
}


def save_raw(m: onnx.ModelProto, path) -> None:
    """onnx.save without the checker or shape inference: the bytes as built."""
    with open(path, "wb") as f:
        f.write(m.SerializeToString())


@pytest.mark.parametrize("case", list(CASES))
def test_api_bad_model_is_one_model_error(tmp_path, case):
    build, names = CASES[case]
    with pytest.raises(ModelError) as info:
        rewrite(build())
    msg = str(info.value)
    assert "\n" not in msg and all(n in msg for n in names), msg
    path = tmp_path / f"{case}.onnx"
    save_raw(build(), path)
    with pytest.raises(ModelError) as info:
        rewrite_detailed(path, archs=["sm_90"])        # before any kernel is rendered
    assert str(info.value).startswith(str(path)) and all(n in str(info.value) for n in names)


def _leftovers(d):
    return sorted(p.name for p in d.iterdir() if p.name.startswith(".plus-ep-") or p.name.startswith("out"))


@pytest.mark.parametrize("command", ["rewrite", "inspect"])
@pytest.mark.parametrize("case", list(CASES))
def test_cli_bad_model_exits_2(tmp_path, capsys, case, command):
    build, names = CASES[case]
    src = tmp_path / "in.onnx"
    save_raw(build(), src)
    out = tmp_path / "out.onnx"
    argv = ["rewrite", str(src), "-o", str(out), "--arch", "sm_90"] if command == "rewrite" else ["inspect", str(src)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("plus-ep: error: "), err
    assert all(n in err[0] for n in names), err[0]
    assert _leftovers(tmp_path) == []


# ------------------------------------------------------------------------------ unsupported opsets

OPSETS = {"opset-1": (lambda: mlp(opset=1), "opset 1 is older than 7"),
          "opset-6": (lambda: mlp(opset=6), "opset 6 is older than 7"),
          "no-default-opset": (_no_default_opset, "imports no default-domain opset")}


@pytest.mark.parametrize("case", list(OPSETS))
def test_unsupported_opset_stays_unfused(tmp_path, caplog, capsys, case):
    build, why = OPSETS[case]
    m = build()
    out = rewrite(m)
    assert [(n.domain, n.op_type) for n in out.graph.node] == [("", "MatMul"), ("", "Add"), ("", "Relu")]
    (msg,) = [r.getMessage() for r in caplog.records if why in r.getMessage()]
    assert "unfused" in msg
    src, dst = tmp_path / "in.onnx", tmp_path / "out.onnx"
    save_raw(m, src)
    assert cli.main(["rewrite", str(src), "-o", str(dst), "--arch", "sm_90"]) == 0
    assert dst.read_bytes() == src.read_bytes()                   # written unchanged
    assert "nothing to fuse" in capsys.readouterr().out
    assert cli.main(["inspect", str(src)]) == 0


# ------------------------------------------------------------------------ negative declared dims


@pytest.mark.parametrize("dim", [-1, -5])
def test_negative_input_dim_reads_as_dynamic(caplog, dim):
    """ONNX Runtime treats a negative dim_value as unknown and runs the model; so does the rewrite:
    the fused node binds that dim at run time and the rewritten model computes what the original does."""
    ort = pytest.importorskip("onnxruntime")
    m = mlp(x_shape=(2, dim, N))
    res = rewrite_detailed(m)
    assert any(f"graph input 'X' declares shape [2, {dim}, {N}]" in r.getMessage() for r in caplog.records)
    assert [n.domain for n in res.model.graph.node] == ["ai.plus_ep"]
    assert not res.model.graph.input[0].type.tensor_type.shape.dim[1].HasField("dim_value")
    assert m.graph.input[0].type.tensor_type.shape.dim[1].dim_value == dim      # the caller's model unchanged
    x = np.random.default_rng(0).standard_normal((2, 3, N)).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
    got = ort.InferenceSession(res.model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_negative_input_dim_plan_binds_it():
    pytest.importorskip("cuda.bindings.nvrtc")
    res = rewrite_detailed(mlp(x_shape=(2, -5, N)), archs=["sm_90"])
    (node,) = [n for n in res.model.graph.node if n.domain == "ai.plus_ep"]
    plan = next(a.s.decode() for a in node.attribute if a.name == "plus_plan")
    assert "-5" not in plan and f"in 0 1 3 2 s0 {N}" in plan, plan


def test_large_but_valid_dim_rewrites():
    """2**40 rows: no int64 overflow, a valid (if unfeedable) model; it rewrites, nothing crashes."""
    out = rewrite(mlp(x_shape=(2**40, N)))
    assert [n.domain for n in out.graph.node] == ["ai.plus_ep"]


def test_plan_guard_refuses_int64_overflow_and_negative_dims():
    """Defence behind check_model: a rendered plan with a literal beyond int64, or a negative literal
    dim, leaves its subgraph unfused (kernel_build) instead of reaching the launcher."""
    from plus_ep.kernels.wire.plan import problem as plan_problem
    good = "plusplan 1\nnode n/0\nin 0 1 2 s0 8\nout 0 1 2 s0 8\nval 0 s0\nroute 0 1\n" \
           "kernel 0 0 k s0,256,cdiv 1 1 256 1 1 0\nend\n"
    assert plan_problem(good) is None
    assert plan_problem(good.replace("in 0 1 2 s0 8", "in 0 1 2 s0 -5")) == \
        "plan line 3 `in 0 1 2 s0 -5`: negative dim -5"
    assert "9223372036854775808 does not fit in int64" in plan_problem(
        good.replace("s0,256,cdiv", f"{2**63},256,cdiv"))
    assert plan_problem(good.replace("out 0 1 2 s0 8", f"out 0 1 2 s0,{2**62},* 8")) is None   # run-time checked


# --------------------------------------------------------------------------------- external data


def _external(tmp_path):
    m = mlp()
    path = tmp_path / "ext.onnx"
    onnx.save(m, path, save_as_external_data=True, all_tensors_to_one_file=True, location="ext.weights",
              size_threshold=0)
    return path, tmp_path / "ext.weights"


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_external_data_problems(tmp_path, capsys, damage):
    path, data = _external(tmp_path)
    rewrite(path)                                  # intact: fine
    if damage == "missing":
        data.unlink()
        names = ["ext.weights", "does not exist", "initializer '"]
    else:
        data.write_bytes(data.read_bytes()[:64])
        names = ["cannot read the external data in 'ext.weights'", "exceeds"]
    with pytest.raises(ModelError) as info:
        rewrite(path)
    assert all(n in str(info.value) for n in names) and "\n" not in str(info.value), str(info.value)
    out = tmp_path / "out.onnx"
    for argv in (["rewrite", str(path), "-o", str(out), "--arch", "none"], ["inspect", str(path)]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and all(n in err[0] for n in names), err
    assert not out.exists() and _leftovers(tmp_path) == []


# ------------------------------------------------------------------ plus_ep.InferenceSession


@pytest.fixture
def plus_ep_path(monkeypatch, tmp_path):
    """InferenceSession's PlusEP path (rewrite, then a CUDA session) on this machine: pretend there
    is a GPU. A bad model must fail in the rewrite, before any session exists."""
    ort = pytest.importorskip("onnxruntime")
    from plus_ep.kernels.compile import nvrtc
    monkeypatch.setattr(nvrtc, "local_arch", lambda device=0: "sm_90a")
    monkeypatch.setattr(ort, "get_available_providers",
                        lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    return {"cache_dir": str(tmp_path / "cache")}


@pytest.mark.parametrize("case", ["missing-initializer", "initializer-huge-dims", "reshape-negative",
                                  "duplicate-output", "cycle"])
def test_session_plus_ep_bad_model(tmp_path, plus_ep_path, case):
    from plus_ep import InferenceSession
    build, names = CASES[case]
    path = tmp_path / "bad.onnx"
    save_raw(build(), path)
    for model in (str(path), build().SerializeToString()):
        with pytest.raises(ModelError) as info:
            InferenceSession(model, providers=[("PlusEP", plus_ep_path), "CPUExecutionProvider"])
        assert all(n in str(info.value) for n in names), str(info.value)
    assert not (tmp_path / "cache" / "models").exists()


def test_session_plus_ep_unreadable_file(tmp_path, plus_ep_path):
    from plus_ep import InferenceSession
    data = mlp().SerializeToString()
    path = tmp_path / "truncated.onnx"
    path.write_bytes(data[: len(data) // 2])
    for model in (str(path), data[: len(data) // 2]):
        with pytest.raises(ModelError, match="not an ONNX model"):
            InferenceSession(model, providers=[("PlusEP", plus_ep_path), "CPUExecutionProvider"])


def test_session_plus_ep_missing_external_data(tmp_path, plus_ep_path):
    from plus_ep import InferenceSession
    path, data = _external(tmp_path)
    data.unlink()
    with pytest.raises(ModelError, match="ext.weights.*does not exist"):
        InferenceSession(str(path), providers=[("PlusEP", plus_ep_path), "CPUExecutionProvider"])


_FALLBACK = r"""
import json, sys, resource
resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))   # a runaway allocation fails, not the box
import warnings; warnings.simplefilter("ignore")
from plus_ep import InferenceSession
out = {}
for path in sys.argv[1:]:
    try:
        InferenceSession(path, providers=[("PlusEP", {}), "CPUExecutionProvider"])
        out[path] = "ok"
    except Exception as e:
        out[path] = type(e).__name__ + ": " + str(e).splitlines()[0][:200] if str(e) else type(e).__name__
print(json.dumps(out))
"""


def test_session_fallback_bad_models_raise_not_crash(tmp_path):
    """Without a GPU, PlusEP hands the original model to ONNX Runtime: every bad model is ORT's own
    exception (or loads, where ORT is lenient), never a crash, a hang or a MemoryError."""
    from plus_ep.kernels.compile import nvrtc
    if nvrtc.local_arch() is not None:
        pytest.skip("this machine has a GPU: the PlusEP path is tested above")
    paths = []
    builds = {case: build for case, (build, _) in CASES.items()}
    builds.update({case: build for case, (build, _) in OPSETS.items()})
    builds["opset-99"] = lambda: mlp(opset=99)      # rewrite refuses it (tests/cpu/test_front_door.py)
    for case, build in builds.items():
        p = tmp_path / f"{case}.onnx"
        save_raw(build(), p)
        paths.append(str(p))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLUS_EP_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, "-c", _FALLBACK, *paths], capture_output=True, text=True, env=env,
                       timeout=300, cwd=str(ROOT))
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert sorted(res) == sorted(paths)
    assert not any("MemoryError" in v for v in res.values()), res
    raised = {os.path.basename(p)[:-5] for p, v in res.items() if v != "ok"}
    # ORT refuses these itself; the rest (e.g. a dataless Constant) it loads and fails at run time
    assert {"cycle", "missing-initializer", "opset-1", "opset-99", "duplicate-output"} <= raised, res
