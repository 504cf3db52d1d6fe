"""The zoo families of gated MLPs, RoPE and disentangled attention (issue 23: Llama with realistic weights, Qwen2,
Phi-3, DeBERTa-v2) at tiny widths for the test suite: 2 layers, hidden 32, 2 heads (Llama/Qwen2: 1 KV head, GQA),
intermediate 48 (not a multiple of 16: the gated interleave's last column pair is partial), realistic random
weights (norm weights != 1, biases != 0). bench/runs/gated_families.py runs the zoo's small size instead."""
from __future__ import annotations

import pytest

LAYERS = 2
FAMILIES = ("llama", "qwen2", "phi3", "deberta_v2")
_COMMON = dict(vocab_size=100, hidden_size=32, num_attention_heads=2, intermediate_size=48)
TINY = {
    "llama": dict(_COMMON, num_key_value_heads=1, max_position_embeddings=64),
    "qwen2": dict(_COMMON, num_key_value_heads=1, max_position_embeddings=64),
    "phi3": dict(_COMMON, num_key_value_heads=2, max_position_embeddings=64, original_max_position_embeddings=64,
                 pad_token_id=0, bos_token_id=1, eos_token_id=2),
    "deberta_v2": dict(_COMMON, max_position_embeddings=64, position_buckets=8),
}
# data kernels of the 2-layer export: per layer, plus the embedding (LayerNorm/RMSNorm with the Gather) and the
# mask preparation the decoders' exports leave outside the attention (a Cast; dynamo: a GatherND)
BUDGET = {"llama": (5, 4), "qwen2": (5, 4), "phi3": (5, 4), "deberta_v2": (6, 1)}


def tiny_path(family: str, exporter: str):
    zoo = pytest.importorskip("plus_ep.zoo")
    return zoo.export(family, exporter, "small", layers=LAYERS, overrides=dict(TINY[family]))
