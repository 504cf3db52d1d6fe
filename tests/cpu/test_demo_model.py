"""plus_ep.demo_model: a hand-built BERT encoder that checks, infers, runs on ORT CPU, matches a numpy
reference of the same math, and fuses into attention / gemm / gemm_layernorm subgraphs."""
import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from plus_ep.demo_model import build_bert, sample_inputs, save_bert

CFG = dict(layers=2, hidden=64, heads=4, intermediate=256, vocab=100, max_pos=160, seed=3)
SHAPES = [(1, 1), (3, 7), (2, 16), (2, 128)]
_erf = np.vectorize(math.erf, otypes=[np.float64])


def _run(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(["last_hidden_state"], feeds)[0]


def _layernorm(x, g, b, eps=1e-12):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def reference(model, input_ids, attention_mask, layers, heads):
    """The same BERT math in float64 numpy, reading the model's weights by name."""
    w = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    batch, seq = input_ids.shape

    def lin(x, name):
        return x @ w[f"{name}.weight"] + w[f"{name}.bias"]

    def ln(x, name):
        return _layernorm(x, w[f"{name}.weight"], w[f"{name}.bias"])

    x = w["embeddings.word_embeddings.weight"][input_ids] + \
        w["embeddings.position_embeddings.weight"][np.arange(seq)][None]
    x = ln(x, "embeddings.LayerNorm")
    hidden = x.shape[-1]
    d = hidden // heads
    mask = (1.0 - attention_mask[:, None, None, :].astype(np.float64)) * -10000.0
    for i in range(layers):
        p = f"encoder.layer.{i}"

        def heads_of(t):
            return t.reshape(batch, seq, heads, d).transpose(0, 2, 1, 3)
        q, k, v = (heads_of(lin(x, f"{p}.attention.self.{n}")) for n in ("query", "key", "value"))
        s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        o = (s / s.sum(-1, keepdims=True)) @ v
        o = o.transpose(0, 2, 1, 3).reshape(batch, seq, hidden)
        x = ln(lin(o, f"{p}.attention.output.dense") + x, f"{p}.attention.output.LayerNorm")
        h = lin(x, f"{p}.intermediate.dense")
        h = h * (1.0 + _erf(h / 1.4142135)) * 0.5
        x = ln(lin(h, f"{p}.output.dense") + x, f"{p}.output.LayerNorm")
    return x


@pytest.fixture(scope="module")
def model():
    return build_bert(**CFG)


@pytest.fixture(scope="module")
def rewritten(model):
    from plus_ep.rewrite import rewrite_detailed
    return rewrite_detailed(model)


def test_checker_and_metadata():
    m = build_bert()           # defaults: 2 layers, hidden 256, 4 heads
    onnx.checker.check_model(m, full_check=True)
    assert m.ir_version == 8
    assert [(o.domain, o.version) for o in m.opset_import] == [("", 17)]
    dims = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
            for i in m.graph.input}
    assert dims == {"input_ids": ["batch", "seq"], "attention_mask": ["batch", "seq"]}
    assert all(i.type.tensor_type.elem_type == onnx.TensorProto.INT64 for i in m.graph.input)
    assert [o.name for o in m.graph.output] == ["last_hidden_state"]
    names = {n.name for n in m.graph.node}
    assert "/encoder/layer.0/attention/self/query/MatMul" in names
    assert "/encoder/layer.1/intermediate/intermediate_act_fn/Erf" in names
    assert all(n.name for n in m.graph.node) and len(names) == len(m.graph.node)


def test_shape_inference_is_symbolic():
    m = build_bert()
    # Forget the declared output shape: inference alone must derive [batch, seq, hidden].
    m.graph.output[0].type.tensor_type.ClearField("shape")
    inferred = onnx.shape_inference.infer_shapes(m, strict_mode=True)
    out = inferred.graph.output[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in out] == ["batch", "seq", 256]
    for vi in inferred.graph.value_info:          # and no intermediate loses a dim
        for d in vi.type.tensor_type.shape.dim:
            assert d.HasField("dim_value") or not d.dim_param.startswith("unk"), vi.name


@pytest.mark.parametrize("batch,seq", SHAPES)
def test_ort_matches_numpy_reference(model, batch, seq):
    feeds = sample_inputs(batch, seq, seed=batch * 100 + seq, vocab=CFG["vocab"])
    got = _run(model, feeds)
    assert got.shape == (batch, seq, CFG["hidden"]) and got.dtype == np.float32
    assert np.isfinite(got).all()
    want = reference(model, feeds["input_ids"], feeds["attention_mask"], CFG["layers"], CFG["heads"])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)


def test_default_model_runs():
    m = build_bert()
    for batch, seq in [(1, 1), (3, 7), (2, 128)]:
        out = _run(m, sample_inputs(batch, seq))
        assert out.shape == (batch, seq, 256) and np.isfinite(out).all()


def test_mask_matters(model):
    feeds = sample_inputs(2, 16, vocab=CFG["vocab"])
    assert feeds["attention_mask"][1, -1] == 0 and feeds["attention_mask"][0].all()
    full = dict(feeds, attention_mask=np.ones_like(feeds["attention_mask"]))
    a, b = _run(model, feeds), _run(model, full)
    np.testing.assert_allclose(a[0], b[0], atol=1e-6)       # row 0 has no padding
    assert np.abs(a[1] - b[1]).max() > 1e-3                 # row 1's padding is masked out


def test_sample_inputs():
    f = sample_inputs(2, 16, seed=5, vocab=1000)
    assert set(f) == {"input_ids", "attention_mask"}
    assert f["input_ids"].dtype == np.int64 and f["attention_mask"].dtype == np.int64
    assert f["input_ids"].shape == f["attention_mask"].shape == (2, 16)
    assert f["input_ids"].min() >= 0 and f["input_ids"].max() < 1000
    assert f["attention_mask"][1, -1] == 0 and f["attention_mask"][1, 0] == 1
    np.testing.assert_array_equal(f["input_ids"], sample_inputs(2, 16, seed=5)["input_ids"])
    assert sample_inputs(1, 1)["attention_mask"].tolist() == [[1]]


def test_seed_determinism_and_save(tmp_path):
    a, b = build_bert(**CFG), build_bert(**CFG)
    assert a.SerializeToString() == b.SerializeToString()
    c = build_bert(**dict(CFG, seed=4))
    assert a.graph.initializer[0].raw_data != c.graph.initializer[0].raw_data
    path = tmp_path / "bert.onnx"
    saved = save_bert(str(path), **CFG)
    assert onnx.load(str(path)).SerializeToString() == saved.SerializeToString() == a.SerializeToString()
    with pytest.raises(ValueError):
        build_bert(hidden=30, heads=4)


def test_rewriter_fuses_every_layer(rewritten):
    names = [s.pattern.name for s in rewritten.subgraphs]
    print(len(names), names)
    for i in range(CFG["layers"]):
        per = [(s.pattern.name, {rewritten.view.nodes[j].name for j in s.nodes})
               for s in rewritten.subgraphs]
        mine = [(p, ns) for p, ns in per if any(n.startswith(f"/encoder/layer.{i}/") for n in ns)]
        attn = [ns for p, ns in mine if p == "attention"]
        assert len(attn) == 1 and f"/encoder/layer.{i}/attention/self/Softmax" in attn[0]
        assert sum(p == "gemm_layernorm" for p, _ in mine) == 2
        ffn = [ns for p, ns in mine if p == "gemm"
               and f"/encoder/layer.{i}/intermediate/intermediate_act_fn/Erf" in ns]
        assert len(ffn) == 1 and f"/encoder/layer.{i}/intermediate/dense/MatMul" in ffn[0]
    assert any(n.op_type == "Fused" for n in rewritten.model.graph.node)


@pytest.mark.parametrize("batch,seq", [(1, 1), (3, 7), (2, 128)])
def test_rewritten_model_matches_original(model, rewritten, batch, seq):
    feeds = sample_inputs(batch, seq, seed=7, vocab=CFG["vocab"])
    got, want = _run(rewritten.model, feeds), _run(model, feeds)
    assert np.abs(got - want).max() <= 1e-4
