"""The rewritten-model cache: `<cache root>/models/<key>.onnx` plus `<key>.json` (its size and sha256,
written last). `plus_ep.InferenceSession` (and the plugin EP) look a model up here before rewriting.

    key = model_key(model_bytes, "sm_90a", disable=("gemm",), fp32_math="exact", warehouse=wh)
    data = read(entry(key, cache_dir))        # None on a miss; a damaged entry is removed
    store(entry(key, cache_dir), data)        # atomic; OSError when the folder cannot be written

The key covers everything the rewritten model depends on: the model's bytes, the arch, the options,
PlusEP's version, the digest of PlusEP's own sources (`config.source_digest()`, so a changed rewriter
or template never returns a stale model) and the loaded warehouse (`Warehouse.digest()`: pattern
names, order, options and the source of every pattern, user patterns included).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import warnings

from . import config
from .kernels.build.cache import package_version
from .kernels.build.files import write_atomic
from .kernels.target import FP32_MATH_DEFAULT

log = logging.getLogger("plus_ep")
_warned: set = set()


def model_key(model_bytes: bytes, arch: str, disable=(), fp32_math: str = FP32_MATH_DEFAULT, warehouse=None) -> str:
    """sha256 naming the rewritten model. `warehouse`: the loaded Warehouse (default_warehouse())."""
    if warehouse is None:
        from .warehouse import default_warehouse
        warehouse = default_warehouse()
    h = hashlib.sha256()
    for part in (f"arch {arch}", "disable " + ",".join(sorted(disable)), f"fp32_math {fp32_math}",
                 f"plus_ep {package_version()}", "sources " + config.source_digest(),
                 "warehouse " + warehouse.digest()):
        h.update(part.encode() + b"\n")
    h.update(b"model\n" + hashlib.sha256(model_bytes).digest())
    return h.hexdigest()


def entry(key: str, cache_dir=None) -> str:
    """Path of the entry's model file; `cache_dir` is the cache root (a session's `cache_dir` option)."""
    return os.path.join(config.model_cache_dir(cache_dir), f"{key}.onnx")


def read(path: str) -> bytes | None:
    """The cached model, or None. An entry whose model does not match its .json is removed."""
    meta_path = path[:-len(".onnx")] + ".json"
    try:
        with open(meta_path) as f:
            meta = json.load(f)
        with open(path, "rb") as f:
            data = f.read()
    except (FileNotFoundError, NotADirectoryError):
        return None     # absent, or its store did not finish (the .json goes last)
    except (OSError, ValueError) as exc:
        meta, data = None, exc
    if (not isinstance(meta, dict) or isinstance(data, Exception) or meta.get("size") != len(data)
            or meta.get("sha256") != hashlib.sha256(data).hexdigest()):
        log.warning("PlusEP: removing damaged model cache entry %s; it will be rebuilt", path)
        for p in (meta_path, path):
            try:
                os.remove(p)
            except OSError:
                pass
        return None
    return data


def store(path: str, data: bytes) -> None:
    """Store `data` at `path` (model first, .json last, each atomically). On OSError (a folder that
    cannot be written: read only, disk full) nothing partial stays behind and the error is raised."""
    meta = json.dumps({"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}).encode()
    written = []
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        for target, blob in ((path, data), (path[:-len(".onnx")] + ".json", meta)):
            write_atomic(target, blob)
            written.append(target)
    except OSError:
        for p in written:       # no partial entry: a model without its .json is rebuilt anyway
            try:
                os.remove(p)
            except OSError:
                pass
        raise


def _warn_once(msg):
    if msg not in _warned:
        _warned.add(msg)
        warnings.warn(msg, RuntimeWarning, stacklevel=3)
        log.info(msg)


def rewritten_model(model_bytes: bytes, arch: str, opts: dict) -> bytes:
    """The rewritten model with kernels for `arch`, from the model cache (this module) or
    built now. Kernels go to the kernel cache under the same root (`cache_dir` option, else
    $PLUS_EP_CACHE_DIR, else ~/.cache/plus_ep: see plus_ep/config.py). A cache folder that cannot be
    written (read only, disk full) warns once and the model is built without being stored."""
    from .kernels.build.cache import KernelCache
    from .rewrite import rewrite_detailed
    from .warehouse import default_warehouse
    from . import options
    disable, fp32_math = options.disabled(opts), options.fp32_math(opts)
    warehouse = default_warehouse()
    key = model_key(model_bytes, arch, disable, fp32_math, warehouse)
    path = entry(key, opts.get("cache_dir"))
    cached = read(path)
    if cached is not None:
        log.info("PlusEP: rewritten model from cache %s", path)
        return cached
    result = rewrite_detailed(model_bytes, warehouse=warehouse, disable=disable, archs=[arch], fp32_math=fp32_math,
                              cache=KernelCache(config.kernel_cache_dir(opts.get("cache_dir"))))
    data = result.model.SerializeToString()
    try:
        store(path, data)
    except OSError as exc:
        _warn_once(f"PlusEP: cannot store the rewritten model in {os.path.dirname(path)} "
                   f"({exc.strerror or exc}); it is rebuilt by the next session")
    return data
