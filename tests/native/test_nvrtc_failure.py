"""NVRTC failing on some subgraphs of a real model: those subgraphs stay unfused with a warning naming
the node, every other subgraph keeps its kernels, and the rewritten model computes what the original
does (ORT CPU: function bodies; and with the launcher library registered but no driver). Two real
NVRTC errors are injected into the demo BERT: a syntax error in a copy of the attention template
(kernels/families/flash_attention/attention.cuh), and an `#error` in the generated source of one GEMM subgraph.
The CLI half: a kernel compile that fails outright (or is interrupted) leaves no output file."""
from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
import pytest

pytest.importorskip("cuda.bindings.nvrtc")

import plus_ep.kernels.compile.stage as kernel_build  # noqa: E402
from plus_ep.kernels.compile import cubin as cubin_reader  # noqa: E402
from plus_ep.kernels.compile import nvrtc  # noqa: E402
from plus_ep.kernels.wire import plan as plan_text  # noqa: E402
from plus_ep.kernels.compile.nvrtc import CompileError, CompileResult  # noqa: E402
from plus_ep import cli  # noqa: E402
from plus_ep.demo_model import build_bert, sample_inputs  # noqa: E402
from plus_ep.rewrite import rewrite_detailed  # noqa: E402

ort = pytest.importorskip("onnxruntime")

# head_dim 64: a size the attention template supports, so only the injected error stops it
CFG = dict(layers=1, hidden=128, heads=2, intermediate=256, vocab=100, max_pos=64, seed=5)
FUSED = ("ai.plus_ep", "Fused")


def attr(node, name):
    for a in node.attribute:
        if a.name == name:
            return a
    return None


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture(scope="module")
def broken(tmp_path_factory):
    """The demo BERT rewritten for sm_90 with two subgraphs whose kernels NVRTC rejects."""
    model = build_bert(**CFG)
    plain = rewrite_detailed(model)                              # no kernels: the names the build uses
    names = [f"plus_ep/{sg.pattern.name}/{k}" for k, sg in enumerate(plain.subgraphs)]
    gemms = [n for n in names if n.split("/")[1] in ("gemm", "gemm_group")]
    assert len(gemms) >= 2 and any("/attention/" in n for n in names), names
    bad_gemm = gemms[1]

    templates, families = tmp_path_factory.mktemp("templates"), tmp_path_factory.mktemp("families")
    shutil.copytree(nvrtc.TEMPLATES_DIR, templates, dirs_exist_ok=True)
    for name, path in nvrtc.template_files().items():      # the family headers, each in its family's folder
        if path.parent.parent == nvrtc.FAMILIES_DIR:
            (families / path.parent.name).mkdir(exist_ok=True)
            shutil.copy2(path, families / path.parent.name / name)
    with open(families / "flash_attention" / "attention.cuh", "a") as f:
        f.write("\nint plus_injected_failure = ;   // a syntax error NVRTC reports\n")
    real_render = kernel_build.render

    def render(view, sg, ins, outs, node_name="fused", **kw):
        rd = real_render(view, sg, ins, outs, node_name=node_name, **kw)
        if node_name == bad_gemm:
            for v in rd.variants:
                v.source += '\n#error "injected failure in this subgraph"\n'
        return rd

    logger, rec = logging.getLogger("plus_ep"), _Records()
    logger.addHandler(rec)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(nvrtc, "TEMPLATES_DIR", templates)
        mp.setattr(nvrtc, "FAMILIES_DIR", families)
        mp.setattr(kernel_build, "render", render)
        res = rewrite_detailed(model, archs=["sm_90"], progress=False)
    logger.removeHandler(rec)
    return {"model": model, "res": res, "names": names, "bad_gemm": bad_gemm, "warnings": rec.messages}


def test_failed_subgraphs_stay_unfused_with_a_warning(broken):
    res, names = broken["res"], broken["names"]
    attention = [n for n in names if "/attention/" in n]
    failed = sorted(name for _, name, _ in res.kernels.failures)
    assert failed == sorted(attention + [broken["bad_gemm"]])
    for _, name, reason in res.kernels.failures:
        assert reason.startswith("kernel compile failed:")
        assert ("attention.cuh" in reason) if "/attention/" in name else ("injected failure" in reason), reason
        (msg,) = [m for m in broken["warnings"] if m.startswith(f"{name} stays unfused")]
        assert "kernel compile failed" in msg
    assert len(res.subgraphs) == len(names) - len(failed)


def test_the_other_subgraphs_keep_their_kernels(broken):
    res, names = broken["res"], broken["names"]
    fused = [n for n in res.model.graph.node if (n.domain, n.op_type) == FUSED]
    failed = {name for _, name, _ in res.kernels.failures}
    assert len(fused) == len(names) - len(failed) > 0
    for n in fused:
        plan = attr(n, "plus_plan").s.decode()
        parsed = plan_text.parse(plan)
        assert parsed.node not in failed and parsed.archs == ["sm_90"]
        assert n.name == parsed.node     # the launcher's errors name this very node
        pack = bytes(onnx.numpy_helper.to_array(attr(n, "plus_images_sm_90").t))
        images = kernel_build.unpack_images(pack)
        assert images and all(cubin_reader.cubin_arch(im) == "sm_90" for im in images)
    # the unfused subgraphs' original operators are back in the main graph
    ops = [n.op_type for n in res.model.graph.node if n.domain == ""]
    assert "Softmax" in ops and ops.count("MatMul") >= 3      # attention's two and the failed GEMM's


def _feeds(batch=2, seq=12):
    return sample_inputs(batch=batch, seq=seq, vocab=CFG["vocab"])


def test_rewritten_model_runs_like_the_original(broken):
    want = ort.InferenceSession(broken["model"].SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, _feeds())
    got = ort.InferenceSession(broken["res"].model.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, _feeds())
    for a, b in zip(want, got):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)


_WITH_LIBRARY = r"""
import json, sys
import numpy as np, onnxruntime as ort
so = ort.SessionOptions()
so.register_custom_ops_library(sys.argv[2])
sess = ort.InferenceSession(sys.argv[1], so, providers=["CPUExecutionProvider"])
feeds = {k: np.load(v) for k, v in json.loads(sys.argv[3]).items()}
np.save(sys.argv[4], sess.run(None, feeds)[0])
"""


def test_runs_with_the_launcher_registered(broken, tmp_path):
    """The partly fused model loads with the launcher library (every plan parses) and, with no CUDA
    driver, runs the fused nodes' function bodies beside the unfused nodes."""
    from plus_ep.library import get_library_path
    try:
        lib = get_library_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    path = tmp_path / "partial.onnx"
    onnx.save(broken["res"].model, path)
    feeds = {}
    for k, v in _feeds().items():
        np.save(tmp_path / f"{k}.npy", v)
        feeds[k] = str(tmp_path / f"{k}.npy")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PLUS_EP_", "FAKE_CUDA_"))}
    env["PLUS_EP_CUDA_LIBRARY"] = "/nonexistent/libcuda.so.1"
    r = subprocess.run([sys.executable, "-c", _WITH_LIBRARY, str(path), lib, json.dumps(feeds),
                        str(tmp_path / "out.npy")], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    want = ort.InferenceSession(broken["model"].SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, _feeds())[0]
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), want, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------- the CLI


@pytest.fixture(scope="module")
def bert_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("bert") / "bert.onnx"
    onnx.save(build_bert(**CFG), path)
    return path


def _fake_compile_all(fail):
    """compile_all without NVRTC: jobs whose name `fail` picks get a CompileError, the rest a stand-in
    cubin (the CLI only packs them)."""
    def compile_all(jobs, cache=None, progress=None, **kw):
        out = []
        for job in jobs:
            if fail(job.name):
                out.append(CompileError(job.name, f"{job.name}(1): error: injected", None))
            else:
                out.append(CompileResult(cubin=b"\x7fELF stand-in", log="", resources={}, seconds=0.0,
                                         arch=job.arch))
        return out
    return compile_all


def _temp_files(d):
    return [p.name for p in d.iterdir() if p.name.startswith(".plus-ep-")]


def test_render_bug_in_one_subgraph_leaves_only_it_unfused(bert_file, monkeypatch, caplog):
    """A codegen exception (not a RenderError) in one subgraph: that one stays unfused with a
    warning naming it and the exception; the rewrite goes on."""
    monkeypatch.setattr(kernel_build, "compile_all", _fake_compile_all(lambda name: False))
    real_render = kernel_build.render

    def render(view, sg, ins, outs, node_name="fused", **kw):
        if "/gemm_layernorm/" in node_name:
            raise KeyError("injected codegen bug")
        return real_render(view, sg, ins, outs, node_name=node_name, **kw)
    monkeypatch.setattr(kernel_build, "render", render)
    res = rewrite_detailed(bert_file, archs=["sm_90"], progress=False)
    failed = [(name, reason) for _, name, reason in res.kernels.failures]
    assert failed and all("/gemm_layernorm/" in n and "KeyError" in r and "injected" in r for n, r in failed)
    assert all(any(m.startswith(f"{n} stays unfused") for m in caplog.messages) for n, _ in failed)
    fused = [n.name for n in res.model.graph.node if (n.domain, n.op_type) == FUSED]
    assert fused and not any("gemm_layernorm" in n for n in fused)
    assert any("/attention/" in n for n in fused)
    assert not set(fused) & {n for n, _ in failed}          # no fused node carries a failed one's name


def test_cli_subgraph_compile_failure_still_writes(bert_file, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(kernel_build, "compile_all", _fake_compile_all(lambda name: "/attention/" in name))
    out = tmp_path / "out.onnx"
    assert cli.main(["rewrite", str(bert_file), "-o", str(out), "--arch", "sm_90"]) == 0
    cap = capsys.readouterr()
    notes = [line for line in cap.err.splitlines() if line.startswith("note: ")]
    assert len(notes) == 1 and "/attention/" in notes[0] and "stays unfused" in notes[0], cap.err
    m = onnx.load(out)
    fused = [n for n in m.graph.node if (n.domain, n.op_type) == FUSED]
    assert fused and not any("attention" in n.name for n in fused)
    assert "Softmax" in [n.op_type for n in m.graph.node]
    assert _temp_files(tmp_path) == []


@pytest.mark.parametrize("failure,code", [(RuntimeError("injected: NVRTC crashed"), 1),
                                          (OSError(errno.ENOMEM, "Cannot allocate memory"), 2),
                                          (KeyboardInterrupt(), 130)],
                         ids=["internal-error", "os-error", "interrupted"])
@pytest.mark.parametrize("existing", [False, True], ids=["no-old-output", "old-output-kept"])
def test_cli_failure_during_kernel_compile_leaves_no_output(bert_file, tmp_path, capsys, monkeypatch,
                                                            failure, code, existing):
    def compile_all(jobs, **kw):
        raise failure
    monkeypatch.setattr(kernel_build, "compile_all", compile_all)
    out = tmp_path / "out.onnx"
    if existing:
        out.write_bytes(b"the previous output")
    assert cli.main(["rewrite", str(bert_file), "-o", str(out), "--arch", "sm_90"]) == code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("plus-ep: error: ") and "Traceback" not in err[0], err
    if existing:
        assert out.read_bytes() == b"the previous output"
    else:
        assert not out.exists()
    assert _temp_files(tmp_path) == []
