"""Content-keyed disk cache of compiled kernels.

    cache = KernelCache()                      # <cache root>/kernels (plus_ep.config: $PLUS_EP_CACHE_DIR/kernels)
    r = cache.build(source, "sm_90", name="gemm_k1.cu")   # compiles once, then loads
    r.cached, cache.stats                      # True on a hit; CacheStats(hits=.., misses=.., ...)

The key hashes every input of the binary: the cache schema, the PlusEP version, the NVRTC version
(and its wheel's patch level), the arch, the rendered source (its code: the `//` comment header that
names the node is left out, kernels/compile/sources.py), the contents of every header it can
include (`nvrtc.header_digest`) and the options. An entry is a folder

    <root>/<key[:2]>/<key>/kernel.cubin   the image
                          kernel.ptx     the PTX NVRTC assembled it from (packed beside the cubin)
                          kernel.cu      the source, readable beside it
                          meta.json      sha256 and size of the cubin, resources, arch, options, ... (written last)

Every file is written to a temporary name in the same folder and moved into place with os.replace, and
meta.json goes last, so a reader sees a whole entry or none. `get` checks the cubin against meta.json
and its SASS arch (the ELF header's SM number) against the entry's arch; a damaged entry, or one
holding another arch's cubin, is logged, removed and rebuilt. A cache folder that cannot be written
(read-only, disk full) logs one warning per KernelCache and compiles without storing; a failed store
removes what it wrote, so no partial entry stays behind. `build` is try-load -> lock (flock on
<root>/locks/<key>.lock, between processes and threads) -> try-load -> compile -> put, so concurrent
builders of one kernel compile it once. With PLUS_EP_ASSERT_CACHED=1 a miss raises CacheMiss instead
of compiling: tests use it to prove a warm start compiles nothing.

Size limit (PLUS_EP_KERNEL_CACHE_LIMIT, default 2 GiB; plus_ep/config.py): a hit marks its entry used
(meta.json's modification time, touched at most once a minute), and past the limit the entries used
longest ago are removed, down to 90% of it (`evict`, run after stores at most every few seconds and at
the end of `compile_all`). Eviction takes a non-blocking flock on <root>/locks/evict.lock, so one process
evicts at a time; it removes an entry the way `get` removes a damaged one (rename, then delete), so a
concurrent reader sees the whole entry or a miss and compiles again; a folder without meta.json is another
process's store in progress and is left alone unless it is an hour old. `lru_evict` is the one eviction
rule, shared with the rewritten-model cache (plus_ep/model_cache.py).

Renders: `<root>/renders/<key[:2]>/<key>.json` holds a subgraph's rendered plan and sources
(kernels/compile/render_store.py, keyed by the subgraph's canonical form, the target, the pattern and
PlusEP's own sources), so a warm rewrite in a new process renders nothing. They are entries of this cache:
`entries()` lists them (a file each, used = its modification time), so the size limit, `evict` and
`clear` (and `plus-ep cache info|trim|clear kernels`) cover them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import pathlib
import shutil
import struct
import threading
import time
import uuid
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from ... import config
from . import cubin as cubin_reader
from . import nvrtc, sources
from .files import write_atomic
from .nvrtc import CompileResult, Resources

log = logging.getLogger("plus_ep.kernels")

SCHEMA = 2   # 2: entries hold kernel.ptx
ENV_ASSERT_CACHED = "PLUS_EP_ASSERT_CACHED"

CUBIN, PTX, SOURCE, META = "kernel.cubin", "kernel.ptx", "kernel.cu", "meta.json"
RENDERS, RENDER_SUFFIX = "renders", ".json"     # <root>/renders/../<key>.json: the stored renders (render_store.py)


EVICT_TO = 0.9              # eviction goes down to this share of the limit
EVICT_EVERY = 5.0           # seconds between the eviction checks `build` runs after a store
TOUCH_EVERY = 60.0          # a hit refreshes its entry's last-used time when it is older than this
STALE_SECONDS = 3600.0      # an entry folder without meta.json this old is a dead writer's leftover


@dataclass
class CacheEntry:
    """One cache entry for eviction: its name, files or folder, bytes and last use (epoch seconds)."""
    name: str
    paths: tuple
    size: int
    used: float


def tree_size(path: pathlib.Path) -> int:
    """Bytes of the files under `path` (a file: its size); vanished files count 0."""
    try:
        if path.is_file():
            return path.stat().st_size
        total = 0
        for dirpath, _, files in os.walk(path):
            for f in files:
                try:
                    total += os.lstat(os.path.join(dirpath, f)).st_size
                except OSError:
                    pass
        return total
    except OSError:
        return 0


def file_entries(folder: pathlib.Path, suffix: str) -> list[CacheEntry]:
    """The files `<folder>/<2 chars>/<name><suffix>` as entries (used = modification time): the stored
    renders (RENDERS, render_store.py)."""
    out = []
    if not folder.is_dir():
        return out
    for shard in folder.iterdir():
        if len(shard.name) != 2 or not shard.is_dir():
            continue
        for f in shard.iterdir():
            if f.suffix != suffix or f.name.startswith("."):
                continue
            try:
                st = f.stat()
            except OSError:
                continue
            out.append(CacheEntry(f.name, (f,), st.st_size, st.st_mtime))
    return out


def lru_evict(entries, limit: int, remove, keep=()) -> list:
    """The one eviction rule: when the entries' total exceeds `limit` bytes (> 0), `remove(entry)` the least
    recently used ones (not those named in `keep`) until the total is at most EVICT_TO x limit. Returns
    the removed entries."""
    entries = list(entries)
    total = sum(e.size for e in entries)
    if limit <= 0 or total <= limit:
        return []
    target, removed = int(limit * EVICT_TO), []
    for e in sorted(entries, key=lambda e: (e.used, e.name)):
        if total <= target:
            break
        if e.name in keep:
            continue
        remove(e)
        total -= e.size
        removed.append(e)
    return removed


@contextmanager
def try_lock(path: pathlib.Path):
    """A non-blocking exclusive flock on `path`: yields True when taken, False when another process
    holds it or the folder cannot be written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield False
        return
    try:
        try:
            import fcntl
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except ImportError:  # pragma: no cover - not POSIX
            pass
        except OSError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


class CacheMiss(RuntimeError):
    """A kernel was not in the cache while PLUS_EP_ASSERT_CACHED=1 forbade compiling it."""


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0      # lookups that found nothing (compiled, or raised CacheMiss)
    compiled: int = 0    # NVRTC compiles this cache ran
    corrupt: int = 0     # damaged entries found and removed
    unstored: int = 0    # compiled kernels that could not be stored (read-only or full cache folder)


def assert_cached() -> bool:
    return config.flag(ENV_ASSERT_CACHED)


def package_version() -> str:
    """PlusEP's version from the installed distribution metadata ("dev" when not installed).
    Read from metadata rather than `plus_ep.__version__`: kernels never imports plus_ep."""
    try:
        from importlib.metadata import version
        return version("plus-ep")
    except Exception:
        return "dev"


def _include_dirs_in(options) -> list[str]:
    dirs = []
    for o in options:
        if o.startswith("--include-path="):
            dirs.append(o[len("--include-path="):])
        elif o.startswith("-I") and len(o) > 2:
            dirs.append(o[2:])
    return dirs


def cache_key(source: str | bytes, arch, options=()) -> str:
    """sha256 naming the binary that compiling `source` for `arch` with `options` gives."""
    arch = nvrtc.parse_arch(arch)
    options = [str(o) for o in options]
    fixed = [o for o in nvrtc.base_options(arch) if not o.startswith("-I")]  # -I paths: contents hashed below
    code = sources.body(source)             # the comment header (it names the node) is not code
    src = code if isinstance(code, bytes) else code.encode()
    h = hashlib.sha256()
    for part in (f"schema {SCHEMA}", f"plus_ep {package_version()}", nvrtc.compiler_id(), f"arch {arch}",
                 "headers " + nvrtc.header_digest(_include_dirs_in(options)),
                 "options " + json.dumps(fixed + options)):
        h.update(part.encode() + b"\n")
    h.update(b"source\n" + hashlib.sha256(src).digest())
    return h.hexdigest()


class KernelCache:
    def __init__(self, root: str | os.PathLike | None = None):
        self.root = pathlib.Path(root).expanduser() if root is not None else config.kernel_cache_dir()
        self.stats = CacheStats()
        self._stats_lock = threading.Lock()
        self._warned_unwritable = False
        self._last_evict = 0.0

    def __repr__(self) -> str:
        return f"KernelCache({str(self.root)!r}, {self.stats})"

    def _count(self, **delta: int) -> None:
        with self._stats_lock:
            for k, v in delta.items():
                setattr(self.stats, k, getattr(self.stats, k) + v)

    # ------------------------------------------------------------------------------- layout
    def key(self, source: str | bytes, arch, options=()) -> str:
        return cache_key(source, arch, options)

    def path(self, key: str) -> pathlib.Path:
        return self.root / key[:2] / key

    @contextmanager
    def lock(self, key: str):
        """Exclusive inter-process (and inter-thread) lock for building `key`."""
        lock_dir = self.root / "locks"
        lock_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_dir / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                import fcntl
            except ImportError:  # pragma: no cover - not POSIX: builds may race, entries stay atomic
                fcntl = None
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the flock

    # --------------------------------------------------------------------------- read / write
    def get(self, key: str, arch=None, _retry: bool = True) -> CompileResult | None:
        """The cached result for `key`, or None. A damaged entry (or one whose cubin is SASS for another
        arch than the entry's, or than `arch` when given) is logged, removed and reported as None."""
        t0 = time.perf_counter()
        entry = self.path(key)
        try:
            meta_text = (entry / META).read_text()
        except (FileNotFoundError, NotADirectoryError):
            return None  # absent, or still being written (meta.json goes last)
        except OSError as e:   # unreadable (permissions, I/O error): use it as a miss, leave it be
            log.debug("kernel cache: cannot read %s (%s)", entry / META, e)
            return None
        try:
            meta = json.loads(meta_text)
            if meta.get("schema") != SCHEMA or meta.get("key") != key:
                raise ValueError("meta.json does not describe this key")
            try:
                cubin = (entry / CUBIN).read_bytes()
            except FileNotFoundError:
                # the entry may have been removed and stored again between the two reads: look again
                if _retry:
                    return self.get(key, arch, _retry=False)
                if not (entry / META).exists():
                    return None
                raise
            if len(cubin) != meta["cubin"]["size"]:
                raise ValueError(f"cubin is {len(cubin)} bytes, meta.json says {meta['cubin']['size']}")
            if hashlib.sha256(cubin).hexdigest() != meta["cubin"]["sha256"]:
                raise ValueError("cubin sha256 does not match meta.json")
            want = nvrtc.parse_arch(arch) if arch is not None else nvrtc.parse_arch(meta["arch"])
            if nvrtc.parse_arch(meta["arch"]) != want:
                raise ValueError(f"meta.json says the entry is for {meta['arch']}, not {want}")
            got = cubin_reader.cubin_arch(cubin)
            # the SM number decides whether the image loads; sm_90 vs sm_90a SASS both run on 9.0
            if got.rstrip("a") != want.rstrip("a"):
                raise ValueError(f"cubin is SASS for {got}, the entry is for {want}")
            cubin_reader.read_cubin(cubin)  # its section table and symbols are all there
            try:
                ptx = (entry / PTX).read_bytes()
            except FileNotFoundError:   # removed and stored again between the reads, as above
                if _retry:
                    return self.get(key, arch, _retry=False)
                if not (entry / META).exists():
                    return None
                raise
            if hashlib.sha256(ptx).hexdigest() != meta["ptx"]["sha256"]:
                raise ValueError("kernel.ptx sha256 does not match meta.json")
            resources = {fn: Resources(**r) for fn, r in meta["resources"].items()}
        except (OSError, ValueError, KeyError, TypeError, IndexError, struct.error) as e:
            log.warning("kernel cache: removing damaged entry %s (%s); it will be rebuilt", entry, e)
            self._count(corrupt=1)
            self._remove(entry)
            return None
        self._touch(entry / META)
        return CompileResult(cubin=cubin, log=meta.get("log", ""), resources=resources,
                             seconds=time.perf_counter() - t0, cached=True, arch=meta["arch"], key=key,
                             ptx=ptx.decode())

    @staticmethod
    def _touch(meta: pathlib.Path) -> None:
        """Mark the entry used now (its meta.json's mtime), when the mark is older than TOUCH_EVERY."""
        try:
            if time.time() - meta.stat().st_mtime > TOUCH_EVERY:
                os.utime(meta)
        except OSError:     # a read-only cache: it is never evicted by this process either
            pass

    def _remove(self, entry: pathlib.Path) -> None:
        """Remove an entry folder (or a stored render's file, render_store.py)."""
        trash = entry.with_name(f".trash-{entry.name}-{uuid.uuid4().hex[:8]}")
        try:
            os.rename(entry, trash)  # atomic: readers see the entry or nothing
        except OSError:
            return
        if trash.is_dir():
            shutil.rmtree(trash, ignore_errors=True)
        else:
            trash.unlink(missing_ok=True)

    def put(self, key: str, source: str | bytes, result: CompileResult, name: str = "plus_kernel.cu",
            options=()) -> pathlib.Path:
        """Store `result` (compiled from `source`) under `key`; returns the entry folder."""
        entry = self.path(key)
        entry.mkdir(parents=True, exist_ok=True)
        src = source if isinstance(source, bytes) else source.encode()
        meta = {
            "schema": SCHEMA,
            "key": key,
            "name": name,
            "arch": result.arch,
            "options": [str(o) for o in options],
            "nvrtc": list(nvrtc.nvrtc_version()),
            "compiler": nvrtc.compiler_id(),
            "plus_ep": package_version(),
            "cubin": {"sha256": hashlib.sha256(result.cubin).hexdigest(), "size": len(result.cubin)},
            "ptx": {"sha256": hashlib.sha256(result.ptx.encode()).hexdigest(), "size": len(result.ptx.encode())},
            "resources": {fn: dataclasses.asdict(r) for fn, r in result.resources.items()},
            "compile_seconds": round(result.seconds, 4),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "log": result.log,
        }
        try:
            write_atomic(entry / CUBIN, result.cubin)
            write_atomic(entry / PTX, result.ptx.encode())
            write_atomic(entry / SOURCE, src)
            write_atomic(entry / META, (json.dumps(meta, indent=1, sort_keys=True) + "\n").encode())
        except BaseException:
            # no half entry stays behind (a cubin without its meta.json, or beside an older one)
            self._remove(entry)
            try:
                entry.parent.rmdir()   # the <key[:2]> folder, when this was its only entry
            except OSError:
                pass
            raise
        return entry

    def _unwritable(self, exc: OSError) -> None:
        """One warning per cache: the folder cannot be written, kernels compile without being stored."""
        with self._stats_lock:
            self.stats.unstored += 1
            first, self._warned_unwritable = not self._warned_unwritable, True
        if first:
            log.warning("kernel cache %s cannot be written (%s); compiling kernels without caching them",
                        self.root, exc.strerror or exc)

    # ---------------------------------------------------------------------------------- build
    def build(self, source: str | bytes, arch, options=(), name: str = "plus_kernel.cu") -> CompileResult:
        """The compiled kernel, from the cache or compiled now (and stored). Raises CompileError, or
        CacheMiss when PLUS_EP_ASSERT_CACHED=1 and it is not cached."""
        arch = nvrtc.parse_arch(arch)
        options = tuple(str(o) for o in options)
        key = self.key(source, arch, options)
        hit = self.get(key, arch)
        if hit is None and assert_cached():
            self._count(misses=1)
            raise CacheMiss(f"kernel {name} ({arch}) is not in the kernel cache {self.root} "
                            f"(key {key}) and {ENV_ASSERT_CACHED}=1 forbids compiling it")
        if hit is None:
            with ExitStack() as stack:
                try:
                    stack.enter_context(self.lock(key))
                    locked = True
                except OSError as e:   # read-only or full cache folder: compile, do not store
                    self._unwritable(e)
                    locked = False
                if locked:
                    hit = self.get(key, arch)  # another process or thread may have built it while we waited
                    if hit is None and self.path(key).exists():
                        self._remove(self.path(key))  # a dead writer's leftovers (no meta.json): start clean
                if hit is None:
                    self._count(misses=1, compiled=1)
                    result = nvrtc.compile_cubin(source, arch, name=name, options=options)
                    result.key = key
                    if locked:
                        try:
                            self.put(key, source, result, name=name, options=options)
                        except OSError as e:
                            self._unwritable(e)
                        else:
                            if time.monotonic() - self._last_evict > EVICT_EVERY:
                                self.evict(keep=(key,))
                    log.debug("kernel cache: compiled %s (%s) in %.2fs -> %s", name, arch, result.seconds, key)
                    return result
        self._count(hits=1)
        return hit

    # ------------------------------------------------------------------------------- size limit
    def entries(self) -> list[CacheEntry]:
        """Every entry (a dead writer's leftover folder counts as used at time 0), the stored renders
        (<root>/renders, render_store.py) included; not the lock files."""
        out = []
        if not self.root.is_dir():
            return out
        out += file_entries(self.root / RENDERS, RENDER_SUFFIX)
        now = time.time()
        for shard in self.root.iterdir():
            if len(shard.name) != 2 or not shard.is_dir():
                continue
            for entry in shard.iterdir():
                if entry.name.startswith(".trash-"):
                    continue
                try:
                    used = (entry / META).stat().st_mtime
                except OSError:
                    try:
                        if now - entry.stat().st_mtime < STALE_SECONDS:
                            continue            # another process may be storing it right now
                    except OSError:
                        continue
                    used = 0.0
                out.append(CacheEntry(entry.name, (entry,), tree_size(entry), used))
        return out

    def evict(self, limit: int | None = None, keep=()) -> list[CacheEntry]:
        """Apply the size limit (default PLUS_EP_KERNEL_CACHE_LIMIT): least recently used entries first,
        down to EVICT_TO x limit. One process at a time (a non-blocking lock: a busy lock skips)."""
        self._last_evict = time.monotonic()
        limit = config.cache_limit(config.KERNELS) if limit is None else limit
        if limit <= 0 or not self.root.is_dir():
            return []
        with try_lock(self.root / "locks" / "evict.lock") as got:
            if not got:
                return []
            removed = lru_evict(self.entries(), limit, lambda e: self._remove(e.paths[0]), keep)
        if removed:
            log.info("kernel cache: removed %d least recently used entries (%.1f MiB) to stay under %.1f MiB",
                     len(removed), sum(e.size for e in removed) / 2**20, limit / 2**20)
        return removed

    def clear(self) -> None:
        """Remove every entry (and lock file) under the root."""
        if self.root.is_dir():
            for child in self.root.iterdir():
                if child.is_dir():
                    shutil.rmtree(child, ignore_errors=True)
