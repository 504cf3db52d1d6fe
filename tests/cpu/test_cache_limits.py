"""The size limits of the kernel and model caches: least recently used entries go first, down to 90% of
the limit; a hit counts as a use; the entry just stored stays; eviction by several processes at once
while others read and store leaves only whole entries (kernels/compile/cache.py, plus_ep/model_cache.py)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from plus_ep import model_cache
from plus_ep.kernels.compile.cache import EVICT_TO, CacheEntry, KernelCache, lru_evict
from tests.support.faults import src

ROOT = Path(__file__).resolve().parents[2]


def test_lru_rule():
    es = [CacheEntry(n, (), 100, used) for n, used in (("a", 5.0), ("b", 1.0), ("c", 3.0), ("d", 4.0))]
    gone = []
    assert lru_evict(es, 400, gone.append) == [] and gone == []                  # at the limit: nothing
    assert [e.name for e in lru_evict(es, 350, gone.append)] == ["b"]             # 300 <= 90% of 350
    assert [e.name for e in lru_evict(es, 250, gone.append)] == ["b", "c"]        # oldest first, to 225
    assert [e.name for e in lru_evict(es, 250, lambda e: None, keep=("b",))] == ["c", "d"]
    assert lru_evict(es, 0, gone.append) == []                                    # 0: no limit


def test_kernel_cache_evicts_least_recently_used(tmp_path, monkeypatch):
    monkeypatch.setenv("PLUS_EP_KERNEL_CACHE_LIMIT", "0")       # no eviction while filling
    cache = KernelCache(tmp_path)
    keys = [cache.build(src(f"{k}.0f"), "sm_80").key for k in range(6)]     # six real kernels (NVRTC)
    for k, key in enumerate(keys):
        os.utime(cache.path(key) / "meta.json", (1000 + k, 1000 + k))       # stored in order, long ago
    size = sum(e.size for e in cache.entries())
    assert len(cache.entries()) == 6
    cache._touch(cache.path(keys[0]) / "meta.json")          # a hit: entry 0 is the most recently used now
    removed = cache.evict(limit=size * 5 // 6)
    assert sorted(e.name for e in removed) == sorted(keys[1:3]), [e.name for e in removed]
    assert cache.get(keys[0], "sm_80") is not None and cache.get(keys[1], "sm_80") is None
    assert sum(e.size for e in cache.entries()) <= size * 5 // 6 * EVICT_TO
    assert cache.evict() == []                               # PLUS_EP_KERNEL_CACHE_LIMIT=0: no limit


def test_model_cache_evicts_and_keeps_the_new_entry(tmp_path, monkeypatch):
    monkeypatch.setenv("PLUS_EP_MODEL_CACHE_LIMIT", "25K")
    for k in range(4):
        path = model_cache.entry(f"key{k}", tmp_path)
        model_cache.store(path, bytes([k]) * 10_000)
        os.utime(path[:-5] + ".json", (1000 + k, 1000 + k))
    assert model_cache.read(model_cache.entry("key0", tmp_path)) is not None      # a hit: key0 used now
    gone = model_cache.evict(tmp_path, keep=("key3",))
    assert sorted(e.name for e in gone) == ["key1", "key2"]
    assert {e.name for e in model_cache.entries(tmp_path)} == {"key0", "key3"}
    assert model_cache.read(model_cache.entry("key1", tmp_path)) is None


WORKER = r"""
import os, sys, random
from plus_ep import model_cache
root, me = sys.argv[1], int(sys.argv[2])
rng = random.Random(me)
for i in range(60):
    key = f"k{rng.randrange(12)}"
    path = model_cache.entry(key, root)
    data = model_cache.read(path)
    if data is None:
        model_cache.store(path, (key.encode() * 4000)[:4000 + rng.randrange(2000)])
        model_cache.evict(root, keep=(key,))
    elif not data.startswith(key.encode()):
        print("WRONG", key); sys.exit(1)
print("ok")
"""


def test_concurrent_processes_read_store_and_evict(tmp_path):
    """Four processes read, store and evict one model cache under a limit of about three entries: every
    read is whole and right, nothing but whole entries is left, and the limit holds at the end."""
    env = dict(os.environ, PLUS_EP_MODEL_CACHE_LIMIT="16K",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(tmp_path), str(k)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for k in range(4)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 and o.strip() == "ok" for p, (o, _) in zip(procs, outs)), outs
    folder = tmp_path / "models"
    names = sorted(os.listdir(folder))
    stems = {n.rsplit(".", 1)[0] for n in names if not n.startswith(".")}
    for s in stems:      # whole entries only: model and check both there and agreeing
        assert model_cache.read(str(folder / f"{s}.onnx")) is not None, names
    model_cache.evict(tmp_path, limit=16 << 10)
    assert sum(e.size for e in model_cache.entries(tmp_path)) <= 16 << 10
    assert time.perf_counter() - t0 < 60
