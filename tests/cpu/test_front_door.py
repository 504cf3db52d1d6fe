"""What a newcomer meets first (issue 39): `plus_ep.rewrite()` builds kernels by default, Ctrl-C stops a
kernel build at once, every command reads models through one loader (one message, exit 2), an opset the
installed onnxruntime cannot load is refused naming both versions, the zoo without torch is a usage error,
bad `profile` numbers are refused, and PLUS_EP_COMPILE_THREADS sets the compile threads."""
from __future__ import annotations

import _thread
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import plus_ep
from plus_ep import cli, options
from plus_ep.graph_rewrites.index import ModelError
from plus_ep.kernels.compile import jobs as compile_mod
from plus_ep.kernels.compile import nvrtc
from plus_ep.validate import runtime_limits

ROOT = Path(__file__).resolve().parents[2]


def mlp(opset: int = 17) -> onnx.ModelProto:
    """X[n, 32] @ W + B -> Relu: one `gemm` subgraph."""
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((32, 48)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(48).astype(np.float32), "B")
    nodes = [helper.make_node("MatMul", ["X", "W"], ["m"], name="mm"),
             helper.make_node("Add", ["m", "B"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["Y"], name="relu")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["n", 32])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["n", 48])], [w, b])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def packs(model: onnx.ModelProto) -> set:
    return {a.name[len("plus_images_"):] for n in model.graph.node if n.domain == "ai.plus_ep"
            for a in n.attribute if a.name.startswith("plus_images_")}


# ----------------------------------------------------------------------------- rewrite() and archs
def test_rewrite_builds_the_cli_default_archs(tmp_path):
    """The README's first call gives a model with kernels, for the archs `plus-ep rewrite` builds."""
    path = tmp_path / "m.onnx"
    onnx.save(mlp(), path)
    want = set(options.cli_archs("auto"))
    assert want == (set(options.DEFAULT_ARCHS) if nvrtc.local_arch() is None else {nvrtc.local_arch()})
    fused = plus_ep.rewrite(str(path))
    assert packs(fused) == want
    # the CLI's default is the same set
    out = tmp_path / "m.plus.onnx"
    assert cli.main(["rewrite", str(path), "-o", str(out), "-q"]) == 0
    assert packs(onnx.load(out)) == want


def test_rewrite_archs_spellings():
    assert packs(plus_ep.rewrite(mlp(), archs="sm_80")) == {"sm_80"}
    assert packs(plus_ep.rewrite(mlp(), archs=["sm_90a"])) == {"sm_90a"}
    for none in (None, [], "none"):
        out = plus_ep.rewrite(mlp(), archs=none)
        assert packs(out) == set() and any(n.domain == "ai.plus_ep" for n in out.graph.node)
    with pytest.raises(ValueError, match="unsupported GPU architecture 'sm_42'"):
        plus_ep.rewrite(mlp(), archs="sm_42")


# --------------------------------------------------------------------------------------- Ctrl-C
class _SlowCompiles:
    """nvrtc.compile_cubin that blocks (as NVRTC does, without the GIL) until released; counts starts."""

    def __init__(self):
        self.started = 0
        self.release = threading.Event()
        self.lock = threading.Lock()

    def __call__(self, source, arch, name="k.cu", options=()):
        with self.lock:
            self.started += 1
        self.release.wait(60)
        raise nvrtc.CompileError(name, "", "released by the test")


def test_interrupt_stops_the_compile_queue_at_once(monkeypatch):
    slow = _SlowCompiles()
    monkeypatch.setattr(nvrtc, "compile_cubin", slow)
    jobs = [compile_mod.Job(f"k{i}", f"extern \"C\" __global__ void k{i}() {{}}\n", "sm_80") for i in range(6)]
    timer = threading.Timer(0.5, _thread.interrupt_main)
    t0 = time.perf_counter()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            compile_mod.compile_all(jobs, cache=False, workers=2, progress=False)
        elapsed = time.perf_counter() - t0
        time.sleep(0.3)
        assert elapsed < 1.5, f"the interrupt took {elapsed:.1f}s to stop the build"
        assert slow.started == 2, "a queued compile started after the interrupt"
    finally:
        timer.cancel()
        slow.release.set()


_INTERRUPTED_CLI = r"""
import os, sys, threading
from plus_ep.kernels.compile import nvrtc
marker, never = sys.argv[1], threading.Event()
def compile_cubin(source, arch, name="k.cu", options=()):
    open(marker, "a").write(name + "\n")          # the test sends SIGINT once a compile runs
    never.wait(120)
    raise RuntimeError("not reached")
nvrtc.compile_cubin = compile_cubin
from plus_ep import cli
sys.argv[1:] = sys.argv[2:]
sys.exit(cli.main())
"""


def test_ctrl_c_during_kernel_compilation_exits_within_a_second(tmp_path):
    src, out, marker, cache = tmp_path / "m.onnx", tmp_path / "o.onnx", tmp_path / "started", tmp_path / "cache"
    onnx.save(mlp(), src)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLUS_EP_")}
    env.update(PLUS_EP_CACHE_DIR=str(cache), PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]))
    p = subprocess.Popen([sys.executable, "-c", _INTERRUPTED_CLI, str(marker), "rewrite", str(src), "-o", str(out),
                          "--arch", "sm_80,sm_90a"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), p.communicate(timeout=5)
        p.send_signal(signal.SIGINT)
        t0 = time.monotonic()
        _, err = p.communicate(timeout=30)
        elapsed = time.monotonic() - t0
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130 and "interrupted" in err, err
    assert elapsed < 1.0, f"exited {elapsed:.1f}s after Ctrl-C"
    assert not out.exists()
    entries = [d for d in (cache / "kernels").glob("*/*") if d.parent.name not in ("locks", "renders")]
    assert entries == [], "a partial kernel-cache entry was left behind"


def test_compile_threads_setting(monkeypatch):
    monkeypatch.setenv("PLUS_EP_COMPILE_THREADS", "3")
    assert compile_mod.compile_threads() == 3
    monkeypatch.setenv("PLUS_EP_COMPILE_THREADS", "0")
    with pytest.raises(ValueError, match="PLUS_EP_COMPILE_THREADS=0"):
        compile_mod.compile_threads()
    monkeypatch.delenv("PLUS_EP_COMPILE_THREADS")
    assert compile_mod.compile_threads() == min(os.cpu_count() or 1, 8)
    # compile_all runs that many at once
    monkeypatch.setenv("PLUS_EP_COMPILE_THREADS", "3")
    slow = _SlowCompiles()
    monkeypatch.setattr(nvrtc, "compile_cubin", slow)
    jobs = [compile_mod.Job(f"k{i}", f"extern \"C\" __global__ void t{i}() {{}}\n", "sm_80") for i in range(5)]
    done = []
    t = threading.Thread(target=lambda: done.append(compile_mod.compile_all(jobs, cache=False, progress=False)))
    t.start()
    time.sleep(0.5)
    running = slow.started
    slow.release.set()
    t.join(30)
    assert running == 3 and slow.started == 5 and all(isinstance(r, nvrtc.CompileError) for r in done[0])


# --------------------------------------------------------------------------------------- one loader
def _bad_files(tmp_path) -> dict:
    text = tmp_path / "text.onnx"
    text.write_text("hello, this is not a model\n")
    data = mlp().SerializeToString()
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(data[: len(data) // 2])
    return {"text": text, "truncated": truncated}


@pytest.mark.parametrize("command", [["verify"], ["profile", "--emulate"], ["trust"], ["trust", "--status"],
                                     ["inspect"], ["explain", "--pattern", "gemm"],
                                     ["rewrite", "-o", "OUT"]])
def test_every_command_reads_models_the_same_way(tmp_path, capsys, command):
    for kind, path in _bad_files(tmp_path).items():
        argv = [a if a != "OUT" else str(tmp_path / "out.onnx") for a in command]
        assert cli.main([*argv[:1], str(path), *argv[1:]]) == 2, kind
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"plus-ep: error: {path}: not an ONNX model"), err
        assert "internal error" not in err and len(err.splitlines()) == 1


def test_zoo_without_torch_is_a_usage_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PLUS_EP_ZOO_DIR", str(tmp_path / "zoo"))      # nothing exported there
    monkeypatch.setitem(sys.modules, "torch", None)                    # `import torch` raises ImportError
    assert cli.main(["inspect", "zoo:bert"]) == 2
    err = capsys.readouterr().err
    assert "zoo:bert: plus_ep.zoo needs torch" in err and "[models]" in err and "internal error" not in err


# ------------------------------------------------------------------------------------------ opsets
@pytest.mark.parametrize("opset", [runtime_limits()[1] + 1, 99])
def test_an_opset_onnxruntime_cannot_load_is_refused(tmp_path, capsys, opset):
    newest = runtime_limits()[1]
    src = tmp_path / "m.onnx"
    onnx.save(mlp(opset), src)
    assert cli.main(["rewrite", str(src), "-o", str(tmp_path / "o.onnx"), "--arch", "none"]) == 2
    err = capsys.readouterr().err
    assert f"opset {opset}" in err and f"onnxruntime {ort.__version__} implements opsets up to {newest}" in err
    assert not (tmp_path / "o.onnx").exists()
    with pytest.raises(ModelError, match=f"opset {opset}, but"):
        plus_ep.rewrite(mlp(opset), archs=None)


def test_the_newest_loadable_opset_still_rewrites_and_loads(tmp_path):
    newest = runtime_limits()[1]
    out = plus_ep.rewrite(mlp(min(newest, onnx.defs.onnx_opset_version())), archs=None)
    assert any(n.domain == "ai.plus_ep" for n in out.graph.node)
    ort.InferenceSession(out.SerializeToString(), providers=["CPUExecutionProvider"])


# ------------------------------------------------------------------------------------ profile args
@pytest.mark.parametrize("argv, needle", [(["--sample-ctas", "0"], "--sample-ctas 0: run at least 1 CTA"),
                                         (["--sample-ctas", "-2"], "--sample-ctas -2"),
                                         (["--batch", "0"], "--batch and --seq must be at least 1")])
def test_profile_refuses_numbers_it_cannot_run(tmp_path, capsys, argv, needle):
    model = tmp_path / "m.plus.onnx"
    onnx.save(plus_ep.rewrite(mlp(), archs=["sm_80"]), model)
    assert cli.main(["profile", str(model), "--emulate", *argv]) == 2
    assert needle in capsys.readouterr().err
