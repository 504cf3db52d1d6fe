"""The shared test vectors of the trust policy (tests/support/trust_vectors.json): node digests, keys
files, PLUS_EP_TRUST values, the folder rule and the rewrite metadata. One table, read by the Python
half (tests/cpu/test_trust_vectors.py: plus_ep/trust.py) and by the C half through the native harness
(tests/native/test_trust_vectors_c.py: plus_ep/native/trust.c), so both read every input alike.

The digests in the table come from `oracle_digest`, a second implementation of the layout trust.h
states, written from that text (not from either implementation); `python -m tests.support.trust_vectors
--write` regenerates them after a deliberate change of the layout.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
import sys
from pathlib import Path

TABLE = Path(__file__).with_name("trust_vectors.json")
ORDER = ["pattern", "pgraph", "pgraph_hash", "plus_body", "plus_plan", "template"]   # trust.h's list


def load() -> dict:
    return json.loads(TABLE.read_text())


def blob(spec) -> bytes:
    """A byte string of the table: "hex", or {"repeat": hex, "n": count}."""
    if isinstance(spec, dict):
        return bytes.fromhex(spec["repeat"]) * spec["n"]
    return bytes.fromhex(spec)


def text(spec) -> bytes:
    """A keys file's bytes: a str, or {"hex": ...}, or {"repeat": str, "n": count, "then": str}."""
    if isinstance(spec, str):
        return spec.encode()
    if "hex" in spec:
        return bytes.fromhex(spec["hex"])
    return spec["repeat"].encode() * spec["n"] + spec.get("then", "").encode()


def oracle_digest(node: dict) -> str:
    """The digest trust.h describes, of a table node (what the custom op or the plugin EP sees)."""
    def s(b: bytes) -> bytes:
        return struct.pack("<Q", len(b)) + b
    h = hashlib.sha256(b"plus_ep node 2\n")
    for k in ("domain", "op_type", "name"):
        h.update(s(node[k].encode()))
    for k in ("inputs", "outputs"):
        h.update(struct.pack("<I", len(node[k])) + bytes(node[k]))
    strings = {k: v.encode() for k, v in node["strings"].items()}
    h.update(struct.pack("<I", len(strings)))
    for k in ORDER:
        if k in strings:
            h.update(s(k.encode()) + s(strings[k]))
    packs = {a: blob(b) for a, b in node["packs"].items()}
    h.update(struct.pack("<I", len(packs)))
    for a in sorted(packs, key=str.encode):
        h.update(s(a.encode()) + s(packs[a]))
    return h.hexdigest()


def onnx_node(node: dict):
    """The table node as an onnx NodeProto (extra attributes included)."""
    import numpy as np
    from onnx import helper, numpy_helper
    n = helper.make_node(node["op_type"], [f"i{k}" if w else "" for k, w in enumerate(node["inputs"])],
                         [f"o{k}" if w else "" for k, w in enumerate(node["outputs"])], name=node["name"],
                         domain=node["domain"])
    for k, v in node["strings"].items():
        n.attribute.append(helper.make_attribute(k, v.encode()))
    for a, b in list(node["packs"].items()) + list(node.get("unlisted_packs", {}).items()):
        n.attribute.append(helper.make_attribute(f"plus_images_{a}", numpy_helper.from_array(
            np.frombuffer(blob(b), np.uint8), name=f"plus_images_{a}")))
    for k, v in node.get("extra", {}).items():
        n.attribute.append(helper.make_attribute(k, v))
    return n


def c_description(node: dict, view: str, folder: Path) -> str:
    """A harness `trust` DESC file for the table node as one front end sees it: "ep" (the plugin EP:
    every attribute name listed, every pack read) or "op" (the custom op: no list, the plan's packs
    read and an unlisted known arch reported)."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = [f"domain {node['domain']}", f"op {node['op_type']}", f"name {node['name']}",
             "in " + " ".join(str(x) for x in node["inputs"]), "out " + " ".join(str(x) for x in node["outputs"])]
    for i, (k, v) in enumerate(node["strings"].items()):
        p = folder / f"s{i}"
        p.write_bytes(v.encode())
        lines.append(f"str {k} {p}")
    packs = dict(node["packs"])
    if view == "ep":
        packs.update(node.get("unlisted_packs", {}))
    for i, (a, b) in enumerate(packs.items()):
        p = folder / f"p{i}"
        p.write_bytes(blob(b))
        lines.append(f"pack {a} {p}")
    if view == "ep":
        names = list(node["strings"]) + [f"plus_images_{a}" for a in packs] + list(node.get("extra", {}))
        lines += [f"attr {n}" for n in names]
    elif node.get("unlisted_packs"):
        lines.append(f"unlisted {next(iter(node['unlisted_packs']))}")
    desc = folder / "desc"
    desc.write_text("\n".join(lines) + "\n")
    return str(desc)


def expected(vector: dict, view: str) -> dict:
    """{"digest": hex} or {"error": substring} for one front end ("py", "ep" or "op")."""
    return vector.get(view) or vector["expect"]


def make_folder_case(case: dict, base: Path) -> tuple[str, dict]:
    """Build a folder-rule case under `base`: returns (the path to check, the substitutions for its
    expected text: {path}, {target}, {uid}, {me})."""
    root = base / "root"
    target_dir = root / "a"
    path = target_dir / "trusted"
    path.mkdir(parents=True)
    for d in (base, root, target_dir, path):
        os.chmod(d, 0o700)
    if case.get("kind") == "keys":
        path = path / "keys.pub"
        path.write_text("")
        os.chmod(path, 0o600)
    target = {"self": path, "parent": path.parent}[case.get("target", "self")]
    if "mode" in case:
        os.chmod(target, int(case["mode"], 8))
    if "owner" in case:
        os.chown(target, case["owner"], -1)
    return str(path), {"path": str(path), "target": str(target), "me": str(os.geteuid())}


def make_manifest_case(case: dict, folder: Path, digest_hex: str) -> Path:
    """A trust dir under `folder` holding one entry for `digest_hex` as the case describes; returns it."""
    d = folder / "trusted"
    shard = d / digest_hex[:2]
    shard.mkdir(parents=True, mode=0o700)
    os.chmod(d, 0o700)
    entry = shard / digest_hex
    kind = case["entry"]
    if kind == "folder":
        entry.mkdir(mode=0o700)
    else:
        named = {"names": digest_hex, "other": "0" * 64}.get(kind)
        entry.write_text("" if named is None else json.dumps({"digest": named, "note": "test"}) + "\n")
        os.chmod(entry, int(case.get("entry_mode", "0600"), 8))
        if "owner" in case:
            os.chown(entry, case["owner"], -1)
    if "shard_mode" in case:
        os.chmod(shard, int(case["shard_mode"], 8))
    return d


def _write() -> None:
    table = load()
    for v in table["digest"]:
        if "digest" in v["expect"]:
            v["expect"]["digest"] = oracle_digest(v["node"])
        for view in ("op", "ep", "py"):
            if view in v and "digest" in v[view]:
                node = dict(v["node"], **v.get("op_node", {})) if view == "op" else v["node"]
                v[view]["digest"] = oracle_digest(node)
    TABLE.write_text(json.dumps(table, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        _write()
