"""The trust policy's shared vectors (tests/support/trust_vectors.json) through plus_ep/native/trust.c,
by the native harness (tests/native/harness.c: trust, keys, policy, safe), for both front ends' views of
a node: the plugin EP's (every attribute listed) and the custom op's (no attribute list). The same table
goes through plus_ep/trust.py in tests/cpu/test_trust_vectors.py."""
from __future__ import annotations

import os
import subprocess

import pytest

from tests.support.launcher_sources import GCC, build_harness as build
from tests.support import trust_vectors as tv

pytestmark = pytest.mark.skipif(GCC is None, reason="needs a C compiler")
TABLE = tv.load()


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    exe, fake = build(tmp_path_factory.mktemp("trust_vectors"), [])
    return exe, fake


def run(harness, *args, env=None):
    exe, fake = harness
    e = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_CUDA_", "PLUS_EP_"))}
    e.update({"PLUS_EP_CUDA_LIBRARY": str(fake), **(env or {})})
    r = subprocess.run([str(exe), *args], capture_output=True, text=True, env=e, timeout=60)
    assert r.returncode in (0, 1), r.stdout + r.stderr
    return r.returncode, r.stdout


@pytest.mark.parametrize("view", ["ep", "op"])
@pytest.mark.parametrize("v", TABLE["digest"], ids=lambda v: v["id"])
def test_digest(harness, v, view, tmp_path):
    want = tv.expected(v, view)
    desc = tv.c_description(v["node"], view, tmp_path)
    rc, out = run(harness, "trust", desc, env={"PLUS_EP_TRUST_DIR": str(tmp_path / "none")})
    first = out.splitlines()[0]
    if "error" in want:
        assert first.startswith("no digest: ") and want["error"] in first, out
        assert rc == 1 and f"PlusEP node '{v['node']['name']}': refusing its embedded kernel images: " in out
    else:
        assert first == f"digest {want['digest']}", out


@pytest.mark.parametrize("v", TABLE["keys"], ids=lambda v: v["id"])
def test_keys_file(harness, v, tmp_path):
    path = tmp_path / "keys"
    if v.get("kind") == "dir":
        path.mkdir()
    else:
        path.write_bytes(tv.text(v["text"]))
    rc, out = run(harness, "keys", str(path))
    if "error" in v:
        assert rc == 1 and out.startswith(f"error: PLUS_EP_TRUSTED_KEYS={path} ") and v["error"] in out, out
    else:
        assert rc == 0 and out.split() == v["ids"], out


@pytest.mark.parametrize("v", TABLE["policy"], ids=lambda v: repr(v["value"]))
def test_policy(harness, v):
    rc, out = run(harness, "policy", *([] if v["value"] is None else [v["value"]]))
    if "error" in v:
        assert rc == 1 and v["error"] in out, out
    else:
        assert out.strip() == v["expect"]


@pytest.mark.skipif(os.geteuid() != 0, reason="the cases of another user's folders need root (chown)")
@pytest.mark.parametrize("v", TABLE["folders"], ids=lambda v: v["id"])
def test_folder_rule(harness, v, tmp_path):
    path, subst = tv.make_folder_case(v, tmp_path)
    what = "PLUS_EP_TRUSTED_KEYS" if v.get("kind") == "keys" else "trust folder"
    rc, out = run(harness, "safe", what, path)
    if v["expect"] == "ok":
        assert rc == 0 and out.strip() == "ok", out
    else:
        assert rc == 1 and v["expect"].format(**subst) in out, out


@pytest.mark.skipif(os.geteuid() != 0, reason="an entry of another user needs root (chown)")
@pytest.mark.parametrize("v", TABLE["manifest"], ids=lambda v: v["id"])
def test_manifest_entry(harness, v, tmp_path):
    base = TABLE["digest"][0]
    d = tv.make_manifest_case(v, tmp_path / "m", base["expect"]["digest"])
    rc, out = run(harness, "trust", tv.c_description(base["node"], "op", tmp_path / "n"),
                  env={"PLUS_EP_TRUST_DIR": str(d)})
    if v["expect"] == "trusted":
        assert rc == 0 and "trusted manifest" in out, out
    else:
        assert rc == 1 and "refusing its embedded kernel images" in out, out
