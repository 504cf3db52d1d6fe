"""The rewritten-model cache: `<cache root>/models/<key>.onnx` plus `<key>.json` (its size and sha256,
written last). `plus_ep.InferenceSession` (and the plugin EP) look a model up here before rewriting.

    key = model_key(model_bytes, "sm_90a", disable=("gemm",), fp32_math="exact", warehouse=wh)
    data = read(entry(key, cache_dir))        # None on a miss; a damaged entry is removed
    store(entry(key, cache_dir), data)        # atomic; OSError when the folder cannot be written

A hit is used only when every fused node of the cached model is in the trust manifest (`untrusted`):
the plugin EP's planner hands its groups to the launcher without the launcher's own trust check, so
whoever can write the cache folder must not decide what runs; an entry that fails is rewritten.

The key covers everything the rewritten model depends on: the model's bytes, the arch, the options,
PlusEP's version, the digest of PlusEP's own sources (`config.source_digest()`, so a changed rewriter
or template never returns a stale model) and the loaded warehouse (`Warehouse.digest()`: pattern
names, order, options and the source of every pattern, user patterns included).

Size limit (PLUS_EP_MODEL_CACHE_LIMIT, default 8 GiB; plus_ep/config.py): a hit marks its entry used
(the .json's modification time) and a store applies the limit with the kernel cache's rule
(`kernels/compile/cache.py: lru_evict`, least recently used first, the entry just stored kept), one
process at a time (a non-blocking flock on `<models>/.evict.lock`). An entry is removed .json first, so
a concurrent reader sees a miss (it rebuilds), never a model without its check.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import pathlib
import time
import warnings

from . import config
from .kernels.compile.cache import TOUCH_EVERY, CacheEntry, lru_evict, package_version, try_lock
from .kernels.compile.files import write_atomic
from .kernels.target import FP32_MATH_DEFAULT

log = logging.getLogger("plus_ep")
_warned: set = set()


def model_key(model_bytes: bytes, arch: str, disable=(), fp32_math: str = FP32_MATH_DEFAULT, warehouse=None,
              shape_reads: bool = True) -> str:
    """sha256 naming the rewritten model. `warehouse`: the loaded Warehouse (default_warehouse());
    shape_reads: rewrite_detailed's (False: the plugin EP planner's rewrite)."""
    if warehouse is None:
        from .warehouse import default_warehouse
        warehouse = default_warehouse()
    h = hashlib.sha256()
    for part in (f"arch {arch}", "disable " + ",".join(sorted(disable)), f"fp32_math {fp32_math}",
                 f"plus_ep {package_version()}", "sources " + config.source_digest(),
                 "warehouse " + warehouse.digest()) + (() if shape_reads else ("shape_reads off",)):
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
    try:                # mark it used (the least recently used entries go first past the size limit)
        if time.time() - os.stat(meta_path).st_mtime > TOUCH_EVERY:
            os.utime(meta_path)
    except OSError:
        pass
    return data


def entries(cache_dir=None) -> list[CacheEntry]:
    """The model cache's entries (model + .json), by key; an entry without its .json counts as used at 0."""
    folder = config.model_cache_dir(cache_dir)
    by_key: dict = {}
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    for name in names:
        stem, ext = os.path.splitext(name)
        if ext in (".onnx", ".json") and not name.startswith("."):
            by_key.setdefault(stem, []).append(folder / name)
    out = []
    for key, paths in by_key.items():
        size, used = 0, 0.0
        for p in paths:
            try:
                st = p.stat()
            except OSError:
                continue
            size += st.st_size
            if p.suffix == ".json":
                used = st.st_mtime
        # the .json first: a reader then misses the entry instead of reading a model without its check
        out.append(CacheEntry(key, tuple(sorted(paths, key=lambda p: p.suffix != ".json")), size, used))
    return out


def evict(cache_dir=None, limit: int | None = None, keep=()) -> list[CacheEntry]:
    """Apply the size limit (default PLUS_EP_MODEL_CACHE_LIMIT) to the model cache; returns what went."""
    limit = config.cache_limit(config.MODELS) if limit is None else limit
    folder = config.model_cache_dir(cache_dir)
    if limit <= 0 or not folder.is_dir():
        return []

    def remove(e):
        for p in e.paths:
            try:
                os.remove(p)
            except OSError:
                pass
    with try_lock(pathlib.Path(folder) / ".evict.lock") as got:
        if not got:
            return []
        removed = lru_evict(entries(cache_dir), limit, remove, keep)
    if removed:
        log.info("PlusEP: removed %d least recently used rewritten models (%.1f MiB) from %s to stay under %.1f MiB",
                 len(removed), sum(e.size for e in removed) / 2**20, folder, limit / 2**20)
    return removed


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


def untrusted(data: bytes, cache_dir=None) -> str | None:
    """Why a cached rewritten model's kernels are not what this installation built (None when every
    kernel node is in the trust manifest, plus_ep/trust.py): the plugin EP's planner hands its groups to
    the launcher unchecked, so the cache folder must not decide what runs."""
    import onnx
    from . import trust
    try:
        nodes = trust.status(onnx.load_model_from_string(data), cache_dir)
    except Exception as exc:  # noqa: BLE001 - a model that does not parse is not trusted either
        return f"it does not load ({exc})"
    bad = [n for n in nodes if n.how != "manifest"]
    return None if not bad else (f"{len(bad)} of {len(nodes)} fused nodes are not in the trust manifest "
                                 f"({bad[0].node}: {bad[0].why})")


def _warn_once(msg):
    if msg not in _warned:
        _warned.add(msg)
        warnings.warn(msg, RuntimeWarning, stacklevel=3)
        log.info(msg)


def rewritten_model(model_bytes: bytes, arch: str, opts: dict, shape_reads: bool = True) -> bytes:
    """The rewritten model with kernels for `arch`, from the model cache (this module) or
    built now (shape_reads: rewrite_detailed's). Kernels go to the kernel cache under the same root
    (`cache_dir` option, else $PLUS_EP_CACHE_DIR, else ~/.cache/plus_ep: see plus_ep/config.py). A cache
    folder that cannot be written (read only, disk full) warns once and the model is built without being
    stored."""
    from .kernels.compile.cache import KernelCache
    from .rewrite import rewrite_detailed
    from .warehouse import default_warehouse
    from . import options
    disable, fp32_math = options.disabled(opts), options.fp32_math(opts)
    warehouse = default_warehouse()
    key = model_key(model_bytes, arch, disable, fp32_math, warehouse, shape_reads)
    path = entry(key, opts.get("cache_dir"))
    cached = read(path)
    if cached is not None:
        why = untrusted(cached, opts.get("cache_dir"))
        if why is None:
            log.info("PlusEP: rewritten model from cache %s", path)
            return cached
        _warn_once(f"PlusEP: not using the cached rewritten model {path}: {why}; rewriting it")
    result = rewrite_detailed(model_bytes, warehouse=warehouse, disable=disable, archs=[arch], fp32_math=fp32_math,
                              shape_reads=shape_reads, cache=KernelCache(config.kernel_cache_dir(opts.get("cache_dir"))))
    data = result.model.SerializeToString()
    try:
        store(path, data)
    except OSError as exc:
        _warn_once(f"PlusEP: cannot store the rewritten model in {os.path.dirname(path)} "
                   f"({exc.strerror or exc}); it is rebuilt by the next session")
    else:
        evict(opts.get("cache_dir"), keep=(key,))
    return data
