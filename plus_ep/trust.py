"""A model file is data: which embedded kernels this installation runs (the Python half of the trust
policy; the launcher enforces it in C, plus_ep/native/trust.c, before any image is loaded).

    from plus_ep import trust
    trust.status(model)                    # per fused node: how it is trusted (manifest, signature) or not
    report = rebuild.rebuild(model)        # plus_ep/rebuild.py: every node rebuilt here from its function body
    model, what = rebuild.resolve(model)   # the embedded kernels if identical, else the local build (recorded)
    trust.record_model(model, "accepted by the operator")   # vouch without rebuilding (an explicit opt-out)
    trust.sign_model(model, "key.pem")     # Ed25519 signatures (the [sign] extra: cryptography)

A fused node's **digest** is sha256 over its plan and every image pack (CONTRACT.md §5; the same bytes
as plus_trust_digest in C). The launcher runs a node's images only when
  (a) the digest is in a trust manifest: a file <trust dir>/<hex[:2]>/<hex> that this installation
      wrote because it built those kernels itself (every rewrite with kernels records what it built)
      or rebuilt them from the node's function body and got the same bytes (`plus-ep trust MODEL`);
      the trust dir is $PLUS_EP_TRUST_DIR, else <cache root>/trusted;
  (b) the node's `plus_signature` is an Ed25519 signature of the digest by a key listed in the file
      $PLUS_EP_TRUSTED_KEYS (lines `ed25519 <base64 public key> [comment]`);
  (c) the operator opted out: PLUS_EP_TRUST=any, or the session's option (custom op: session config
      entry `plus_ep.trust=any`; plugin EP: provider option `trust=any`), with one warning per process.
"""
from __future__ import annotations

import base64
import datetime
import hashlib
import json
import logging
import os
import pathlib
import struct
from dataclasses import dataclass

import onnx
from onnx import numpy_helper

from . import config

log = logging.getLogger("plus_ep")

DIGEST_TAG = b"plus_ep node 1\n"
SIGNATURE_TAG = b"plus_ep signature 1\n"
SIGNATURE_ATTR = "plus_signature"
SESSION_KEY = "plus_ep.trust"          # custom op: session config entry; plugin EP: provider option `trust`
REWRITE_METADATA = "plus_ep.rewrite"   # model metadata: the options a rewrite used (for the rebuild)
POLICIES = ("verify", "any")


class TrustError(ValueError):
    """A model's embedded kernels cannot be trusted or rebuilt here."""


# ------------------------------------------------------------------------------------------- digest
def node_packs(node: onnx.NodeProto) -> dict:
    """{arch: image pack bytes} of a fused node (its plus_images_<arch> attributes)."""
    return {a.name[len("plus_images_"):]: numpy_helper.to_array(a.t).tobytes()
            for a in node.attribute if a.name.startswith("plus_images_")}


def node_plan(node: onnx.NodeProto) -> bytes | None:
    """The node's plus_plan text, None when it carries none."""
    return next((a.s for a in node.attribute if a.name == "plus_plan"), None)


def digest(plan: str | bytes, packs: dict) -> bytes:
    """sha256 over the tag, the plan and the packs in byte order of arch name (as plus_trust_digest)."""
    plan = plan.encode() if isinstance(plan, str) else plan
    h = hashlib.sha256(DIGEST_TAG)
    h.update(struct.pack("<Q", len(plan)) + plan + struct.pack("<I", len(packs)))
    for arch in sorted(packs, key=lambda a: a.encode()):
        a, blob = arch.encode(), bytes(packs[arch])
        h.update(struct.pack("<Q", len(a)) + a + struct.pack("<Q", len(blob)))
        h.update(blob)
    return h.digest()


def node_digest(node: onnx.NodeProto) -> bytes:
    plan = node_plan(node)
    if plan is None:
        raise TrustError(f"node '{node.name}' carries no plus_plan")
    return digest(plan, node_packs(node))


def digest_of_attrs(attrs: dict) -> bytes:
    """The digest of a fused node's kernel attributes as kernel_build makes them
    ({"plus_plan": str, "plus_images_<arch>": TensorProto})."""
    packs = {k[len("plus_images_"):]: numpy_helper.to_array(v).tobytes() for k, v in attrs.items()
             if k.startswith("plus_images_")}
    return digest(attrs["plus_plan"], packs)


def plan_node(plan: str | bytes) -> str:
    """The node a plan names (for notes and messages)."""
    from .kernels.wire.plan import PlanSyntaxError, node_of
    try:
        return node_of(plan.decode("utf-8", "replace") if isinstance(plan, bytes) else plan)
    except PlanSyntaxError:
        return "?"


def kernel_nodes(model: onnx.ModelProto) -> list:
    """The fused nodes that carry kernels (a plus_plan), in graph order."""
    return [n for n in model.graph.node if n.domain == "ai.plus_ep" and node_plan(n) is not None]


# ----------------------------------------------------------------------------------------- manifest
def trust_dir(cache_dir: str | os.PathLike | None = None) -> pathlib.Path:
    """$PLUS_EP_TRUST_DIR, else <cache root>/trusted (the same folder trust.c searches)."""
    return config.path("PLUS_EP_TRUST_DIR") or config.cache_root(cache_dir) / config.TRUSTED


def _entry(d: pathlib.Path, hexd: str) -> pathlib.Path:
    return d / hexd[:2] / hexd


def is_recorded(dig: bytes, cache_dir=None) -> bool:
    hexd = dig.hex()
    dirs = [trust_dir()] + ([config.cache_root(cache_dir) / config.TRUSTED] if cache_dir else [])
    return any(_entry(d, hexd).is_file() for d in dirs)


def record(dig: bytes, note: str, cache_dir=None) -> pathlib.Path | None:
    """Write the manifest entry of one digest (atomically); None (with a warning) when the trust dir
    cannot be written: the launcher will then refuse that node until it can."""
    path = _entry(trust_dir(cache_dir), dig.hex())
    if path.is_file():
        return path
    text = json.dumps({"recorded": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                       "note": note}) + "\n"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as exc:
        _warn_once(f"PlusEP: cannot record trusted kernels in {path.parent.parent} ({exc.strerror or exc}); the "
                   "launcher refuses them until they are recorded (set PLUS_EP_TRUST_DIR to a writable folder)")
        return None
    return path


def record_model(model: onnx.ModelProto, note: str, cache_dir=None) -> int:
    """Record every kernel node of `model`; returns how many entries exist now."""
    return sum(record(node_digest(n), f"{note}: node {n.name}", cache_dir) is not None for n in kernel_nodes(model))


_warned: set = set()


def _warn_once(msg: str) -> None:
    if msg not in _warned:
        _warned.add(msg)
        log.warning(msg)


def policy() -> str:
    """PLUS_EP_TRUST: "verify" (the default) or "any" (every model's embedded kernels run unchecked)."""
    value = (config.get("PLUS_EP_TRUST") or "verify").strip()
    if value not in POLICIES:
        raise TrustError(f"PLUS_EP_TRUST={value!r}: use 'any' or 'verify' (the default)")
    return value


# ---------------------------------------------------------------------------------------- signatures
def _crypto():
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
        from cryptography.hazmat.primitives import serialization
    except ImportError:
        raise TrustError("signing needs the `cryptography` package: pip install cryptography (the [sign] extra: "
                         "pip install -e '.[sign]' in the PlusEP checkout)") from None
    return ed25519, serialization


def key_id(public_raw: bytes) -> str:
    """The key id a signature names: hex of the first 8 bytes of sha256(raw public key)."""
    return hashlib.sha256(public_raw).hexdigest()[:16]


def public_line(public_raw: bytes, comment: str = "") -> str:
    return f"ed25519 {base64.b64encode(public_raw).decode()}" + (f" {comment}" if comment else "")


def keygen(path: str | os.PathLike, comment: str = "") -> tuple[pathlib.Path, str]:
    """A new Ed25519 key: the private key as PKCS#8 PEM at `path` (mode 0600) and its public line in
    `path`.pub (what PLUS_EP_TRUSTED_KEYS files list). Returns (public file, public line)."""
    ed25519, ser = _crypto()
    path = pathlib.Path(path)
    if path.exists():
        raise TrustError(f"{path} exists; refusing to overwrite a key")
    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(ser.Encoding.PEM, ser.PrivateFormat.PKCS8, ser.NoEncryption())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    raw = key.public_key().public_bytes(ser.Encoding.Raw, ser.PublicFormat.Raw)
    line = public_line(raw, comment or path.stem)
    pub = path.with_name(path.name + ".pub")
    pub.write_text(line + "\n")
    return pub, line


def _private_key(path):
    ed25519, ser = _crypto()
    key = ser.load_pem_private_key(pathlib.Path(path).read_bytes(), password=None)
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise TrustError(f"{path}: not an Ed25519 private key (make one with `plus-ep keygen`)")
    return key


def sign_model(model: onnx.ModelProto, key_path) -> int:
    """Sign every kernel node of `model` in place (attribute plus_signature); returns the count."""
    _, ser = _crypto()
    key = _private_key(key_path)
    kid = key_id(key.public_key().public_bytes(ser.Encoding.Raw, ser.PublicFormat.Raw))
    n = 0
    for node in kernel_nodes(model):
        sig = key.sign(SIGNATURE_TAG + node_digest(node))
        for a in [a for a in node.attribute if a.name == SIGNATURE_ATTR]:
            node.attribute.remove(a)
        node.attribute.append(onnx.helper.make_attribute(
            SIGNATURE_ATTR, f"ed25519 {kid} {base64.b64encode(sig).decode()}"))
        n += 1
    return n


def trusted_keys(path=None) -> dict:
    """{key id: raw public key} of the keys file ($PLUS_EP_TRUSTED_KEYS when path is None)."""
    path = path or config.get("PLUS_EP_TRUSTED_KEYS")
    if not path:
        return {}
    keys = {}
    for no, line in enumerate(pathlib.Path(path).read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        try:
            raw = base64.b64decode(parts[1], validate=True) if parts[0] == "ed25519" and len(parts) > 1 else b""
        except ValueError:
            raw = b""
        if len(raw) != 32:
            raise TrustError(f"{path} line {no}: expected `ed25519 <base64 public key> [comment]`")
        keys[key_id(raw)] = raw
    return keys


def _signed_by(node: onnx.NodeProto, dig: bytes, keys: dict) -> str | None:
    text = next((a.s.decode("utf-8", "replace") for a in node.attribute if a.name == SIGNATURE_ATTR), None)
    if not text or not keys:
        return None
    parts = text.split(" ")
    if len(parts) != 3 or parts[0] != "ed25519" or parts[1] not in keys:
        return None
    ed25519, _ = _crypto()
    try:
        ed25519.Ed25519PublicKey.from_public_bytes(keys[parts[1]]).verify(
            base64.b64decode(parts[2], validate=True), SIGNATURE_TAG + dig)
    except Exception:  # noqa: BLE001  (InvalidSignature, bad base64: not signed by that key)
        return None
    return parts[1]


# ------------------------------------------------------------------------------------------- status
@dataclass
class NodeTrust:
    node: str
    digest: str                 # hex
    how: str | None             # "manifest", "signature <key id>", or None (refused unless opted out)


def status(model: onnx.ModelProto, cache_dir=None) -> list:
    """How the launcher would treat each kernel node of `model` (before any opt-out)."""
    try:
        keys = trusted_keys()
    except (OSError, TrustError) as exc:
        _warn_once(f"PlusEP: PLUS_EP_TRUSTED_KEYS: {exc}")
        keys = {}
    out = []
    for node in kernel_nodes(model):
        dig = node_digest(node)
        how = "manifest" if is_recorded(dig, cache_dir) else None
        if how is None and keys:
            try:
                kid = _signed_by(node, dig, keys)
            except TrustError:
                kid = None
            how = f"signature {kid}" if kid else None
        out.append(NodeTrust(node.name, dig.hex(), how))
    return out
