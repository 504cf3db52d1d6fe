"""BERT-base for the lease's timing steps, built without torch export or downloads: the ONNX graph is
plus_ep.demo_model's BERT (the HF TorchScript export's op sequence) at BERT-base sizes (hidden 768, 12
heads of 64, FFN 3072, vocab 30522, seeded random weights, LayerNorm weights and biases perturbed so
they are not 1 and 0), and `TorchBert` is the same network in torch on the very same weights (cuBLAS
GEMMs, scaled_dot_product_attention, F.layer_norm), for torch eager and torch.compile.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

BASE = {"hidden": 768, "heads": 12, "intermediate": 3072, "vocab": 30522, "max_pos": 512}
TINY = {"hidden": 64, "heads": 2, "intermediate": 128, "vocab": 64, "max_pos": 32}   # the rehearsal's
SHORT = {"hidden": 32, "heads": 2, "intermediate": 64, "vocab": 64, "max_pos": 16}    # CI's short rehearsal


def plan(emulated: bool, short: bool) -> dict:
    """Sizes of the kernel-time and end-to-end steps: BERT-base on a GPU; a 64-wide BERT in the rehearsal
    (the PTX interpreter runs every kernel); a 32-wide one, fp32 only, in CI's short rehearsal. --prepare
    puts the kernels of each into the carried cache, so no step compiles."""
    if short:
        return {"size": SHORT, "dtypes": ("fp32",), "shapes": [(1, 8)], "layers": 1, "runs": 1}
    if emulated:
        return {"size": TINY, "dtypes": ("fp16", "fp32"), "shapes": [(1, 8)], "layers": 2, "runs": 1}
    return {"size": BASE, "dtypes": ("fp16", "fp32"), "shapes": [(1, 128), (16, 128)], "layers": 12, "runs": 20}


def step_setup(step: str, argv: list):
    """What the kernel-time and end-to-end steps start with: (carry, out, status, plan, torch or None, why
    not, kernel cache). The emulated driver's interpreter is attached first, when it is the driver."""
    import pathlib

    from plus_ep.kernels.compile.cache import KernelCache

    from bench.lease import env as lease_env
    carry, out = pathlib.Path(argv[0]), argv[1]
    st = lease_env.Status(step)
    lease_env.emulator()
    torch, why = lease_env.torch_cuda()
    p = plan(lease_env.mode() == "emulated", "--short" in argv)
    return carry, out, st, p, torch, why, KernelCache(carry / "cache" / "kernels")


def onnx_model(layers: int, dtype: str = "fp32", size: dict = BASE, seed: int = 0) -> onnx.ModelProto:
    from plus_ep.demo_model import build_bert

    from bench.harness.bert_fp16 import to_fp16
    m = build_bert(layers=layers, seed=seed, **size)
    rng = np.random.default_rng(seed + 1)
    for i, t in enumerate(m.graph.initializer):
        if "LayerNorm" in t.name:
            a = numpy_helper.to_array(t)
            a = (1 + rng.standard_normal(a.shape) / 10) if t.name.endswith("weight") else rng.standard_normal(a.shape) / 10
            m.graph.initializer[i].CopyFrom(numpy_helper.from_array(a.astype(np.float32), t.name))
    return to_fp16(m) if dtype == "fp16" else m


def feeds(batch: int, seq: int, vocab: int, seed: int = 0) -> dict:
    """Random ids; the last sequence ends in padding (a quarter of it) when batch > 1."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, size=(batch, seq), dtype=np.int64)
    mask = np.ones((batch, seq), np.int64)
    if batch > 1:
        mask[-1, seq - max(1, seq // 4):] = 0
    return {"input_ids": ids, "attention_mask": mask}


def weights(model: onnx.ModelProto) -> dict:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def torch_bert(model: onnx.ModelProto, layers: int, heads: int, device, dtype):
    """The ONNX model's network in torch, on its weights."""
    import torch
    import torch.nn.functional as F

    W = {k: torch.from_numpy(np.ascontiguousarray(v)).to(device) for k, v in weights(model).items()
         if v.dtype.kind == "f"}
    W = {k: v.to(dtype) for k, v in W.items()}

    def lin(x, name):
        return torch.addmm(W[f"{name}.bias"], x.reshape(-1, x.shape[-1]), W[f"{name}.weight"]).view(
            *x.shape[:-1], -1)

    def ln(x, name):
        return F.layer_norm(x, (x.shape[-1],), W[f"{name}.weight"], W[f"{name}.bias"], 1e-12)

    class TorchBert(torch.nn.Module):
        def forward(self, ids, mask):
            b, s = ids.shape
            x = W["embeddings.word_embeddings.weight"][ids] + W["embeddings.position_embeddings.weight"][:s]
            x = ln(x, "embeddings.LayerNorm")
            m = (1.0 - mask[:, None, None, :].to(x.dtype)) * -10000.0
            hid = x.shape[-1]
            for i in range(layers):
                p = f"encoder.layer.{i}"
                q, k, v = (lin(x, f"{p}.attention.self.{n}").view(b, s, heads, hid // heads).transpose(1, 2)
                           for n in ("query", "key", "value"))
                a = F.scaled_dot_product_attention(q, k, v, attn_mask=m).transpose(1, 2).reshape(b, s, hid)
                x = ln(lin(a, f"{p}.attention.output.dense") + x, f"{p}.attention.output.LayerNorm")
                h = F.gelu(lin(x, f"{p}.intermediate.dense"))
                x = ln(lin(h, f"{p}.output.dense") + x, f"{p}.output.LayerNorm")
            return x

    return TorchBert(), W


def torch_node_ops(W: dict, batch: int, seq: int, heads: int, device, dtype, layer: int = 0) -> dict:
    """Torch eager equivalents of PlusEP's fused nodes of one BERT layer, by pattern: callables that run
    what the fused node computes, on inputs of its shapes (cuBLAS addmm, SDPA, F.layer_norm, F.gelu)."""
    import torch
    import torch.nn.functional as F
    p = f"encoder.layer.{layer}"
    hid = W[f"{p}.attention.output.dense.weight"].shape[0]
    ffn = W[f"{p}.intermediate.dense.weight"].shape[1]
    g = torch.Generator(device=device).manual_seed(0)

    def rnd(*shape):
        return torch.randn(*shape, generator=g, device=device, dtype=torch.float32).to(dtype)
    x, r, h = rnd(batch * seq, hid), rnd(batch * seq, hid), rnd(batch * seq, ffn)
    ids = torch.randint(0, W["embeddings.word_embeddings.weight"].shape[0], (batch, seq), device=device)
    q, k, v = (rnd(batch, heads, seq, hid // heads) for _ in range(3))
    mask = torch.zeros(batch, 1, 1, seq, device=device, dtype=dtype)

    def w(name):
        return W[f"{name}.weight"], W[f"{name}.bias"]

    def ln(t, name):
        return F.layer_norm(t, (hid,), *w(name), 1e-12)
    qkv = [w(f"{p}.attention.self.{n}") for n in ("query", "key", "value")]
    return {
        "layernorm": lambda: ln(W["embeddings.word_embeddings.weight"][ids]
                                + W["embeddings.position_embeddings.weight"][:seq], "embeddings.LayerNorm"),
        "gemm_group": lambda: [torch.addmm(b_, x, w_) for w_, b_ in qkv],
        "attention": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
        "gemm_layernorm": lambda: ln(torch.addmm(W[f"{p}.attention.output.dense.bias"], x,
                                                 W[f"{p}.attention.output.dense.weight"]) + r,
                                     f"{p}.attention.output.LayerNorm"),
        "gemm": lambda: F.gelu(torch.addmm(W[f"{p}.intermediate.dense.bias"], x, W[f"{p}.intermediate.dense.weight"])),
        "gemm_layernorm_ffn": lambda: ln(torch.addmm(W[f"{p}.output.dense.bias"], h, W[f"{p}.output.dense.weight"])
                                         + r, f"{p}.output.LayerNorm"),
    }
