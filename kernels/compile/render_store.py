"""Renders kept on disk, beside the compiled kernels: a warm rewrite in a new process renders nothing.

    store = RenderStore.beside(kernel_cache)          # <kernel cache>/renders
    rd = store.get(key)                              # a Rendered, or None
    store.put(key, rd)

`kernels/render.py` keeps renders in memory by the subgraph's canonical form (`render_key`); this store
keeps them across processes under a key that adds everything a render depends on besides the subgraph:
the store's schema, PlusEP's version, the digest of PlusEP's own sources (`config.source_digest()`: any
edit of a renderer, template or helper gives new keys), the pattern's definition, check and roles finder
(`warehouse.registry.pattern_digest`, user patterns included) and the versions of sympy and numpy (their
printing and arithmetic shape the generated text). A stale render can therefore not be returned; an
entry that no longer matches its key is simply never read again and leaves by the kernel cache's size
limit.

An entry is one JSON file `<root>/<key[:2]>/<key>.json` (no pickle: loading it runs no code), written
atomically (kernels/compile/files.py). It holds the render as tagged JSON (tuples and the plan's dataclasses
named, so it loads back equal in value and type; a render that does not is not stored) and its own key;
a file that does not parse or names another key is removed and the subgraph rendered again; a folder that
cannot be written (a read-only deploy cache) keeps nothing, said once per process at INFO. A store that
another user could change (files.safe_path, the trust manifest's rule) is neither read nor written, said
once at WARNING: a render's source is what the rewriter compiles and records as trusted. A hit marks
the file used (its modification time, at most once a minute). The entries are kernel cache entries for
`plus-ep cache info|clear|trim` and the size limit (PLUS_EP_KERNEL_CACHE_LIMIT): KernelCache.entries()
lists them beside the compiled kernels, least recently used first out.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import os
import pathlib
import time

from ... import config
from .cache import RENDER_SUFFIX, RENDERS, file_entries, package_version
from .files import safe_path, write_atomic

log = logging.getLogger("plus_ep.kernels")

SCHEMA = 1
FOLDER = RENDERS
SUFFIX = RENDER_SUFFIX
_UNWRITABLE: set = set()        # roots that could not be written (said once per process)
_UNSAFE: set = set()            # roots another user could change (said once per process)


@functools.lru_cache(maxsize=1)
def _environment() -> bytes:
    """The key's part that is the same for every render of this process."""
    import numpy
    import sympy
    return (f"render store {SCHEMA}\nplus_ep {package_version()}\nsources {config.source_digest()}\n"
            f"sympy {sympy.__version__}\nnumpy {numpy.__version__}\n").encode()


def store_key(render_key: str, pattern) -> str:
    """sha256 naming a render on disk: the in-memory key (kernels/render.py: render_key) plus what a
    render depends on besides the subgraph (see above)."""
    from ...warehouse.registry import pattern_digest
    h = hashlib.sha256(_environment())
    h.update(b"pattern " + pattern_digest(pattern) + b"\nrender " + render_key.encode())
    return h.hexdigest()


# ---- tagged JSON: the render's own types, nothing else -----------------------------------------------
def _classes() -> dict:
    from ..render import Rendered, Variant
    from ..wire.plan import Launch, Plan, Route
    return {c.__name__: c for c in (Rendered, Variant, Plan, Route, Launch)}


def encode(x, classes=None):
    """A JSON-able form of `x`: dataclasses of the render (by name) and tuples tagged; TypeError for
    anything else than str, int, float, bool, None, lists and those."""
    classes = classes or _classes()
    if x is None or type(x) in (str, int, float, bool):
        return x
    if type(x) is list:
        return [encode(v, classes) for v in x]
    if type(x) is tuple:
        return {"@t": [encode(v, classes) for v in x]}
    name = type(x).__name__
    if classes.get(name) is type(x):
        return {"@": name, "f": {f.name: encode(getattr(x, f.name), classes) for f in dataclasses.fields(x)}}
    raise TypeError(f"a render holds a {type(x).__name__}, which the render store does not keep")


def decode(x, classes=None):
    classes = classes or _classes()
    if isinstance(x, list):
        return [decode(v, classes) for v in x]
    if isinstance(x, dict):
        if "@t" in x:
            return tuple(decode(v, classes) for v in x["@t"])
        return classes[x["@"]](**{k: decode(v, classes) for k, v in x["f"].items()})
    return x


class RenderStore:
    def __init__(self, root: str | os.PathLike):
        self.root = pathlib.Path(root)
        self.hits = self.stores = 0

    @classmethod
    def beside(cls, kernel_cache) -> "RenderStore":
        """The store of a KernelCache (its root's `renders` folder)."""
        return cls(pathlib.Path(kernel_cache.root) / FOLDER)

    @staticmethod
    def key(render_key: str, pattern) -> str:
        return store_key(render_key, pattern)

    def path(self, key: str) -> pathlib.Path:
        return self.root / key[:2] / f"{key}{SUFFIX}"

    def unsafe(self) -> str | None:
        """Why this store may not be used (files.safe_path: another user could change what it
        returns, and a render's source is what gets compiled and trusted), said once per root."""
        why = safe_path("render store", self.root)
        if why and self.root not in _UNSAFE:
            _UNSAFE.add(self.root)
            log.warning("%s; renders are neither read from it nor kept", why)
        return why

    def get(self, key: str):
        """The stored render, or None (absent, damaged: then removed, or an unsafe store)."""
        if self.unsafe():
            return None
        path = self.path(key)
        try:
            text = path.read_bytes()
        except OSError:
            return None
        try:
            entry = json.loads(text)
            if entry.get("key") != key:
                raise ValueError(f"holds key {entry.get('key')!r}")
            rd = decode(entry["render"])
        except Exception as exc:          # damaged or foreign: render again
            log.warning("render store: removing damaged entry %s (%s); it will be rendered again", path, exc)
            try:
                os.remove(path)
            except OSError:
                pass
            return None
        try:
            if time.time() - path.stat().st_mtime > 60.0:
                os.utime(path)            # used now (the size limit removes the least recently used first)
        except OSError:
            pass
        self.hits += 1
        return rd

    def put(self, key: str, rendered) -> bool:
        """Store `rendered` under `key`; False when it is not kept (a type the store does not hold, a
        render that does not load back equal, or a folder that cannot be written: one warning)."""
        if self.unsafe():
            return False
        try:
            data = {"key": key, "render": encode(rendered)}
        except TypeError as exc:
            log.debug("render store: not storing %s: %s", key, exc)
            return False
        text = json.dumps(data, separators=(",", ":"))
        if repr(decode(json.loads(text)["render"])) != repr(rendered):
            log.debug("render store: not storing %s: it does not load back equal", key)
            return False
        try:
            path = self.path(key)
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, text.encode())
        except OSError as exc:     # a read-only kernel cache (a deploy folder): slower, not wrong
            if self.root not in _UNWRITABLE:
                _UNWRITABLE.add(self.root)
                log.info("render store %s cannot be written (%s); renders are not kept", self.root,
                         exc.strerror or exc)
            return False
        self.stores += 1
        return True

    def entries(self) -> list:
        """Every stored render as a kernels.compile.cache.CacheEntry (for info, trim and the size limit)."""
        return file_entries(self.root, SUFFIX)
