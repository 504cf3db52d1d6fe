"""EPContext models with the PlusEP plugin EP on the stand-in driver (tests/native/fake_cuda.c, whose
kernels add 1000, so outputs show who ran): ONNX Runtime's ModelCompiler writes them (embedded payload or
side file), a new process runs them through PlusEP without planning, the C writer's payload is what the
Python reader (plus_ep/epcontext.py) reads and the Python writer's what the C reader runs, damaged or
unsafe payloads are refused in one line naming the node, `epcontext.compile_model` fails in one line
where PlusEP cannot compile, and a C host (no Python) runs them under ASan/UBSan.
The real kernels on the PTX interpreter: tests/emulated/test_epcontext_emulated.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import helper  # noqa: E402

from plus_ep import epcontext  # noqa: E402
from tests.support.launcher_models import PLAN, add_model, fake_pack  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    tuple(int(p) for p in ort.__version__.split(".")[:2]) < (1, 25), reason="plugin EPs need onnxruntime >= 1.25")

COMPILE = r"""
import json, sys
spec = json.loads(sys.argv[1])
import onnxruntime as ort, plus_ep
so = ort.SessionOptions()
so.add_provider_for_devices(plus_ep.get_ep_devices(), {})
flags = ort.OrtCompileApiFlags.ERROR_IF_NO_NODES_COMPILED if spec.get("strict") else ort.OrtCompileApiFlags.NONE
try:
    ort.ModelCompiler(so, spec["model"], embed_compiled_data_into_model=spec["embed"], flags=flags).compile_to_file(spec["out"])
    print(json.dumps({"ok": True}))
except Exception as e:
    print(json.dumps({"error": str(e)}))
"""

RUN = r"""
import json, sys
spec = json.loads(sys.argv[1])
import numpy as np, onnxruntime as ort, plus_ep
so = ort.SessionOptions()
so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
source = open(spec["model"], "rb").read() if spec.get("bytes") else spec["model"]
try:
    s = ort.InferenceSession(source, so, providers=["PlusEP", "CPUExecutionProvider"])
    z = s.run(None, {"X": np.arange(4, dtype=np.float32), "Y": np.full(4, 2, np.float32)})[0]
except Exception as e:
    print(json.dumps({"error": str(e)})); sys.exit(0)
print(json.dumps({"out": z.tolist(), "planned": plus_ep.ep.planned(),
                  "assigned": [[sg.ep_name, [n.op_type for n in sg.get_nodes()]]
                               for sg in s.get_provider_graph_assignment_info()]}))
"""


def _env(fake_cuda, extra=None) -> dict:
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("FAKE_CUDA_", "PLUS_EP_")) or k == "PLUS_EP_CACHE_DIR"}   # its trust manifest
    e.update({"PLUS_EP_CUDA_LIBRARY": str(fake_cuda), **(extra or {})})
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT), e.get("PYTHONPATH", "")])
    return e


def _child(code: str, spec: dict | str, env: dict) -> dict:
    arg = spec if isinstance(spec, str) else json.dumps(spec)
    r = subprocess.run([sys.executable, "-c", code, arg], capture_output=True, text=True, env=env,
                       timeout=300, cwd=str(ROOT))
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1]) | {"stderr": r.stderr}


@pytest.fixture()
def add_path(tmp_path):
    path = tmp_path / "add.onnx"
    onnx.save(add_model(), path)          # a Fused node with stand-in packs, vouched for in the trust manifest
    return path


def _context_node(model) -> onnx.NodeProto:
    [n] = [n for n in model.graph.node if n.op_type == "EPContext"]
    return n


@pytest.mark.parametrize("embed", [True, False], ids=["embedded", "side-file"])
def test_model_compiler_writes_what_a_new_process_runs(add_path, tmp_path, fake_cuda, embed):
    out = tmp_path / "add_ctx.onnx"
    assert _child(COMPILE, {"model": str(add_path), "out": str(out), "embed": embed, "strict": True},
                  _env(fake_cuda)).get("ok")
    m = onnx.load(str(out))
    node = _context_node(m)
    a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
    assert list(node.input) == ["X", "Y"] and list(node.output) == ["Z"], node
    assert a["source"] == b"PlusEP" and a["main_context"] == 1 and a["embed_mode"] == int(embed), a
    assert a["hardware_architecture"] == b"sm_90" and a["ep_sdk_version"].startswith(b"PlusEP "), a
    if embed:
        assert a["ep_cache_context"].startswith(epcontext.EMBED_MAGIC) and b"\0" not in a["ep_cache_context"]
    else:
        assert (tmp_path / a["ep_cache_context"].decode()).is_file() and b"/" not in a["ep_cache_context"]
    # the C writer's payload, read by the Python reader: the Fused node's plan, packs and names
    [part] = epcontext.payloads(m, out)[node.name]
    assert (part.node, part.plan, part.inputs, part.outputs) == ("fused_add", PLAN, ["#0", "#1"], ["#0"])
    assert part.packs == {"sm_90": fake_pack("sm_90")} and part.signature is None
    res = _child(RUN, {"model": str(out)}, _env(fake_cuda))
    assert res["out"] == [1002.0, 1003.0, 1004.0, 1005.0], res          # the stand-in's kernel ran
    assert res["assigned"] == [["PlusEP", ["EPContext"]]] and res["planned"] == {}, res


@pytest.mark.parametrize("embed", [True, False], ids=["embedded", "side-file"])
def test_python_writer_runs_through_the_c_reader(add_path, tmp_path, fake_cuda, embed):
    out = tmp_path / "py_ctx.onnx"
    onnx.save(epcontext.to_epcontext(onnx.load(str(add_path)), out, embed=embed), out)
    m = onnx.load(str(out))
    assert not m.functions and [n.op_type for n in m.graph.node] == ["EPContext"]
    res = _child(RUN, {"model": str(out)}, _env(fake_cuda))
    assert res["out"] == [1002.0, 1003.0, 1004.0, 1005.0], res


def test_session_option_ep_context_enable_writes_the_model(add_path, tmp_path, fake_cuda):
    """ep.context_enable=1 on a plain InferenceSession (ORT's older switch): <model>_ctx.onnx appears."""
    code = ("import sys, onnxruntime as ort, plus_ep\n"
            "so = ort.SessionOptions()\n"
            "so.add_session_config_entry('ep.context_enable', '1')\n"
            "so.add_session_config_entry('ep.context_embed_mode', '0')\n"
            "ort.InferenceSession(sys.argv[1], so, providers=['PlusEP', 'CPUExecutionProvider'])\n"
            "print('{}')\n")
    _child(code, str(add_path), _env(fake_cuda))
    out = tmp_path / "add_ctx.onnx"
    assert out.is_file(), sorted(p.name for p in tmp_path.iterdir())
    ref = next(x.s.decode() for x in _context_node(onnx.load(str(out))).attribute if x.name == "ep_cache_context")
    assert ref == epcontext.side_file_name(str(out), _context_node(onnx.load(str(out))).name)
    assert _child(RUN, {"model": str(out)}, _env(fake_cuda))["out"] == [1002.0, 1003.0, 1004.0, 1005.0]


# ---------------------------------------------------------------- refusals, one line each


def _damaged(tmp_path, how: str) -> Path:
    m = epcontext.to_epcontext(add_model(), None, embed=True)
    node = _context_node(m)
    attr = {a.name: a for a in node.attribute}
    raw = epcontext.encode(epcontext.decode(attr["ep_cache_context"].s))
    side = tmp_path / "payload.plusep"
    if how == "truncated":
        attr["ep_cache_context"].s = epcontext.embedded(raw[:-20])
    elif how == "unknown-record":
        attr["ep_cache_context"].s = epcontext.embedded(raw[:-9] + b"Q" + b"\0" * 8 + raw[-9:])
    elif how == "not-ours":
        attr["ep_cache_context"].s = b"some other EP's blob"
    elif how == "bad-ref":
        [part] = epcontext.decode(raw)
        part.inputs = ["#0", "#9"]
        attr["ep_cache_context"].s = epcontext.embedded(epcontext.encode([part]))
    elif how == "main-context-0":
        attr["main_context"].i = 0
    elif how in ("dotdot", "absolute", "missing"):
        side.write_bytes(raw)
        attr["embed_mode"].i = 0
        attr["ep_cache_context"].s = {"dotdot": b"../payload.plusep", "absolute": str(side).encode(),
                                      "missing": b"nowhere.plusep"}[how]
    path = tmp_path / "sub" / "bad_ctx.onnx"
    path.parent.mkdir(exist_ok=True)
    onnx.save(m, path)
    return path


@pytest.mark.parametrize("how, needle", [
    ("truncated", "its payload is damaged or not PlusEP's"),
    ("unknown-record", "unknown record 'Q'"),
    ("not-ours", 'no "PLUSEPCTX1" header'),
    ("main-context-0", "main_context=0"),
    ("bad-ref", "part 'fused_add' refers to input '#9' of the node, which has 2"),
    ("dotdot", "is not a relative path inside the model's folder"),
    ("absolute", "is not a relative path inside the model's folder"),
    ("missing", "cannot read its context file"),
])
def test_damaged_or_unsafe_payload_is_refused(tmp_path, fake_cuda, how, needle):
    res = _child(RUN, {"model": str(_damaged(tmp_path, how))}, _env(fake_cuda))
    err = res.get("error", "")
    assert needle in err and "PlusEP EPContext node 'fused_add'" in err, res
    assert "compile the model again" in err or "relative path" in err or "beside the model" in err \
        or "main_context" in err, err
    assert len(err.splitlines()) == 1, err


def test_side_file_model_from_bytes_names_the_fix(add_path, tmp_path, fake_cuda):
    out = tmp_path / "add_ctx.onnx"
    assert _child(COMPILE, {"model": str(add_path), "out": str(out), "embed": False}, _env(fake_cuda)).get("ok")
    res = _child(RUN, {"model": str(out), "bytes": True}, _env(fake_cuda))
    assert "the model was loaded from bytes: load it from its path" in res.get("error", ""), res


def test_compile_model_fails_in_one_line_where_it_cannot(add_path, tmp_path, fake_cuda):
    code = ("import sys, plus_ep\nfrom plus_ep import epcontext\n"
            "try:\n    epcontext.compile_model(sys.argv[1], sys.argv[1] + '.ctx.onnx')\n    print('{\"ok\": true}')\n"
            "except RuntimeError as e:\n    import json; print(json.dumps({'error': str(e)}))\n")
    none = _child(code, str(add_path), _env("/nonexistent/libcuda.so.1"))["error"]
    assert none.startswith("PlusEP cannot compile") and "no usable NVIDIA GPU" in none and "libcuda" in none, none
    assert len(none.splitlines()) == 1
    unclaimable = tmp_path / "add80.onnx"
    onnx.save(add_model(packs={"sm_80": fake_pack("sm_80")}), unclaimable)   # no kernel for the 9.0 device
    err = _child(code, str(unclaimable), _env(fake_cuda))["error"]
    assert err.startswith("PlusEP could not compile") and len(err.splitlines()) == 1, err
    ok = _child(code, str(add_path), _env(fake_cuda))
    assert ok.get("ok") and Path(str(add_path) + ".ctx.onnx").is_file(), ok


# ---------------------------------------------------------------- a C host under the sanitizers


def test_c_host_runs_epcontext_models_under_asan(add_path, tmp_path, fake_cuda):
    from tests.support.plugin_host import SANITIZE, build_host, run_host
    host, lib, fake = build_host(tmp_path / "build", SANITIZE)
    for embed in (True, False):
        out = tmp_path / f"ctx{int(embed)}.onnx"
        onnx.save(epcontext.to_epcontext(onnx.load(str(add_path)), out, embed=embed), out)
        r = run_host(host, lib, out, 4, {"PLUS_EP_CUDA_LIBRARY": str(fake)})
        assert r.returncode == 0 and "Z: 1002 1003 1004 1005" in r.stdout, (r.stdout, r.stderr[-2000:])
    for how in ("truncated", "dotdot", "unknown-record"):
        (tmp_path / how).mkdir()
        r = run_host(host, lib, _damaged(tmp_path / how, how), 4, {"PLUS_EP_CUDA_LIBRARY": str(fake)})
        assert r.returncode == 1 and "PlusEP EPContext node 'fused_add'" in r.stdout, (how, r.stdout)


def test_a_changed_payload_is_not_trusted(add_path, tmp_path, fake_cuda):
    """The trust digest covers what runs: a payload whose plan changed (or that carries a second plan beside
    its own) is refused, naming the node; trust=any admits the changed plan."""
    out = tmp_path / "add_ctx.onnx"
    assert _child(COMPILE, {"model": str(add_path), "out": str(out), "embed": True}, _env(fake_cuda)).get("ok")
    m = onnx.load(str(out))
    attr = next(a for a in _context_node(m).attribute if a.name == "ep_cache_context")
    parts, consts = epcontext.decode_all(attr.s)
    original = parts[0].plan
    parts[0].plan = parts[0].plan.replace("node fused_add", "node fused_add_changed")
    attr.s = epcontext.embedded(epcontext.encode(parts, consts))
    changed = tmp_path / "changed_ctx.onnx"
    onnx.save(m, changed)
    res = _child(RUN, {"model": str(changed)}, _env(fake_cuda))
    assert "PlusEP node 'fused_add'" in res.get("error", "") and "trust" in res["error"], res
    assert _child(RUN, {"model": str(changed)}, _env(fake_cuda, {"PLUS_EP_TRUST": "any"}))["out"] == \
        [1002.0, 1003.0, 1004.0, 1005.0]
    parts[0].strings["plus_plan"] = original.encode()     # the trusted plan beside the one that would run
    attr.s = epcontext.embedded(epcontext.encode(parts, consts))
    onnx.save(m, changed)
    res = _child(RUN, {"model": str(changed)}, _env(fake_cuda))
    assert "a bad attribute name" in res.get("error", ""), res
