"""Kernel and model cache faults: a cubin for another arch, entries whose checksums agree with a bad
cubin, a read-only or full cache folder, a writer that died half-way, readers racing a writer.
Every case ends rebuilt or skipped with a warning, never with a wrong cubin loaded.
(Damaged entries whose checksum disagrees, and two processes building one key, are in
test_kernel_cache.py.)"""
from __future__ import annotations

import builtins
import errno
import hashlib
import json
import logging
import os
import pathlib
import threading

import pytest

pytest.importorskip("cuda.bindings.nvrtc")

from plus_ep.kernels.compile import cache as kcache  # noqa: E402
from plus_ep.kernels.compile import files as kfiles  # noqa: E402
from plus_ep.kernels.compile import cubin as cubin_reader  # noqa: E402
from plus_ep.kernels.compile import nvrtc  # noqa: E402
from plus_ep.kernels.compile.cache import KernelCache  # noqa: E402
from plus_ep.kernels.compile.jobs import Job, compile_all  # noqa: E402
from plus_ep.kernels.compile.nvrtc import CompileResult  # noqa: E402
from tests.support.faults import HalfWriter, freeze_templates, src  # noqa: E402

@pytest.fixture(autouse=True)
def frozen_templates(tmp_path, monkeypatch):
    """A private copy of the common header (keys hash every template; the real folder may be edited)."""
    monkeypatch.delenv("PLUS_EP_ASSERT_CACHED", raising=False)
    return freeze_templates(tmp_path, monkeypatch)


@pytest.fixture
def cache(tmp_path):
    return KernelCache(tmp_path / "kc")


def files_under(root: pathlib.Path) -> list:
    """Every file in the cache except the lock files (those persist by design)."""
    if not root.exists():
        return []
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.is_file() and p.parent.name != "locks")


def warnings_of(caplog, text) -> list:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and text in r.getMessage()]


# ------------------------------------------------------------------------------ the cubin's own arch


@pytest.mark.parametrize("arch", nvrtc.ARCHS)
def test_cubin_arch_reads_the_elf_header(arch):
    r = nvrtc.compile_cubin(src(), arch)
    assert cubin_reader.cubin_arch(r.cubin) == arch


@pytest.mark.parametrize("data", [b"", b"\x7fELF" + bytes(60), b"FAKECUBIN\n" * 10],
                         ids=["empty", "zero-header", "not-elf"])
def test_cubin_arch_rejects_non_cubins(data):
    with pytest.raises(ValueError):
        cubin_reader.cubin_arch(data)


def _plant(cache: KernelCache, key: str, cubin: bytes, arch: str | None = None) -> pathlib.Path:
    """Replace the entry's cubin and make meta.json agree with it (size, sha256, optionally arch):
    only the cubin's contents can tell that it is wrong."""
    entry = cache.path(key)
    (entry / "kernel.cubin").write_bytes(cubin)
    meta = json.loads((entry / "meta.json").read_text())
    meta["cubin"] = {"sha256": hashlib.sha256(cubin).hexdigest(), "size": len(cubin)}
    if arch:
        meta["arch"] = arch
    (entry / "meta.json").write_text(json.dumps(meta))
    return entry


@pytest.mark.parametrize("lie_in_meta", [False, True], ids=["meta-says-sm_90", "meta-says-sm_80"])
def test_cubin_for_another_arch_is_rebuilt(cache, caplog, lie_in_meta):
    good = cache.build(src(), "sm_90", name="scale.cu")
    other = nvrtc.compile_cubin(src(), "sm_80").cubin
    entry = _plant(cache, good.key, other, "sm_80" if lie_in_meta else None)
    caplog.set_level(logging.WARNING, logger="plus_ep.kernels")
    assert cache.get(good.key, "sm_90") is None
    (msg,) = warnings_of(caplog, "damaged")
    assert "sm_80" in msg and "sm_90" in msg and str(entry) in msg
    assert not entry.exists() and cache.stats.corrupt == 1
    again = cache.build(src(), "sm_90", name="scale.cu")
    assert not again.cached and again.cubin == good.cubin and cubin_reader.cubin_arch(again.cubin) == "sm_90"
    assert cache.build(src(), "sm_90").cached   # and the rebuilt entry is good


def test_build_never_returns_a_wrong_arch_hit(cache):
    good = cache.build(src(), "sm_90")
    _plant(cache, good.key, nvrtc.compile_cubin(src(), "sm_86").cubin)
    r = cache.build(src(), "sm_90")
    assert cubin_reader.cubin_arch(r.cubin) == "sm_90" and r.cubin == good.cubin and not r.cached


@pytest.mark.parametrize("bad", ["truncated-elf", "garbage", "empty"])
def test_bad_cubin_with_matching_checksum_is_rebuilt(cache, caplog, bad):
    """A bad cubin whose meta.json was rewritten to match (a buggy writer, a restored backup)."""
    good = cache.build(src(), "sm_80")
    cubin = {"truncated-elf": good.cubin[:len(good.cubin) // 2], "garbage": os.urandom(2048),
             "empty": b""}[bad]
    _plant(cache, good.key, cubin)
    caplog.set_level(logging.WARNING, logger="plus_ep.kernels")
    assert cache.get(good.key) is None and len(warnings_of(caplog, "damaged")) == 1
    r = cache.build(src(), "sm_80")
    assert r.cubin == good.cubin and not r.cached


# ------------------------------------------------------------------ read-only / unusable cache folders


@pytest.fixture
def read_only(monkeypatch):
    """Make a folder read-only. chmod does it for ordinary users; root writes through permission bits,
    so for root the calls the cache writes with fail with EROFS under that folder, as on a read-only
    mount."""
    def make(root: pathlib.Path):
        root.mkdir(parents=True, exist_ok=True)
        for p in [root, *root.rglob("*")]:
            p.chmod(0o555 if p.is_dir() else 0o444)
        probe = root / ".probe"
        try:
            probe.write_bytes(b"")
        except OSError:
            return                      # permission bits are enforced
        probe.unlink()
        prefix = str(root)

        def under(path) -> bool:
            return os.path.abspath(os.fspath(path)).startswith(prefix)

        def refuse(path):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))

        real_open, real_os_open = builtins.open, os.open
        real_mkdir, real_replace, real_rename = os.mkdir, os.replace, os.rename

        def fake_open(path, mode="r", *a, **k):
            if any(c in mode for c in "wax+") and under(path):
                refuse(path)
            return real_open(path, mode, *a, **k)

        def fake_os_open(path, flags, *a, **k):
            if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and under(path):
                refuse(path)
            return real_os_open(path, flags, *a, **k)

        def fake_mkdir(path, *a, **k):
            if under(path):
                if os.path.isdir(path):
                    raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), os.fspath(path))
                refuse(path)
            return real_mkdir(path, *a, **k)

        def guard(real):
            def f(src_, dst, *a, **k):
                if under(src_) or under(dst):
                    refuse(dst)
                return real(src_, dst, *a, **k)
            return f

        import plus_ep.model_cache
        for module in (kcache, kfiles, plus_ep.model_cache):     # the modules that write cache files
            monkeypatch.setattr(module, "open", fake_open, raising=False)
        monkeypatch.setattr(os, "open", fake_os_open)
        monkeypatch.setattr(os, "mkdir", fake_mkdir)
        monkeypatch.setattr(os, "replace", guard(real_replace))
        monkeypatch.setattr(os, "rename", guard(real_rename))
    yield make


@pytest.mark.parametrize("kind", ["read-only", "root-is-a-file"])
def test_unwritable_cache_compiles_without_caching(tmp_path, caplog, read_only, kind):
    root = tmp_path / "kc"
    if kind == "read-only":
        read_only(root)
    else:
        root.write_text("not a folder")
    cache = KernelCache(root)
    caplog.set_level(logging.WARNING, logger="plus_ep.kernels")
    jobs = [Job(f"k{i}.cu", src(f"{i}.0f"), arch) for i in range(3) for arch in ("sm_80", "sm_90")]
    results = compile_all(jobs, cache=cache, workers=2, progress=False)
    for job, r in zip(jobs, results):
        assert isinstance(r, CompileResult), r
        assert not r.cached and cubin_reader.cubin_arch(r.cubin) == job.arch
        assert r.cubin == nvrtc.compile_cubin(job.source, job.arch).cubin
    (msg,) = warnings_of(caplog, "cannot be written")      # one warning for six kernels
    assert str(root) in msg and "without caching" in msg
    assert cache.stats.compiled == 6 and cache.stats.unstored == 6
    if kind == "read-only":
        assert files_under(root) == []
    else:
        assert root.read_text() == "not a folder"


def test_read_only_cache_still_serves_hits(tmp_path, caplog, read_only):
    root = tmp_path / "kc"
    first = KernelCache(root).build(src(), "sm_90")
    read_only(root)
    caplog.set_level(logging.WARNING, logger="plus_ep.kernels")
    ro = KernelCache(root)
    hit = ro.build(src(), "sm_90")
    assert hit.cached and hit.cubin == first.cubin
    miss = ro.build(src("7.0f"), "sm_90")
    assert not miss.cached and cubin_reader.cubin_arch(miss.cubin) == "sm_90"
    assert len(warnings_of(caplog, "cannot be written")) == 1
    assert ro.stats.hits == 1 and ro.stats.compiled == 1


# ---------------------------------------------------------------------------------------- full disk


class _FullDisk:
    """kernels.compile.cache's and .files' open(): the n-th file opened for writing takes half its data, then ENOSPC."""

    def __init__(self, fail_at: int):
        self.fail_at, self.count = fail_at, 0

    def __call__(self, path, mode="r", *a, **k):
        f = builtins.open(path, mode, *a, **k)
        if "w" not in mode:
            return f
        self.count += 1
        return HalfWriter(f, path) if self.count == self.fail_at else f


@pytest.mark.parametrize("fail_at", [1, 2, 3, 4], ids=["cubin", "ptx", "source", "meta"])
def test_full_disk_leaves_no_partial_entry(cache, caplog, monkeypatch, fail_at):
    want = nvrtc.compile_cubin(src(), "sm_90").cubin
    full = _FullDisk(fail_at)
    for module in (kcache, kfiles):                    # cache.py and the atomic writer it uses
        monkeypatch.setattr(module, "open", full, raising=False)
    caplog.set_level(logging.WARNING, logger="plus_ep.kernels")
    r = cache.build(src(), "sm_90", name="scale.cu")
    assert full.count >= fail_at                       # the write really failed
    assert r.cubin == want and not r.cached            # the result is still right
    (msg,) = warnings_of(caplog, "cannot be written")
    assert "No space left" in msg
    assert files_under(cache.root) == []               # no cubin, source, meta or temp file stays
    assert not [p for p in cache.root.glob("??") if p.is_dir()]
    assert cache.get(r.key) is None
    # Space again: the next build stores a whole entry.
    for module in (kcache, kfiles):
        monkeypatch.setattr(module, "open", builtins.open, raising=False)
    again = KernelCache(cache.root).build(src(), "sm_90", name="scale.cu")
    assert not again.cached and again.cubin == want
    assert sorted(p.name for p in cache.path(r.key).iterdir()) == ["kernel.cu", "kernel.cubin", "kernel.ptx", "meta.json"]


def test_full_disk_for_the_lock_file(cache, caplog, monkeypatch):
    real = os.open

    def no_space(path, flags, *a, **k):
        if str(path).endswith(".lock"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.fspath(path))
        return real(path, flags, *a, **k)
    monkeypatch.setattr(os, "open", no_space)
    caplog.set_level(logging.WARNING, logger="plus_ep.kernels")
    r = cache.build(src(), "sm_80")
    assert cubin_reader.cubin_arch(r.cubin) == "sm_80" and len(warnings_of(caplog, "cannot be written")) == 1
    assert files_under(cache.root) == []


# ----------------------------------------------------------------------- dead writers, racing readers


def test_dead_writers_leftovers_are_replaced(cache, caplog):
    """A writer killed between the cubin and meta.json (or mid-cubin) leaves files without meta.json:
    a plain miss, and the rebuild starts the entry afresh."""
    key = cache.key(src(), "sm_90")
    entry = cache.path(key)
    entry.mkdir(parents=True)
    (entry / "kernel.cubin").write_bytes(nvrtc.compile_cubin(src(), "sm_80").cubin)  # wrong and orphaned
    (entry / ".kernel.cu.12345.deadbeef.tmp").write_bytes(b"half a sou")
    caplog.set_level(logging.WARNING, logger="plus_ep.kernels")
    assert cache.get(key) is None and cache.stats.corrupt == 0
    r = cache.build(src(), "sm_90")
    assert cubin_reader.cubin_arch(r.cubin) == "sm_90" and not r.cached
    assert sorted(p.name for p in entry.iterdir()) == ["kernel.cu", "kernel.cubin", "kernel.ptx", "meta.json"]
    assert cache.get(key).cubin == r.cubin and not warnings_of(caplog, "damaged")


def test_readers_racing_a_writer_never_see_a_wrong_cubin(cache, caplog):
    """Readers poll an entry that a writer removes and stores again and again: each read is a whole
    entry or a miss, never another cubin, and never reported as damaged."""
    good = cache.build(src(), "sm_90")
    entry = cache.path(good.key)
    stop = threading.Event()
    seen = {"hit": 0, "miss": 0, "wrong": 0}
    lock = threading.Lock()
    caplog.set_level(logging.WARNING, logger="plus_ep.kernels")

    def reader():
        while not stop.is_set():
            r = cache.get(good.key, "sm_90")
            with lock:
                if r is None:
                    seen["miss"] += 1
                elif r.cubin != good.cubin:
                    seen["wrong"] += 1
                else:
                    seen["hit"] += 1

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        for _ in range(150):
            cache._remove(entry)
            cache.put(good.key, src(), good)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert seen["wrong"] == 0 and seen["hit"] > 0, seen
    assert cache.stats.corrupt == 0 and not warnings_of(caplog, "damaged"), seen
    assert cache.get(good.key).cubin == good.cubin


# ------------------------------------------------------------------------------- the model cache


@pytest.fixture(scope="module")
def small_model():
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(64).astype(np.float32), "B")
    nodes = [helper.make_node("MatMul", ["X", "W"], ["m"], name="mm"),
             helper.make_node("Add", ["m", "B"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["Y"], name="relu")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["n", 64])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["n", 64])], [w, b])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9).SerializeToString()


@pytest.fixture
def session_cache(tmp_path, monkeypatch):
    """The session's cache under tmp, with the kernel folder shared with the test run (warm)."""
    from plus_ep import model_cache
    monkeypatch.setattr(nvrtc, "TEMPLATES_DIR", pathlib.Path(kcache.__file__).parents[1] / "templates")
    monkeypatch.setattr(nvrtc, "FAMILIES_DIR", pathlib.Path(kcache.__file__).parents[1] / "families")
    model_cache._warned.clear()
    return tmp_path / "plus_ep"


def _model_entries(root: pathlib.Path) -> list:
    """The model cache's entries (.onnx + .json); the eviction lock file (.evict.lock) is not one."""
    folder = root / "models"
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) if folder.exists() else []


def test_model_cache_damaged_entry_is_rebuilt(small_model, session_cache, caplog):
    import onnx

    from plus_ep.model_cache import rewritten_model
    opts = {"cache_dir": str(session_cache)}
    first = rewritten_model(small_model, "sm_90", opts)
    names = _model_entries(session_cache)
    assert len(names) == 2 and {n.rsplit(".", 1)[1] for n in names} == {"onnx", "json"}
    onnx_path = session_cache / "models" / next(n for n in names if n.endswith(".onnx"))
    assert rewritten_model(small_model, "sm_90", opts) == first           # a hit
    onnx_path.write_bytes(first[: len(first) // 2])                        # truncated on disk
    caplog.set_level(logging.WARNING, logger="plus_ep")
    again = rewritten_model(small_model, "sm_90", opts)
    assert again == first and len(warnings_of(caplog, "damaged model cache entry")) == 1
    assert onnx.load_model_from_string(again).graph.node[0].domain == "ai.plus_ep"
    assert onnx_path.read_bytes() == first                                 # stored whole again
    (session_cache / "models" / next(n for n in names if n.endswith(".json"))).unlink()
    assert rewritten_model(small_model, "sm_90", opts) == first            # no meta: a plain miss


def test_model_cache_unwritable_warns_once(small_model, session_cache, read_only):
    from plus_ep.model_cache import rewritten_model
    read_only(session_cache)
    opts = {"cache_dir": str(session_cache)}
    with pytest.warns(RuntimeWarning, match="cannot store the rewritten model") as rec:
        a = rewritten_model(small_model, "sm_90", opts)
        b = rewritten_model(small_model, "sm_90", opts)
    assert a == b and a
    assert len([w for w in rec if "cannot store" in str(w.message)]) == 1
    assert files_under(session_cache) == []
