"""Bad input, through the API (`plus_ep.rewrite.rewrite`) and the CLI (`plus_ep.cli.main`): unreadable
files are one-line ModelErrors / exit 2 with no output written; odd but valid graphs still rewrite."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from plus_ep.graph_rewrites.index import ModelError
from plus_ep import cli
from plus_ep.rewrite import rewrite
from tests.support.faults import HalfWriter

F = TensorProto.FLOAT
FUSED = ("ai.plus_ep", "Fused")


def make_model(nodes, inputs, outputs, inits=(), domains=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    opsets = [helper.make_opsetid("", 18)] + [helper.make_opsetid(d, 1) for d in domains]
    return helper.make_model(g, opset_imports=opsets, ir_version=10)


def weights(n=8):
    rng = np.random.default_rng(0)
    return (numpy_helper.from_array(rng.standard_normal((n, n)).astype(np.float32), "W"),
            numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "B"))


def x_info(shape=(2, 4, 8)):
    return helper.make_tensor_value_info("X", F, list(shape))


def y_info(shape=None):
    return helper.make_tensor_value_info("Y", F, None if shape is None else list(shape))


def real_model_bytes() -> bytes:
    w, b = weights(64)
    nodes = [helper.make_node("MatMul", ["X", "W"], ["m"]), helper.make_node("Add", ["m", "B"], ["a"]),
             helper.make_node("Relu", ["a"], ["Y"])]
    return make_model(nodes, [x_info((2, 4, 64))], [y_info()], [w, b]).SerializeToString()


def unreadable_files(tmp_path):
    rng = np.random.default_rng(42)
    data = real_model_bytes()
    files = {
        "random": rng.integers(0, 256, 4096, dtype=np.uint8).tobytes(),
        "text": b"this is not an onnx model\njust some text\n" * 10,
        "truncated": data[: len(data) // 2],
        "empty": b"",
    }
    paths = {}
    for name, content in files.items():
        p = tmp_path / f"{name}.onnx"
        p.write_bytes(content)
        paths[name] = p
    paths["missing"] = tmp_path / "missing.onnx"
    paths["directory"] = tmp_path / "folder.onnx"
    paths["directory"].mkdir()
    return paths


KINDS = ["random", "text", "truncated", "empty", "missing", "directory"]


@pytest.mark.parametrize("kind", KINDS)
def test_api_unreadable_input_is_model_error(tmp_path, kind):
    path = unreadable_files(tmp_path)[kind]
    with pytest.raises(ModelError) as info:
        rewrite(path)
    msg = str(info.value)
    assert "\n" not in msg and str(path.name) in msg


@pytest.mark.parametrize("path,why", [("/dev/zero", "is a device"), ("/dev/null", "is a device")])
def test_device_is_refused_without_reading_it(path, why):
    """/dev/zero would be read forever (a hang, then a MemoryError): refused from its file type."""
    with pytest.raises(ModelError, match=why):
        rewrite(path)


def test_file_over_2gib_is_refused_without_reading_it(tmp_path):
    big = tmp_path / "big.onnx"
    with open(big, "wb") as f:                     # sparse: no disk space used
        f.truncate(2**31 + 10)
    with pytest.raises(ModelError, match="2.0 GiB, more than one ONNX protobuf can hold"):
        rewrite(big)


@pytest.mark.parametrize("command", ["rewrite", "inspect", "explain"])
@pytest.mark.parametrize("kind", KINDS)
def test_cli_unreadable_input_exits_2(tmp_path, capsys, kind, command):
    path = unreadable_files(tmp_path)[kind]
    out = tmp_path / "out.onnx"
    argv = {"rewrite": ["rewrite", str(path), "-o", str(out)],
            "inspect": ["inspect", str(path)],
            "explain": ["explain", str(path), "--pattern", "gemm"]}[command]
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("plus-ep: error:"), captured.err
    assert "Traceback" not in captured.err
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".plus-ep-")]


def test_truncated_real_model_is_rejected(tmp_path):
    data = real_model_bytes()
    onnx.load_model_from_string(data)               # the full model is fine
    with pytest.raises(ModelError, match="not an ONNX model"):
        rewrite(data[: len(data) // 2])


def unknown_op_model():
    """MatMul -> com.example::Foo -> Add -> Relu -> MatMul -> Add."""
    w, b = weights()
    nodes = [helper.make_node("MatMul", ["X", "W"], ["m"], name="mm0"),
             helper.make_node("Foo", ["m"], ["f"], name="foo", domain="com.example"),
             helper.make_node("Add", ["f", "B"], ["a"], name="add0"),
             helper.make_node("Relu", ["a"], ["r"], name="relu0"),
             helper.make_node("MatMul", ["r", "W"], ["m2"], name="mm1"),
             helper.make_node("Add", ["m2", "B"], ["Y"], name="add1")]
    return make_model(nodes, [x_info()], [y_info()], [w, b], ["com.example"])


def test_unknown_op_left_untouched_rest_fused(tmp_path, capsys):
    out = rewrite(unknown_op_model())
    foo = [n for n in out.graph.node if n.domain == "com.example"]
    assert len(foo) == 1 and foo[0].name == "foo" and foo[0].op_type == "Foo"
    assert list(foo[0].input) == ["m"] and list(foo[0].output) == ["f"]
    fused = [n for n in out.graph.node if (n.domain, n.op_type) == FUSED]
    assert any("m" in n.output for n in fused)
    # Foo's output has no known shape, so the Add reading it may stay unfused (its broadcast cannot
    # be proved); everything else fuses, and every original node is kept exactly once
    fused_ops = sorted(n.op_type for f in out.functions for n in f.node)
    plain_ops = sorted(n.op_type for n in out.graph.node if n.domain == "")
    assert fused_ops.count("MatMul") == 2 and "Relu" in fused_ops and plain_ops in ([], ["Add"])
    assert sorted(fused_ops + plain_ops) == ["Add", "Add", "MatMul", "MatMul", "Relu"]

    src = tmp_path / "unknown.onnx"
    onnx.save(unknown_op_model(), src)
    dst = tmp_path / "out.onnx"
    assert cli.main(["rewrite", str(src), "-o", str(dst)]) == 0
    assert "fused subgraphs" in capsys.readouterr().out
    assert [n.op_type for n in onnx.load(dst).graph.node if n.domain == "com.example"] == ["Foo"]


def test_no_skeletons_is_fine(tmp_path, capsys):
    m = make_model([helper.make_node("Add", ["X", "X"], ["a"]), helper.make_node("Relu", ["a"], ["Y"])],
                   [x_info()], [y_info((2, 4, 8))])
    out = rewrite(m)
    onnx.checker.check_model(out, full_check=True)
    src = tmp_path / "addrelu.onnx"
    onnx.save(m, src)
    dst = tmp_path / "out.onnx"
    assert cli.main(["rewrite", str(src), "-o", str(dst)]) == 0
    assert capsys.readouterr().err == ""
    ort = pytest.importorskip("onnxruntime")
    x = np.random.default_rng(0).standard_normal((2, 4, 8)).astype(np.float32)
    got = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
    np.testing.assert_allclose(got, np.maximum(x + x, 0), rtol=1e-6)


def cyclic_model():
    nodes = [helper.make_node("Add", ["X", "b"], ["a"], name="add_a"),
             helper.make_node("Relu", ["a"], ["b"], name="relu_b"),
             helper.make_node("Identity", ["a"], ["Y"], name="out")]
    return make_model(nodes, [x_info()], [y_info()])


def test_cyclic_graph_api():
    with pytest.raises(ModelError, match="cycle") as info:
        rewrite(cyclic_model())
    assert "add_a" in str(info.value) or "relu_b" in str(info.value)


def test_cyclic_graph_cli(tmp_path, capsys):
    src = tmp_path / "cycle.onnx"
    onnx.save(cyclic_model(), src)
    out = tmp_path / "out.onnx"
    assert cli.main(["rewrite", str(src), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("plus-ep: error:") and "cycle" in err[0]
    assert "add_a" in err[0] or "relu_b" in err[0]
    assert not out.exists()


@pytest.mark.parametrize("x_shape", [(2, 4, 8), None], ids=["shaped-input", "no-shapes-at-all"])
def test_missing_shape_info_does_not_crash(tmp_path, capsys, x_shape):
    """A custom op's output (no shape anywhere) feeds MatMul+Add+Relu."""
    w, b = weights()
    nodes = [helper.make_node("Foo", ["X"], ["f"], name="foo", domain="com.example"),
             helper.make_node("MatMul", ["f", "W"], ["m"], name="mm"),
             helper.make_node("Add", ["m", "B"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["Y"], name="relu")]
    m = make_model(nodes, [helper.make_tensor_value_info("X", F, None if x_shape is None else list(x_shape))],
                   [y_info()], [w, b], ["com.example"])
    out = rewrite(m)
    assert [n.op_type for n in out.graph.node if n.domain == "com.example"] == ["Foo"]
    src = tmp_path / "noshape.onnx"
    onnx.save(m, src)
    assert cli.main(["inspect", str(src)]) == 0
    assert cli.main(["explain", str(src), "--pattern", "gemm"]) == 0
    assert cli.main(["rewrite", str(src), "-o", str(tmp_path / "out.onnx")]) == 0
    assert "Traceback" not in capsys.readouterr().err


# ------------------------------------------------------------------ a failing write: no partial output


def _disk_full(monkeypatch, path_kind):
    import os
    import shutil
    if path_kind == "fused":                       # save_model: os.fdopen on the temporary file
        real = os.fdopen
        monkeypatch.setattr(os, "fdopen", lambda fd, *a, **k: HalfWriter(real(fd, *a, **k)))
    elif path_kind == "untouched":                 # _copy_untouched: shutil.copyfile
        def copyfile(src, dst, *a, **k):
            with open(dst, "wb") as f:
                f.write(b"partial")
            raise OSError(28, "No space left on device", dst)
        monkeypatch.setattr(shutil, "copyfile", copyfile)
    elif path_kind == "external-data-late":       # OUT.data is in place, then moving OUT fails
        monkeypatch.setattr(cli, "EXTERNAL_DATA_THRESHOLD", 0)
        real_replace = os.replace

        def replace(src_, dst, *a, **k):
            if os.fspath(dst).endswith("out.onnx"):
                raise OSError(28, "No space left on device", dst)
            return real_replace(src_, dst, *a, **k)
        monkeypatch.setattr(os, "replace", replace)
    else:                                          # external data (a model over 2 GiB): onnx.save_model
        monkeypatch.setattr(cli, "EXTERNAL_DATA_THRESHOLD", 0)
        real_save = onnx.save_model

        def save_model(model, path, *a, **k):
            real_save(model, path, *a, **k)        # the data file and the model are staged ...
            raise OSError(28, "No space left on device", path)   # ... then the disk fills up
        monkeypatch.setattr(onnx, "save_model", save_model)


@pytest.mark.parametrize("existing", [False, True], ids=["new-output", "old-output-kept"])
@pytest.mark.parametrize("path_kind", ["fused", "untouched", "external-data", "external-data-late"])
def test_cli_full_disk_leaves_no_partial_output(tmp_path, capsys, monkeypatch, path_kind, existing):
    if path_kind == "untouched":
        m = make_model([helper.make_node("Foo", ["X"], ["Y"], domain="com.example")], [x_info()],
                       [y_info((2, 4, 8))], domains=["com.example"])     # nothing to fuse
        src = tmp_path / "in.onnx"
        onnx.save(m, src)
    else:
        src = tmp_path / "in.onnx"
        src.write_bytes(real_model_bytes())
    out = tmp_path / "out.onnx"
    if existing:
        out.write_bytes(b"previous output")
    _disk_full(monkeypatch, path_kind)
    assert cli.main(["rewrite", str(src), "-o", str(out), "--arch", "none"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "No space left on device" in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == (["in.onnx", "out.onnx"] if existing else ["in.onnx"])
    if existing:
        assert out.read_bytes() == b"previous output"


def test_cli_external_data_output_when_the_disk_has_room(tmp_path, monkeypatch):
    """The same external-data path without the failure: OUT and OUT.data, nothing else."""
    monkeypatch.setattr(cli, "EXTERNAL_DATA_THRESHOLD", 0)
    src = tmp_path / "in.onnx"
    src.write_bytes(real_model_bytes())
    out = tmp_path / "out.onnx"
    assert cli.main(["rewrite", str(src), "-o", str(out), "--arch", "none"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.onnx", "out.onnx", "out.onnx.data"]
    m = onnx.load(out)
    assert [n.domain for n in m.graph.node] == ["ai.plus_ep"]
