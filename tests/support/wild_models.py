"""Tiny exports of the zoo families of issue 23 (Swin, Whisper encoder, CLIP text; ResNet-18's structure)
for the test suite: the zoo's own configs with smaller widths (zoo.export overrides), so that their kernels
run on the CPU PTX interpreter in seconds. Weights are the zoo's realistic random ones (norm weights != 1,
biases != 0, Swin's relative position bias tables N(0, 0.5)). The acceptance runs use the zoo's small
configs unchanged (bench/runs/wild_families.py)."""
from __future__ import annotations

# family -> (layers, config overrides). Swin: 8 x 8 patches, 4 x 4 windows (4 windows and a shifted block
# in stage 1, one window after the merging); Whisper: 7 encoder positions (odd) from 14 feature frames.
TINY = {
    "swin": (2, dict(image_size=16, patch_size=2, embed_dim=16, window_size=4, num_heads=[1, 2])),
    "whisper": (1, dict(num_mel_bins=8, max_source_positions=7, d_model=32, encoder_attention_heads=2,
                        encoder_ffn_dim=64)),
    "clip": (1, dict(hidden_size=32, num_attention_heads=2, intermediate_size=64)),
}

# data kernels allowed, as (per block, extra per model): Swin per transformer block (its patch embedding,
# merging and head in the extra), Whisper encoder and CLIP text per layer (embedding / conv front-end,
# final norm and pooling in the extra)
BUDGET = {"swin": (8, 0), "whisper": (5, 4), "clip": (5, 6)}


def blocks(family: str, layers: int) -> int:
    return 2 * layers if family == "swin" else layers


def tiny_path(family: str, exporter: str):
    from plus_ep import zoo
    layers, over = TINY[family]
    return zoo.export(family, exporter, "small", layers=layers, overrides=over)
