"""The GPU benchmark's model set: zoo families plus T5 split into encoder and one decoder step.

    spec = SPECS["t5_decoder_step"]
    built = build("t5_decoder_step", size="real")      # fp32 eval torch module, positional inputs
    feeds = make_feeds(spec, built.config, batch=16, seq=128, dtype="fp16")

Weights come from the zoo (transformers config, ``torch.manual_seed(0)``, no downloads). Every
contender gets the same weights: torch runs ``.to(dtype)`` copies of one fp32 model, ONNX contenders
run its exports (bench/harness/export.py; fp16 by conversion, see there). Float inputs are rounded to fp16
once, so fp32 and fp16 runs (and the fp32 reference) see identical values.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from plus_ep.zoo import models as zoo_models
from plus_ep.zoo import config as zoo_config


@dataclass(frozen=True)
class Input:
    name: str
    kind: str            # ids | type_ids | mask | pixels | hidden
    dims: tuple          # "batch", "seq", or an int; "hidden"/"image" resolved from the config


@dataclass(frozen=True)
class Spec:
    name: str
    family: str
    title: str
    inputs: tuple
    outputs: tuple
    out_dims: dict       # output name -> {axis: "batch"|"seq"} (dynamic axes of the outputs)
    optimizer_type: str  # onnxruntime.transformers.optimizer model_type
    part: str = "all"    # t5: encoder | decoder_step


_IDS = (Input("input_ids", "ids", ("batch", "seq")), Input("attention_mask", "mask", ("batch", "seq")))
_BS = {0: "batch", 1: "seq"}
SPECS = {s.name: s for s in (
    Spec("bert", "bert", "BERT-base", _IDS + (Input("token_type_ids", "type_ids", ("batch", "seq")),),
         ("last_hidden_state", "pooler_output"), {"last_hidden_state": _BS, "pooler_output": {0: "batch"}},
         "bert"),
    Spec("albert", "albert", "ALBERT-base", _IDS + (Input("token_type_ids", "type_ids", ("batch", "seq")),),
         ("last_hidden_state", "pooler_output"), {"last_hidden_state": _BS, "pooler_output": {0: "batch"}},
         "bert"),
    Spec("gpt2", "gpt2", "GPT-2 (124M)", _IDS, ("last_hidden_state",), {"last_hidden_state": _BS}, "gpt2"),
    Spec("t5_encoder", "t5", "T5-base encoder", _IDS, ("last_hidden_state",), {"last_hidden_state": _BS},
         "t5", part="encoder"),
    Spec("t5_decoder_step", "t5", "T5-base decoder step",
         (Input("decoder_input_ids", "ids", ("batch", 1)),
          Input("encoder_hidden_states", "hidden", ("batch", "seq", "hidden")),
          Input("encoder_attention_mask", "mask", ("batch", "seq"))),
         ("last_hidden_state",), {"last_hidden_state": {0: "batch"}}, "t5", part="decoder_step"),
    Spec("vit", "vit", "ViT-B/16 (224²)", (Input("pixel_values", "pixels", ("batch", 3, "image", "image")),),
         ("last_hidden_state", "pooler_output"), {"last_hidden_state": {0: "batch"}, "pooler_output": {0: "batch"}},
         "vit"),
    # ORT's optimizer has no llama model type; "bert" applies its generic fusions (RMSNorm, ...).
    Spec("llama", "llama", "Llama-3.2-1B width, 4 layers", _IDS, ("last_hidden_state",),
         {"last_hidden_state": _BS}, "bert"),
)}
NAMES = tuple(SPECS)


@dataclass
class Built:
    spec: Spec
    config: object
    wrapper: object      # fp32 eval torch.nn.Module, positional inputs in spec order, tuple out


def _t5_wrappers():
    import torch

    class Encoder(torch.nn.Module):
        def __init__(self, t5):
            super().__init__()
            self.encoder = t5.encoder

        def forward(self, input_ids, attention_mask):
            return (self.encoder(input_ids=input_ids, attention_mask=attention_mask,
                                 use_cache=False).last_hidden_state,)

    class DecoderStep(torch.nn.Module):
        """The first decoder step: one target token, cross-attention over the encoder output."""

        def __init__(self, t5):
            super().__init__()
            self.decoder = t5.decoder

        def forward(self, decoder_input_ids, encoder_hidden_states, encoder_attention_mask):
            return (self.decoder(input_ids=decoder_input_ids, encoder_hidden_states=encoder_hidden_states,
                                 encoder_attention_mask=encoder_attention_mask,
                                 use_cache=False).last_hidden_state,)

    return {"encoder": Encoder, "decoder_step": DecoderStep}


def config(name: str, size: str = "real", layers: int | None = None):
    return zoo_config(SPECS[name].family, size, layers)


def build(name: str, size: str = "real", layers: int | None = None) -> Built:
    """fp32 eval-mode torch module for ``name`` with the zoo's seeded random weights."""
    spec = SPECS[name]
    built = zoo_models.build(spec.family, size, layers)
    wrapper = built.wrapper
    if spec.part != "all":
        wrapper = _t5_wrappers()[spec.part](built.model).eval()
    return Built(spec, built.config, wrapper)


def layers(spec: Spec, cfg) -> int:
    """Transformer layers one inference runs (the decoder step runs the decoder stack only)."""
    if spec.family == "gpt2":
        return cfg.n_layer
    if spec.family == "t5":
        return cfg.num_decoder_layers if spec.part == "decoder_step" else cfg.num_layers
    return cfg.num_hidden_layers


def hidden(cfg) -> int:
    return getattr(cfg, "d_model", None) or getattr(cfg, "n_embd", None) or cfg.hidden_size


def heads(cfg) -> int:
    return getattr(cfg, "num_heads", None) or getattr(cfg, "n_head", None) or cfg.num_attention_heads


def tokens(spec: Spec, cfg, seq: int) -> int:
    """Sequence length the model actually runs: ViT's is fixed by the image (patches + CLS)."""
    if spec.family == "vit":
        return (cfg.image_size // cfg.patch_size) ** 2 + 1
    return seq


def shape(inp: Input, cfg, batch: int, seq: int) -> tuple:
    named = {"batch": batch, "seq": seq, "hidden": hidden(cfg), "image": getattr(cfg, "image_size", 0)}
    return tuple(named[d] if isinstance(d, str) else d for d in inp.dims)


def make_feeds(spec: Spec, cfg, batch: int, seq: int, dtype: str = "fp32", seed: int = 0) -> dict:
    """Numpy feeds in spec order: ids in [0, vocab), masks all ones but the last row's tail
    (right padding), float inputs standard normal rounded to fp16 (then cast to ``dtype``)."""
    rng = np.random.default_rng(seed)
    float_type = np.float16 if dtype == "fp16" else np.float32
    feeds = {}
    for inp in spec.inputs:
        shp = shape(inp, cfg, batch, seq)
        if inp.kind == "ids":
            arr = rng.integers(0, cfg.vocab_size, size=shp, dtype=np.int64)
        elif inp.kind == "type_ids":
            arr = rng.integers(0, cfg.type_vocab_size, size=shp, dtype=np.int64)
        elif inp.kind == "mask":
            arr = np.ones(shp, np.int64)
            if shp[1] > 1:
                arr[-1, shp[1] - max(1, shp[1] // 3):] = 0
        elif inp.kind in ("pixels", "hidden"):
            arr = rng.standard_normal(shp).astype(np.float16).astype(float_type)
        else:
            raise ValueError(f"{spec.name}: unknown input kind {inp.kind!r}")
        feeds[inp.name] = arr
    return feeds


def describe(name: str, cfg) -> dict:
    spec = SPECS[name]
    return {"title": spec.title, "family": spec.family, "layers": layers(spec, cfg), "hidden": hidden(cfg),
            "heads": heads(cfg), "inputs": [i.name for i in spec.inputs], "outputs": list(spec.outputs)}
