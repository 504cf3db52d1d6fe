"""The quantized encoders of the zoo (plus_ep/zoo/quantized.py: a random-weight MiniLM-shaped BERT quantized by
ORT's quantize_static (QDQ, per-channel), quantize_dynamic and as FP8 QDQ) against the same fp32 export: data
kernels after the rewrite (issue 36 allows the fp32 count plus one per layer), each layer's attention one
attention kernel, every linear layer of the 8-bit kinds an 8-bit GEMM. No kernels are compiled here; the slow
acceptance run verifies the QDQ model's kernels on the interpreter (`plus-ep verify` at multi-tile shapes)."""
from __future__ import annotations

import onnx
import pytest

from plus_ep.report import report
from plus_ep.rewrite import rewrite_detailed

pytest.importorskip("torch")
quantized = pytest.importorskip("plus_ep.zoo.quantized")

LAYERS = 2


@pytest.fixture(scope="module")
def fp32_kernels():
    s = quantized.SHAPES["minilm"]
    path = quantized.bert_export(LAYERS, s["hidden"], s["heads"], s["intermediate"])
    return report(rewrite_detailed(onnx.load(path), archs=["sm_80"], compile_kernels=False))["data_kernels_after"]


def _rewrite(kind):
    return rewrite_detailed(onnx.load(quantized.bert_quantized(kind, "minilm", LAYERS)), archs=["sm_80"],
                            compile_kernels=False)


@pytest.mark.parametrize("kind", ["qdq", "fp8"])
def test_quantized_encoder_has_at_most_one_kernel_more_per_layer(kind, fp32_kernels):
    r = _rewrite(kind)
    assert report(r)["data_kernels_after"] <= fp32_kernels + LAYERS
    patterns = [sg.pattern.name for sg in r.subgraphs]
    assert patterns.count("attention") == LAYERS
    if kind == "qdq":
        assert all(sg.roles.quantized_probs for sg in r.subgraphs if sg.pattern.name == "attention")
        ints = sum(r.view.nodes[i].op_type == "MatMulInteger" for sg in r.subgraphs for i in sg.nodes)
        assert ints == 6 * LAYERS                  # Q, K, V, attention output, FFN in and out: 8-bit GEMMs


def test_dynamic_encoder_kernels_are_the_known_gap(fp32_kernels):
    """quantize_dynamic: the 8-bit GEMMs and attention fuse as in fp32; each DynamicQuantizeLinear (4 per layer) costs
    one range kernel (min, max, scale and zero point: the dynamic_range family), and its quantization runs in the
    consuming 8-bit GEMM as it loads A, except before Q, K and V (three GEMMs of one group share the 8-bit copy: a
    point-wise kernel). So fp32 + 5 per layer (docs/design-notes.md, "Dynamic quantization"). Fails when that
    changes, either way."""
    r = _rewrite("dynamic")
    dql = 4 * LAYERS
    assert report(r)["data_kernels_after"] == fp32_kernels + dql + LAYERS
    names = [sg.pattern.name for sg in r.subgraphs]
    assert names.count("dynamic_range") == dql and names.count("attention") == LAYERS
    assert names.count("gemm_quantized_a") == LAYERS and names.count("gemm_layernorm_quantized_a") == 2 * LAYERS


@pytest.mark.slow
def test_qdq_encoder_verifies_on_the_interpreter(tmp_path):
    import plus_ep
    r = rewrite_detailed(onnx.load(quantized.bert_quantized("qdq", "minilm", LAYERS)), archs=["sm_80", "sm_90a"])
    assert not r.kernels.failures, r.kernels.failures
    path = tmp_path / "q.plus.onnx"
    onnx.save(r.model, path)
    rep = plus_ep.verify(str(path), cubins=False)
    assert rep["ok"], plus_ep.verify_text(rep)
