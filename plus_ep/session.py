"""`plus_ep.InferenceSession`: a convenience over the PlusEP plugin execution provider.

    from plus_ep import InferenceSession
    sess = InferenceSession("model.onnx", providers=[("PlusEP", {"arch": "sm_90"}),
                                                     "CUDAExecutionProvider", "CPUExecutionProvider"])

The stock `onnxruntime.InferenceSession` knows "PlusEP" once `plus_ep` is imported (plus_ep/ep.py).
This class adds one step in front: with "PlusEP" in `providers` it rewrites the model in Python first
(cached by model hash + options, kernels compiled and cached), so models given as bytes are fused too
and a bad model fails with plus_ep's ModelError before any session exists; then it hands the
rewritten model and the same providers to onnxruntime.InferenceSession, where the plugin EP claims
the Fused nodes. Options (strings, ORT style, passed on to the EP as well): arch (default: the local
GPU, else the EP device's), cache_dir, disable (comma-separated pattern names), fp32_math ("tf32", the
default as in ONNX Runtime's CUDA EP, | "exact"), trust ("any": run a rewritten model's embedded kernels
unverified), verify ("1": compare one random run against the plain providers and warn on a mismatch).
A model that already carries kernels (`plus-ep rewrite` output) runs them when this installation trusts
them (plus_ep/trust.py); otherwise its fused nodes are rebuilt here from their function bodies and the
local build runs (recorded as trusted), unless trust is "any" or PLUS_EP_TRUST=any.
Without a usable GPU the original model goes to ONNX Runtime unchanged, on the other providers, with one
warning per process at ONNX Runtime's log severity (plus_ep/ortlog.py: `sess_options.log_severity_level`,
else `onnxruntime.set_default_logger_severity`). Without "PlusEP" it is exactly onnxruntime.InferenceSession.
"""
from __future__ import annotations

import logging

import onnx
import onnxruntime as ort

from . import options, ortlog
from .model_cache import rewritten_model
from .options import NAME

log = logging.getLogger("plus_ep")


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
    return (options.check(plus) if plus is not None else None), rest


def _trusted(model_bytes: bytes, opts: dict) -> bytes:
    """A model with embedded kernels: itself when trusted or rebuilt here byte-identical, else the local
    build of its fused nodes (plus_ep/trust.py). Unchanged when it carries none or trust is "any"."""
    if b"plus_plan" not in model_bytes:
        return model_bytes
    from . import config, rebuild, trust
    from .kernels.compile.cache import KernelCache
    if opts.get("trust") == "any" or trust.policy() == "any":
        return model_bytes
    model, what = rebuild.resolve(onnx.load_model_from_string(model_bytes),
                                cache=KernelCache(config.kernel_cache_dir(opts.get("cache_dir"))),
                                cache_dir=opts.get("cache_dir"))
    log.info("PlusEP: %s", what)
    return model.SerializeToString()


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
        from . import ep
        from .kernels.compile import nvrtc
        ep.register()                       # the plugin EP (raises on onnxruntime < 1.25)
        gpu = nvrtc.local_arch()
        arch = options.arch_for(plus) or gpu
        if arch is None:                    # an emulated / stand-in driver: the EP device's arch
            dev = next((d for d in ep.devices() if d["mode"] in ("gpu", "staging")), None)
            if dev and dev.get("compute_capability"):
                try:
                    arch = options.arch_for({}, cc=dev["compute_capability"])
                except ValueError as e:     # an arch PlusEP does not build for: run unfused
                    log.warning("PlusEP: %s; running the original model", e)
        ep_opts = dict(plus)
        providers = [(NAME, ep_opts) if ep_opts else NAME, *rest]
        if arch is None:                    # no usable GPU: the original runs
            if not ep.get_ep_devices():     # no PlusEP device: ONNX Runtime would refuse the name, once a session
                providers = providers[1:] or ["CPUExecutionProvider"]
                ortlog.emit(ortlog.WARNING, f"PlusEP: {ep.no_device_reason() or 'no usable NVIDIA GPU'}; the model "
                            "runs unfused on the other execution providers", sess_options, once="no-device")
            super().__init__(path_or_bytes, sess_options, providers, **kwargs)   # else the inert EP warns once
            self.plus_ep_arch = None
            return
        original = _model_bytes(path_or_bytes)
        model = rewritten_model(_trusted(original, plus), arch, plus)
        names = [p if isinstance(p, str) else p[0] for p in rest]
        if gpu and "CUDAExecutionProvider" in ort.get_available_providers() and "CUDAExecutionProvider" not in names:
            providers.insert(1, "CUDAExecutionProvider")
        super().__init__(model, sess_options, providers, **kwargs)
        self.plus_ep_arch = arch
        if options.verify(plus):
            self._verify(original, [p for p in providers if (p if isinstance(p, str) else p[0]) != NAME])

    def _verify(self, original: bytes, providers):
        import numpy as np
        from .feeds import sample_inputs
        plain = ort.InferenceSession(original, providers=providers)
        feeds = sample_inputs(onnx.load_model_from_string(original), batch=2, seq=16)
        want, got = plain.run(None, feeds), self.run(None, feeds)
        worst = max(float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
                    if np.asarray(a).size else 0.0 for a, b in zip(want, got))
        (log.info if worst <= 1e-3 else log.warning)("PlusEP verify: max |diff| vs plain providers = %.3g", worst)
        self.plus_ep_verify_max_diff = worst
