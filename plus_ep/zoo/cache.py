"""Cache location and cache keys for zoo exports."""

from __future__ import annotations

import hashlib
import json
import pathlib

from .. import config
from . import _deps

# Bump when the wrappers / post-processing change the produced graphs.
ZOO_FORMAT = 1


def cache_dir(cache_dir=None) -> pathlib.Path:
    """``cache_dir`` argument, else ``$PLUS_EP_ZOO_DIR``, else ``<cache root>/zoo`` (plus_ep/config.py)."""
    if cache_dir is None:
        return config.zoo_dir()
    return pathlib.Path(cache_dir).expanduser()


def config_hash(cfg, opset: int) -> str:
    torch = _deps.torch()
    tf = _deps.transformers()
    payload = {
        "config": cfg.to_dict(),
        "attn_implementation": getattr(cfg, "_attn_implementation", None),
        "torch": torch.__version__,
        "transformers": tf.__version__,
        "opset": opset,
        "zoo_format": ZOO_FORMAT,
    }
    blob = json.dumps(payload, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:10]


def file_name(family: str, exporter: str, size: str, layers: int, cfg, opset: int) -> str:
    return f"{family}-{exporter}-{size}-L{layers}-{config_hash(cfg, opset)}.onnx"
