"""Quantized BERT-class encoders, the way users make them:

* ``quantize(path, "qdq", feeds, out)``: onnxruntime.quantization.quantize_static, QDQ format, per-channel int8
  weights and int8 activations calibrated on `feeds` (MinMax), after quant_pre_process;
* ``quantize(path, "dynamic", feeds, out)``: quantize_dynamic (DynamicQuantizeLinear + MatMulInteger, int8 weights);
* ``quantize(path, "fp8", feeds, out)``: an FP8 QDQ model built with onnx helpers (no tool installed here writes
  one): every MatMul with a constant weight reads DequantizeLinear of a float8e4m3fn weight (per-tensor scale
  amax / 448) and a QuantizeLinear -> DequantizeLinear pair of float8e4m3fn on its activation (scale from the
  activation's amax over `feeds`, saturate=1), as TensorRT Model Optimizer's FP8 exports do.

``bert_quantized(kind, shape, layers)`` returns the cached path of a random-weight BERT of the zoo's ``shape``
("minilm": hidden 384, 12 heads, FFN 1536; "bert-base": hidden 768, 12 heads, FFN 3072) quantized that way, its
calibration data the zoo's sample feeds (batch 2, seq 16, token ids from a fixed seed)."""
from __future__ import annotations

import os
import pathlib
import tempfile

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.numpy_helper import saturate_cast

from . import cache
from .ortopt import _key, _publish, bert_export

SHAPES = {"minilm": dict(hidden=384, heads=12, intermediate=1536),
          "bert-base": dict(hidden=768, heads=12, intermediate=3072)}
KINDS = ("qdq", "dynamic", "fp8")
E4M3_MAX = 448.0


class _Reader:
    """onnxruntime.quantization's CalibrationDataReader over a list of feed dicts."""

    def __init__(self, feeds):
        self._it = iter(list(feeds))

    def get_next(self):
        return next(self._it, None)

    def rewind(self):
        pass


def quantize(path, kind: str, feeds, out) -> str:
    """Quantize the fp32 model at `path` (see the module doc for `kind`); writes and returns `out`."""
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r}: one of {KINDS}")
    out = os.fspath(out)
    if kind == "fp8":
        onnx.save(fp8_qdq(onnx.load(os.fspath(path)), feeds), out)
        return out
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process
    with tempfile.TemporaryDirectory() as td:
        pre = os.path.join(td, "pre.onnx")
        quant_pre_process(os.fspath(path), pre, skip_symbolic_shape=True)
        if kind == "dynamic":
            quantize_dynamic(pre, out, weight_type=QuantType.QInt8)
        else:
            reader = type("Reader", (_Reader, CalibrationDataReader), {})(feeds)
            quantize_static(pre, out, reader, quant_format=QuantFormat.QDQ, per_channel=True,
                            activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
    return out


def fp8_qdq(model: onnx.ModelProto, feeds) -> onnx.ModelProto:
    """FP8 (e4m3fn) QDQ of every MatMul whose B is a constant 2-D weight: weight DQ(fp8 weight, amax / 448), and a
    Q -> DQ pair on A with the scale amax(A) / 448 measured on `feeds` (ORT CPU runs the fp32 model)."""
    import onnxruntime as ort
    inits = {t.name: t for t in model.graph.initializer}
    mms = [n for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in inits
           and len(inits[n.input[1]].dims) == 2]
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    acts = sorted({n.input[0] for n in mms})
    probe.graph.output.extend(helper.make_tensor_value_info(a, TensorProto.FLOAT, None) for a in acts)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(probe.SerializeToString(), so, providers=["CPUExecutionProvider"])
    amax = dict.fromkeys(acts, 0.0)
    for f in feeds:
        for a, v in zip(acts, sess.run(acts, f)):
            amax[a] = max(amax[a], float(np.abs(v).max()))
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    new_inits, nodes = [], []
    quantized = {}
    mm_outs = {m.output[0] for m in mms}
    for n in g.node:
        if n.op_type == "MatMul" and n.output[0] in mm_outs:
            a, w = n.input[0], n.input[1]
            if a not in quantized:
                s = np.float32(max(amax[a], 1e-12) / E4M3_MAX)
                sa, za = f"{a}_fp8_scale", f"{a}_fp8_zero"
                new_inits += [numpy_helper.from_array(np.array(s, np.float32), sa),
                              helper.make_tensor(za, TensorProto.FLOAT8E4M3FN, [], [0.0])]
                nodes += [helper.make_node("QuantizeLinear", [a, sa, za], [f"{a}_fp8"], name=f"{a}_fp8_Q", saturate=1),
                          helper.make_node("DequantizeLinear", [f"{a}_fp8", sa, za], [f"{a}_fp8_dq"], name=f"{a}_fp8_DQ")]
                quantized[a] = f"{a}_fp8_dq"
            wv = numpy_helper.to_array(inits[w]).astype(np.float32)
            sw = np.float32(max(float(np.abs(wv).max()), 1e-12) / E4M3_MAX)
            w8 = saturate_cast((wv / sw).astype(np.float32), ml_dtypes.float8_e4m3fn)
            wt = helper.make_tensor(f"{w}_fp8", TensorProto.FLOAT8E4M3FN, list(wv.shape),
                                    w8.view(np.uint8).tobytes(), raw=True)
            new_inits += [wt, numpy_helper.from_array(np.array(sw, np.float32), f"{w}_fp8_scale")]
            nodes.append(helper.make_node("DequantizeLinear", [f"{w}_fp8", f"{w}_fp8_scale"], [f"{w}_fp8_w"],
                                          name=f"{w}_fp8_wDQ"))
            mm = helper.make_node("MatMul", [quantized[a], f"{w}_fp8_w"], list(n.output), name=n.name)
            nodes.append(mm)
        else:
            nodes.append(n)
    del g.node[:]
    g.node.extend(nodes)
    g.initializer.extend(new_inits)
    changed = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "Split", "Pad", "Resize", "ScatterND"}
    for o in out.opset_import:
        if o.domain in ("", "ai.onnx") and o.version < 19:
            if changed & {n.op_type for n in g.node}:
                raise ValueError("raising this model to opset 19 (float8 Q/DQ) would change ops whose form changed")
            o.version = 19                                # float8 Q/DQ and saturate: opset 19
    if out.ir_version < 9:
        out.ir_version = 9
    return out


def sample_feeds(n: int = 2, batch: int = 2, seq: int = 16, vocab: int = 1000) -> list:
    """The calibration feeds: token ids from a fixed seed, full attention masks, segment 0."""
    rng = np.random.default_rng(0)
    return [{"input_ids": rng.integers(0, vocab, (batch, seq)).astype(np.int64),
             "attention_mask": np.ones((batch, seq), np.int64),
             "token_type_ids": np.zeros((batch, seq), np.int64)} for _ in range(n)]


def bert_quantized(kind: str = "qdq", shape: str = "minilm", layers: int = 2, cache_dir=None) -> pathlib.Path:
    """Cached path of a random-weight BERT encoder of `shape` (SHAPES) with `layers` layers, quantized by `kind`."""
    if shape not in SHAPES:
        raise ValueError(f"shape {shape!r}: one of {sorted(SHAPES)}")
    directory = cache.cache_dir(cache_dir)
    args = dict(quant=kind, shape=shape, layers=layers, **SHAPES[shape])
    target = directory / f"bert-{shape}-{kind}-L{layers}-{_key('bert', **args)}.onnx"
    if target.exists():
        return target
    raw = bert_export(layers, SHAPES[shape]["hidden"], SHAPES[shape]["heads"], SHAPES[shape]["intermediate"],
                      1000, directory)
    with tempfile.TemporaryDirectory(dir=directory, prefix=".tmp-") as td:
        path = quantize(raw, kind, sample_feeds(), os.path.join(td, "q.onnx"))
        return _publish(onnx.load(path), target)
