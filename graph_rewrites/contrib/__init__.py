"""Contrib ops as ops: the ``com.microsoft`` fused operators that ONNX Runtime's transformers optimizer,
Optimum (O2-O4) and onnxruntime-genai's model builder emit, lowered like any standard op.

Each op here has an *expansion*: the standard-ONNX subgraph computing exactly what ONNX Runtime's CPU
kernel for it computes (tests/cpu/test_contrib_ops.py compares the two on random inputs). Expansions
are written in the form the warehouse already matches for raw exports (three sibling Q/K/V projections
and the softmax(QKᵀ)V chain, a LayerNormalization or the RMS chain, GELU chains), so their +Loop
nests are the ones of that decomposed form and a contrib op becomes the skeleton (Attention's
projections, MatMulNBits' GEMM) or the epilogue (SkipLayerNormalization's residual + norm after a
MatMul, FastGelu's bias + GELU) of a warehouse pattern.

Where it happens: before identification, `expand_model` replaces every contrib node it can expand by
its subgraph (graph level, not node level: one Attention node becomes two fused kernels, the Q/K/V
group and the attention); after fusion `restore` puts back each contrib node none of whose nodes was
fused, so what PlusEP does not take keeps ORT's own kernel, and a fused node's function body holds the
contrib nodes whose whole expansion it fused (`original_body`), so the rewritten model run without PlusEP
computes with ORT's own contrib kernels. A node that does not expand (an
unsupported attribute or input) stays opaque with a one-line reason (`refused`, shown by
``plus-ep explain``).

    ex = expand_model(model)          # ex.model, ex.groups (what each node became), ex.refused
    fused = ...                       # identify + fuse ex.model
    model = restore(fused, ex)
"""
from __future__ import annotations

from .emit import Facts, Refused
from .model import Expanded, expand_model, original_body, restore, run_node
from .table import CONTRIB, ContribOp, contrib_op, expand_node

__all__ = ["CONTRIB", "ContribOp", "Expanded", "Facts", "Refused", "contrib_op", "expand_model", "expand_node",
           "original_body", "restore", "run_node"]
