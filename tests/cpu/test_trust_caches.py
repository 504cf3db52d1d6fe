"""The caches that decide what runs are under the trust policy (plus_ep/trust.py): the rewritten-model
cache the plugin EP's planner runs from is verified against the trust manifest on every hit (an entry
whose kernels this installation did not build is rewritten, with one warning), and the render store
follows the manifest's folder rule (a store another user could change is neither read nor written)."""
from __future__ import annotations

import logging
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from plus_ep import model_cache, trust
from plus_ep.kernels.compile import render_store as S
from plus_ep.kernels.compile.cache import KernelCache


def _small() -> bytes:
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((32, 32)).astype(np.float32), "W")
    nodes = [helper.make_node("MatMul", ["X", "W"], ["m"], name="mm"), helper.make_node("Relu", ["m"], ["Y"], name="r")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["n", 32])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["n", 32])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9).SerializeToString()


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("PLUS_EP_TRUST_DIR", str(tmp_path / "trusted"))
    monkeypatch.delenv("PLUS_EP_TRUSTED_KEYS", raising=False)
    model_cache._warned.clear()
    S._UNSAFE.clear()
    return {"cache_dir": str(tmp_path / "cache")}


def _tampered(data: bytes) -> bytes:
    """The cached model with its kernel node's pack changed by one byte (as another user could)."""
    m = onnx.load_model_from_string(data)
    node = trust.kernel_nodes(m)[0]
    a = next(a for a in node.attribute if a.name.startswith("plus_images_"))
    arr = numpy_helper.to_array(a.t).copy()
    arr[-1] ^= 1
    a.t.CopyFrom(numpy_helper.from_array(arr, name=a.t.name))
    return m.SerializeToString()


def test_a_cached_model_whose_kernels_were_not_built_here_is_rewritten(fresh, caplog, recwarn):
    first = model_cache.rewritten_model(_small(), "sm_90", fresh)
    path = model_cache.entry(model_cache.model_key(_small(), "sm_90"), fresh["cache_dir"])
    assert model_cache.read(path) == first and model_cache.untrusted(first, fresh["cache_dir"]) is None
    bad = _tampered(first)
    model_cache.store(path, bad)                       # a valid entry (its .json matches), other kernels
    assert model_cache.read(path) == bad
    assert "1 of 1 fused nodes are not in the trust manifest" in model_cache.untrusted(bad, fresh["cache_dir"])
    caplog.set_level(logging.WARNING, logger="plus_ep")
    assert model_cache.rewritten_model(_small(), "sm_90", fresh) == first
    assert model_cache.read(path) == first             # stored again as built here
    said = [str(w.message) for w in recwarn.list if "not using the cached rewritten model" in str(w.message)]
    assert len(said) == 1 and path in said[0] and "not in the trust manifest" in said[0]


def test_a_cached_model_from_before_the_manifest_is_rewritten(fresh, tmp_path, monkeypatch):
    first = model_cache.rewritten_model(_small(), "sm_90", fresh)
    monkeypatch.setenv("PLUS_EP_TRUST_DIR", str(tmp_path / "another"))        # the manifest that vouched is gone
    assert "not in the trust manifest" in model_cache.untrusted(first, fresh["cache_dir"])
    with pytest.warns(RuntimeWarning, match="not using the cached rewritten model"):
        again = model_cache.rewritten_model(_small(), "sm_90", fresh)
    assert again == first and model_cache.untrusted(again, fresh["cache_dir"]) is None


def test_a_render_store_others_can_change_is_not_used(fresh, tmp_path, caplog):
    store = S.RenderStore.beside(KernelCache(tmp_path / "kc"))
    from plus_ep.kernels.wire.plan import Plan
    rd = Plan(node="n")                                # any value of the render's own types
    assert store.put("ab" * 32, rd) and store.get("ab" * 32) == rd
    os.chmod(store.root, 0o777)
    caplog.set_level(logging.WARNING, logger="plus_ep.kernels")
    assert store.get("ab" * 32) is None and not store.put("cd" * 32, rd)
    msgs = [r.getMessage() for r in caplog.records if "render store" in r.getMessage()]
    assert msgs == [f"render store {store.root} is writable by group or others (mode 0777): chmod go-w {store.root}; "
                    "renders are neither read from it nor kept"]
    os.chmod(store.root, 0o700)
    assert store.get("ab" * 32) == rd
