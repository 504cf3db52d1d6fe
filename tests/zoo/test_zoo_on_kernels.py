"""Small zoo exports through their kernels on the CPU PTX interpreter (the launcher in ONNX Runtime on the
emulated CUDA driver) against ONNX Runtime CPU on the export, per element within bounds measured from the
model's sensitivity (plus_ep/verification/bounds.py), with trained-looking weights (non-zero biases, norm scales
!= 1, peaky attention logits) at batch 2 x seq 70, the second sequence padded (70 queries and keys span
several attention tiles, M = 140 several GEMM row tiles; the zoo's hidden size 64 is one 64-wide tile):

- Llama (dynamo exporter): grouped-query attention (4 query heads on 2 key/value heads), rotary
  embeddings, RMSNorm, the causal + padding mask with the exporter's IsNaN guard; exact fp32 on sm_80;
- GPT-2 (TorchScript exporter): LayerNorm, tanh-GELU, the causal + padding mask; float16 on sm_90a
  (wgmma GEMMs, f16 tensor-core attention, the cluster GEMM + LayerNorm)."""
from __future__ import annotations

import onnx
import pytest

from tests.support.kernel_models import check_model_on_kernels, realistic_weights

pytestmark = pytest.mark.zoo


@pytest.mark.parametrize("family,exporter,math,arch", [("llama", "dynamo", "exact", "sm_80"),
                                                       ("gpt2", "torchscript", "fp16", "sm_90a")])
def test_zoo_export_through_its_kernels(family, exporter, math, arch):
    pytest.importorskip("cuda.bindings")
    pytest.importorskip("torch", reason="zoo exports need the [models] extra (torch, transformers)")
    pytest.importorskip("transformers", reason="zoo exports need the [models] extra (torch, transformers)")
    from plus_ep import zoo
    path = zoo.export(family, exporter, "small", layers=2)
    model = realistic_weights(onnx.load(path))
    feeds = zoo.sample_inputs(path, batch=2, seq=70)
    assert feeds["attention_mask"][-1].sum() < 70                      # the last sequence is padded
    ops = {n.op_type for n in model.graph.node}
    assert {"IsNaN", "Where", "Softmax"} <= ops, ops                   # the exporter's guarded mask
    run = check_model_on_kernels(model, feeds, [arch], math)
    assert any(n.startswith("plus_ep/attention/") for n in run.fused), run.fused
    attn = [tuple(ln[2]) for ln in run.launches[arch] if ln[1] == "plus_attention"]
    assert attn and all(g[0] >= 2 and g[2] == 2 for g in attn), attn   # several query tiles, both sequences
    # several row tiles: a grid's y on the tiled GEMMs; the persistent TMA GEMM's CTAs take work units (grid x =
    # units here, fewer than SMs), and M = 140 exceeds every TMA tile's BM, so its units span several row tiles
    from plus_ep.kernels.families.gemm import sm90a_configs
    assert max(c.bm for c in sm90a_configs.WS_CONFIGS) < 140
    gemms = [(tuple(ln[2]), ln[8]) for ln in run.launches[arch] if ln[1] == "plus_gemm"]
    assert gemms and all(g[1] >= 2 if not ws else g[0] >= 2 for g, ws in gemms), gemms
