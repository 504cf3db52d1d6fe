"""Decoder LLMs exported the way servers run them: one graph for prefill and KV-cache decode.

    from plus_ep.zoo import decoders
    path = decoders.export("llama", "torchscript")          # cached .onnx path (2 layers, fp32)
    feeds = decoders.feeds(path, batch=2, seq=1, past=20)   # a decode step at past length 20

The graph has Optimum's inputs and outputs: ``input_ids [batch, seq]``, ``attention_mask [batch,
past+seq]``, ``position_ids [batch, seq]``, per layer ``past_key_values.{i}.key/.value [batch, kv_heads,
past, head_dim]``; ``logits [batch, seq, vocab]`` and ``present.{i}.key/.value [batch, kv_heads,
past+seq, head_dim]``. The same session serves the prefill (past = 0, seq = prompt length) and every
decode step (seq = 1, past growing). Families (transformers' config classes, ``torch.manual_seed(0)``
weights made realistic by models.realistic_weights: norm weights != 1, biases != 0, Q/K scaled):
``llama`` (Llama-3 style: GQA, RoPE, SwiGLU, RMSNorm, no biases) and ``qwen2`` (the same with Q/K/V
biases). Sizes: ``small`` (hidden 64, 4 heads of 16, 2 KV heads, fp32; CPU tests) and ``real``
(Llama-3.2-1B width: hidden 2048, 32 heads of 64, 8 KV heads, MLP 8192, fp16, a 256-token vocabulary so
that a layer and not the LM head dominates).
Both torch exporters; dims are renamed ``batch``, ``seq``, ``past`` (and ``past+seq``) in both.
Greedy generation through a rewritten model's kernels: plus_ep/verification/generate.py.
"""
from __future__ import annotations

import os
import pathlib
import tempfile
import warnings

import numpy as np
import onnx

from . import _deps, cache
from .configs import WEIGHTS_SCHEME
from .exporters import OPSET, postprocess as _postprocess, publish, save
from .models import realistic_weights
from ..feeds import META_PREFIX

FAMILIES = ("llama", "qwen2")
SIZES = ("small", "real")
DEFAULT_LAYERS = {"small": 2, "real": 1}
DTYPES = {"small": "float32", "real": "float16"}
EXAMPLE = {"batch": 2, "seq": 3, "past": 5}      # not 0/1 and distinct: nothing specialised
_CLASSES = {"llama": ("LlamaConfig", "LlamaForCausalLM"), "qwen2": ("Qwen2Config", "Qwen2ForCausalLM")}
_KWARGS = {
    "small": dict(vocab_size=1000, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, max_position_embeddings=512, rms_norm_eps=1e-5,
                  rope_theta=500000.0, tie_word_embeddings=False),
    # meta-llama/Llama-3.2-1B width; one layer and a small vocabulary (the decode-step profile)
    "real": dict(vocab_size=256, hidden_size=2048, intermediate_size=8192, num_attention_heads=32,
                 num_key_value_heads=8, head_dim=64, max_position_embeddings=131072, rms_norm_eps=1e-5,
                 rope_theta=500000.0, tie_word_embeddings=False),
}
WEIGHTS = WEIGHTS_SCHEME     # models.realistic_weights (part of the cache key; decoder-v1: norms and biases only)


def config(family: str, size: str = "small", layers: int | None = None, overrides: dict | None = None):
    if family not in FAMILIES:
        raise ValueError(f"unknown decoder family {family!r}; expected one of {FAMILIES}")
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; expected one of {SIZES}")
    tf = _deps.transformers()
    kwargs = dict(_KWARGS[size], num_hidden_layers=layers or DEFAULT_LAYERS[size], use_cache=True)
    kwargs.update(overrides or {})
    cfg = getattr(tf, _CLASSES[family][0])(**kwargs)
    cfg.plus_ep_weights = WEIGHTS
    cfg.plus_ep_dtype = DTYPES[size]
    if cfg.plus_ep_dtype == "float16":
        # torch's SDPA math path on the CPU computes half inputs in fp32, and the TorchScript export then
        # keeps o_proj (and the attention) in fp32; eager attention exports the fp16 graph a GPU serves
        # (softmax in fp32 between Casts, as transformers writes it)
        cfg._attn_implementation = "eager"
    return cfg


def build(family: str, size: str = "small", layers: int | None = None, cfg=None):
    """(config, eval-mode torch wrapper taking (input_ids, attention_mask, position_ids, *past) and
    returning (logits, *present))."""
    torch = _deps.torch()
    tf = _deps.transformers()
    cfg = config(family, size, layers) if cfg is None else cfg
    torch.manual_seed(0)
    model = getattr(tf, _CLASSES[family][1])(cfg)
    realistic_weights(model)
    model = model.to(getattr(torch, cfg.plus_ep_dtype)).eval()
    n_layers = cfg.num_hidden_layers

    class WithPast(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, position_ids, *past):
            kv = tf.DynamicCache([(past[2 * i], past[2 * i + 1]) for i in range(n_layers)], config=cfg)
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                             cache=kv, use_cache=True)
            present = []
            for layer in out.past_key_values.layers:
                present += [layer.keys, layer.values]
            return (out.logits, *present)

    return cfg, WithPast().eval()


def names(n_layers: int) -> tuple[list[str], list[str]]:
    ins = ["input_ids", "attention_mask", "position_ids"]
    outs = ["logits"]
    for i in range(n_layers):
        ins += [f"past_key_values.{i}.key", f"past_key_values.{i}.value"]
        outs += [f"present.{i}.key", f"present.{i}.value"]
    return ins, outs


def _dims(name: str) -> dict[int, str]:
    if name.startswith("past_key_values."):
        return {0: "batch", 2: "past"}
    if name.startswith("present."):
        return {0: "batch", 2: "past+seq"}
    if name == "attention_mask":
        return {0: "batch", 1: "past+seq"}
    return {0: "batch", 1: "seq"}       # input_ids, position_ids, logits


def make_feeds(cfg, batch: int, seq: int, past: int, seed: int = 0, pad: int = 0) -> dict[str, np.ndarray]:
    """Inputs of one step: random ids, a past of random K/V, the mask with the first `pad` positions of the
    last row padded (left padding, as generation pads a batch of prompts) and positions counting only
    the unpadded tokens (as transformers' generate computes them)."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(cfg.plus_ep_dtype)
    mask = np.ones((batch, past + seq), np.int64)
    if pad:
        mask[-1, :min(pad, past + seq - 1)] = 0
    pos = np.cumsum(mask, axis=1) - 1
    pos = np.where(mask == 0, 1, pos)[:, past:]
    out = {"input_ids": rng.integers(0, cfg.vocab_size, (batch, seq)).astype(np.int64),
           "attention_mask": mask, "position_ids": pos.astype(np.int64)}
    shape = (batch, cfg.num_key_value_heads, past, cfg.head_dim)
    for i in range(cfg.num_hidden_layers):
        for kv in ("key", "value"):
            out[f"past_key_values.{i}.{kv}"] = rng.standard_normal(shape).astype(dt)
    return out


def feeds(path, batch: int = 1, seq: int = 1, past: int = 0, seed: int = 0, pad: int = 0) -> dict[str, np.ndarray]:
    """`make_feeds` for an exported file (its metadata names the family and size)."""
    model = onnx.load(os.fspath(path), load_external_data=False)
    meta = {p.key[len(META_PREFIX):]: p.value for p in model.metadata_props if p.key.startswith(META_PREFIX)}
    cfg = config(meta["family"], meta["size"], int(meta["layers"]))
    return make_feeds(cfg, batch, seq, past, seed, pad)


def _torch_inputs(feeds_: dict, n_layers: int):
    torch = _deps.torch()
    ins, _ = names(n_layers)
    return tuple(torch.from_numpy(np.ascontiguousarray(feeds_[n])) for n in ins)


def run_torch(wrapper, feeds_: dict, n_layers: int) -> list[np.ndarray]:
    torch = _deps.torch()
    with torch.no_grad():
        return [o.float().numpy() for o in wrapper(*_torch_inputs(feeds_, n_layers))]


def _export_torchscript(wrapper, args, path: str, n_layers: int) -> None:
    torch = _deps.torch()
    ins, outs = names(n_layers)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(wrapper, args, path, dynamo=False, opset_version=OPSET["torchscript"],
                          input_names=ins, output_names=outs, dynamic_axes={n: _dims(n) for n in ins + outs},
                          do_constant_folding=True)


def _export_dynamo(wrapper, args, path: str, n_layers: int) -> None:
    torch = _deps.torch()
    ins, outs = names(n_layers)
    D = torch.export.Dim.DYNAMIC
    per_input = {"input_ids": {0: D, 1: D}, "attention_mask": {0: D, 1: D}, "position_ids": {0: D, 1: D},
                 "past": tuple({0: D, 2: D} for _ in range(2 * n_layers))}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(wrapper, args, dynamo=True, opset_version=OPSET["dynamo"], input_names=ins,
                                    output_names=outs, dynamic_shapes=per_input, optimize=True,
                                    external_data=True, verbose=False)
    program.save(path, external_data=True)


def _name_dims(model: onnx.ModelProto) -> None:
    """Graph inputs and outputs get the dims batch / seq / past / past+seq (the dynamo exporter names
    each input's dims on its own: s10, s15, s89 ...); value_info is dropped (the rewriter infers shapes
    again, from these names)."""
    for vi in list(model.graph.input) + list(model.graph.output):
        for axis, name in _dims(vi.name).items():
            vi.type.tensor_type.shape.dim[axis].dim_param = name
    del model.graph.value_info[:]


def export(family: str, exporter: str, size: str = "small", layers: int | None = None, cache_dir=None,
           verify: bool | None = None, force: bool = False) -> pathlib.Path:
    """Path of the cached export, exporting it if needed. ``verify`` (default: size small) compares ORT
    CPU with torch on a padded prefill and on decode steps at past 1 and 9 before caching."""
    if exporter not in OPSET:
        raise ValueError(f"unknown exporter {exporter!r}; expected one of {tuple(OPSET)}")
    torch = _deps.torch()
    cfg = config(family, size, layers)
    n_layers = cfg.num_hidden_layers
    opset = OPSET[exporter]
    directory = cache.cache_dir(cache_dir)
    target = directory / cache.file_name(f"{family}_past", exporter, size, n_layers, cfg, opset)
    if target.exists() and not force:
        return target
    verify = (size == "small") if verify is None else verify
    directory.mkdir(parents=True, exist_ok=True)
    cfg, wrapper = build(family, size, n_layers, cfg)
    args = _torch_inputs(make_feeds(cfg, EXAMPLE["batch"], EXAMPLE["seq"], EXAMPLE["past"]), n_layers)
    with tempfile.TemporaryDirectory(dir=directory, prefix=".tmp-") as td:
        raw = os.path.join(td, "raw.onnx")
        with torch.no_grad():
            (_export_torchscript if exporter == "torchscript" else _export_dynamo)(wrapper, args, raw, n_layers)
        model = onnx.load(raw, load_external_data=True)
        model = _postprocess(model, None)
        _name_dims(model)
        meta = {"family": family, "exporter": exporter, "size": size, "layers": str(n_layers), "opset": str(opset),
                "form": "decoder-with-past", "dtype": cfg.plus_ep_dtype, "vocab_size": str(cfg.vocab_size),
                "torch_version": torch.__version__, "transformers_version": _deps.transformers().__version__,
                "config_hash": cache.config_hash(cfg, opset)}
        for k, v in meta.items():
            model.metadata_props.add(key=META_PREFIX + k, value=v)
        staged = pathlib.Path(td) / target.name
        save(model, staged)
        del model
        onnx.checker.check_model(os.fspath(staged), full_check=False)
        if verify:
            compare_with_torch(staged, wrapper, cfg)
        publish(staged, target)
    return target


def real_positions(name: str, mask: np.ndarray, past: int, *arrays):
    """The elements of output `name` at unpadded positions. A padding query sees no key: its attention row
    is fully masked, and what it yields (and every later layer's K/V there) is the runtime's convention,
    never attended by a real token."""
    keep = mask.astype(bool)
    if name == "logits":
        return tuple(a[keep[:, past:]] for a in arrays)
    return tuple(a.transpose(0, 2, 1, 3)[keep] for a in arrays)


def compare_with_torch(path, wrapper, cfg, atol: float = 1e-4) -> float:
    """ORT CPU against torch on a padded prefill (past 0) and decode steps (seq 1 at past 1 and 9), at the
    positions that are not padding (`real_positions`)."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(os.fspath(path), so, providers=["CPUExecutionProvider"])
    worst = 0.0
    for batch, seq, past, pad in ((2, 5, 0, 2), (2, 1, 1, 1), (1, 1, 9, 0)):
        f = make_feeds(cfg, batch, seq, past, pad=pad)
        got = sess.run(None, f)
        want = run_torch(wrapper, f, cfg.num_hidden_layers)
        for name, g, w in zip(names(cfg.num_hidden_layers)[1], got, want):
            if g.shape != w.shape:
                raise AssertionError(f"{name} at b{batch} s{seq} past {past}: ORT {g.shape} != torch {w.shape}")
            g, w = real_positions(name, f["attention_mask"], past, g, w)
            diff = float(np.max(np.abs(g.astype(np.float64) - w))) if g.size else 0.0
            worst = max(worst, diff)
            if not diff <= atol:
                raise AssertionError(f"{name} at b{batch} s{seq} past {past}: max abs diff {diff:.3g} > {atol}")
    return worst
