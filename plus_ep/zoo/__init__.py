"""Model zoo: build random-weight transformers models and export them to ONNX.

torch / transformers are imported lazily (the ``[models]`` extra); importing
this package only needs numpy and onnx.

    from plus_ep import zoo
    path = zoo.export("bert", "dynamo")            # cached .onnx path
    feeds = zoo.sample_inputs(path, batch=2, seq=7)

Notes:
* Models are built from a transformers config with ``torch.manual_seed(0)``
  weights, made realistic by ``models.realistic_weights`` (biases != 0, norm
  weights != 1, Q/K scaled so softmax is not uniform), fp32, eval mode;
  wrappers take positional tensors and return tuples.
* TorchScript exporter: opset 17, ``dynamic_axes``. Dynamo exporter: opset 18,
  ``dynamic_shapes`` with ``torch.export.Dim``; optimized, local functions
  inlined, only the default ONNX domain.
* Attention: the transformers default (``sdpa``) everywhere; both exporters
  lower it to plain MatMul/Softmax (plus an IsNaN/Where guard when a mask is
  present), never to a fused ``Attention`` op. See ``ATTN_IMPLEMENTATION``.
* Symbolic dims: ``batch``, ``seq`` and, for T5, ``dec_seq``.
* Size "small" exports are checked against torch on ORT CPU (b2 s7, b1 s16,
  max abs diff <= 1e-4) before they enter the cache.
* CLI: ``python -m plus_ep.zoo [--size small|real] [--family F ...]
  [--exporter E ...] [--layers N] [--out DIR]``.
"""

from __future__ import annotations

import onnx

from .cache import cache_dir
from .configs import (ATTN_IMPLEMENTATION, CORE_FAMILIES, EXPORTERS, FAMILIES, GATED_FAMILIES, SIZES, WEIGHTS_SCHEME,
                      WILD_FAMILIES, config)
from .exporters import OPSET, compare_with_torch
from .exporters import export as _export
from ..feeds import metadata, sample_inputs
from ._deps import MissingModelsExtra

__all__ = [
    "FAMILIES", "CORE_FAMILIES", "WILD_FAMILIES", "GATED_FAMILIES", "WEIGHTS_SCHEME", "EXPORTERS", "SIZES", "OPSET", "ATTN_IMPLEMENTATION",
    "export", "load", "config", "sample_inputs", "metadata", "cache_dir",
    "compare_with_torch", "MissingModelsExtra",
]


def export(family, exporter, size="small", layers=None, cache_dir=None, **kwargs):
    """Path of the ONNX file for ``family``/``exporter``/``size``, exporting it if not cached."""
    return _export(family, exporter, size, layers, cache_dir, **kwargs)


def load(family, exporter, size="small", layers=None, cache_dir=None, **kwargs) -> onnx.ModelProto:
    """The exported model as an ``onnx.ModelProto`` (exports it first if needed)."""
    return onnx.load(str(export(family, exporter, size, layers, cache_dir, **kwargs)))
