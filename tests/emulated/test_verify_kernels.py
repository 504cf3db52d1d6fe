"""`plus-ep verify` / plus_ep.verify and `plus-ep profile --emulate` on a tiny model rewritten with real
kernels (LayerNorm row kernel, GEMM with a bias+Relu epilogue; sm_80 and sm_90a): the kernels' PTX runs
on the interpreter through the launcher; a corrupted instruction is caught; bad inputs and 16 threads
on one session with the emulated driver (the GPU reliability cases, on the CPU, fewer runs)."""
from __future__ import annotations

import json
import subprocess
import sys

import onnx
import pytest

import plus_ep
from plus_ep.verification.profile import profile, profile_text
from tests.support.emulated_models import (
    ROOT,
    corrupt_ptx,
    rewritten_tiny,
    run_child,
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "tiny.plus.onnx"
    onnx.save(rewritten_tiny(), path)
    return path


def test_verify_passes_every_node_on_both_archs(tiny):
    rep = plus_ep.verify(str(tiny), batch=2, seq=3)
    text = plus_ep.verify_text(rep)
    assert rep["ok"], text
    assert [(r["node"], r["arch"]) for r in rep["nodes"]] == [
        ("plus_ep/layernorm/0", "sm_80"), ("plus_ep/gemm/1", "sm_80"),
        ("plus_ep/layernorm/0", "sm_90a"), ("plus_ep/gemm/1", "sm_90a")]
    for r in rep["nodes"]:
        assert r["executed"] and r["launches"] >= 1 and r["n_findings"] == 0 and r["outputs"], r
        assert r["kernels"] == (["plus_row"] if "layernorm" in r["node"] else ["plus_gemm"])
        o = r["outputs"][0]
        assert o["shape"] == [2, 3, 32] and o["bound"] == "element" and o["ok"] and o["ratio"] <= 1, o
        assert [x["run"] for x in r["outputs"]] == ["model", "stress X[2, 3, 32]"], r["outputs"]
    assert len(rep["outputs"]) == 2 and all(o["ok"] for o in rep["outputs"])
    assert "PASSED: 4/4 node runs executed" in text


def test_corrupted_ptx_instruction_is_caught(tiny, tmp_path):
    m = onnx.load(tiny)
    changed = corrupt_ptx(m, "plus_ep/layernorm/0", "sm_80", "sub.f32", "add.f32")   # x - mean -> x + mean
    assert changed.startswith("add.f32")
    bad = tmp_path / "corrupt.plus.onnx"
    onnx.save(m, bad)
    r = subprocess.run([sys.executable, "-m", "plus_ep", "verify", str(bad), "--arch", "sm_80", "--json"],
                       capture_output=True, text=True, cwd=str(ROOT), timeout=300, check=False)
    assert r.returncode == 1, r.stderr[-3000:]
    rep = json.loads(r.stdout)
    rows = {x["node"]: x for x in rep["nodes"]}
    ln, gemm = rows["plus_ep/layernorm/0"], rows["plus_ep/gemm/1"]
    assert ln["executed"] and not ln["ok"] and ln["outputs"][0]["ratio"] > 100, ln
    assert gemm["ok"], gemm              # per node: the GEMM is checked on the inputs it really got
    assert not rep["outputs"][0]["ok"] and rep["summary"]["mismatches"] == 1
    text = subprocess.run([sys.executable, "-m", "plus_ep", "verify", str(bad), "--arch", "sm_80"],
                          capture_output=True, text=True, cwd=str(ROOT), timeout=300, check=False).stdout
    assert "MISMATCH" in text and "FAILED" in text


def test_verify_refuses_a_model_without_kernels(tmp_path):
    from tests.support.emulated_models import tiny_model
    p = tmp_path / "plain.onnx"
    onnx.save(tiny_model(), p)
    with pytest.raises(ValueError, match="no ai.plus_ep::Fused nodes"):
        plus_ep.verify(str(p))


def test_profile_reports_counts_per_node(tiny):
    rep = profile(str(tiny), arch="sm_80", batch=1, seq=4)
    assert rep["ok"] and "not measurements" in rep["note"]
    rows = {r["pattern"]: r for r in rep["nodes"]}
    g = rows["gemm"]
    assert g["flops"] >= 2 * 4 * 32 * 32                       # M*N*K multiply-adds, plus the epilogue
    assert g["compulsory_bytes"] == 4 * (4 * 32 + 32 * 32 + 32 + 4 * 32)   # A, W, bias read; Y written
    assert g["dram_bytes"] >= g["compulsory_bytes"] // 2 and g["roofline_us"] > 0
    assert g["ld_sectors_per_request"] >= g["ld_sectors_ideal"] > 0
    assert g["tensor_core_share"] == 0.0 and g["math"] == "exact"   # fp32 exact: SIMT
    assert "MODELLED, not a measurement" in profile_text(rep)
    assert g["ctas"] >= 1 and g["waves"] >= 1 and g["modelled_us"] >= max(k["floor_us"] for k in g["per_kernel"]) > 0
    t = rep["model_totals"]
    assert t["launches"] == sum(len(r["per_kernel"]) for r in rep["nodes"])
    assert t["launch_gaps_us"]["cuda_graph"] < t["launch_gaps_us"]["stream"] and t["constants"]["sms"] == 108
    sampled = profile(str(tiny), arch="sm_80", batch=4, seq=16, sample_ctas=1)
    assert sampled["ok"] and any(r["sampled"] for r in sampled["nodes"])


RELIABILITY = r"""
import json, sys, threading
import numpy as np, onnx, onnxruntime as ort
from plus_ep.verification.emulator import Emulator
from plus_ep.library import get_library_path
path, mode = sys.argv[1], sys.argv[2]
emu = Emulator.get(); emu.register_model(onnx.load(path)); emu.set_arch("sm_80")
so = ort.SessionOptions(); so.register_custom_ops_library(get_library_path()); so.log_severity_level = 3
plus = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"])     # function bodies inlined
def x(b, s, dt=np.float32, h=32, seed=0):
    return {"X": np.random.default_rng(seed).standard_normal((b, s, h)).astype(dt)}
def run(sess, f):
    try:
        return sess.run(None, f)[0], None
    except Exception as e:
        return None, " ".join(str(e).split())[:300]
out = {}
if mode == "inputs":
    for name, f in {"b1s1": x(1, 1), "b2s5": x(2, 5), "b3s17": x(3, 17), "b0-empty": x(0, 4),
                    "s0-empty": x(2, 0), "float64": x(1, 4, np.float64), "hidden33": x(1, 4, h=33)}.items():
        got, gerr = run(plus, f); want, werr = run(ref, f)
        out[name] = {"plus_error": gerr, "ref_error": werr,
                     "maxdiff": float(np.max(np.abs(got - want), initial=0)) if got is not None and want is not None else None,
                     "shape": list(got.shape) if got is not None else None}
    a, _ = run(plus, x(2, 5)); b, _ = run(plus, x(2, 5))
    out["repeat_equal"] = bool(np.array_equal(a, b))
else:
    n = int(sys.argv[3]); feeds = [x(1 + t % 3, 2 + t % 5, seed=t) for t in range(16)]
    res, errors = {}, []
    def work(t):
        try:
            res[t] = [plus.run(None, feeds[t])[0] for _ in range(n)]
        except Exception as e:
            errors.append(str(e))
    ts = [threading.Thread(target=work, args=(t,)) for t in range(16)]
    [t.start() for t in ts]; [t.join() for t in ts]
    out = {"errors": errors[:3], "threads": len(res),
           "distinct": [len({o.tobytes() for o in res[t]}) for t in sorted(res)],
           "maxdiff": max(float(np.max(np.abs(res[t][0] - ref.run(None, feeds[t])[0]))) for t in res)}
out["live_allocations"] = emu.live_allocations()
print(json.dumps(out))
"""


def test_emulated_bad_and_edge_inputs(tiny):
    res = json.loads(run_child(RELIABILITY, [tiny, "inputs"]))
    for name in ("b1s1", "b2s5", "b3s17", "b0-empty", "s0-empty"):
        r = res[name]
        assert r["plus_error"] is None and r["ref_error"] is None and r["maxdiff"] <= 1e-5, (name, r)
    assert res["b0-empty"]["shape"] == [0, 4, 32] and res["s0-empty"]["shape"] == [2, 0, 32]
    for name in ("float64", "hidden33"):            # ORT refuses them before any kernel: an error, no result
        assert res[name]["plus_error"] is not None and res[name]["shape"] is None, (name, res[name])
    assert res["repeat_equal"] and res["live_allocations"] == 0


def test_emulated_sixteen_threads_one_session_bit_identical(tiny):
    res = json.loads(run_child(RELIABILITY, [tiny, "threads", 3]))
    assert res["errors"] == [] and res["threads"] == 16, res
    assert res["distinct"] == [1] * 16, res          # every run of one input: the same bits
    assert res["maxdiff"] <= 1e-5 and res["live_allocations"] == 0, res


@pytest.mark.parametrize("case,message", [
    ("name", "--inputs bad.npz: unknown input(s) Z; missing input(s) X (the model's inputs: X)"),
    ("dtype", "--inputs bad.npz: input X is float64, the model takes float32"),
    ("rank", "--inputs bad.npz: input X has shape [2, 32] (rank 2), the model takes rank 3 ([batch, seq, 32])"),
    ("hidden", "--inputs bad.npz: input X has shape [1, 2, 33], the model takes [batch, seq, 32] (axis 2 must be 32)"),
    ("junk", "--inputs bad.npz: not a readable .npz file of arrays"),
    ("ir", "has ONNX IR version {ir}, but the installed onnxruntime"),    # one past what it loads
])
def test_bad_inputs_and_models_exit_2_with_one_line(tiny, tmp_path, capsys, case, message):
    import numpy as np

    from plus_ep.cli import main
    model, npz = tiny, tmp_path / "bad.npz"
    arrays = {"name": {"Z": np.zeros((1, 2, 32), np.float32)}, "dtype": {"X": np.zeros((1, 2, 32))},
              "rank": {"X": np.zeros((2, 32), np.float32)}, "hidden": {"X": np.zeros((1, 2, 33), np.float32)}}
    if case == "junk":
        npz.write_bytes(b"not a zip")
    elif case in arrays:
        np.savez(npz, **arrays[case])
    args = ["verify", str(model)] + (["--inputs", str(npz)] if case != "ir" else [])
    if case == "ir":
        from plus_ep.validate import runtime_limits
        m = onnx.load(tiny)
        m.ir_version = runtime_limits()[0] + 1           # 14 under onnxruntime 1.31, 15 under 1.32
        message = message.format(ir=m.ir_version)
        model = tmp_path / "ir_next.plus.onnx"
        onnx.save(m, model)
        args = ["verify", str(model)]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
