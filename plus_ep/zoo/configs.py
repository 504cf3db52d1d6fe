"""transformers configs for every family and size of the zoo."""

from __future__ import annotations

from typing import Any

from . import _deps

# the transformer families the zoo started with (the benchmarks' fusion tables and budgets), and those added
# for architectures in the wild (window attention, Conv front-ends, a causal text tower; gated MLPs,
# RoPE over a combined QKV projection, disentangled attention)
CORE_FAMILIES = ("bert", "albert", "gpt2", "t5", "vit", "llama")
WILD_FAMILIES = ("swin", "resnet", "whisper", "clip")
GATED_FAMILIES = ("qwen2", "phi3", "deberta_v2")
FAMILIES = CORE_FAMILIES + WILD_FAMILIES + GATED_FAMILIES
EXPORTERS = ("torchscript", "dynamo")
SIZES = ("small", "real")

# Attention implementation requested from transformers per family; None keeps
# the transformers default (SDPA where the model supports it, eager for T5).
# Both exporters lower SDPA to plain ops (MatMul/Softmax/IsNaN/Where) at the
# opsets used here, so no override is needed. Set "eager" to force the
# classic MatMul-Div-Add-Softmax-MatMul pattern.
ATTN_IMPLEMENTATION: dict[str, str | None] = {f: None for f in FAMILIES}

# Default layer count per (family, size). Swin: stages of two blocks each (a patch merging between
# stages); ResNet: basic blocks per stage of four (2 = ResNet-18); Whisper: encoder layers.
DEFAULT_LAYERS = {
    "small": {"bert": 12, "albert": 12, "gpt2": 12, "t5": 12, "vit": 12, "llama": 4,
              "swin": 2, "resnet": 2, "whisper": 4, "clip": 12, "qwen2": 2, "phi3": 2, "deberta_v2": 2},
    "real": {"bert": 12, "albert": 12, "gpt2": 12, "t5": 12, "vit": 12, "llama": 4,
             "swin": 4, "resnet": 2, "whisper": 4, "clip": 12, "qwen2": 4, "phi3": 4, "deberta_v2": 4},
}

# The random weights of every family are made "realistic" after transformers' init
# (models.realistic_weights): norm weights != 1, biases != 0, BatchNorm statistics != (0, 1), Q/K
# projections scaled so that softmax is not nearly uniform. The scheme's name is in every config (and so in
# the cache key of every export); change it when realistic_weights changes. v1 (the four families
# only) had no Q/K scaling and left GPT-2's Conv1D biases at 0.
WEIGHTS_SCHEME = "realistic-v2"

# Keyword arguments of the transformers config classes.
_KWARGS: dict[str, dict[str, dict[str, Any]]] = {
    "small": {
        "bert": dict(vocab_size=1000, hidden_size=64, num_attention_heads=4,
                     intermediate_size=128, max_position_embeddings=512,
                     type_vocab_size=2),
        "albert": dict(vocab_size=1000, embedding_size=32, hidden_size=64,
                       num_attention_heads=4, intermediate_size=128,
                       max_position_embeddings=512, type_vocab_size=2,
                       num_hidden_groups=1, inner_group_num=1),
        "gpt2": dict(vocab_size=1000, n_embd=64, n_head=4, n_inner=128,
                     n_positions=512, bos_token_id=999, eos_token_id=999),
        "t5": dict(vocab_size=1000, d_model=64, d_kv=16, num_heads=4, d_ff=128,
                   relative_attention_num_buckets=32,
                   relative_attention_max_distance=128,
                   decoder_start_token_id=0, pad_token_id=0),
        "vit": dict(image_size=32, patch_size=8, num_channels=3, hidden_size=64,
                    num_attention_heads=4, intermediate_size=128),
        "llama": dict(vocab_size=1000, hidden_size=64, intermediate_size=128,
                      num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=512, rms_norm_eps=1e-5,
                      rope_theta=500000.0, tie_word_embeddings=False),
        # q/k/v projections with biases, grouped-query attention
        "qwen2": dict(vocab_size=1000, hidden_size=64, intermediate_size=128,
                      num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=512, rms_norm_eps=1e-6,
                      rope_theta=1000000.0, tie_word_embeddings=False),
        # one combined qkv_proj and one combined gate_up_proj per layer (split by Slice)
        "phi3": dict(vocab_size=1000, hidden_size=64, intermediate_size=128,
                     num_attention_heads=4, num_key_value_heads=4,
                     max_position_embeddings=512, original_max_position_embeddings=512,
                     rms_norm_eps=1e-5, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                     tie_word_embeddings=False),
        # DeBERTa-v3 style: disentangled attention (c2p and p2c from shared keys), log-bucketed
        # relative positions, no absolute position embedding, no token types
        "deberta_v2": dict(vocab_size=1000, hidden_size=64, num_attention_heads=4,
                           intermediate_size=128, max_position_embeddings=512,
                           relative_attention=True, position_buckets=32,
                           max_relative_positions=-1, pos_att_type=["p2c", "c2p"],
                           norm_rel_ebd="layer_norm", share_att_key=True,
                           position_biased_input=False, type_vocab_size=0,
                           hidden_act="gelu", layer_norm_eps=1e-7),
        # 14 x 14 patches, 7 x 7 windows (49 tokens: odd): 4 windows and a shifted block in stage 1, one
        # window in stage 2 (7 x 7 patches after the merging; transformers does not shift a whole-image window)
        "swin": dict(image_size=28, patch_size=2, num_channels=3, embed_dim=32, window_size=7,
                     mlp_ratio=2.0),
        # ResNet-18's structure (basic blocks, 2 per stage) at a quarter of its widths, 32 x 32 images
        "resnet": dict(num_channels=3, embedding_size=16, hidden_sizes=[16, 32, 64, 128],
                       layer_type="basic", image_size=32),
        # 15 encoder positions (odd), from 30 feature frames
        "whisper": dict(num_mel_bins=16, max_source_positions=15, d_model=64,
                        encoder_attention_heads=4, encoder_ffn_dim=128, vocab_size=1000,
                        decoder_layers=1, decoder_attention_heads=4, decoder_ffn_dim=128,
                        pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1),
        "clip": dict(vocab_size=1000, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                     max_position_embeddings=77, bos_token_id=998, eos_token_id=999, pad_token_id=1),
    },
    "real": {
        # bert-base-uncased
        "bert": dict(vocab_size=30522, hidden_size=768, num_attention_heads=12,
                     intermediate_size=3072, max_position_embeddings=512,
                     type_vocab_size=2),
        # albert-base-v2
        "albert": dict(vocab_size=30000, embedding_size=128, hidden_size=768,
                       num_attention_heads=12, intermediate_size=3072,
                       max_position_embeddings=512, type_vocab_size=2,
                       num_hidden_groups=1, inner_group_num=1,
                       hidden_act="gelu_new"),
        # gpt2 (124M)
        "gpt2": dict(vocab_size=50257, n_embd=768, n_head=12, n_positions=1024),
        # t5-base
        "t5": dict(vocab_size=32128, d_model=768, d_kv=64, num_heads=12, d_ff=3072,
                   relative_attention_num_buckets=32,
                   relative_attention_max_distance=128,
                   decoder_start_token_id=0, pad_token_id=0),
        # google/vit-base-patch16-224
        "vit": dict(image_size=224, patch_size=16, num_channels=3, hidden_size=768,
                    num_attention_heads=12, intermediate_size=3072),
        # meta-llama/Llama-3.2-1B width, fewer layers
        "llama": dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192,
                      num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                      max_position_embeddings=131072, rms_norm_eps=1e-5,
                      rope_theta=500000.0, tie_word_embeddings=True,
                      rope_scaling=dict(rope_type="llama3", factor=32.0,
                                        low_freq_factor=1.0, high_freq_factor=4.0,
                                        original_max_position_embeddings=8192)),
        # Qwen/Qwen2.5-0.5B width, fewer layers
        "qwen2": dict(vocab_size=151936, hidden_size=896, intermediate_size=4864,
                      num_attention_heads=14, num_key_value_heads=2,
                      max_position_embeddings=32768, rms_norm_eps=1e-6,
                      rope_theta=1000000.0, tie_word_embeddings=True),
        # microsoft/Phi-3-mini-4k-instruct width, fewer layers
        "phi3": dict(vocab_size=32064, hidden_size=3072, intermediate_size=8192,
                     num_attention_heads=32, num_key_value_heads=32,
                     max_position_embeddings=4096, original_max_position_embeddings=4096,
                     rms_norm_eps=1e-5, pad_token_id=32000, bos_token_id=1, eos_token_id=32000,
                     tie_word_embeddings=False),
        # microsoft/deberta-v3-base, fewer layers
        "deberta_v2": dict(vocab_size=128100, hidden_size=768, num_attention_heads=12,
                           intermediate_size=3072, max_position_embeddings=512,
                           relative_attention=True, position_buckets=256,
                           max_relative_positions=-1, pos_att_type=["p2c", "c2p"],
                           norm_rel_ebd="layer_norm", share_att_key=True,
                           position_biased_input=False, type_vocab_size=0,
                           hidden_act="gelu", layer_norm_eps=1e-7),
        # microsoft/swin-tiny-patch4-window7-224
        "swin": dict(image_size=224, patch_size=4, num_channels=3, embed_dim=96, window_size=7,
                     mlp_ratio=4.0),
        # microsoft/resnet-18
        "resnet": dict(num_channels=3, embedding_size=64, hidden_sizes=[64, 128, 256, 512],
                       layer_type="basic", image_size=224),
        # openai/whisper-tiny encoder
        "whisper": dict(num_mel_bins=80, max_source_positions=1500, d_model=384,
                        encoder_attention_heads=6, encoder_ffn_dim=1536, vocab_size=51865,
                        decoder_layers=1, decoder_attention_heads=6, decoder_ffn_dim=1536),
        # openai/clip-vit-base-patch32 text tower
        "clip": dict(vocab_size=49408, hidden_size=512, num_attention_heads=8, intermediate_size=2048,
                     max_position_embeddings=77, bos_token_id=49406, eos_token_id=49407, pad_token_id=1),
    },
}

_CLASSES = {
    "bert": "BertConfig",
    "albert": "AlbertConfig",
    "gpt2": "GPT2Config",
    "t5": "T5Config",
    "vit": "ViTConfig",
    "llama": "LlamaConfig",
    "swin": "SwinConfig",
    "resnet": "ResNetConfig",
    "whisper": "WhisperConfig",
    "clip": "CLIPTextConfig",
    "qwen2": "Qwen2Config",
    "phi3": "Phi3Config",
    "deberta_v2": "DebertaV2Config",
}


def check_args(family: str, size: str, exporter: str | None = None) -> None:
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; expected one of {FAMILIES}")
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; expected one of {SIZES}")
    if exporter is not None and exporter not in EXPORTERS:
        raise ValueError(f"unknown exporter {exporter!r}; expected one of {EXPORTERS}")


def resolve_layers(family: str, size: str, layers: int | None) -> int:
    check_args(family, size)
    n = DEFAULT_LAYERS[size][family] if layers is None else int(layers)
    if n < 1:
        raise ValueError(f"layers must be >= 1, got {layers}")
    return n


def config(family: str, size: str = "small", layers: int | None = None, overrides: dict | None = None):
    """The transformers config used for ``family`` at ``size`` (``layers`` overrides depth, ``overrides``
    any other field, e.g. a tinier width for a test)."""
    n = resolve_layers(family, size, layers)
    tf = _deps.transformers()
    kwargs = dict(_KWARGS[size][family])
    if family == "gpt2":
        kwargs["n_layer"] = n
    elif family == "t5":
        kwargs["num_layers"] = n
        kwargs["num_decoder_layers"] = n
    elif family == "swin":
        kwargs["depths"] = [2] * n
        kwargs["num_heads"] = [2 * 2 ** k if size == "small" else 3 * 2 ** k for k in range(n)]
    elif family == "resnet":
        kwargs["depths"] = [n] * 4
    elif family == "whisper":
        kwargs["encoder_layers"] = n
    else:
        kwargs["num_hidden_layers"] = n
    if family not in ("swin", "resnet"):
        kwargs["use_cache"] = False
    kwargs.update(overrides or {})
    image_size = kwargs.pop("image_size", None) if family == "resnet" else None
    cfg = getattr(tf, _CLASSES[family])(**kwargs)
    if image_size is not None:
        cfg.image_size = image_size             # ResNetConfig has none: the export's static image side
    cfg.plus_ep_weights = WEIGHTS_SCHEME
    if family == "t5":
        cfg.use_cache = False
    # Dropout is inactive in eval mode anyway; pin the attention implementation.
    if ATTN_IMPLEMENTATION[family] is not None:
        cfg._attn_implementation = ATTN_IMPLEMENTATION[family]
    return cfg
