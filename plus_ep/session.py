"""`plus_ep.InferenceSession`: onnxruntime.InferenceSession with "PlusEP" as a provider name.

    from plus_ep import InferenceSession
    sess = InferenceSession("model.onnx", providers=[("PlusEP", {"arch": "sm_90"}),
                                                     "CUDAExecutionProvider", "CPUExecutionProvider"])

With "PlusEP" in `providers` the model is rewritten (cached by model hash + options), its kernels are
compiled (cached), the launcher library is registered, and the session runs on the CUDA EP. Options
(strings, ORT style): arch (default: the local GPU), cache_dir, disable (comma-separated pattern
names), fp32_math ("exact" | "tf32"), verify ("1": compare one random run against the plain
providers and warn on a mismatch). Without a CUDA GPU it warns once and runs the original model on
the remaining providers. Without "PlusEP" it is exactly onnxruntime.InferenceSession.
"""
from __future__ import annotations

import logging
import os
import warnings

import onnx
import onnxruntime as ort

from .library import get_library_path

log = logging.getLogger("plus_ep")
NAME = "PlusEP"
OPTIONS = {"arch", "cache_dir", "disable", "fp32_math", "verify"}
_warned = set()


def _split_providers(providers, provider_options):
    """(PlusEP options or None, remaining providers in ORT's list form)."""
    plus, rest = None, []
    opts = list(provider_options or [None] * len(providers or []))
    for k, p in enumerate(providers or []):
        name, o = (p if isinstance(p, tuple) else (p, opts[k] if k < len(opts) else None))
        if name == NAME:
            plus = dict(o or {})
        else:
            rest.append((name, o) if o else name)
    if plus is not None:
        unknown = set(plus) - OPTIONS
        if unknown:
            raise ValueError(f"unknown PlusEP provider option(s) {sorted(unknown)}; known: {sorted(OPTIONS)}")
    return plus, rest


def _warn_once(msg):
    if msg not in _warned:
        _warned.add(msg)
        warnings.warn(msg, RuntimeWarning, stacklevel=3)
        log.info(msg)


def rewritten_model(model_bytes: bytes, arch: str, opts: dict) -> bytes:
    """The rewritten model with kernels for `arch`, from the model cache (plus_ep/model_cache.py) or
    built now. Kernels go to the kernel cache under the same root (`cache_dir` option, else
    $PLUS_EP_CACHE_DIR, else ~/.cache/plus_ep: see plus_ep/config.py). A cache folder that cannot be
    written (read only, disk full) warns once and the model is built without being stored."""
    from . import config, model_cache
    from .kernels.cache import KernelCache
    from .rewrite import rewrite_detailed
    from .warehouse import default_warehouse
    disable = tuple(sorted(p for p in opts.get("disable", "").split(",") if p))
    fp32_math = opts.get("fp32_math", "exact")
    warehouse = default_warehouse()
    key = model_cache.model_key(model_bytes, arch, disable, fp32_math, warehouse)
    path = model_cache.entry(key, opts.get("cache_dir"))
    cached = model_cache.read(path)
    if cached is not None:
        log.info("PlusEP: rewritten model from cache %s", path)
        return cached
    result = rewrite_detailed(model_bytes, warehouse=warehouse, disable=disable, archs=[arch], fp32_math=fp32_math,
                              cache=KernelCache(config.kernel_cache_dir(opts.get("cache_dir"))))
    data = result.model.SerializeToString()
    try:
        model_cache.store(path, data)
    except OSError as exc:
        _warn_once(f"PlusEP: cannot store the rewritten model in {os.path.dirname(path)} "
                   f"({exc.strerror or exc}); it is rebuilt by the next session")
    return data


def _model_bytes(path_or_bytes) -> bytes:
    if isinstance(path_or_bytes, (bytes, bytearray)):
        return bytes(path_or_bytes)
    from .rewrite import load_model
    return load_model(path_or_bytes).SerializeToString()


class InferenceSession(ort.InferenceSession):
    def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None, **kwargs):
        plus, rest = _split_providers(providers, provider_options)
        if plus is None:
            super().__init__(path_or_bytes, sess_options, providers, provider_options, **kwargs)
            return
        from .kernels import nvrtc
        gpu = nvrtc.local_arch()
        has_cuda = "CUDAExecutionProvider" in ort.get_available_providers()
        if gpu is None or not has_cuda:
            why = "no CUDA GPU or driver was found" if gpu is None else \
                "this onnxruntime has no CUDAExecutionProvider"
            fallback = rest or ["CPUExecutionProvider"]
            _warn_once(f"PlusEP: {why}; running the original model on {fallback}")
            super().__init__(path_or_bytes, sess_options, fallback, **kwargs)
            return
        arch = nvrtc.parse_arch(plus.get("arch") or gpu)
        original = _model_bytes(path_or_bytes)
        model = rewritten_model(original, arch, plus)
        so = sess_options or ort.SessionOptions()
        so.register_custom_ops_library(get_library_path())
        names = [p if isinstance(p, str) else p[0] for p in rest]
        if "CUDAExecutionProvider" not in names:
            rest.insert(0, "CUDAExecutionProvider")
        super().__init__(model, so, rest, **kwargs)
        self.plus_ep_arch = arch
        if plus.get("verify") in ("1", 1, True, "true"):
            self._verify(original, rest)

    def _verify(self, original: bytes, providers):
        import numpy as np
        from .zoo.inputs import sample_inputs
        plain = ort.InferenceSession(original, providers=providers)
        feeds = sample_inputs(onnx.load_model_from_string(original), batch=2, seq=16)
        want, got = plain.run(None, feeds), self.run(None, feeds)
        worst = max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
                    if np.asarray(a).size else 0.0 for a, b in zip(want, got))
        (log.info if worst <= 1e-3 else log.warning)("PlusEP verify: max |diff| vs plain providers = %.3g", worst)
        self.plus_ep_verify_max_diff = worst
