"""Lazy access to the optional ``[models]`` extra (torch, transformers)."""

from __future__ import annotations

_HINT = ("install the models extra: pip install -e '.[models]' in the PlusEP checkout "
         "(or pip install torch transformers onnxscript)")


class MissingModelsExtra(ImportError):
    """Raised when torch / transformers are needed but not installed."""


def torch():
    try:
        import torch as _torch
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingModelsExtra(f"plus_ep.zoo needs torch; {_HINT}") from exc
    return _torch


def transformers():
    torch()
    try:
        import transformers as _tf
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingModelsExtra(f"plus_ep.zoo needs transformers; {_HINT}") from exc
    return _tf
