"""BERT-base fp16 for the kernel-counter acceptance (issue 15): the torch-free demo BERT
(plus_ep.demo_model) at BERT-base sizes (hidden 768, 12 heads, FFN 3072), converted to float16
(initializers, float constants, Casts to float, the output), saved as .onnx.

    python -m bench.harness.bert_fp16 OUT.onnx [--layers 1]
"""
from __future__ import annotations

import argparse

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from plus_ep.demo_model import build_bert


def to_fp16(model: onnx.ModelProto) -> onnx.ModelProto:
    g = model.graph
    for i, t in enumerate(g.initializer):
        if t.data_type == TensorProto.FLOAT:
            g.initializer[i].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float16), t.name))
    for n in g.node:
        for a in n.attribute:
            if n.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
                a.i = TensorProto.FLOAT16
            if n.op_type == "Constant" and a.name == "value" and a.t.data_type == TensorProto.FLOAT:
                a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float16), a.t.name))
    for o in g.output:
        if o.type.tensor_type.elem_type == TensorProto.FLOAT:
            o.type.tensor_type.elem_type = TensorProto.FLOAT16
    keep = [v for v in g.value_info if v.type.tensor_type.elem_type != TensorProto.FLOAT]
    del g.value_info[:]
    g.value_info.extend(keep)
    return model


def bert_base_fp16(layers: int = 1) -> onnx.ModelProto:
    return to_fp16(build_bert(layers=layers, hidden=768, heads=12, intermediate=3072))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=1)
    a = ap.parse_args(argv)
    m = bert_base_fp16(a.layers)
    onnx.checker.check_model(m)
    onnx.save(m, a.out)
    print(f"{a.out}: {len(m.graph.node)} nodes, {a.layers} layer(s), fp16")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
