"""The `plus-ep` command line: rewrite / inspect / explain on tiny models, ORT CPU as the oracle."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from plus_ep import cli

ort = pytest.importorskip("onnxruntime")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
F = TensorProto.FLOAT


def chain_model(n: int = 16) -> onnx.ModelProto:
    """X[B,4,8] -> MatMul -> Add -> Relu -> Softmax -> Y[B,4,n]."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, n)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "B")
    nodes = [helper.make_node("MatMul", ["X", "W"], ["m"], name="mm"),
             helper.make_node("Add", ["m", "B"], ["a"], name="bias"),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Softmax", ["r"], ["Y"], name="softmax", axis=-1)]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("X", F, ["B", 4, 8])],
                          [helper.make_tensor_value_info("Y", F, ["B", 4, n])], [w, b])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    onnx.checker.check_model(m, full_check=True)
    return m


@pytest.fixture
def chain(tmp_path):
    path = tmp_path / "chain.onnx"
    onnx.save(chain_model(), path)
    return path


def run_ort(path_or_model, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    src = path_or_model if isinstance(path_or_model, (str, os.PathLike)) else path_or_model.SerializeToString()
    sess = ort.InferenceSession(str(src) if not isinstance(src, bytes) else src, so,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def fused_nodes(model):
    return [n for n in model.graph.node if (n.domain, n.op_type) == ("ai.plus_ep", "Fused")]


# ------------------------------------------------------------------------------------------------
def test_rewrite_writes_checked_model_that_matches_ort(chain, tmp_path, capsys):
    out = tmp_path / "out.onnx"
    assert cli.main(["rewrite", str(chain), "-o", str(out)]) == 0
    captured = capsys.readouterr()
    summary = captured.out.strip().splitlines()
    assert len(summary) == 1 and "fused subgraphs" in summary[0] and "data kernels 4 -> " in summary[0]
    assert captured.err == ""
    model = onnx.load(out)
    onnx.checker.check_model(model, full_check=True)
    assert fused_nodes(model)
    x = np.random.default_rng(1).standard_normal((3, 4, 8)).astype(np.float32)
    want, = run_ort(chain, {"X": x})
    got, = run_ort(out, {"X": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # no temporary files left next to the output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chain.onnx", "out.onnx"]


def test_rewrite_report_and_disable(chain, tmp_path, capsys):
    out = tmp_path / "out.onnx"
    assert cli.main(["rewrite", str(chain), "-o", str(out), "--disable", "softmax", "--report"]) == 0
    text = capsys.readouterr().out
    assert "| pattern | subgraphs | nodes |" in text
    assert "softmax |" not in text.split("| pattern |")[1]
    assert cli.main(["rewrite", str(chain), "-o", str(out), "--disable", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("plus-ep: error:") and "nope" in err and len(err.splitlines()) == 1


def test_rewrite_large_model_goes_external(tmp_path, capsys, monkeypatch):
    """Past the protobuf limit (lowered here) tensors go to OUT.data next to OUT."""
    chain = tmp_path / "chain.onnx"
    onnx.save(chain_model(256), chain)                # 8 KiB weight: over the 1 KiB external threshold
    monkeypatch.setattr(cli, "EXTERNAL_DATA_THRESHOLD", 100)
    out = tmp_path / "big.onnx"
    assert cli.main(["rewrite", str(chain), "-o", str(out)]) == 0
    assert "big.onnx.data" in capsys.readouterr().out
    assert (tmp_path / "big.onnx.data").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.onnx", "big.onnx.data", "chain.onnx"]
    model = onnx.load(out)
    assert fused_nodes(model)
    x = np.ones((2, 4, 8), np.float32)
    np.testing.assert_allclose(run_ort(out, {"X": x})[0], run_ort(chain, {"X": x})[0], rtol=1e-5, atol=1e-6)


def test_rewrite_nothing_to_fuse_copies(tmp_path, capsys):
    g = helper.make_graph([helper.make_node("Identity", ["X"], ["Y"])], "id",
                          [helper.make_tensor_value_info("X", F, [2])], [helper.make_tensor_value_info("Y", F, [2])])
    src = tmp_path / "id.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=9), src)
    out = tmp_path / "id_out.onnx"
    assert cli.main(["rewrite", str(src), "-o", str(out)]) == 0
    assert "nothing to fuse" in capsys.readouterr().out
    assert out.read_bytes() == src.read_bytes()


def test_inspect_table_and_json(chain, capsys):
    assert cli.main(["inspect", str(chain)]) == 0
    text = capsys.readouterr().out
    assert "data kernels: 4 -> " in text
    assert "| op | before | after |" in text and "| MatMul | 1 | 0 |" in text
    assert "| pattern | subgraphs | nodes |" in text

    assert cli.main(["inspect", str(chain), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["data_kernels_before"] == 4 and rep["data_kernels_after"] < 4
    assert rep["patterns"] and rep["subgraphs"][0]["pgraph"].startswith("loop0")

    assert cli.main(["inspect", str(chain), "--graphs"]) == 0
    assert "loop0 [" in capsys.readouterr().out


def test_inspect_reports_what_a_build_delivers(chain, capsys, monkeypatch):
    """inspect renders the kernels (no compile) for --arch: a subgraph whose kernels cannot be rendered is
    left out of the counts and listed once with its reason (issue 23: Swin's report said 175 -> 77 data
    kernels where the build gave 151, and each reason was printed two or three times)."""
    assert cli.main(["inspect", str(chain), "--arch", "sm_80,sm_90a"]) == 0
    out = capsys.readouterr()
    assert "kernels: rendered for sm_80,sm_90a" in out.out and "all 2 fused subgraphs get kernels" in out.out
    fused_after = json.loads((cli.main(["inspect", str(chain), "--json", "--arch", "sm_80"]), capsys.readouterr().out)[1])
    assert fused_after["kernel_failures"] == []

    from plus_ep.kernels.compile import stage as kernel_build
    from plus_ep.kernels.codegen.pull import RenderError
    real = kernel_build.render

    def render(view, sg, ins, outs, node_name="fused", **kw):
        if "/softmax/" in node_name:
            raise RenderError(f"{node_name}: injected refusal")
        return real(view, sg, ins, outs, node_name=node_name, **kw)
    monkeypatch.setattr(kernel_build, "render", render)
    assert cli.main(["inspect", str(chain), "--arch", "sm_80,sm_90a"]) == 0
    out = capsys.readouterr()
    text = out.out + out.err
    assert text.count("injected refusal") == 1, text            # once, though two archs were rendered
    assert "1 subgraphs get no kernels and stay with ONNX Runtime" in out.out
    assert "| Softmax | 1 | 1 |" in out.out                      # the counts leave the refused subgraph out
    rep = json.loads((cli.main(["inspect", str(chain), "--json", "--arch", "sm_80"]), capsys.readouterr().out)[1])
    assert [f["reason"] for f in rep["kernel_failures"]] == ["plus_ep/softmax/1: injected refusal"]
    assert rep["data_kernels_after"] == 2


def test_inspect_rewritten_model_reports_fused_nodes(chain, tmp_path, capsys):
    out = tmp_path / "out.onnx"
    assert cli.main(["rewrite", str(chain), "-o", str(out)]) == 0
    capsys.readouterr()
    assert cli.main(["inspect", str(out), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["rewritten"] is True
    assert rep["fused_nodes"] == len(fused_nodes(onnx.load(out)))
    assert sum(rep["patterns"].values()) == rep["fused_nodes"]
    assert cli.main(["inspect", str(out), "--graphs"]) == 0
    text = capsys.readouterr().out
    assert "already rewritten" in text and "| pattern | fused nodes |" in text and "loop0 [" in text


def test_explain_existing_pattern_gives_reason(chain, capsys):
    # gemm grows over MatMul+Add+Relu then is refused the Softmax: a reason is printed
    assert cli.main(["explain", str(chain), "--pattern", "gemm"]) == 0
    text = capsys.readouterr().out
    assert "best match" in text and "| # | node | op | role | accepted | gemm |" in text
    stop = [line for line in text.splitlines() if line.startswith("stopped:")]
    assert len(stop) == 1 and len(stop[0]) > len("stopped: ")
    assert "pattern 'gemm' +Graph:" in text


def test_explain_pattern_that_never_matches(chain, capsys):
    assert cli.main(["explain", str(chain), "--pattern", "rmsnorm"]) == 0
    text = capsys.readouterr().out
    assert "never matched" in text and "closest refusals" in text


def test_explain_unknown_pattern_lists_patterns(chain, capsys):
    assert cli.main(["explain", str(chain), "--pattern", "no_such_pattern"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("plus-ep: error:") and len(err.splitlines()) == 1
    assert "attention" in err and "gemm" in err


def test_explain_list(capsys):
    assert cli.main(["explain", "--list"]) == 0
    text = capsys.readouterr().out
    assert "attention" in text and "loop0 [" in text


def test_verbose_logs_to_stderr(chain, capsys):
    assert cli.main(["-v", "inspect", str(chain), "--json"]) == 0
    captured = capsys.readouterr()
    json.loads(captured.out)                      # stdout stays pure JSON
    assert "fused subgraphs" in captured.err


def test_internal_error_is_one_line_and_debug_reraises(chain, tmp_path, capsys, monkeypatch):
    import importlib
    rw = importlib.import_module("plus_ep.rewrite")     # plus_ep.rewrite is also a function name

    def boom(*a, **k):
        raise RuntimeError("kaboom")
    monkeypatch.setattr(rw, "rewrite_detailed", boom)
    out = tmp_path / "out.onnx"
    assert cli.main(["rewrite", str(chain), "-o", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("plus-ep: error:") and "RuntimeError" in err and len(err.splitlines()) == 1
    assert not out.exists()
    with pytest.raises(RuntimeError):
        cli.main(["rewrite", str(chain), "-o", str(out), "--debug"])


def test_usage_errors_exit_2(capsys):
    assert cli.main([]) == 2
    assert cli.main(["explain"]) == 2
    assert "plus-ep: error:" in capsys.readouterr().err
    assert cli.main(["--help"]) == 0


def test_python_m_help():
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-m", "plus_ep", "--help"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "rewrite" in proc.stdout and "inspect" in proc.stdout and "explain" in proc.stdout
