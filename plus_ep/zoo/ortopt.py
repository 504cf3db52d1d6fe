"""Models already optimized by ONNX Runtime's tools, the way most production ONNX transformers arrive:

* `bert_optimized(level)`: a BERT/MiniLM-style encoder (random non-trivial weights: biases != 0, norm
  weights != 1) exported with TorchScript (eager attention, the form ORT's attention fusion matches),
  then run through ``onnxruntime.transformers.optimizer`` at one of the levels Hugging Face Optimum
  uses: O1 (ORT's basic graph optimizations only), O2 (+ the transformers fusions: Attention,
  SkipLayerNormalization, BiasGelu), O3 (+ GELU approximation: FastGelu), O4 (O3 in float16, inputs and
  outputs kept float32). Result: com.microsoft Attention / SkipLayerNormalization / BiasGelu / FastGelu.
* `genai_llama()`: an onnxruntime-genai-style decoder (GroupQueryAttention with rotary and a KV cache,
  MatMulNBits int4 weights quantized by ORT's own MatMulNBitsQuantizer, SimplifiedLayerNormalization and
  SkipSimplifiedLayerNormalization, SiLU MLP), written with onnx.helper after the graph the model builder
  of onnxruntime-genai 0.18 writes (the same inputs, outputs, op sequence and attributes; the optional
  test tests/zoo/test_ort_optimized.py compares it with the real builder's when that package is
  installed). Random weights, no downloads.

Files are cached in the zoo cache (``$PLUS_EP_ZOO_DIR``) under a key of their arguments and the
torch/transformers/onnxruntime versions (and, for BERT, the zoo's weights scheme).
"""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from . import _deps, cache
from .configs import WEIGHTS_SCHEME
from .models import realistic_weights

LEVELS = {   # Optimum's AutoOptimizationConfig levels, as arguments of ORT's transformers optimizer
    "O1": dict(opt_level=1, only_onnxruntime=True, gelu_approximation=False, fp16=False, use_gpu=False),
    "O2": dict(opt_level=2, only_onnxruntime=False, gelu_approximation=False, fp16=False, use_gpu=False),
    "O3": dict(opt_level=2, only_onnxruntime=False, gelu_approximation=True, fp16=False, use_gpu=False),
    "O4": dict(opt_level=2, only_onnxruntime=False, gelu_approximation=True, fp16=True, use_gpu=True),
}
MS = "com.microsoft"


def _key(kind: str, **args) -> str:
    import onnxruntime
    payload = {"kind": kind, "args": args, "ort": onnxruntime.__version__, "format": 2}
    if kind == "bert":
        payload.update(torch=_deps.torch().__version__, transformers=_deps.transformers().__version__,
                       weights=WEIGHTS_SCHEME)
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:10]


def _publish(model: onnx.ModelProto, target: pathlib.Path) -> pathlib.Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=target.parent, prefix=".tmp-", suffix=".onnx", delete=False) as f:
        staged = f.name
    onnx.save_model(model, staged)
    os.replace(staged, target)
    return target


# ---- ORT transformers optimizer ------------------------------------------------------------------------
def optimize(model_path, level: str, num_heads: int, hidden_size: int, model_type: str = "bert") -> onnx.ModelProto:
    """`model_path` optimized by onnxruntime.transformers.optimizer at Optimum level `level` (O1-O4)."""
    import logging

    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model
    if level not in LEVELS:
        raise ValueError(f"level {level!r}: one of {sorted(LEVELS)}")
    lv = LEVELS[level]
    options = FusionOptions(model_type)
    options.enable_gelu_approximation = lv["gelu_approximation"]
    options.enable_embed_layer_norm = False          # Optimum's default (disable_embed_layer_norm_fusion)
    quiet = logging.getLogger("onnxruntime.transformers")
    old = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        opt = optimize_model(os.fspath(model_path), model_type, num_heads, hidden_size, opt_level=lv["opt_level"],
                             optimization_options=options, use_gpu=lv["use_gpu"],
                             only_onnxruntime=lv["only_onnxruntime"])
        if lv["fp16"]:
            opt.convert_float_to_float16(keep_io_types=True)
    finally:
        quiet.setLevel(old)
    return opt.model


def bert_optimized(level: str = "O3", layers: int = 2, hidden: int = 64, heads: int = 4, intermediate: int = 128,
                   vocab: int = 1000, cache_dir=None) -> pathlib.Path:
    """Path of a random-weight BERT encoder (inputs input_ids, attention_mask, token_type_ids; output
    last_hidden_state) optimized at Optimum level `level`."""
    directory = cache.cache_dir(cache_dir)
    args = dict(level=level, layers=layers, hidden=hidden, heads=heads, intermediate=intermediate, vocab=vocab)
    target = directory / f"bert-ort{level}-L{layers}-h{hidden}-{_key('bert', **args)}.onnx"
    if target.exists():
        return target
    raw = bert_export(layers, hidden, heads, intermediate, vocab, directory)
    return _publish(optimize(raw, level, heads, hidden), target)


def bert_export(layers=2, hidden=64, heads=4, intermediate=128, vocab=1000, cache_dir=None) -> pathlib.Path:
    """The TorchScript export (opset 17, dynamic batch/seq, eager attention) `bert_optimized` starts from."""
    torch, tf = _deps.torch(), _deps.transformers()
    directory = cache.cache_dir(cache_dir)
    args = dict(layers=layers, hidden=hidden, heads=heads, intermediate=intermediate, vocab=vocab)
    target = directory / f"bert-eager-L{layers}-h{hidden}-{_key('bert', **args)}.onnx"
    if target.exists():
        return target
    cfg = tf.BertConfig(vocab_size=vocab, hidden_size=hidden, num_attention_heads=heads,
                        intermediate_size=intermediate, num_hidden_layers=layers, max_position_embeddings=128,
                        type_vocab_size=2)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = tf.BertModel(cfg).eval()
    realistic_weights(model)
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=directory, prefix=".tmp-") as td:
        path = os.path.join(td, "bert.onnx")
        export_encoder(model, path)
        return _publish(onnx.load(path), target)


def export_encoder(model, path, opset: int = 17):
    """TorchScript export of a transformers BertModel: (input_ids, attention_mask, token_type_ids) ->
    last_hidden_state, batch and seq dynamic (also used for the real all-MiniLM-L6-v2 by bench/)."""
    import warnings
    torch = _deps.torch()

    class Encoder(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.m(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids).last_hidden_state

    ids = torch.randint(0, model.config.vocab_size, (2, 8))
    dims = {0: "batch", 1: "seq"}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(Encoder(model).eval(), (ids, torch.ones_like(ids), torch.zeros_like(ids)), path,
                          dynamo=False, opset_version=opset,
                          input_names=["input_ids", "attention_mask", "token_type_ids"],
                          output_names=["last_hidden_state"],
                          dynamic_axes={"input_ids": dims, "attention_mask": dims, "token_type_ids": dims,
                                        "last_hidden_state": dims})


# ---- onnxruntime-genai-style int4 decoder ----------------------------------------------------------------
def genai_llama(layers: int = 2, hidden: int = 64, heads: int = 4, kv_heads: int = 2, intermediate: int = 128,
                vocab: int = 256, max_len: int = 128, dtype: str = "float16", block_size: int = 32,
                seed: int = 0, cache_dir=None) -> pathlib.Path:
    """Path of a random-weight Llama-style decoder in onnxruntime-genai's graph form (int4 MatMulNBits
    weights; float16 activations as the builder writes for CUDA, float32 as for CPU). Inputs input_ids
    [batch_size, sequence_length], attention_mask [batch_size, total_sequence_length],
    past_key_values.<l>.key/value [batch_size, kv_heads, past_sequence_length, head]; outputs logits,
    present.<l>.key/value [batch_size, kv_heads, total_sequence_length, head]."""
    directory = cache.cache_dir(cache_dir)
    args = dict(layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, intermediate=intermediate, vocab=vocab,
                max_len=max_len, dtype=dtype, block_size=block_size, seed=seed)
    target = directory / f"genai-llama-int4-{dtype}-L{layers}-h{hidden}-{_key('genai', **args)}.onnx"
    if target.exists():
        return target
    fp = genai_llama_float(**{k: v for k, v in args.items() if k != "block_size"})
    return _publish(quantize_int4(fp, block_size), target)


def quantize_int4(model: onnx.ModelProto, block_size: int = 32) -> onnx.ModelProto:
    """Every MatMul with a constant [K, N] weight becomes MatMulNBits (4 bits, symmetric, blockwise), by
    ONNX Runtime's own MatMulNBitsQuantizer, as onnxruntime-genai's builder does."""
    import logging

    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.WARNING)
    q = MatMulNBitsQuantizer(model, block_size=block_size, is_symmetric=True)
    q.process()
    return q.model.model


def genai_llama_float(layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128, vocab=256, max_len=128,
                      dtype="float16", seed=0) -> onnx.ModelProto:
    """The decoder with plain MatMul weights (before quantize_int4)."""
    r = np.random.default_rng(seed)
    T = TensorProto.FLOAT16 if dtype == "float16" else TensorProto.FLOAT
    npt = np.float16 if dtype == "float16" else np.float32
    head = hidden // heads
    nodes, inits = [], []

    def init(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def weight(name, k, n):
        return init(name, (r.standard_normal((k, n)) / np.sqrt(k)).astype(npt))

    def norm_w(name):
        return init(name, (1 + 0.1 * r.standard_normal(hidden)).astype(npt))

    def node(op, ins, outs, name, domain="", **attrs):
        nodes.append(helper.make_node(op, ins, outs, name=name, domain=domain, **attrs))
        return outs[0]

    # attention mask -> seqlens_k (int32 [B], valid tokens - 1) and total_sequence_length (int32 scalar)
    m = "/model/attn_mask_reformat/attn_mask_subgraph"
    one = init("/model/constants/INT64/[1]", np.array([1], np.int64))
    idx1 = init("/model/constants/INT64/1", np.array(1, np.int64))
    s = node("ReduceSum", ["attention_mask", one], [f"{m}/ReduceSum/output_0"], f"{m}/ReduceSum", keepdims=0)
    s = node("Sub", [s, one], [f"{m}/Sub/output_0"], f"{m}/Sub")
    seqlens = node("Cast", [s], [f"{m}/Sub/Cast/output_0"], f"{m}/Sub/Cast", to=TensorProto.INT32)
    shp = node("Shape", ["attention_mask"], [f"{m}/Shape/output_0"], f"{m}/Shape")
    tot = node("Gather", [shp, idx1], [f"{m}/Gather/output_0"], f"{m}/Gather", axis=0)
    total = node("Cast", [tot], [f"{m}/Gather/Cast/output_0"], f"{m}/Gather/Cast", to=TensorProto.INT32)
    # rotary caches [max_len, head/2]
    inv = 1.0 / (10000.0 ** (np.arange(0, head, 2) / head))
    ang = np.arange(max_len)[:, None] * inv[None, :]
    cos, sin = init("cos_cache", np.cos(ang).astype(npt)), init("sin_cache", np.sin(ang).astype(npt))
    x = node("Gather", [init("model.embed_tokens.weight", (0.5 * r.standard_normal((vocab, hidden))).astype(npt)),
                        "input_ids"], ["/model/embed_tokens/Gather/output_0"], "/model/embed_tokens/Gather")
    h = node("SimplifiedLayerNormalization", [x, norm_w("model.layers.0.input_layernorm.weight")],
             ["/model/layers.0/input_layernorm/output_0"], "/model/layers.0/input_layernorm/LayerNorm",
             axis=-1, epsilon=1e-5, stash_type=1)
    residual = x
    for l in range(layers):
        p = f"/model/layers.{l}"
        qkv = node("MatMul", [h, weight(f"model.layers.{l}.attn.qkv_proj.MatMul.weight", hidden,
                                        (heads + 2 * kv_heads) * head)],
                   [f"{p}/attn/qkv_proj/MatMul/output_0"], f"{p}/attn/qkv_proj/MatMul")
        att = node("GroupQueryAttention", [qkv, "", "", f"past_key_values.{l}.key", f"past_key_values.{l}.value",
                                           seqlens, total, cos, sin],
                   [f"{p}/attn/GroupQueryAttention/output_0", f"present.{l}.key", f"present.{l}.value"],
                   f"{p}/attn/GroupQueryAttention", domain=MS, num_heads=heads, kv_num_heads=kv_heads,
                   scale=float(1 / np.sqrt(head)), local_window_size=-1, softcap=0.0, do_rotary=1, rotary_interleaved=0)
        o = node("MatMul", [att, weight(f"model.layers.{l}.attn.o_proj.MatMul.weight", heads * head, hidden)],
                 [f"{p}/attn/o_proj/MatMul/output_0"], f"{p}/attn/o_proj/MatMul")
        h, _, _, residual = nodes_out(node, "SkipSimplifiedLayerNormalization",
                                      [residual, o, norm_w(f"model.layers.{l}.post_attention_layernorm.weight")],
                                      [f"{p}/post_attention_layernorm/output_0", "", "",
                                       f"{p}/post_attention_layernorm/output_3"],
                                      f"{p}/post_attention_layernorm/SkipLayerNorm")
        gate = node("MatMul", [h, weight(f"model.layers.{l}.mlp.gate_proj.MatMul.weight", hidden, intermediate)],
                    [f"{p}/mlp/gate_proj/MatMul/output_0"], f"{p}/mlp/gate_proj/MatMul")
        up = node("MatMul", [h, weight(f"model.layers.{l}.mlp.up_proj.MatMul.weight", hidden, intermediate)],
                  [f"{p}/mlp/up_proj/MatMul/output_0"], f"{p}/mlp/up_proj/MatMul")
        sig = node("Sigmoid", [gate], [f"{p}/mlp/act_fn/Sigmoid/output_0"], f"{p}/mlp/act_fn/Sigmoid")
        act = node("Mul", [gate, sig], [f"{p}/mlp/act_fn/Mul/output_0"], f"{p}/mlp/act_fn/Mul")
        prod = node("Mul", [act, up], [f"{p}/mlp/Mul/output_0"], f"{p}/mlp/Mul")
        down = node("MatMul", [prod, weight(f"model.layers.{l}.mlp.down_proj.MatMul.weight", intermediate, hidden)],
                    [f"{p}/mlp/down_proj/MatMul/output_0"], f"{p}/mlp/down_proj/MatMul")
        last = l == layers - 1
        nxt = f"/model/layers.{l + 1}/{'final_norm_layernorm' if last else 'input_layernorm'}"
        outs = [f"{nxt}/output_0"] + ([] if last else ["", "", f"{nxt}/output_3"])
        got = nodes_out(node, "SkipSimplifiedLayerNormalization",
                        [residual, down, norm_w(f"model.layers.{l + 1}.{'final_norm' if last else 'input'}_layernorm"
                                                ".weight")], outs, f"{nxt}/SkipLayerNorm")
        h = got[0]
        residual = None if last else got[3]
    node("MatMul", [h, weight("lm_head.MatMul.weight", hidden, vocab)], ["logits"], "/lm_head/MatMul")
    kv = ["batch_size", kv_heads, "past_sequence_length", head]
    ins = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
           helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch_size", "total_sequence_length"])]
    outs = [helper.make_tensor_value_info("logits", T, ["batch_size", "sequence_length", vocab])]
    for w in ("key", "value"):                     # the builder's order: every layer's keys, then values
        for l in range(layers):
            ins.append(helper.make_tensor_value_info(f"past_key_values.{l}.{w}", T, kv))
            outs.append(helper.make_tensor_value_info(f"present.{l}.{w}", T,
                                                      ["batch_size", kv_heads, "total_sequence_length", head]))
    graph = helper.make_graph(nodes, "main_graph", ins, outs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)],
                             ir_version=10, producer_name="plus_ep.zoo (onnxruntime-genai graph form)")


def nodes_out(node, op, ins, outs, name):
    """A contrib node with several outputs (some empty); returns the output names."""
    node(op, ins, outs, name, domain=MS, epsilon=1e-5)
    return outs


def genai_feeds(model: onnx.ModelProto, batch: int, seq: int, past: int, seed: int = 0, lengths=None):
    """Feeds for a `genai_llama` model: token ids, an attention mask of `past + seq` (rows shorter than
    that per `lengths` are right-padded), random past K/V of length `past`."""
    r = np.random.default_rng(seed)
    ins = {vi.name: vi for vi in model.graph.input}
    vocab = next(t.dims[0] for t in model.graph.initializer if t.name == "model.embed_tokens.weight") \
        if any(t.name == "model.embed_tokens.weight" for t in model.graph.initializer) else 256
    f = {"input_ids": r.integers(0, vocab, (batch, seq)).astype(np.int64)}
    mask = np.ones((batch, past + seq), np.int64)
    for b, n in enumerate(lengths or []):
        mask[b, n:] = 0
    f["attention_mask"] = mask
    for name, vi in ins.items():
        if name.startswith("past_key_values."):
            dims = vi.type.tensor_type.shape.dim
            dt = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
            f[name] = r.standard_normal((batch, dims[1].dim_value, past, dims[3].dim_value)).astype(dt)
    return f


def genai_greedy(run, model: onnx.ModelProto, prompt_ids, new_tokens: int) -> list:
    """Greedy decoding of a `genai_llama` model for batch 1 with a growing KV cache: the prompt, then one
    token per step, each step's present K/V fed back as the next past. `run(feeds) -> outputs by name`
    (an ORT session, or the rewritten model on PlusEP's kernels). Returns the new tokens."""
    kv = [vi for vi in model.graph.input if vi.name.startswith("past_key_values.")]
    cos = next((t for t in model.graph.initializer if t.name == "cos_cache"), None)

    def empty(vi):       # [1, kv heads, 0, head size]; the builder leaves the head size symbolic (kv_cache_dim)
        d = vi.type.tensor_type.shape.dim
        head = d[3].dim_value or (2 * cos.dims[1] if cos is not None else 0)
        return np.zeros((1, d[1].dim_value, 0, head), helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type))
    past = {vi.name: empty(vi) for vi in kv}
    ids = np.asarray([list(prompt_ids)], np.int64)
    tokens, total = [], 0
    for _ in range(new_tokens):
        total += ids.shape[1]
        out = run({"input_ids": ids, "attention_mask": np.ones((1, total), np.int64), **past})
        nxt = int(np.argmax(out["logits"][0, -1].astype(np.float32)))
        tokens.append(nxt)
        past = {n: out[n.replace("past_key_values", "present")] for n in past}
        ids = np.asarray([[nxt]], np.int64)
    return tokens
