"""Placement next to kernels PlusEP lacks (issue 23, graph_rewrites/placement.py): a Relu, an Add or an
Add + Relu right after a Conv is ONNX Runtime's FusedConv; PlusEP leaves it there (fusing the tail alone
would add a kernel), says so in `plus-ep explain`, and still fuses what ORT does not fuse into a Conv."""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from plus_ep import cli
from plus_ep.rewrite import rewrite_detailed


def _block(tail="add_relu", act="Relu") -> onnx.ModelProto:
    """X -> Conv -> (BatchNormalization) -> tail; tail: 'relu' (act), 'add_relu' (+ X, then act),
    'bn_relu' (BatchNormalization, then act), 'relu_mul' (act, then * 2: more than ORT fuses)."""
    rng = np.random.default_rng(0)
    n = helper.make_node
    f = lambda name, a: numpy_helper.from_array(np.asarray(a, np.float32), name)  # noqa: E731
    inits = [f("W", rng.standard_normal((4, 4, 3, 3)) / 6), f("B", 0.1 * rng.standard_normal(4)), f("two", 2.0),
             f("s", 1 + 0.1 * rng.standard_normal(4)), f("o", 0.1 * rng.standard_normal(4)),
             f("mu", 0.1 * rng.standard_normal(4)), f("var", 1 + 0.1 * rng.random(4))]
    nodes = [n("Conv", ["X", "W", "B"], ["c"], pads=[1, 1, 1, 1], name="conv")]
    x = "c"
    if tail == "bn_relu":
        nodes.append(n("BatchNormalization", ["c", "s", "o", "mu", "var"], ["bn"], name="bn"))
        x = "bn"
    if tail == "add_relu":
        nodes.append(n("Add", [x, "X"], ["a"], name="add"))
        x = "a"
    nodes.append(n(act, [x], ["r"], name="act"))
    out = "r"
    if tail == "relu_mul":
        nodes.append(n("Mul", ["r", "two"], ["m"], name="mul"))
        out = "m"
    g = helper.make_graph(nodes, "conv_block", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4, 6, 6])],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, ["N", 4, 6, 6])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def test_conv_tails_stay_with_onnxruntime():
    for tail in ("relu", "add_relu", "bn_relu"):
        r = rewrite_detailed(_block(tail))
        assert r.subgraphs == [], tail
        ((nodes, why),) = r.identifier.placed.values()
        assert why.startswith("left to ONNX Runtime: Conv + ") and "'conv'" in why and "FusedConv" in why


def test_what_ort_does_not_fuse_is_still_fused():
    r = rewrite_detailed(_block("relu_mul"))              # Relu * 2: ORT's FusedConv stops at the Relu
    assert [sg.pattern.name for sg in r.subgraphs] == ["elementwise"] and not r.identifier.placed
    r = rewrite_detailed(_block("relu", act="Sigmoid"))     # no Sigmoid in the CUDA EP's FusedConv
    assert [sg.pattern.name for sg in r.subgraphs] == ["elementwise"]


def test_explain_shows_the_rule(tmp_path, capsys):
    path = tmp_path / "block.onnx"
    onnx.save(_block("add_relu"), path)
    assert cli.main(["explain", str(path), "--pattern", "elementwise"]) == 0
    out = capsys.readouterr().out
    assert "final result: left to ONNX Runtime: Conv + Add + Relu after Conv 'conv'" in out
    assert "placement: 1 grown subgraphs left to ONNX Runtime" in out
