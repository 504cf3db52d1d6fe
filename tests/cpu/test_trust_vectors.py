"""The trust policy's shared vectors (tests/support/trust_vectors.json) through plus_ep/trust.py: node
digests (the whole node: op type, domain, name, arity and wiring, every attribute, the function body,
the packs), keys files, PLUS_EP_TRUST values, the folder rule, the rewrite metadata. The same table goes
through plus_ep/native/trust.c in tests/native/test_trust_vectors_c.py."""
from __future__ import annotations

import os

import pytest

from plus_ep import rebuild, trust
from tests.support import trust_vectors as tv

TABLE = tv.load()


@pytest.mark.parametrize("v", TABLE["digest"], ids=lambda v: v["id"])
def test_digest(v):
    want = tv.expected(v, "py")
    node = tv.onnx_node(v["node"])
    if "error" in want:
        with pytest.raises(trust.TrustError, match=None) as e:
            trust.node_digest(node)
        assert want["error"] in str(e.value) and str(e.value).startswith(f"node '{node.name}': ")
        return
    assert want["digest"] == tv.oracle_digest(v["node"])          # the table agrees with trust.h's text
    assert trust.node_digest(node).hex() == want["digest"]


def test_every_change_of_the_node_changes_the_digest():
    got = {v["id"]: v["expect"]["digest"] for v in TABLE["digest"] if "digest" in v["expect"]}
    same = {v["id"]: v["same_as"] for v in TABLE["digest"] if "same_as" in v}
    for k, base in same.items():
        assert got.pop(k) == got[base]
    assert len(set(got.values())) == len(got), "two different nodes share a digest"


def _keys_file(v, tmp_path):
    if v.get("kind") == "dir":
        (tmp_path / "keys").mkdir()
    else:
        (tmp_path / "keys").write_bytes(tv.text(v["text"]))
    return tmp_path / "keys"


@pytest.mark.parametrize("v", TABLE["keys"], ids=lambda v: v["id"])
def test_keys_file(v, tmp_path):
    path = _keys_file(v, tmp_path)
    if "error" in v:
        with pytest.raises(trust.TrustError) as e:
            trust.read_keys(path)
        assert v["error"] in str(e.value) and str(e.value).startswith(f"PLUS_EP_TRUSTED_KEYS={path} ")
    else:
        assert list(trust.read_keys(path)) == v["ids"]


@pytest.mark.parametrize("v", TABLE["policy"], ids=lambda v: repr(v["value"]))
def test_policy(v, monkeypatch):
    if v["value"] is None:
        monkeypatch.delenv("PLUS_EP_TRUST", raising=False)
    else:
        monkeypatch.setenv("PLUS_EP_TRUST", v["value"])
    if "error" in v:
        with pytest.raises(trust.TrustError, match=v["error"].replace("'", ".").replace("=", ".")):
            trust.policy()
    else:
        assert trust.policy() == v["expect"]


@pytest.mark.skipif(os.geteuid() != 0, reason="the cases of another user's folders need root (chown)")
@pytest.mark.parametrize("v", TABLE["folders"], ids=lambda v: v["id"])
def test_folder_rule(v, tmp_path):
    path, subst = tv.make_folder_case(v, tmp_path)
    what = "PLUS_EP_TRUSTED_KEYS" if v.get("kind") == "keys" else "trust folder"
    got = trust.safe_path(what, path)
    if v["expect"] == "ok":
        assert got is None
    else:
        assert got is not None and v["expect"].format(**subst) in got, got


@pytest.mark.parametrize("v", TABLE["metadata"], ids=lambda v: v["value"])
def test_rewrite_metadata(v):
    """C reads no metadata: these are Python's alone (a clean error, never a TypeError)."""
    import onnx
    m = onnx.ModelProto()
    m.metadata_props.append(onnx.StringStringEntryProto(key=trust.REWRITE_METADATA, value=v["value"]))
    if "error" in v:
        with pytest.raises(trust.TrustError, match=v["error"].replace("[", ".").replace("]", ".")):
            rebuild.rewrite_options(m)
    else:
        assert rebuild.rewrite_options(m)["archs"] == v["archs"]


@pytest.mark.skipif(os.geteuid() != 0, reason="an entry of another user needs root (chown)")
@pytest.mark.parametrize("v", TABLE["manifest"], ids=lambda v: v["id"])
def test_manifest_entry(v, tmp_path, monkeypatch):
    base = TABLE["digest"][0]
    d = tv.make_manifest_case(v, tmp_path, base["expect"]["digest"])
    monkeypatch.setenv("PLUS_EP_TRUST_DIR", str(d))
    assert trust.is_recorded(bytes.fromhex(base["expect"]["digest"])) == (v["expect"] == "trusted")
