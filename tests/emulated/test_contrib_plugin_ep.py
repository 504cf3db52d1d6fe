"""Contrib graphs through the plugin EP on the emulated driver (issue 38's acceptance): a model Optimum's
O2 made (com.microsoft Attention, SkipLayerNormalization, BiasGelu) and an onnxruntime-genai-form int4
decoder (GroupQueryAttention, SkipSimplifiedLayerNormalization, MatMulNBits) run with
providers=["PlusEP", "CPUExecutionProvider"]: every contrib node on PlusEP (only what the offline rewrite
leaves unfused stays on the CPU), as many kernels launched
as the offline rewrite has fused nodes (PlusEP's per-node statistics), outputs (and greedy tokens) as ORT CPU's. Minutes of PTX
interpreter time each: marked slow (PLUS_EP_SLOW_TESTS=1); results of the recorded run in
bench/results/2026-11-28-contrib-plugin-ep.json."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("cuda.bindings")

from tests.support.emulated_models import run_child  # noqa: E402

pytestmark = pytest.mark.slow

RUNNER = r"""
import json, sys, collections
spec = json.loads(sys.argv[1])
import numpy as np, onnx, onnxruntime as ort
from plus_ep.verification.emulator import Emulator
emu = Emulator.get(); emu.set_arch("sm_90a")
import plus_ep
from plus_ep.zoo import ortopt
from plus_ep.rewrite import rewrite_detailed
if spec["model"] == "O2":
    path = str(ortopt.bert_optimized("O2", layers=2))
    r = np.random.default_rng(0)
    feeds = {"input_ids": r.integers(0, 1000, (2, 8)).astype(np.int64),
             "attention_mask": np.array([[1] * 8, [1] * 5 + [0] * 3], np.int64),
             "token_type_ids": r.integers(0, 2, (2, 8)).astype(np.int64)}
else:
    path = str(ortopt.genai_llama(layers=2, dtype=spec["model"]))
rewritten = rewrite_detailed(path, archs=[]).model
offline = [n.name for n in rewritten.graph.node if n.domain == "ai.plus_ep"]
unfused = collections.Counter(f"{n.domain}:{n.op_type}" for n in rewritten.graph.node if n.domain != "ai.plus_ep")
so = ort.SessionOptions()
so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
opts = {"fp32_math": "exact"}
sess = ort.InferenceSession(path, so, providers=[("PlusEP", opts), "CPUExecutionProvider"])
cpu = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
assigned = {}
for sg in sess.get_provider_graph_assignment_info():
    assigned.setdefault(sg.ep_name, collections.Counter()).update(f"{n.domain}:{n.op_type}" for n in sg.get_nodes())
out = {"offline_fused": len(offline), "offline_nodes": offline, "offline_unfused": dict(unfused),
       "assigned": {k: dict(v) for k, v in assigned.items()}}
def by_name(s):
    names = [o.name for o in s.get_outputs()]
    return lambda f: dict(zip(names, s.run(None, f)))
if spec["model"] == "O2":
    got, want = sess.run(None, feeds), cpu.run(None, feeds)
    out["max_abs_diff"] = max(float(np.max(np.abs(g.astype(np.float64) - w))) for g, w in zip(got, want))
else:
    model = onnx.load(path)
    prompt = [1, 5, 9, 13, 17]
    out["tokens_plus_ep"] = ortopt.genai_greedy(by_name(sess), model, prompt, spec["tokens"])
    out["tokens_cpu"] = ortopt.genai_greedy(by_name(cpu), model, prompt, spec["tokens"])
    feeds = ortopt.genai_feeds(model, batch=1, seq=len(prompt), past=0)
    got, want = by_name(sess)(feeds)["logits"], by_name(cpu)(feeds)["logits"]
    out["prefill_logits_max_abs_diff"] = float(np.max(np.abs(got.astype(np.float64) - want)))
import ctypes
lib = ctypes.CDLL(plus_ep.get_library_path())
lib.PlusEP_NodeStats.restype = ctypes.c_size_t
lib.PlusEP_NodeStats.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
buf = ctypes.create_string_buffer(lib.PlusEP_NodeStats(None, 0) + 1)
lib.PlusEP_NodeStats(buf, len(buf))
out["kernel_parts_run"] = sorted(r["node"] for r in json.loads(buf.value.decode()) if r["runs"] > 0)
out["kernel_parts_planned"] = sorted(p["node"] for gs in plus_ep.ep._memo.values() for g in gs for p in g["parts"]
                                     if p["kind"] == "kernel")
out["launches"] = len(emu.records)
out["interpreter_errors"] = [r.error for r in emu.records if r.error or r.findings][:3]
out["planned"] = plus_ep.ep.planned()
print(json.dumps(out, default=float))
"""


def _run(model: str, tokens: int = 0) -> dict:
    return json.loads(run_child(RUNNER, [json.dumps({"model": model, "tokens": tokens})], timeout=3000))


def _check_assignment(res: dict) -> dict:
    """Only what the offline rewrite leaves unfused (position ids, embeddings' gathers) stays on the CPU:
    no contrib node."""
    cpu = res["assigned"].get("CPUExecutionProvider", {})
    assert all(res["offline_unfused"].get(op, 0) >= k for op, k in cpu.items()), (cpu, res["offline_unfused"])
    assert not any(op.startswith("com.microsoft:") for op in cpu), cpu
    return res["assigned"]["PlusEP"]


def test_optimum_o2_minilm_all_on_plus_ep():
    res = _run("O2")
    ops = _check_assignment(res)
    assert ops["com.microsoft:Attention"] == 2 and ops["com.microsoft:SkipLayerNormalization"] == 4, ops
    assert res["kernel_parts_run"] == res["kernel_parts_planned"], res         # every kernel part ran (node stats)
    assert len(res["kernel_parts_run"]) == res["offline_fused"] == 12, res["kernel_parts_run"]
    assert not res["interpreter_errors"], res["interpreter_errors"]
    assert res["max_abs_diff"] <= 1e-4, res["max_abs_diff"]            # exact fp32 kernels


@pytest.mark.parametrize("dtype", ["float16"])
def test_genai_llama_all_on_plus_ep_same_tokens(dtype):
    res = _run(dtype, tokens=8)
    ops = _check_assignment(res)
    assert "CPUExecutionProvider" not in res["assigned"], res["assigned"]    # the genai form: everything
    assert ops["com.microsoft:GroupQueryAttention"] == 2 and ops["com.microsoft:MatMulNBits"] == 11, ops
    assert res["kernel_parts_run"] == res["kernel_parts_planned"], res
    assert len(res["kernel_parts_run"]) == res["offline_fused"] == 14, (res["kernel_parts_run"], res["offline_fused"])
    assert not res["interpreter_errors"], res["interpreter_errors"]
    assert res["tokens_plus_ep"] == res["tokens_cpu"], res
