"""EPContext models with PlusEP on the emulated CUDA driver: ONNX Runtime's own compile API
(`onnxruntime.ModelCompiler(...).compile_to_file()`, with PlusEP's device added to the session options)
turns a raw model into an EPContext model (the planner rewrites it once, at compile time); a NEW process
loads that model and runs it through PlusEP's kernels (executed by the PTX interpreter) without planning
or rewriting anything: no planner call, no rewriter module imported. Embedded payloads and side files;
`plus-ep rewrite --epcontext` writes the same form offline. Outputs against the original model on ORT
CPU within plus_ep/verification/tolerances.py's model tolerance for the kernels' math.

Each step runs in its own child process (the library reads PLUS_EP_CUDA_LIBRARY once per process)."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("cuda.bindings")

from tests.support.emulated_models import ROOT, child_env  # noqa: E402

pytestmark = pytest.mark.skipif(
    tuple(int(p) for p in ort.__version__.split(".")[:2]) < (1, 25), reason="plugin EPs need onnxruntime >= 1.25")

COMPILE = r"""
import json, sys
spec = json.loads(sys.argv[1])
from plus_ep.verification.emulator import Emulator
emu = Emulator.get()
emu.set_arch("sm_90a")
import onnxruntime as ort, plus_ep
so = ort.SessionOptions()
so.add_provider_for_devices(plus_ep.get_ep_devices(), spec.get("options", {}))
flags = ort.OrtCompileApiFlags.ERROR_IF_NO_NODES_COMPILED if spec.get("strict") else ort.OrtCompileApiFlags.NONE
try:
    ort.ModelCompiler(so, spec["model"], embed_compiled_data_into_model=spec["embed"], flags=flags).compile_to_file(spec["out"])
    print(json.dumps({"planned": plus_ep.ep.planned()}))
except Exception as e:
    print(json.dumps({"error": str(e)}))
"""

RUN = r"""
import json, sys
spec = json.loads(sys.argv[1])
import numpy as np, onnx, onnxruntime as ort
from plus_ep.verification.emulator import Emulator
emu = Emulator.get()
emu.set_arch("sm_90a")
import plus_ep
from plus_ep import epcontext
from plus_ep.verification.tolerances import compare, node_math, tolerance
model = onnx.load(spec["model"])
payloads = epcontext.payloads(model, spec["model"])
for node, parts in payloads.items():          # the emulator maps each cubin to the PTX beside it in its pack
    for part in parts:
        for arch, blob in part.packs.items():
            emu.register_pack(blob, node, arch)
feeds = dict(np.load(spec["feeds"]))
want = ort.InferenceSession(spec["reference"], providers=["CPUExecutionProvider"]).run(None, feeds)
so = ort.SessionOptions()
so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
source = open(spec["model"], "rb").read() if spec.get("bytes") else spec["model"]
out = {"contexts": sorted(payloads)}
try:
    sess = ort.InferenceSession(source, so, providers=[("PlusEP", spec.get("options", {})), "CPUExecutionProvider"])
    got = sess.run(None, feeds)
except Exception as e:
    out["error"] = str(e)
    print(json.dumps(out)); sys.exit(0)
from tests.support.emulated_models import module_owners
owner = module_owners(emu)          # which EPContext node each loaded module served
maths = sorted({node_math(emu.registry[k].ptx if k in emu.registry else "", []) for h, k in emu.load_order
                if any(r.module == h for r in emu.records)} or {"exact"})
out.update({
    "assigned": [[sg.ep_name, [[n.op_type, n.name] for n in sg.get_nodes()]] for sg in sess.get_provider_graph_assignment_info()],
    "launches": [[owner.get(r.module, ""), r.entry, r.error, len(r.findings)] for r in emu.records],
    "compare": [dict(compare(g, w), tol=max(tolerance(m, w.dtype, kind="model") for m in maths)) for g, w in zip(got, want)],
    "planned": plus_ep.ep.planned(),
    "rewriter_loaded": "plus_ep.rewrite" in sys.modules or "plus_ep.model_cache" in sys.modules,
})
print(json.dumps(out, default=float))
"""


def _child(script: str, spec: dict, env: dict | None = None) -> dict:
    r = subprocess.run([sys.executable, "-c", script, json.dumps(spec)], capture_output=True, text=True,
                       env=child_env(env), timeout=900, cwd=str(ROOT))
    assert r.returncode == 0, f"child exited with {r.returncode}\n{r.stderr[-4000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1]) | {"stderr": r.stderr}


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    """A one-layer demo BERT (hidden 32) and its feeds (batch 1, seq 8)."""
    from plus_ep.demo_model import sample_inputs, save_bert
    d = tmp_path_factory.mktemp("bert")
    raw = d / "bert.onnx"
    save_bert(str(raw), layers=1, hidden=32, heads=2, intermediate=64, vocab=50, max_pos=16)
    feeds = d / "feeds.npz"
    np.savez(feeds, **sample_inputs(batch=1, seq=8, vocab=50))
    return raw, feeds


def _check_run(res: dict) -> dict:
    """The EPContext model ran on PlusEP: every node of it is an EPContext node on PlusEP, each launched
    its kernels (no interpreter error or finding), nothing was planned or rewritten, outputs match."""
    assert "error" not in res, res.get("error")
    on_ep = [n for ep, nodes in res["assigned"] if ep == "PlusEP" for n in nodes]
    assert {op for op, _ in on_ep} == {"EPContext"} and sorted(n for _, n in on_ep) == res["contexts"], res["assigned"]
    ran: dict = {}
    for node, entry, error, findings in res["launches"]:
        assert not error and not findings, (node, entry, error)
        ran.setdefault(node, []).append(entry)
    assert set(ran) == set(res["contexts"]), (sorted(ran), res["contexts"])
    assert res["planned"] == {} and not res["rewriter_loaded"], res["planned"]
    for c in res["compare"]:
        assert c["rel"] <= c["tol"], c
    return ran


@pytest.mark.parametrize("embed", [True, False], ids=["embedded", "side-file"])
def test_model_compiler_then_a_new_process_runs_the_epcontext_model(bert, tmp_path, embed):
    raw, feeds = bert
    out = tmp_path / "bert_ctx.onnx"
    comp = _child(COMPILE, {"model": str(raw), "out": str(out), "embed": embed, "strict": True})
    assert "error" not in comp, comp
    planned = comp["planned"][str(raw)]
    m = onnx.load(str(out))
    ctx = [n for n in m.graph.node if n.op_type == "EPContext"]
    assert len(ctx) == len(planned) >= 4, ([n.op_type for n in m.graph.node], planned)
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in ctx[0].attribute}
    assert attrs["source"] == b"PlusEP" and attrs["embed_mode"] == int(embed) and attrs["main_context"] == 1
    side = sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".plusep")
    assert len(side) == (0 if embed else len(ctx)), side
    if not embed:
        assert all(a.s.decode() in side for n in ctx for a in n.attribute if a.name == "ep_cache_context")
    assert not m.functions and not any(n.domain == "ai.plus_ep" for n in m.graph.node)
    res = _child(RUN, {"model": str(out), "reference": str(raw), "feeds": str(feeds)})
    ran = _check_run(res)
    assert any("plus_attention" in e for es in ran.values() for e in es), ran


def test_side_file_model_from_bytes_and_tampered_payloads_are_refused(bert, tmp_path):
    """A side-file EPContext model loaded from bytes (no folder to find its files in) and one whose
    payload changed (kernels no trust manifest lists) are refused with one line naming the node and the
    way out; trust=any admits the changed one."""
    raw, feeds = bert
    out = tmp_path / "b_ctx.onnx"
    assert "error" not in _child(COMPILE, {"model": str(raw), "out": str(out), "embed": False})
    res = _child(RUN, {"model": str(out), "reference": str(raw), "feeds": str(feeds), "bytes": True})
    assert "loaded from bytes: load it from its path" in res.get("error", ""), res
    from plus_ep import epcontext
    m = onnx.load(str(out))
    node = next(n for n in m.graph.node if n.op_type == "EPContext")
    ref = next(a.s.decode() for a in node.attribute if a.name == "ep_cache_context")
    [part] = epcontext.decode((tmp_path / ref).read_bytes())
    from plus_ep.kernels.wire import plan as wire_plan
    tampered = wire_plan.parse(part.plan)
    tampered.node = "tampered"                  # another plan, so another digest
    part.plan = tampered.text()
    (tmp_path / ref).write_bytes(epcontext.encode([part]))
    res = _child(RUN, {"model": str(out), "reference": str(raw), "feeds": str(feeds)})
    assert f"PlusEP node '{part.node}'" in res.get("error", "") and "trust" in res["error"], res
    ok = _child(RUN, {"model": str(out), "reference": str(raw), "feeds": str(feeds), "options": {"trust": "any"}})
    _check_run(ok)


def test_offline_rewrite_writes_the_same_form(bert, tmp_path):
    """`plus-ep rewrite --epcontext embed` (and `file`): the rewritten model's fused nodes as EPContext
    nodes, run by a new process exactly like ModelCompiler's output."""
    raw, feeds = bert
    for mode in ("embed", "file"):
        out = tmp_path / f"off_{mode}.onnx"
        r = subprocess.run([sys.executable, "-m", "plus_ep", "rewrite", str(raw), "-o", str(out), "--arch", "sm_90a",
                            "--epcontext", mode], capture_output=True, text=True, env=child_env(), timeout=600,
                           cwd=str(ROOT))
        assert r.returncode == 0, r.stderr[-3000:]
        assert "EPContext" in r.stdout, r.stdout
        _check_run(_child(RUN, {"model": str(out), "reference": str(raw), "feeds": str(feeds)}))


@pytest.mark.zoo
def test_zoo_bert_model_compiler_acceptance(tmp_path):
    """Issue 38's acceptance: ModelCompiler with PlusEP on the zoo BERT (TorchScript export, 2 layers)
    writes an EPContext model that a new process runs through PlusEP's kernels without rewriting; exact
    fp32 kernels (provider option fp32_math=exact at compile time): outputs within 1e-4; both modes."""
    pytest.importorskip("torch")
    from plus_ep import zoo
    from plus_ep.feeds import sample_inputs
    raw = zoo.export("bert", "torchscript", "small", layers=2)
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, **sample_inputs(str(raw), batch=1, seq=8))
    for embed in (True, False):
        out = tmp_path / f"zoo_ctx{int(embed)}.onnx"
        comp = _child(COMPILE, {"model": str(raw), "out": str(out), "embed": embed, "strict": True,
                                "options": {"fp32_math": "exact"}})
        assert "error" not in comp, comp
        res = _child(RUN, {"model": str(out), "reference": str(raw), "feeds": str(feeds)})
        _check_run(res)
        assert all(c["tol"] == 1e-4 for c in res["compare"]), res["compare"]
