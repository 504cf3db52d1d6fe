"""A small BERT-style encoder built directly with `onnx.helper` (no torch / transformers).

The graph mirrors the HF BERT TorchScript export (node names, op sequence, GELU-by-Erf, additive
key-padding mask), so the rewriter's attention / gemm / gemm_layernorm fusions apply to it.
Weights are random (numpy default_rng(seed), scale 0.02), fp32, opset 17, IR 8.
"""
from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8


class _Builder:
    def __init__(self, rng):
        self.rng, self.nodes, self.inits, self._n = rng, [], [], 0

    def weight(self, name, shape, scale=0.02):
        self.inits.append(numpy_helper.from_array(
            (self.rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def tensor(self, name, value):
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def const(self, scope, value, dtype=np.float32):
        """A Constant node (the TorchScript export emits these inline)."""
        self._n += 1
        out = f"{scope}/Constant_{self._n}_output_0"
        self.nodes.append(helper.make_node(
            "Constant", [], [out], name=f"{scope}/Constant_{self._n}",
            value=numpy_helper.from_array(np.asarray(value, dtype=dtype))))
        return out

    def op(self, op_type, name, inputs, **attrs):
        out = f"{name}_output_0"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=name, **attrs))
        return out


def _linear(b, x, scope, n_in, n_out):
    w = b.weight(f"{scope.strip('/').replace('/', '.')}.weight", (n_in, n_out))
    bias = b.weight(f"{scope.strip('/').replace('/', '.')}.bias", (n_out,))
    return b.op("Add", f"{scope}/Add", [b.op("MatMul", f"{scope}/MatMul", [x, w]), bias])


def _layernorm(b, x, scope, hidden):
    p = scope.strip("/").replace("/", ".")
    g = b.tensor(f"{p}.weight", np.ones(hidden, np.float32))
    beta = b.tensor(f"{p}.bias", np.zeros(hidden, np.float32))
    return b.op("LayerNormalization", f"{scope}/LayerNormalization", [x, g, beta],
                axis=-1, epsilon=1e-12)


def _layer(b, x, mask, i, hidden, heads, intermediate):
    head_dim = hidden // heads
    sc = f"/encoder/layer.{i}/attention/self"
    split = b.const(sc, [0, 0, heads, head_dim], np.int64)
    q, k, v = (b.op("Reshape", f"{sc}/Reshape{sfx}",
                    [_linear(b, x, f"{sc}/{n}", hidden, hidden), split])
               for n, sfx in (("query", ""), ("key", "_1"), ("value", "_2")))
    q = b.op("Transpose", f"{sc}/Transpose", [q], perm=[0, 2, 1, 3])
    kt = b.op("Transpose", f"{sc}/Transpose_1", [k], perm=[0, 2, 3, 1])
    v = b.op("Transpose", f"{sc}/Transpose_2", [v], perm=[0, 2, 1, 3])
    s = b.op("MatMul", f"{sc}/MatMul", [q, kt])
    s = b.op("Div", f"{sc}/Div", [s, b.const(sc, math.sqrt(head_dim))])
    s = b.op("Add", f"{sc}/Add", [s, mask])
    p = b.op("Softmax", f"{sc}/Softmax", [s], axis=-1)
    o = b.op("MatMul", f"{sc}/MatMul_1", [p, v])
    o = b.op("Transpose", f"{sc}/Transpose_3", [o], perm=[0, 2, 1, 3])
    o = b.op("Reshape", f"{sc}/Reshape_3", [o, b.const(sc, [0, 0, hidden], np.int64)])
    ao = f"/encoder/layer.{i}/attention/output"
    o = b.op("Add", f"{ao}/Add", [_linear(b, o, f"{ao}/dense", hidden, hidden), x])
    x = _layernorm(b, o, f"{ao}/LayerNorm", hidden)
    im = f"/encoder/layer.{i}/intermediate"
    h = _linear(b, x, f"{im}/dense", hidden, intermediate)
    act = f"{im}/intermediate_act_fn"
    e = b.op("Erf", f"{act}/Erf", [b.op("Div", f"{act}/Div", [h, b.const(act, 1.4142135)])])
    e = b.op("Add", f"{act}/Add", [e, b.const(act, 1.0)])
    h = b.op("Mul", f"{act}/Mul_1", [b.op("Mul", f"{act}/Mul", [h, e]), b.const(act, 0.5)])
    out = f"/encoder/layer.{i}/output"
    o = b.op("Add", f"{out}/Add", [_linear(b, h, f"{out}/dense", intermediate, hidden), x])
    return _layernorm(b, o, f"{out}/LayerNorm", hidden)


def build_bert(layers=2, hidden=256, heads=4, intermediate=1024, vocab=1000, max_pos=512,
               seed=0) -> onnx.ModelProto:
    if hidden % heads:
        raise ValueError(f"hidden {hidden} is not a multiple of heads {heads}")
    b = _Builder(np.random.default_rng(seed))
    emb = "/embeddings"
    word = b.weight("embeddings.word_embeddings.weight", (vocab, hidden))
    pos = b.weight("embeddings.position_embeddings.weight", (max_pos, hidden))
    arange = b.tensor("embeddings.position_ids", np.arange(max_pos, dtype=np.int64)[None, :])
    # position_ids = self.position_ids[:, 0:seq] (the Slice of a constant buffer)
    seq = b.op("Shape", f"{emb}/Shape", ["input_ids"], start=1, end=2)
    pos_ids = b.op("Slice", f"{emb}/Slice", [arange, b.const(emb, [0], np.int64), seq,
                                             b.const(emb, [1], np.int64)])
    x = b.op("Add", f"{emb}/Add", [
        b.op("Gather", f"{emb}/word_embeddings/Gather", [word, "input_ids"]),
        b.op("Gather", f"{emb}/position_embeddings/Gather", [pos, pos_ids])])
    x = _layernorm(b, x, f"{emb}/LayerNorm", hidden)
    # extended mask: (1 - mask[:, None, None, :].float()) * -10000
    m = b.op("Unsqueeze", "/Unsqueeze", ["attention_mask", b.const("", [1, 2], np.int64)])
    m = b.op("Cast", "/Cast", [m], to=TensorProto.FLOAT)
    m = b.op("Sub", "/Sub", [b.const("", 1.0), m])
    mask = b.op("Mul", "/Mul", [m, b.const("", -10000.0)])
    for i in range(layers):
        x = _layer(b, x, mask, i, hidden, heads, intermediate)
    b.nodes[-1].output[0] = "last_hidden_state"
    graph = helper.make_graph(
        b.nodes, "bert_demo",
        [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "seq"])
         for n in ("input_ids", "attention_mask")],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT,
                                       ["batch", "seq", hidden])],
        b.inits,
        # Slice with a data-dependent end is opaque to onnx shape inference: state its shape
        # (as exporters do) so [batch, seq, hidden] stays symbolic through the whole graph.
        value_info=[helper.make_tensor_value_info(pos_ids, TensorProto.INT64, [1, "seq"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="plus_ep.demo_model")
    model.ir_version = IR_VERSION
    return model


def sample_inputs(batch=2, seq=16, seed=0, vocab=1000) -> dict:
    """Random ids < vocab; row 1 (when there is one) ends in padding."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, size=(batch, seq), dtype=np.int64)
    mask = np.ones((batch, seq), dtype=np.int64)
    if batch > 1 and seq > 1:
        mask[1, seq - max(1, seq // 4):] = 0
    return {"input_ids": ids, "attention_mask": mask}


def save_bert(path, **kw) -> onnx.ModelProto:
    model = build_bert(**kw)
    onnx.save(model, path)
    return model
