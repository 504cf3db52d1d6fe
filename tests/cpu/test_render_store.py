"""Host costs (issue 24): renders kept on disk beside the kernel cache (kernels/compile/render_store.py), so a
warm rewrite in a new process renders nothing, with byte-identical plans, sources and model; their key moves
with PlusEP's sources and the pattern; damaged entries are rendered again; `plus-ep cache` sees them. And
the caller's heap is left out of the collector's scans while a rewrite runs (rewrite.heap_spared)."""
from __future__ import annotations

import gc
import json
import sys

import numpy as np
import pytest

from plus_ep import config
from plus_ep.demo_model import build_bert
from plus_ep.kernels import render as R
from plus_ep.kernels.compile import render_store as S
from plus_ep.kernels.compile.cache import KernelCache
from plus_ep.rewrite import rewrite_detailed

RW = sys.modules["plus_ep.rewrite"]     # plus_ep.rewrite is also the function


@pytest.fixture(scope="module")
def model():
    return build_bert(layers=2, hidden=64, heads=2, intermediate=128)


def _rewrite(model, cache):
    R.clear_render_cache()          # a new process: nothing rendered in memory
    return rewrite_detailed(model, archs=["sm_90a"], cache=cache, compile_kernels=False)


def _outputs(r):
    return (r.model.SerializeToString(), {k: a["plus_plan"] for k, a in r.kernels.attrs.items()},
            {k: [(v.name, v.source, v.entries) for v in rd.variants] for k, rd in r.kernels.rendered.items()})


def test_a_warm_rewrite_in_a_new_process_renders_nothing_and_gives_the_same_bytes(model, tmp_path, monkeypatch):
    cache = KernelCache(tmp_path)
    first = _rewrite(model, cache)
    stored = S.RenderStore.beside(cache).entries()
    assert stored and len(stored) < len(first.kernels.rendered)      # layer 2 renders like layer 1

    def boom(*a, **k):
        raise AssertionError("rendered although the render store holds it")
    monkeypatch.setattr(R, "_render", boom)
    again = _rewrite(model, cache)
    assert _outputs(again) == _outputs(first)
    names = {k: a["plus_plan"].splitlines()[1][len("node "):] for k, a in again.kernels.attrs.items()}
    for k, rd in again.kernels.rendered.items():      # each node's own name, not the stored render's
        assert rd.plan.node == names[k] and f"node:    {names[k]}\n" in rd.variants[0].source


def test_the_key_moves_with_the_sources_and_the_pattern(model, monkeypatch):
    pats = sorted({sg.pattern.name: sg.pattern for sg in rewrite_detailed(model).subgraphs}.values(),
                  key=lambda p: p.name)
    key = S.store_key("k", pats[0])
    assert S.store_key("k", pats[0]) == key != S.store_key("k", pats[1]) and S.store_key("j", pats[0]) != key
    monkeypatch.setattr(config, "source_digest", lambda: "an edited renderer")
    S._environment.cache_clear()
    try:
        assert S.store_key("k", pats[0]) != key
    finally:
        monkeypatch.undo()
        S._environment.cache_clear()
    assert S.store_key("k", pats[0]) == key


def test_damaged_or_foreign_entries_are_removed(model, tmp_path):
    cache = KernelCache(tmp_path / "c")
    rd = next(iter(_rewrite(model, cache).kernels.rendered.values()))
    store = S.RenderStore(tmp_path / "r")
    assert store.put("ab" * 32, rd) and repr(store.get("ab" * 32)) == repr(rd)
    path = store.path("ab" * 32)
    text = path.read_text()
    for bad in ("{not json", json.dumps({"key": "cd" * 32, "render": json.loads(text)["render"]}),
                text.replace('"@":"Launch"', '"@":"Popen"')):
        path.write_text(bad)
        assert store.get("ab" * 32) is None and not path.exists()
    assert store.put("ab" * 32, rd) and repr(store.get("ab" * 32)) == repr(rd)


def test_only_what_loads_back_equal_is_stored(model, tmp_path):
    rd = next(iter(_rewrite(model, KernelCache(tmp_path / "c")).kernels.rendered.values()))
    with pytest.raises(TypeError):
        S.encode(np.int64(3))
    rd.plan.scratch = [np.int64(3)]          # a type the store would not give back
    store = S.RenderStore(tmp_path / "r")
    assert not store.put("ef" * 32, rd) and not store.entries()
    assert S.decode(S.encode((1, [2, (3,)]))) == (1, [2, (3,)])


def test_plus_ep_cache_lists_trims_and_clears_renders(model, tmp_path):
    cache = KernelCache(tmp_path)
    _rewrite(model, cache)
    renders = S.RenderStore.beside(cache).entries()
    listed = cache.entries()
    assert renders and {e.name for e in renders} <= {e.name for e in listed}
    gone = cache.evict(limit=1)
    assert {e.name for e in renders} <= {e.name for e in gone}
    assert not S.RenderStore.beside(cache).entries()
    assert not [p for p in (tmp_path / S.FOLDER).rglob("*") if p.is_file()]     # no trash left behind
    _rewrite(model, cache)
    cache.clear()
    assert not (tmp_path / S.FOLDER).exists()


def test_a_rewrite_freezes_the_callers_heap_and_thaws_it(model, monkeypatch):
    assert gc.get_freeze_count() == 0
    seen = []
    inner = RW._rewrite_detailed
    monkeypatch.setattr(RW, "_rewrite_detailed", lambda *a: seen.append(gc.get_freeze_count()) or inner(*a))
    rewrite_detailed(model)
    assert seen[0] > 0 and gc.get_freeze_count() == 0
    # calls, not counts: another thread (pytest-xdist's channel) frees frozen objects meanwhile
    calls = []
    monkeypatch.setattr(gc, "freeze", lambda f=gc.freeze: calls.append("freeze") or f())
    monkeypatch.setattr(gc, "unfreeze", lambda f=gc.unfreeze: calls.append("unfreeze") or f())
    with RW.heap_spared():
        assert calls == ["freeze"] and gc.get_freeze_count() > 0
        with RW.heap_spared():
            assert calls == ["freeze"]
        assert calls == ["freeze"]        # the inner one does not thaw the outer one's heap
    assert calls == ["freeze", "unfreeze"] and gc.get_freeze_count() == 0


def test_a_heap_the_process_froze_itself_stays_frozen(monkeypatch):
    gc.freeze()
    try:
        calls = []
        monkeypatch.setattr(gc, "freeze", lambda f=gc.freeze: calls.append("freeze") or f())
        monkeypatch.setattr(gc, "unfreeze", lambda f=gc.unfreeze: calls.append("unfreeze") or f())
        with RW.heap_spared():
            pass
        assert calls == [] and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_a_folder_that_cannot_be_written_keeps_nothing_and_raises_nothing(model, tmp_path):
    rd = next(iter(_rewrite(model, KernelCache(tmp_path / "c")).kernels.rendered.values()))
    (tmp_path / "file").write_text("")
    store = S.RenderStore(tmp_path / "file" / "renders")      # its parent is a file: mkdir fails
    assert not store.put("ab" * 32, rd) and store.get("ab" * 32) is None
