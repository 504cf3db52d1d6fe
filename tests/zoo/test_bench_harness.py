"""The GPU benchmark harness (bench/harness/gpu.py and friends), checked without a GPU.

The smoke run drives the same code paths on the ORT CPU EP and torch CPU with size-small models;
the trace parsers are checked on a real ORT CPU profile and on synthetic GPU traces; the table,
goals and chart are generated from JSON alone. One `gpu` test runs the harness on a GPU.
"""
from __future__ import annotations

import importlib.util
import json
import pathlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from bench.charts import gpu_table
from bench.charts import goals
from bench.harness import measure
from bench.harness import run_order

ROOT = pathlib.Path(__file__).resolve().parents[2]
OK_KEYS = {"p50_ms", "p90_ms", "runs", "warmup_runs", "kernels_per_run", "kernel_source", "max_abs_diff",
           "max_rel_diff", "gpu_mem_mb", "rss_delta_mb", "provider", "gpu_run", "process", "layers"}


# ----------------------------------------------------------------------------- trace parsing

def test_trace_counts_picks_gpu_kernel_events():
    ort_profile = [
        {"cat": "Session", "name": "model_loading_uri", "dur": 5},
        *[e for _ in range(2) for e in (
            {"cat": "Session", "name": "model_run", "dur": 90},
            {"cat": "Node", "name": "/l0/MatMul_kernel_time", "dur": 10},
            {"cat": "Node", "name": "/l0/MatMul_fence_before", "dur": 0},
            {"cat": "Kernel", "name": "ampere_sgemm_128x64_nn", "args": {"op_name": "MatMul", "stream": 7}},
            {"cat": "Node", "name": "/l0/Softmax_kernel_time", "dur": 4},
            {"cat": "Kernel", "name": "softmax_warp_forward", "args": {"op_name": "Softmax"}},
            {"cat": "Kernel", "name": "elementwise_kernel", "args": {"op_name": "Softmax"}})],
    ]
    c = measure.trace_counts(ort_profile)
    assert c == {"kernel_events": 6, "node_events": 4, "model_runs": 2}

    torch_trace = {"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm", "dur": 3},
        {"ph": "X", "cat": "kernel", "name": "fused_attention", "dur": 5},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "dur": 1},
        {"ph": "X", "cat": "gpu_memset", "name": "Memset", "dur": 1},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "dur": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "dur": 9},
        {"ph": "i", "cat": "Trace", "name": "PyTorch Profiler"},
    ]}
    assert measure.trace_counts(torch_trace) == {"kernel_events": 2, "node_events": 0, "model_runs": 0}


def test_ort_profile_counts_from_file(tmp_path):
    events = [{"cat": "Session", "name": "model_run"}, {"cat": "Kernel", "name": "k1"},
              {"cat": "Kernel", "name": "k2"}, {"cat": "Node", "name": "a_kernel_time"}] * 3
    path = tmp_path / "prof.json"
    path.write_text(json.dumps(events))
    got = measure.ort_profile_counts(path)
    assert got["runs"] == 3 and got["kernels_per_run"] == 2 and got["nodes_per_run"] == 1
    assert "GPU kernel events" in got["source"]
    with pytest.raises(ValueError, match="not a chrome trace"):
        measure.load_events(5)


def _tiny_model() -> bytes:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Softmax", ["a"], ["b"]),
             helper.make_node("Neg", ["b"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "tiny", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model.SerializeToString()


def test_real_ort_cpu_profile_has_node_events_and_no_kernels(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.enable_profiling, so.profile_file_prefix = True, str(tmp_path / "cpu")
    sess = ort.InferenceSession(_tiny_model(), so, providers=["CPUExecutionProvider"])
    for _ in range(4):
        sess.run(None, {"x": np.ones((2, 8), np.float32)})
    got = measure.ort_profile_counts(sess.end_profiling())
    assert got["runs"] == 4
    assert got["nodes_per_run"] == 3          # Relu, Softmax, Neg
    assert got["kernels_per_run"] is None and "node events only" in got["source"]


# ------------------------------------------------------------------------- timing, numerics

class _FakeBound:
    def __init__(self):
        self.runs = self.syncs = 0

    def run(self):
        self.runs += 1

    def sync(self):
        self.syncs += 1


def test_time_runs_warms_up_then_times_every_run():
    b = _FakeBound()
    got = measure.time_runs(b, warmup_runs=3, warmup_s=0.0, min_runs=7, max_runs=7, max_s=10.0)
    assert got["warmup_runs"] == 3 and got["runs"] == 7 and b.runs == b.syncs == 10
    assert 0 <= got["min_ms"] <= got["p50_ms"] <= got["p90_ms"]


def test_diff_absolute_relative_and_non_finite():
    ref = [np.array([1.0, -4.0]), np.array([[2.0]])]
    got = measure.diff([np.array([1.5, -4.0]), np.array([[2.0]])], ref)
    assert got == {"max_abs_diff": 0.5, "max_rel_diff": 0.125}
    bad = measure.diff([np.array([np.inf, 0.0]), np.array([[2.0]])], ref)
    assert bad["max_abs_diff"] == float("inf")
    with pytest.raises(ValueError, match="shape"):
        measure.diff([np.zeros(3), np.zeros((1, 1))], ref)


# ----------------------------------------------------------------------------------- plan

def test_plan_puts_bert_fp16_first_and_the_sweep_last():
    units = run_order.build(["bert", "gpt2"], ["fp16", "fp32"], ["torchscript", "dynamo"],
                       list(run_order.ORDER), [(1, 128), (16, 128)], [1, 4], [32, 128])
    first = [u for u in units if u.model == "bert" and u.dtype == "fp16" and not u.sweep][:7]
    assert units[:7] == first and all(u.exporter in (None, "torchscript") for u in first)
    assert {u.contender for u in first} == set(run_order.ORDER) - set(run_order.LATE)
    assert units[0].contender == "ort" and units[0].shapes == ((1, 128), (16, 128))
    sweep = [i for i, u in enumerate(units) if u.sweep]
    assert sweep and sweep == list(range(len(units) - len(sweep), len(units)))
    ma = [i for i, u in enumerate(units) if u.contender == "torch_compile_max_autotune"]
    gpt2_fp16 = max(i for i, u in enumerate(units) if u.model == "gpt2" and u.dtype == "fp16" and not u.sweep
                    and u.contender != "torch_compile_max_autotune" and u.exporter != "dynamo")
    bert_fp32 = min(i for i, u in enumerate(units) if u.model == "bert" and u.dtype == "fp32")
    assert gpt2_fp16 < ma[0] < bert_fp32     # after every model's fp16 run, before fp32
    dynamo = min(i for i, u in enumerate(units) if u.exporter == "dynamo")
    assert dynamo > max(i for i, u in enumerate(units) if u.dtype == "fp32" and u.exporter == "torchscript")
    assert all(u.exporter is None for u in units if u.contender.startswith("torch"))
    assert run_order.sweep_shapes("vit", (1, 4), (32, 128)) == ((1, 32), (4, 32))
    with pytest.raises(ValueError, match="unknown contender"):
        run_order.build(["bert"], ["fp16"], ["dynamo"], ["ort", "tvm"], [(1, 8)])


# ------------------------------------------------------------------- goals, table, chart

def _row(contender, p50, batch, exporter="torchscript", process="h:1:t", kernels=None, **kw):
    r = {"model": "bert", "title": "BERT-base", "dtype": "fp16", "exporter": exporter, "contender": contender,
         "batch": batch, "seq": 128, "sweep": False, "layers": 12, "status": "ok", "reason": None,
         "gpu_run": True, "process": process, "p50_ms": p50, "p90_ms": p50 * 1.1, "runs": 100,
         "kernels_per_run": kernels, "kernels_per_layer": None if kernels is None else kernels / 12,
         "max_abs_diff": 1e-3, "max_rel_diff": 1e-4, "gpu_mem_mb": 500.0, "rss_delta_mb": 50.0,
         "create_cold_s": 2.0, "create_warm_s": 0.5, "provider": "CUDAExecutionProvider", "note": None}
    r.update(kw)
    return r


def _synthetic_gpu_doc():
    """A made-up GPU result (test fixture numbers, not measurements)."""
    rows = [_row("ort", 1.0, 1, kernels=300), _row("ort_cuda_graph", 0.8, 1),
            _row("plus_ep", 0.5, 1, kernels=84), _row("plus_ep_cuda_graph", 0.25, 1, kernels=84),
            _row("torch_compile", 0.5, 1, exporter=None),
            _row("ort", 4.0, 16), _row("plus_ep", 2.0, 16, kernels=96),
            _row("torch_compile", 2.0, 16, exporter=None),
            # another process: must not count, however fast
            _row("ort", 0.01, 16, process="h:2:t"),
            _row("plus_ep", 1.0, 1, sweep=True), _row("plus_ep", 9.0, 64, sweep=True),
            {**_row("ort_optimizer", 0, 1), "status": "skipped", "reason": "over budget: 3 s left"}]
    return {"schema": "plus_ep.bench.gpu/1", "kind": "gpu", "gpu_run": True, "note": None,
            "date": "2026-01-02T03:04:05+00:00", "device": "NVIDIA H100 80GB HBM3", "process": "h:1:t",
            "env": {"driver": "580", "torch": "2.11", "onnxruntime": "1.31.1", "gpu": {"driver_cuda": "13.0"}},
            "args": {"exporters": ["torchscript", "dynamo"]}, "budget_s": 600, "elapsed_s": 500,
            "complete": True, "models": {"bert": {"layers": 12}}, "results": rows}


def test_goals_use_one_process_and_report_met_or_not():
    doc = _synthetic_gpu_doc()
    got = {g["id"]: g for g in goals.evaluate(doc)}
    assert got["vs_ort"]["cases"] == 2 and got["vs_ort"]["met"] is True       # 0.8/0.25 = 3.2, 4/2 = 2
    assert got["vs_ort"]["worst_ratio"] == pytest.approx(2.0)                 # not 0.01/2 from process 2
    assert got["vs_compile"]["met"] is False and got["vs_compile"]["worst_ratio"] == pytest.approx(1.0)
    assert got["bert_b1"]["met"] is True and got["bert_b1"]["value"] == 0.25
    assert got["bert_b16"]["met"] is False and got["bert_b16"]["value"] == 2.0
    assert got["kernels"]["worst"] == pytest.approx(96 / 12) and got["kernels"]["met"] is False
    smoke = {**doc, "kind": "cpu-smoke", "gpu_run": False}
    assert all(g["met"] is None and "not measured" in g["measured"] for g in goals.evaluate(smoke))


def test_table_and_chart_from_json_alone(tmp_path):
    path = tmp_path / "2026-01-02-gpu-h100.json"
    path.write_text(json.dumps(_synthetic_gpu_doc()))
    written = gpu_table.write(path)
    md = (tmp_path / "2026-01-02-gpu-h100.md").read_text()
    assert written[0].name.endswith(".md")
    assert "# PlusEP GPU benchmark: 2026-01-02 on NVIDIA H100 80GB HBM3" in md
    assert "SMOKE" not in md
    assert "| BERT-base fp16 seq 128 batch 1 <= 0.30 ms (PlusEP, CUDA graph) | 0.250 ms p50" in md
    assert "Dynamic sweep" in md and "over budget: 3 s left" in md
    assert "84 (7.0/layer)" in md
    if _has_matplotlib():
        png = tmp_path / "2026-01-02-gpu-h100.png"
        assert png in written and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _has_matplotlib():
    return importlib.util.find_spec("matplotlib") is not None


# ------------------------------------------------------------------------------ smoke run

@pytest.mark.zoo
def test_cpu_smoke_run(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from bench.harness import gpu
    monkeypatch.setenv("PLUS_EP_BENCH_DIR", str(tmp_path / "exports"))
    out = tmp_path / "out"
    path = gpu.run(["--device", "cpu", "--smoke", "--models", "bert", "t5_decoder_step",
                    "--exporters", "torchscript", "--dtypes", "fp16", "--sweep-batches", "1", "2", "--sweep-seqs", "8",
                    "--out", str(out), "--workdir", str(tmp_path / "work")])
    assert path.parent == out and path.name.endswith(".json") and "-cpu-smoke-" in path.name
    doc = json.loads(path.read_text())
    assert doc["schema"] == "plus_ep.bench.gpu/1" and doc["kind"] == "cpu-smoke"
    assert doc["gpu_run"] is False and "NOT a GPU result" in doc["note"] and doc["complete"] is True
    assert {"date", "device", "env", "process", "budget_s", "elapsed_s", "models", "exports", "results"} <= set(doc)
    assert doc["env"]["gpu"]["present"] is False
    rows = doc["results"]
    assert all(r["gpu_run"] is False for r in rows)
    ok = [r for r in rows if r["status"] == "ok"]
    assert {r["contender"] for r in ok} == {"ort", "ort_optimizer", "plus_ep", "torch_eager"}
    for r in ok:
        assert OK_KEYS <= set(r), r["contender"]
        assert r["p50_ms"] > 0 and r["kernels_per_run"] is None and "CPU run" in r["kernels_reason"]
        assert r["dtype"] == "fp16" and r["max_abs_diff"] <= 2e-2, r    # vs the fp32 reference
    profiled = [r for r in ok if r["contender"] in ("ort", "plus_ep") and not r["sweep"]]
    assert profiled and all(r["ort_profile"]["nodes_per_run"] > 0 for r in profiled)
    assert all("fell back" in r["note"] for r in ok if r["contender"] == "plus_ep")
    firsts = [r for r in ok if "create_cold_s" in r]
    assert firsts and all(r["create_cold_s"] > 0 and r["create_warm_s"] > 0 for r in firsts)
    skipped = {r["contender"]: r["reason"] for r in rows if r["status"] == "skipped"}
    for name in ("ort_cuda_graph", "plus_ep_cuda_graph", "torch_compile_max_autotune"):
        assert "needs a CUDA GPU" in skipped[name]
    assert "smoke" in skipped["torch_compile"]
    assert not [r for r in rows if r["status"] == "error"]
    assert {r["model"] for r in rows if r["sweep"]} == {"bert", "t5_decoder_step"}
    md = path.with_suffix(".md").read_text()
    assert "CPU SMOKE RUN: NOT A GPU RESULT" in md and "not measured (cpu-smoke run" in md
    if _has_matplotlib():
        assert path.with_suffix(".png").exists()


def test_smoke_results_never_default_to_bench_results():
    from bench.harness import gpu
    a = gpu.parse_args(["--device", "cpu", "--smoke"])
    assert gpu.out_dir(a).resolve() != gpu.RESULTS.resolve()
    assert gpu.out_dir(gpu.parse_args([])).resolve() == (ROOT / "bench" / "results").resolve()


@pytest.mark.zoo
def test_split_t5_dynamo_export_matches_torch(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    ort = pytest.importorskip("onnxruntime")
    from bench.harness import export
    from bench.harness import model_set
    monkeypatch.setenv("PLUS_EP_BENCH_DIR", str(tmp_path))
    built = model_set.build("t5_decoder_step", "small", 1)
    path = export.onnx_path("t5_decoder_step", "dynamo", "fp32", "small", 1, built=lambda: built)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [i.name for i in sess.get_inputs()] == ["decoder_input_ids", "encoder_hidden_states",
                                                    "encoder_attention_mask"]
    for batch, seq in [(1, 5), (3, 11)]:
        feeds = model_set.make_feeds(built.spec, built.config, batch, seq)
        got = sess.run(None, feeds)[0]
        with torch.no_grad():
            want = built.wrapper(*[torch.from_numpy(v) for v in feeds.values()])[0].numpy()
        assert got.shape == (batch, 1, 64)
        assert float(np.max(np.abs(got - want))) <= 1e-4


@pytest.mark.zoo
def test_models_past_two_gb_go_through_external_data(tmp_path, monkeypatch):
    """The >2 GB route (Llama at full width): external weights, fp16 conversion and ORT's
    optimizer read and write them; forced here with a tiny threshold on a small BERT."""
    pytest.importorskip("torch")
    ort = pytest.importorskip("onnxruntime")
    from bench.harness import model_set
    from bench.harness.store import Store
    monkeypatch.setenv("PLUS_EP_BENCH_DIR", str(tmp_path / "exports"))
    from plus_ep.zoo import exporters
    monkeypatch.setattr(exporters, "_TWO_GB", 1)
    store = Store("small", 1, "cpu", tmp_path)
    fp32 = store.onnx_path("bert", "torchscript", "fp32")
    assert fp32.with_name(fp32.name + ".data").exists()
    feeds = model_set.make_feeds(model_set.SPECS["bert"], store.config("bert"), 2, 6)
    want = store.references("bert", [(2, 6)])[(2, 6)]
    for path, tol in ((fp32, 1e-4), (store.onnx_path("bert", "torchscript", "fp16"), 2e-2),
                      (store.ort_optimized("bert", "torchscript", "fp16"), 2e-2)):
        got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
            None, model_set.make_feeds(model_set.SPECS["bert"], store.config("bert"), 2, 6,
                                    dtype="fp16" if "fp16" in path.name else "fp32"))
        assert measure.diff(got, want)["max_abs_diff"] <= tol, path.name
    assert list(feeds) == ["input_ids", "attention_mask", "token_type_ids"]


# --------------------------------------------------------------------------------- on a GPU

@pytest.mark.gpu
@pytest.mark.zoo
def test_gpu_smoke_run_counts_kernels(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    from bench.harness import gpu
    monkeypatch.setenv("PLUS_EP_BENCH_DIR", str(tmp_path / "exports"))
    path = gpu.run(["--device", "cuda", "--smoke", "--models", "bert", "--exporters", "torchscript",
                    "--dtypes", "fp16", "--no-sweep", "--out", str(tmp_path / "out"),
                    "--contenders", "ort", "ort_cuda_graph", "torch_eager", "plus_ep", "plus_ep_cuda_graph"])
    doc = json.loads(path.read_text())
    assert doc["kind"] == "gpu-smoke" and doc["env"]["gpu"]["present"] is True
    rows = {(r["contender"], r["batch"]): r for r in doc["results"]}
    import onnxruntime as ort
    cuda_ep = "CUDAExecutionProvider" in ort.get_available_providers()   # the lent machines: a CPU build
    for name in ("ort", "torch_eager") if cuda_ep else ("torch_eager",):
        r = rows[(name, 1)]
        assert r["status"] == "ok" and r["gpu_run"] is True, r
        assert r["kernels_per_run"] and r["kernels_per_run"] > 0 and r["gpu_mem_mb"] is not None
    for r in doc["results"]:
        if r["contender"].startswith("ort") and not cuda_ep:
            assert r["status"] == "skipped" and "CPU build" in r["reason"], r
            continue
        assert r["status"] in ("ok", "error"), r     # nothing GPU-only is skipped on a GPU
        if r["status"] == "ok" and r["contender"].startswith("plus_ep"):
            assert r["gpu_run"] is True and not r.get("note"), r
