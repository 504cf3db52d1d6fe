"""PlusEP as an ONNX Runtime plugin EP on the emulated CUDA driver: the stock
onnxruntime.InferenceSession (providers by name, and SessionOptions.add_provider_for_devices) runs the
nodes PlusEP claims with their real NVRTC kernels, which the PTX interpreter executes on the CPU.

Each case runs in a child process with PLUS_EP_CUDA_LIBRARY naming plus_ep/_emucuda*.so (the library
reads it once per process, and `import plus_ep` registers the EP). In the child, Emulator.get() loads
that same driver object and attaches the interpreter; the emulated device reports compute capability
9.0, where the EP takes the sm_90a packs. The emulator maps each cubin the launcher loads to the PTX
beside it in its pack: the child registers a rewritten model's packs (Emulator.register_model); for a
raw model the planner hands the emulator the packs of the groups it plans (plus_ep/ep.py).

Checked per session: PlusEP first in get_providers(); get_provider_graph_assignment_info() puts the
Fused nodes (rewritten model) or the planned groups (raw model) on PlusEP; every claimed node launched
at least one kernel on the interpreter, with no interpreter error or checker finding; the outputs
match the original model on ORT CPU within plus_ep/verification/tolerances.py's model tolerance for the math the
launched kernels use (exact fp32: 1e-4; tf32 GEMMs, PlusEP's default like the CUDA EP's: 2e-2). Tiny shapes
(one layer, hidden 32, batch 1, seq 8) keep the interpreter's share to seconds."""
from __future__ import annotations

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from tests.support.emulated_models import run_child  # noqa: E402

pytestmark = pytest.mark.skipif(
    tuple(int(p) for p in ort.__version__.split(".")[:2]) < (1, 25), reason="plugin EPs by name need onnxruntime >= 1.25")

RUNNER = r"""
import json, sys
spec = json.loads(sys.argv[1])
import numpy as np, onnx, onnxruntime as ort
from plus_ep.verification.emulator import Emulator
emu = Emulator.get()                 # the driver the EP loads (PLUS_EP_CUDA_LIBRARY), interpreter attached
import plus_ep                       # registers "PlusEP" with onnxruntime
from plus_ep.verification.tolerances import compare, node_math, tolerance
emu.set_arch(spec.get("arch", "sm_90a"))
model = onnx.load(spec["model"])
registered = emu.register_model(model)          # a rewritten model's packs (0 for a raw model)
feeds = dict(np.load(spec["feeds"]))
want = ort.InferenceSession(spec["reference"], providers=["CPUExecutionProvider"]).run(None, feeds)
out = {"registered": registered,
       "devices": [{k: v for k, v in d.items() if k != "device"} for d in plus_ep.ep.devices()], "runs": {}}
opts = spec.get("options", {})
for how in spec["hows"]:
    emu.reset_records()
    so = ort.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    if how.endswith("_noopt"):
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    source = open(spec["model"], "rb").read() if how.endswith("_bytes") else spec["model"]
    try:
        if how.startswith("devices"):
            so.add_provider_for_devices([d for d in ort.get_ep_devices() if d.ep_name == "PlusEP"], opts)
            sess = ort.InferenceSession(source, sess_options=so)
        else:
            sess = ort.InferenceSession(source, so, providers=[("PlusEP", opts), "CPUExecutionProvider"])
        got = sess.run(None, feeds)
    except Exception as e:
        out["runs"][how] = {"error": str(e)}
        continue
    # which claimed node each loaded module served, as plus-ep verify attributes them
    from tests.support.emulated_models import module_owners
    owner = module_owners(emu)
    # the model tolerance of the loosest math mode among the kernels that ran (as plus-ep verify)
    maths = sorted({node_math(emu.registry[key].ptx if key in emu.registry else "", []) for h, key in emu.load_order
                    if any(r.module == h for r in emu.records)} or {"exact"})
    out["runs"][how] = {
        "providers": sess.get_providers(),
        "assigned": [[sg.ep_name, [[n.op_type, n.name] for n in sg.get_nodes()]]
                     for sg in sess.get_provider_graph_assignment_info()],
        "launches": [[owner.get(r.module, r.node), r.entry, r.error, len(r.findings)] for r in emu.records],
        "maths": maths,
        "compare": [dict(compare(g, w), tol=max(tolerance(m, w.dtype, kind="model") for m in maths))
                    for g, w in zip(got, want)],
        "live_allocations": emu.live_allocations(),
        "planned": plus_ep.ep.planned(),
    }
    del sess
print(json.dumps(out, default=float))
"""


def _child(model, reference, feeds: dict, hows, tmp_path, options=None) -> dict:
    path = tmp_path / "feeds.npz"
    np.savez(path, **feeds)
    spec = {"model": str(model), "reference": str(reference), "feeds": str(path), "hows": list(hows),
            "options": options or {}}
    return json.loads(run_child(RUNNER, [json.dumps(spec)], timeout=600))


def _fused_names(path) -> list[str]:
    return [n.name for n in onnx.load(str(path)).graph.node if n.domain == "ai.plus_ep" and n.op_type == "Fused"]


def _check_run(run: dict, claimed: set[str]) -> dict:
    """The common checks of one session; returns {claimed node: its kernel entries}."""
    assert "error" not in run, run.get("error")
    assert run["providers"][:2] == ["PlusEP", "CPUExecutionProvider"], run["providers"]
    bad = [ln for ln in run["launches"] if ln[2] or ln[3]]
    assert not bad, bad                                       # no interpreter error, no checker finding
    ran: dict = {}
    for node, entry, _, _ in run["launches"]:
        ran.setdefault(node, []).append(entry)
    assert set(ran) == claimed, (sorted(ran), sorted(claimed))  # every claimed node ran its kernels, no other
    for c in run["compare"]:
        assert c["rel"] <= c["tol"], c                        # the original model's outputs, fp32 model tolerance
    assert run["live_allocations"] == 0                       # host staging freed every device buffer
    return ran


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    """A one-layer demo BERT at hidden 32, raw and rewritten with sm_90a kernels (NVRTC on the CPU),
    and its feeds (batch 1, seq 8)."""
    pytest.importorskip("cuda.bindings")
    import plus_ep
    from plus_ep.demo_model import sample_inputs, save_bert
    d = tmp_path_factory.mktemp("bert")
    raw = d / "bert.onnx"
    save_bert(str(raw), layers=1, hidden=32, heads=2, intermediate=64, vocab=50, max_pos=16)
    r = plus_ep.rewrite_detailed(str(raw), archs=["sm_90a"])
    assert not r.kernels.failures, r.kernels.failures
    plus = d / "bert.plus.onnx"
    onnx.save(r.model, plus)
    return raw, plus, sample_inputs(batch=1, seq=8, vocab=50)


def test_rewritten_bert_by_name_and_by_device(bert, tmp_path):
    raw, plus, feeds = bert
    fused = _fused_names(plus)
    assert any(n.startswith("plus_ep/attention/") for n in fused), fused
    res = _child(plus, raw, feeds, ["names", "devices", "names_bytes"], tmp_path)
    assert res["registered"] > 0 and res["devices"][0]["mode"] == "staging", res
    assert res["devices"][0]["compute_capability"] == "9.0"
    for how in ("names", "devices", "names_bytes"):     # a rewritten model from bytes runs as from a file
        run = res["runs"][how]
        on_ep = [n for ep, nodes in run["assigned"] if ep == "PlusEP" for n in nodes]
        assert sorted(n for _, n in on_ep) == sorted(fused) and {op for op, _ in on_ep} == {"Fused"}, run["assigned"]
        ran = _check_run(run, set(fused))
        assert "plus_attention" in {e for n, es in ran.items() if "/attention/" in n for e in es}, ran


def _check_planned(run: dict, path) -> None:
    """A raw model: PlusEP claimed one subgraph per planned group, the attention groups among them, left
    no MatMul, Softmax or LayerNormalization to the CPU, and ran exactly the planned groups' kernels."""
    import os
    groups = run["planned"].get(os.path.abspath(str(path)), [])
    assert groups and any("/attention/" in g for g in groups), run["planned"]
    on_ep = [[op for op, _ in nodes] for ep, nodes in run["assigned"] if ep == "PlusEP"]
    assert len(on_ep) == len(groups), run["assigned"]
    assert sum("Softmax" in g for g in on_ep) == sum("/attention/" in g for g in groups), run["assigned"]
    assert not any(op in ("MatMul", "Softmax", "LayerNormalization")
                   for ep, nodes in run["assigned"] if ep != "PlusEP" for op, _ in nodes), run["assigned"]
    ran = _check_run(run, set(groups))
    assert "plus_attention" in {e for n, es in ran.items() if "/attention/" in n for e in es}, ran


def test_raw_bert_planned_incl_attention(bert, tmp_path):
    """A raw model: the EP asks the Python planner, which plans on the graph as ORT's basic optimizations
    leave it (ConstantSharing renames the mask's constant 1.0 before partitioning, which kept the
    attention group unclaimed when planned on the file), claims every group and runs their kernels;
    also with ORT's optimizations off (the planner lists both names of a shared constant)."""
    raw, _, feeds = bert
    res = _child(raw, raw, feeds, ["names", "names_noopt", "names_bytes"], tmp_path)
    assert res["registered"] == 0, res            # the packs reached the emulator only through the planner
    for how in ("names", "names_noopt"):
        _check_planned(res["runs"][how], raw)
    b = res["runs"]["names_bytes"]                # from bytes the EP has no path to plan: nothing claimed
    assert "error" not in b and b["providers"][0] == "PlusEP", b
    assert not [ep for ep, _ in b["assigned"] if ep == "PlusEP"] and b["launches"] == [], b
    assert all(c["rel"] <= c["tol"] for c in b["compare"]), b["compare"]


@pytest.mark.zoo
def test_zoo_bert_rewritten_and_raw_exact(tmp_path):
    """One small zoo export (BERT, TorchScript exporter, 2 layers; cached after its first export) with
    exact fp32 kernels (rewritten with fp32_math="exact"; raw with the provider option fp32_math=exact,
    which reaches the planner): outputs within 1e-4 of the original. Marked zoo (torch, and about a
    minute of NVRTC and interpreter time): `-m "not zoo"` skips it."""
    pytest.importorskip("cuda.bindings")
    pytest.importorskip("torch")
    import plus_ep
    from plus_ep import zoo
    from plus_ep.feeds import sample_inputs
    raw = zoo.export("bert", "torchscript", "small", layers=2)
    r = plus_ep.rewrite_detailed(str(raw), archs=["sm_90a"], fp32_math="exact")
    assert not r.kernels.failures, r.kernels.failures
    plus = tmp_path / "zoo.plus.onnx"
    onnx.save(r.model, plus)
    fused = _fused_names(plus)
    feeds = sample_inputs(str(raw), batch=1, seq=8)
    rw = _child(plus, raw, feeds, ["names"], tmp_path)["runs"]["names"]
    assert sorted(n for ep, nodes in rw["assigned"] if ep == "PlusEP" for _, n in nodes) == sorted(fused)
    assert rw["maths"] == ["exact"] and all(c["tol"] == 1e-4 for c in rw["compare"]), rw
    _check_run(rw, set(fused))
    rr = _child(raw, raw, feeds, ["names"], tmp_path, options={"fp32_math": "exact"})["runs"]["names"]
    assert rr["maths"] == ["exact"] and all(c["tol"] == 1e-4 for c in rr["compare"]), rr
    _check_planned(rr, raw)
