"""Golden rendered sources: the generated .cu of a few patterns, kept under tests/golden/.

    python -m tests.support.golden            # check (exit 1 and a diff summary on a mismatch)
    python -m tests.support.golden --update   # regenerate after an intended codegen change

The cases render subgraphs of the small BERT TorchScript export (zoo, 2 layers). The rendered code does
not depend on weight values, so tests/golden/ also keeps that export's graph with its weights zeroed
(STRUCTURE, ~9 KB gzipped): the golden check runs from it without torch (tests/cpu/test_golden.py), and
with torch the export itself must still have exactly that graph (tests/zoo/test_kernels_codegen.py).
`--update` needs the [models] extra: it rewrites the golden sources and STRUCTURE from the export.

The TMA GEMM cases (TMA_CASES, `tma_*`) render the fp16 demo BERT (plus_ep/demo_model.py, no torch) for sm_90a
with the menu restricted to the TMA tiles, as PLUS_EP_GEMM_TILES=ws_* would: the group, the GEMM + GELU and the
GEMM + LayerNorm on templates/gemm_sm90a_ws.cuh, each with its plan's `tmap` records.

The sm_90a attention case (WGMMA_CASES, `wg_attention`) renders a small fp16 attention with a key padding mask
(`wgmma_attention_model`, no torch) for sm_90a: the body of attention_sm90a.cuh with its three `tmap` records.
"""
from __future__ import annotations

import gzip
import pathlib
import sys

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "golden"
STRUCTURE = GOLDEN / "bert-torchscript-small-L2.structure.onnx.gz"
CASES = {"gemm_group_qkv": ("gemm_group", "Transpose"), "gemm_bias_gelu": ("gemm", "Erf"),
         "gemm_layernorm": ("gemm_layernorm", "LayerNormalization"), "attention": ("attention", "Softmax"),
         "layernorm_embed": ("layernorm", "Gather")}


TMA_CASES = {"tma_gemm_group_qkv": ("gemm_group", "Transpose"), "tma_gemm_bias_gelu": ("gemm", "Erf"),
             "tma_gemm_layernorm": ("gemm_layernorm", "LayerNormalization")}


def render_tma_cases() -> dict:
    """{file name: text} of the TMA cases (see above)."""
    from bench.harness.bert_fp16 import to_fp16
    from plus_ep.demo_model import build_bert
    from plus_ep.kernels.families.gemm import sm90a_configs as gc
    from plus_ep.kernels.render import render
    from plus_ep.kernels.target import Target
    from plus_ep.rewrite import rewrite_detailed
    r = rewrite_detailed(to_fp16(build_bert(layers=1, hidden=128, heads=2, intermediate=384)), archs=["sm_90a"],
                         compile_kernels=False)
    # only the two-CTA multicast tiles 128 x 128 and 128 x 256 (two consumers, B shared by the pair): at these
    # small shapes the model would pick the one-consumer tiles everywhere, which tests/emulated/test_ptx_gemm_ws.py
    # covers with the other tiles
    keep = {"ws_128x128x64_s6_c2", "ws_128x256x64_s4_c2"}
    target = Target("sm_90a", "exact", frozenset(c.name for c in gc.CONFIGS + gc.CLUSTER_CONFIGS + gc.WS_CONFIGS
                                                 if c.name not in keep))
    out = {}
    for case, (pattern, op) in TMA_CASES.items():
        sg = next(s for s in r.subgraphs if s.pattern.name == pattern and any(r.view.nodes[i].op_type == op
                                                                                for i in s.nodes))
        ins, outs = r.view.graph_index.boundary(sg.nodes)
        rd = render(r.view, sg, ins, outs, target, node_name=case)
        out[f"{case}.cu"] = rd.variants[0].source
        out[f"{case}.plan"] = rd.plan.text()
    return out


WGMMA_CASES = ("wg_attention",)


def wgmma_attention_model():
    """fp16 attention softmax(Q·Kᵀ·0.125 + key padding mask)·V, Q, K, V [batch, 4, seq, 64] graph inputs (K under a
    Transpose) and a [batch, 1, 1, seq] additive mask: the sm_90a body's operand form (no torch)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    f16 = TensorProto.FLOAT16
    ins = [helper.make_tensor_value_info(n, f16, ["batch", 4, "seq", 64]) for n in "qkv"]
    ins.append(helper.make_tensor_value_info("mask", f16, ["batch", 1, 1, "seq"]))
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s0"]), helper.make_node("Mul", ["s0", "scale"], ["s1"]),
             helper.make_node("Add", ["s1", "mask"], ["s"]), helper.make_node("Softmax", ["s"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["o"])]
    g = helper.make_graph(nodes, "wg_attention", ins,
                          [helper.make_tensor_value_info("o", f16, ["batch", 4, "seq", 64])],
                          [numpy_helper.from_array(np.array(0.125, np.float16), "scale")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


def render_wgmma_cases() -> dict:
    """{file name: text} of the sm_90a attention body's case (`wgmma_attention_model` for sm_90a; its last route,
    the long sequences', is the body's)."""
    from plus_ep.kernels.render import render
    from plus_ep.kernels.target import Target
    from plus_ep.rewrite import rewrite_detailed
    r = rewrite_detailed(wgmma_attention_model(), archs=["sm_90a"], compile_kernels=False)
    (sg,) = [s for s in r.subgraphs if s.pattern.name == "attention"]
    ins, outs = r.view.graph_index.boundary(sg.nodes)
    rd = render(r.view, sg, ins, outs, Target("sm_90a"), node_name="wg_attention")
    return {"wg_attention.cu": rd.variants[-1].source, "wg_attention.plan": rd.plan.text()}


def export_model():
    """The small BERT TorchScript export (2 layers) the cases come from (needs the [models] extra)."""
    from plus_ep import zoo
    return zoo.load("bert", "torchscript", "small", layers=2)


def zero_weights(model):
    """The graph of `model` with every initializer of 16 or more elements set to zeros (shapes, dtypes
    and small constants kept): what the codegen reads, in a few KB."""
    import numpy as np
    import onnx
    from onnx import numpy_helper
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for k, t in enumerate(out.graph.initializer):
        a = numpy_helper.to_array(t)
        if a.size >= 16:
            out.graph.initializer[k].CopyFrom(numpy_helper.from_array(np.zeros_like(a), t.name))
    return out


def structure_model():
    """The export's graph with zeroed weights, from tests/golden/ (no torch needed)."""
    import onnx
    return onnx.load_from_string(gzip.decompress(STRUCTURE.read_bytes()))


def render_cases(model=None, arch="sm_80") -> dict:
    """{file name: text} of every case rendered from `model` (default: the zoo export)."""
    from plus_ep.kernels.render import render
    from plus_ep.kernels.target import Target
    from plus_ep.rewrite import rewrite_detailed
    r = rewrite_detailed(export_model() if model is None else model)
    out = {}
    for case, (pattern, op) in CASES.items():
        sg = next(s for s in r.subgraphs if s.pattern.name == pattern
                  and any(r.view.nodes[i].op_type == op for i in s.nodes)
                  and not any(r.view.nodes[i].op_type == "Flatten" for i in s.nodes))
        ins, outs = r.view.graph_index.boundary(sg.nodes)
        rd = render(r.view, sg, ins, outs, Target(arch, "exact"), node_name=case)
        out[f"{case}.cu"] = rd.variants[0].source
        out[f"{case}.plan"] = rd.plan.text()
    return out


def differing(rendered: dict) -> list:
    """Names of the golden files `rendered` does not match."""
    return [name for name, text in rendered.items()
            if not (GOLDEN / name).exists() or (GOLDEN / name).read_text() != text]


def main(argv=None) -> int:
    update = "--update" in (argv if argv is not None else sys.argv[1:])
    if update:
        model = export_model()
        GOLDEN.mkdir(parents=True, exist_ok=True)
        for name, text in {**render_cases(model), **render_tma_cases(), **render_wgmma_cases()}.items():
            (GOLDEN / name).write_text(text)
        STRUCTURE.write_bytes(gzip.compress(zero_weights(model).SerializeToString(), 9, mtime=0))
        print(f"golden sources and {STRUCTURE.name} written ({GOLDEN})")
        return 0
    bad = differing({**render_cases(structure_model()), **render_tma_cases(), **render_wgmma_cases()})
    if bad:
        print("golden sources differ: " + ", ".join(bad) + " (python -m tests.support.golden --update)")
        return 1
    print(f"golden sources match ({GOLDEN})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
