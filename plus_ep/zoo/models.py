"""Random-weight torch models and export wrappers (positional tensors in, tuple out)."""

from __future__ import annotations

from dataclasses import dataclass

from . import _deps
from .configs import config as make_config

# Graph input / output names and the symbolic dims of each input.
INPUTS = {
    "bert": ("input_ids", "attention_mask", "token_type_ids"),
    "albert": ("input_ids", "attention_mask", "token_type_ids"),
    "gpt2": ("input_ids", "attention_mask"),
    "t5": ("input_ids", "attention_mask", "decoder_input_ids"),
    "vit": ("pixel_values",),
    "llama": ("input_ids", "attention_mask"),
    "swin": ("pixel_values",),
    "resnet": ("pixel_values",),
    "whisper": ("input_features",),
    "clip": ("input_ids", "attention_mask"),
    "qwen2": ("input_ids", "attention_mask"),
    "phi3": ("input_ids", "attention_mask"),
    "deberta_v2": ("input_ids", "attention_mask"),
}
OUTPUTS = {
    "bert": ("last_hidden_state", "pooler_output"),
    "albert": ("last_hidden_state", "pooler_output"),
    "gpt2": ("last_hidden_state",),
    "t5": ("last_hidden_state", "encoder_last_hidden_state"),
    "vit": ("last_hidden_state", "pooler_output"),
    "llama": ("last_hidden_state",),
    "swin": ("last_hidden_state", "pooler_output"),
    "resnet": ("last_hidden_state", "pooler_output"),
    "whisper": ("last_hidden_state",),
    "clip": ("last_hidden_state", "pooler_output"),
    "qwen2": ("last_hidden_state",),
    "phi3": ("last_hidden_state",),
    "deberta_v2": ("last_hidden_state",),
}
_DIMS = {
    "input_ids": {0: "batch", 1: "seq"},
    "attention_mask": {0: "batch", 1: "seq"},
    "token_type_ids": {0: "batch", 1: "seq"},
    "decoder_input_ids": {0: "batch", 1: "dec_seq"},
    "pixel_values": {0: "batch"},
    "input_features": {0: "batch"},
}
_OUT_DIMS = {
    "last_hidden_state": {0: "batch", 1: "seq"},
    "encoder_last_hidden_state": {0: "batch", 1: "seq"},
    "pooler_output": {0: "batch"},
}


def input_dims(family: str) -> dict[str, dict[int, str]]:
    return {name: dict(_DIMS[name]) for name in INPUTS[family]}


def output_dims(family: str) -> dict[str, dict[int, str]]:
    dims = {name: dict(_OUT_DIMS[name]) for name in OUTPUTS[family]}
    if family == "t5":
        dims["last_hidden_state"] = {0: "batch", 1: "dec_seq"}
    if family in ("vit", "swin", "resnet", "whisper"):
        dims["last_hidden_state"] = {0: "batch"}
    return dims


@dataclass
class Built:
    family: str
    config: object
    model: object  # the transformers model
    wrapper: object  # torch.nn.Module with positional inputs


def _wrapper_classes():
    """Per-family wrappers with explicit positional arguments (export friendly)."""
    torch = _deps.torch()

    class _Base(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

    class Encoder(_Base):  # bert, albert
        def forward(self, input_ids, attention_mask, token_type_ids):
            out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=token_type_ids)
            return out.last_hidden_state, out.pooler_output

    class Decoder(_Base):  # gpt2, llama, qwen2, phi3
        def forward(self, input_ids, attention_mask):
            out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                             use_cache=False)
            return (out.last_hidden_state,)

    class PlainEncoder(_Base):  # deberta_v2 (no pooler, no token types)
        def forward(self, input_ids, attention_mask):
            return (self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state,)

    class Seq2Seq(_Base):  # t5
        def forward(self, input_ids, attention_mask, decoder_input_ids):
            out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                             decoder_input_ids=decoder_input_ids, use_cache=False)
            return out.last_hidden_state, out.encoder_last_hidden_state

    class Vision(_Base):  # vit, swin, resnet
        def forward(self, pixel_values):
            out = self.model(pixel_values=pixel_values)
            return out.last_hidden_state, out.pooler_output

    class AudioEncoder(_Base):  # whisper (the encoder of WhisperModel)
        def forward(self, input_features):
            return (self.model(input_features=input_features).last_hidden_state,)

    class TextTower(_Base):  # clip (CLIPTextModel: causal mask + padding mask, pooled at the EOS token)
        def forward(self, input_ids, attention_mask):
            out = self.model(input_ids=input_ids, attention_mask=attention_mask)
            return out.last_hidden_state, out.pooler_output

    return {"bert": Encoder, "albert": Encoder, "gpt2": Decoder, "llama": Decoder,
            "t5": Seq2Seq, "vit": Vision, "swin": Vision, "resnet": Vision,
            "whisper": AudioEncoder, "clip": TextTower, "qwen2": Decoder, "phi3": Decoder,
            "deberta_v2": PlainEncoder}


_MODEL_CLASSES = {
    "bert": "BertModel",
    "albert": "AlbertModel",
    "gpt2": "GPT2Model",
    "t5": "T5Model",
    "vit": "ViTModel",
    "llama": "LlamaModel",
    "swin": "SwinModel",
    "resnet": "ResNetModel",
    "whisper": "WhisperModel",
    "clip": "CLIPTextModel",
    "qwen2": "Qwen2Model",
    "phi3": "Phi3Model",
    "deberta_v2": "DebertaV2Model",
}


# Attention projections whose weights realistic_weights redraws so that the attention logits have a spread
# (module names in transformers; GPT-2's fused c_attn holds Q, K and V side by side in its output columns).
# T5 is not listed: its init already scales Q/K for attention without 1/sqrt(d) (logit std about 1).
_QK_NAMES = ("query", "key", "q_proj", "k_proj", "query_proj", "key_proj")     # the last two: DeBERTa
QK_LOGIT_STD = 2.0       # wanted std of a Q.K/sqrt(d) logit for unit-variance inputs


def realistic_weights(model, seed: int = 0) -> None:
    """Weights a trained model could have where transformers' init leaves them trivial: every norm's
    weight 1 + 0.25 N(0, 1) and bias 0.1 N(0, 1), BatchNorm running mean 0.1 N(0, 1) and variance in
    [0.5, 1.5], every Linear/Conv bias (and GPT-2's Conv1D) 0.05 N(0, 1), Swin's relative position bias
    tables N(0, 0.5), and the Q and K projections redrawn N(0, sqrt(QK_LOGIT_STD / in_features)) so that
    the attention logits of unit-variance inputs have a std of about QK_LOGIT_STD (transformers' init,
    N(0, 0.02), gives about 0.1 at the zoo's small width: a nearly uniform softmax); ALBERT's embedding
    mapping (its attention's input) redrawn N(0, 1 / sqrt(in_features)) to keep the normed scale."""
    torch = _deps.torch()
    g = torch.Generator().manual_seed(seed)

    def randn(t, scale):
        return torch.randn(t.shape, generator=g, dtype=t.dtype) * scale
    norms = (torch.nn.LayerNorm, torch.nn.GroupNorm, torch.nn.modules.batchnorm._BatchNorm)
    with torch.no_grad():
        for name, mod in model.named_modules():
            leaf = name.rsplit(".", 1)[-1]
            if isinstance(mod, norms) or type(mod).__name__.endswith(("RMSNorm", "LayerNorm")):
                if getattr(mod, "weight", None) is not None:
                    mod.weight.copy_(1 + randn(mod.weight, 0.25))
                if getattr(mod, "bias", None) is not None:
                    mod.bias.copy_(randn(mod.bias, 0.1))
                if getattr(mod, "running_mean", None) is not None:
                    mod.running_mean.copy_(randn(mod.running_mean, 0.1))
                    mod.running_var.copy_(0.5 + torch.rand(mod.running_var.shape, generator=g))
                continue
            if isinstance(mod, torch.nn.Linear) and leaf in _QK_NAMES:
                mod.weight.copy_(randn(mod.weight, (QK_LOGIT_STD / mod.in_features) ** 0.5))
            elif isinstance(mod, torch.nn.Linear) and leaf == "embedding_hidden_mapping_in":
                # ALBERT's attention reads this projection of the normed embeddings: keep their scale
                mod.weight.copy_(randn(mod.weight, mod.in_features ** -0.5))
            elif isinstance(mod, torch.nn.Linear) and leaf == "qkv_proj":   # Phi-3: rows Q, K, V (V: Hkv * D)
                c = model.config
                v_rows = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
                v_rows *= getattr(c, "head_dim", None) or mod.in_features // c.num_attention_heads
                qk = mod.weight[:mod.out_features - v_rows]
                qk.copy_(randn(qk, (QK_LOGIT_STD / mod.in_features) ** 0.5))
            elif type(mod).__name__ == "Conv1D" and leaf == "c_attn":      # [in, 3 * hidden]: Q, K, V
                qk = 2 * mod.weight.shape[1] // 3
                mod.weight[:, :qk].copy_(randn(mod.weight[:, :qk], (QK_LOGIT_STD / mod.weight.shape[0]) ** 0.5))
            linear = isinstance(mod, (torch.nn.Linear, torch.nn.Conv1d, torch.nn.Conv2d)) \
                or type(mod).__name__ == "Conv1D"
            if linear and getattr(mod, "bias", None) is not None:
                mod.bias.copy_(randn(mod.bias, 0.05))
            table = getattr(mod, "relative_position_bias_table", None)
            if isinstance(table, torch.nn.Parameter):
                table.copy_(randn(table, 0.5))


def build(family: str, size: str = "small", layers: int | None = None, cfg=None) -> Built:
    """Random-weight (``torch.manual_seed(0)``) fp32 eval-mode model for ``family``."""
    torch = _deps.torch()
    tf = _deps.transformers()
    cfg = make_config(family, size, layers) if cfg is None else cfg
    torch.manual_seed(0)
    model = getattr(tf, _MODEL_CLASSES[family])(cfg)
    if family == "whisper":
        model = model.get_encoder()
    if getattr(cfg, "plus_ep_weights", None):
        realistic_weights(model)
    model = model.to(torch.float32).eval()
    wrapper = _wrapper_classes()[family](model).eval()
    return Built(family, cfg, model, wrapper)


def torch_inputs(family: str, feeds: dict):
    """Positional torch tensors for the wrapper from a numpy feed dict."""
    torch = _deps.torch()
    return tuple(torch.from_numpy(feeds[name]) for name in INPUTS[family])


def run_torch(built: Built, feeds: dict) -> list:
    """Run the torch wrapper on numpy feeds; returns numpy outputs."""
    torch = _deps.torch()
    with torch.no_grad():
        outs = built.wrapper(*torch_inputs(built.family, feeds))
    return [o.detach().cpu().numpy() for o in outs]
