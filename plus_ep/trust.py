"""A model file is data: which embedded kernels this installation runs (the Python half of the trust
policy; the launcher enforces it in C, plus_ep/native/trust.c, before any image is loaded; the guide is
docs/guide/trust.md).

    from plus_ep import trust
    trust.status(model)                    # per fused node: how it is trusted (manifest, signature) or why not
    report = rebuild.rebuild(model)        # plus_ep/rebuild.py: every node rebuilt here from its function body
    model, what = rebuild.resolve(model)   # the embedded kernels if identical, else the local build (recorded)
    trust.record_model(model, "accepted by the operator")   # vouch without rebuilding (an explicit opt-out)
    trust.sign_model(model, "key.pem")     # Ed25519 signatures of every node (the [sign] extra: cryptography)
    trust.sign_whole_model(model, "key.pem")   # one signature over the whole model (for distribution)

A fused node's **digest** covers the whole node as the graph holds it (CONTRACT.md §5; the same bytes as
plus_trust_node_digest in C): domain, op type and name, how many inputs and outputs it has and which
of them are wired, its STRING attributes (plan, pattern, pgraph, pgraph_hash, template and `plus_body`,
the sha256 of the function body it calls) and every image pack; `plus_signature` is the one attribute
it leaves out, and any other attribute makes the node refused. The launcher runs a node's images only when
  (a) the digest is in a trust manifest: a file <trust dir>/<hex[:2]>/<hex> naming the digest, which
      this installation wrote because it built those kernels itself (every rewrite with kernels
      records what it built), rebuilt them from the node's function body and got the same bytes, or
      checked a whole-model signature (`plus-ep trust MODEL`); the trust dir is $PLUS_EP_TRUST_DIR,
      else <cache root>/trusted;
  (b) the node's `plus_signature` is an Ed25519 signature of the digest by a key listed in the file
      $PLUS_EP_TRUSTED_KEYS (lines `ed25519 <base64 public key> [comment]`);
  (c) the operator opted out: PLUS_EP_TRUST=any, or the session's option (custom op: session config
      entry `plus_ep.trust=any`; plugin EP: provider option `trust=any`), with one warning per process.
A trust dir or keys file that another user could change (ssh's StrictModes rule: `safe_path`) counts
for nothing, with the chmod/chown that fixes it.
"""
from __future__ import annotations

import base64
import datetime
import hashlib
import json
import logging
import os
import pathlib
import stat
import struct
import time
from dataclasses import dataclass, field

import onnx
from onnx import numpy_helper

from . import config
from .kernels.compile.files import safe_path, write_atomic

log = logging.getLogger("plus_ep")

DIGEST_TAG = b"plus_ep node 2\n"
MODEL_TAG = b"plus_ep model 1\n"
SIGNATURE_TAG = b"plus_ep signature 1\n"
SIGNATURE_ATTR = "plus_signature"
BODY_ATTR = "plus_body"
MODEL_SIGNATURE = "plus_ep.signature"  # model metadata: the whole-model signature
STRINGS = ("pattern", "pgraph", "pgraph_hash", "plus_body", "plus_plan", "template")   # byte order (trust.c)
PACK_PREFIX = "plus_images_"
SESSION_KEY = "plus_ep.trust"          # custom op: session config entry; plugin EP: provider option `trust`
REWRITE_METADATA = "plus_ep.rewrite"   # model metadata: the options a rewrite used (for the rebuild)
POLICIES = ("verify", "any")
MAX_KEYS = 64                          # PLUS_TRUST_MAX_KEYS
MAX_KEYS_FILE = 1 << 20                # PLUS_TRUST_MAX_KEYS_FILE
TMP_AGE = 60.0                         # a .tmp file older than this (seconds) is a failed write's leftover


class TrustError(ValueError):
    """A model's embedded kernels cannot be trusted or rebuilt here."""


# ------------------------------------------------------------------------------------------- digest
@dataclass(frozen=True)
class NodeKey:
    """What a node digest covers (see the module docstring): inputs/outputs as wired flags."""
    domain: str
    op_type: str
    name: str
    inputs: tuple
    outputs: tuple
    strings: dict = field(default_factory=dict)     # name in STRINGS -> bytes
    packs: dict = field(default_factory=dict)       # arch -> bytes


def node_packs(node: onnx.NodeProto) -> dict:
    """{arch: image pack bytes} of a fused node (its plus_images_<arch> attributes)."""
    return {a.name[len(PACK_PREFIX):]: numpy_helper.to_array(a.t).tobytes()
            for a in node.attribute if a.name.startswith(PACK_PREFIX)}


def node_plan(node: onnx.NodeProto) -> bytes | None:
    """The node's plus_plan text, None when it carries none."""
    return next((a.s for a in node.attribute if a.name == "plus_plan"), None)


def listed_archs(plan: bytes) -> list | None:
    """The archs of the plan's `archs` line (None when it has none), as trust.c reads them."""
    for line in plan.split(b"\n"):
        if line.startswith(b"archs "):
            return [a.decode("utf-8", "replace") for a in line[6:].split(b" ") if a]
    return None


def node_key(node: onnx.NodeProto) -> NodeKey:
    """The node as its digest sees it; TrustError naming the attribute for a node that is not a fused
    node's shape (an unknown attribute, a STRING attribute of another type, a pack the plan's `archs`
    line does not list, no plan)."""
    strings, packs = {}, {}
    for a in node.attribute:
        if a.name == SIGNATURE_ATTR:
            continue
        if a.name in STRINGS:
            if a.type != onnx.AttributeProto.STRING:
                raise TrustError(f"attribute '{a.name}' is not a STRING")
            strings[a.name] = bytes(a.s)
        elif a.name.startswith(PACK_PREFIX) and len(a.name) > len(PACK_PREFIX):
            if a.type != onnx.AttributeProto.TENSOR:
                raise TrustError(f"attribute '{a.name}' is not a TENSOR")
            arch = a.name[len(PACK_PREFIX):]
            if arch in packs:
                raise TrustError(f"two plus_images_{arch} attributes")
            packs[arch] = numpy_helper.to_array(a.t).tobytes()
        else:
            raise TrustError(f"attribute '{a.name}' is not part of a fused node (kernels/CONTRACT.md §5)")
    return NodeKey(node.domain, node.op_type, node.name, tuple(bool(i) for i in node.input),
                   tuple(bool(o) for o in node.output), strings, packs)


def _str(b: bytes) -> bytes:
    return struct.pack("<Q", len(b)) + b


def digest(key: NodeKey) -> bytes:
    """sha256 of a NodeKey, as plus_trust_node_digest (trust.h states the layout); TrustError for a
    node without a plan or whose packs and `archs` line disagree."""
    plan = key.strings.get("plus_plan")
    if plan is None:
        raise TrustError("the node carries no plus_plan attribute")
    listed = listed_archs(plan)
    for arch in key.packs:
        if listed is not None and arch not in listed:
            raise TrustError(f"attribute plus_images_{arch}: the plan's `archs` line does not list {arch}")
    for arch in listed or ():
        if arch not in key.packs:
            raise TrustError(f"the plan's `archs` line lists {arch} but the node has no attribute plus_images_{arch}")
    h = hashlib.sha256(DIGEST_TAG)
    h.update(_str(key.domain.encode()) + _str(key.op_type.encode()) + _str(key.name.encode()))
    for flags in (key.inputs, key.outputs):
        h.update(struct.pack("<I", len(flags)) + bytes(int(f) for f in flags))
    present = [s for s in STRINGS if s in key.strings]
    h.update(struct.pack("<I", len(present)))
    for s in present:
        h.update(_str(s.encode()) + _str(key.strings[s]))
    h.update(struct.pack("<I", len(key.packs)))
    for arch in sorted(key.packs, key=lambda a: a.encode()):
        h.update(_str(arch.encode()) + _str(bytes(key.packs[arch])))
    return h.digest()


def node_digest(node: onnx.NodeProto) -> bytes:
    """The digest of a fused node (TrustError naming the node when it has none)."""
    try:
        return digest(node_key(node))
    except TrustError as exc:
        raise TrustError(f"node '{node.name}': {exc}") from None


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


# -------------------------------------------------------------------------------- function bodies
def _functions(model: onnx.ModelProto) -> dict:
    return {(f.domain, f.name, f.overload): f for f in model.functions}


def body_digest(function: onnx.FunctionProto) -> str:
    """The hex sha256 a node's `plus_body` names: the function's deterministic serialization."""
    return hashlib.sha256(function.SerializeToString(deterministic=True)).hexdigest()


def bind_bodies(model: onnx.ModelProto, nodes=None) -> None:
    """Set `plus_body` on each kernel node (default: all) that calls a model-local function."""
    funcs = _functions(model)
    for node in kernel_nodes(model) if nodes is None else nodes:
        f = funcs.get((node.domain, node.op_type, node.overload))
        if f is None:
            continue
        for a in [a for a in node.attribute if a.name == BODY_ATTR]:
            node.attribute.remove(a)
        node.attribute.append(onnx.helper.make_attribute(BODY_ATTR, body_digest(f)))


def body_problem(model: onnx.ModelProto, node: onnx.NodeProto) -> str | None:
    """Why `node`'s function body is not the one its `plus_body` binds (None when it is, or when it
    binds none: every rewrite binds it, and the digest covers its absence, so it cannot be dropped)."""
    bound = next((a.s.decode("ascii", "replace") for a in node.attribute if a.name == BODY_ATTR), None)
    if bound is None:
        return None
    f = _functions(model).get((node.domain, node.op_type, node.overload))
    if f is None:
        return "it binds a function body the model does not hold"
    if bound != body_digest(f):
        return "its function body is not the one its plus_body names (the body was changed)"
    return None


# ------------------------------------------------------------------------------------- the folder rule
def _private(st: os.stat_result) -> bool:
    return st.st_uid in (os.geteuid(), 0) and not st.st_mode & 0o022


# ----------------------------------------------------------------------------------------- manifest
def trust_dir(cache_dir: str | os.PathLike | None = None) -> pathlib.Path:
    """$PLUS_EP_TRUST_DIR, else <cache root>/trusted (the same folder trust.c searches)."""
    return config.path("PLUS_EP_TRUST_DIR") or config.cache_root(cache_dir) / config.TRUSTED


def _entry(d: pathlib.Path, hexd: str) -> pathlib.Path:
    return d / hexd[:2] / hexd


def _dirs(cache_dir=None) -> list:
    return [trust_dir()] + ([config.cache_root(cache_dir) / config.TRUSTED] if cache_dir else [])


def _names_digest(path: pathlib.Path, hexd: str) -> bool:
    """The entry at `path` exists, is private to this user and names the digest (as trust.c reads it)."""
    try:
        if not _private(os.stat(path.parent)):
            return False
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not _private(st) or st.st_size >= 4096:
            return False
        return f'"digest": "{hexd}"'.encode() in os.read(fd, 4096)
    finally:
        os.close(fd)


def dir_problems(cache_dir=None) -> list:
    """Why a trust dir the launcher searches counts for nothing (safe_path), one line each."""
    return [p for p in (safe_path("trust folder", d) for d in _dirs(cache_dir)) if p]


def is_recorded(dig: bytes, cache_dir=None) -> bool:
    hexd = dig.hex()
    return any(safe_path("trust folder", d) is None and _names_digest(_entry(d, hexd), hexd) for d in _dirs(cache_dir))


class RecordError(TrustError):
    """The manifest entry could not be written (an unsafe, read-only or full trust folder)."""


def record(dig: bytes, note: str, cache_dir=None, folder: str | os.PathLike | None = None) -> pathlib.Path:
    """Write the manifest entry of one digest, atomically (a failed write leaves no file), in the trust
    dir (or `folder`: a manifest to ship, e.g. beside a Triton model); RecordError when that folder is
    unsafe (safe_path) or cannot be written: the launcher then refuses that node until it is recorded."""
    d = pathlib.Path(folder) if folder is not None else trust_dir(cache_dir)
    hexd = dig.hex()
    path = _entry(d, hexd)
    problem = safe_path("trust folder", d)
    if problem:
        raise RecordError(problem)
    if _names_digest(path, hexd):
        return path
    text = json.dumps({"digest": hexd, "recorded": datetime.datetime.now(datetime.timezone.utc).isoformat(
        timespec="seconds"), "note": note}) + "\n"
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        problem = safe_path("trust folder", path.parent)     # a folder made now under another umask
        if problem:
            raise RecordError(problem)
        write_atomic(path, text.encode())
    except OSError as exc:
        raise RecordError(f"cannot record trusted kernels in {d} ({exc.strerror or exc}); the launcher refuses "
                          "them until they are recorded (set PLUS_EP_TRUST_DIR to a writable folder)") from None
    return path


def record_nodes(nodes, note: str, cache_dir=None, folder=None) -> tuple[int, list]:
    """Record each node's digest: (how many entries exist now, the reasons of the failures). Each
    reason is also warned once."""
    n, failures = 0, []
    for node in nodes:
        try:
            record(node_digest(node), f"{note}: node {node.name}", cache_dir, folder)
            n += 1
        except TrustError as exc:
            failures.append(str(exc))
            _warn_once(f"PlusEP: {exc}")
    return n, failures


def record_model(model: onnx.ModelProto, note: str, cache_dir=None) -> int:
    """Record every kernel node of `model`; returns how many entries exist now."""
    return record_nodes(kernel_nodes(model), note, cache_dir)[0]


def record_built(model: onnx.ModelProto, plans, note: str = "built here") -> int:
    """What a rewrite built: bind the function body of each kernel node whose plan is in `plans`
    (bind_bodies), then record those nodes. Returns how many were recorded."""
    plans = {p.encode() if isinstance(p, str) else bytes(p) for p in plans}
    nodes = [n for n in kernel_nodes(model) if node_plan(n) in plans]
    bind_bodies(model, nodes)
    return record_nodes(nodes, note)[0]


def sweep(folder: str | os.PathLike, age: float = TMP_AGE) -> int:
    """Remove the `.tmp` files a failed or interrupted write left under `folder` (older than `age`
    seconds: a younger one may be another process's write in progress). Returns how many went."""
    gone, now = 0, time.time()
    for root, _, files in os.walk(folder):
        for f in files:
            p = os.path.join(root, f)
            try:
                if f.endswith(".tmp") and now - os.lstat(p).st_mtime >= age:
                    os.remove(p)
                    gone += 1
            except OSError:
                pass
    return gone


_warned: set = set()


def _warn_once(msg: str) -> None:
    if msg not in _warned:
        _warned.add(msg)
        log.warning(msg)


def policy(value: str | None = None) -> str:
    """PLUS_EP_TRUST (or `value`): "verify" (unset, empty, "verify") or "any" (every model's embedded
    kernels run unchecked); anything else, " any" included, is a TrustError (as plus_trust_policy)."""
    value = (config.get("PLUS_EP_TRUST") or "") if value is None else value
    if value in ("", "verify"):
        return "verify"
    if value == "any":
        return "any"
    raise TrustError(f"PLUS_EP_TRUST='{value}' is not a policy: use 'any' (run every model's embedded kernels "
                     "unchecked) or 'verify' (the default)")


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


def _signature_text(key, message: bytes) -> str:
    _, ser = _crypto()
    kid = key_id(key.public_key().public_bytes(ser.Encoding.Raw, ser.PublicFormat.Raw))
    return f"ed25519 {kid} {base64.b64encode(key.sign(SIGNATURE_TAG + message)).decode()}"


def sign_model(model: onnx.ModelProto, key_path) -> int:
    """Sign every kernel node of `model` in place (attribute plus_signature); returns the count."""
    key = _private_key(key_path)
    n = 0
    for node in kernel_nodes(model):
        sig = _signature_text(key, node_digest(node))
        for a in [a for a in node.attribute if a.name == SIGNATURE_ATTR]:
            node.attribute.remove(a)
        node.attribute.append(onnx.helper.make_attribute(SIGNATURE_ATTR, sig))
        n += 1
    return n


def _copy_fields(src, dst, skip=()) -> None:
    for fd, value in src.ListFields():
        if fd.name in skip:
            continue
        repeated = fd.is_repeated if hasattr(fd, "is_repeated") else fd.label == fd.LABEL_REPEATED
        if repeated:
            getattr(dst, fd.name).extend(value)
        elif fd.message_type is not None:
            getattr(dst, fd.name).CopyFrom(value)
        else:
            setattr(dst, fd.name, value)


def model_digest(model: onnx.ModelProto) -> bytes:
    """sha256 over the whole model as loaded (graph, functions, attributes, metadata but the
    whole-model signature itself; each initializer by its name, type, dims and values, so the way it
    is stored, inline or in an external file, does not matter and no protobuf of the whole model is
    built): what sign_whole_model signs."""
    shell = onnx.ModelProto()
    _copy_fields(model, shell, skip=("graph", "metadata_props"))
    shell.metadata_props.extend(p for p in model.metadata_props if p.key != MODEL_SIGNATURE)
    _copy_fields(model.graph, shell.graph, skip=("initializer",))
    h = hashlib.sha256(MODEL_TAG)
    h.update(_str(shell.SerializeToString(deterministic=True)))
    h.update(struct.pack("<Q", len(model.graph.initializer)))
    for t in model.graph.initializer:
        h.update(_tensor_digest(t))
    return h.digest()


def _tensor_digest(t: onnx.TensorProto) -> bytes:
    """sha256 of an initializer's name, type, dims and values, however they are stored (typed fields,
    raw_data, or an external file that onnx.load has read in)."""
    h = hashlib.sha256(_str(t.name.encode()) + struct.pack("<iQ", t.data_type, len(t.dims)))
    h.update(b"".join(struct.pack("<q", d) for d in t.dims))
    if t.data_type == onnx.TensorProto.STRING:
        for v in t.string_data:
            h.update(_str(bytes(v)))
    else:
        h.update(numpy_helper.to_array(t).tobytes())
    return h.digest()


def sign_whole_model(model: onnx.ModelProto, key_path) -> str:
    """Sign the whole model in place (metadata plus_ep.signature; the node signatures stay as they are);
    returns the key id. Sign last: any later change of the model breaks the signature."""
    key = _private_key(key_path)
    for p in [p for p in model.metadata_props if p.key == MODEL_SIGNATURE]:
        model.metadata_props.remove(p)
    text = _signature_text(key, model_digest(model))
    model.metadata_props.append(onnx.StringStringEntryProto(key=MODEL_SIGNATURE, value=text))
    return text.split(" ")[1]


def parse_keys(text: bytes, max_keys: int = MAX_KEYS) -> dict:
    """{key id: raw public key} of a keys file's bytes, with plus_trust_parse_keys's rules and words:
    fields separated by spaces or tabs, '#' comments, canonical base64 of 32 bytes, at most max_keys
    keys, no NUL byte. TrustError("line N: ...")."""
    keys, count = {}, 0
    for no, raw_line in enumerate(bytes(text).split(b"\n"), 1):
        if b"\0" in raw_line:
            raise TrustError(f"line {no}: a NUL byte (not a text file)")
        line = raw_line.strip(b" \t\r")
        if not line or line.startswith(b"#"):
            continue
        if len(line) < 8 or not line.startswith(b"ed25519") or line[7:8] not in (b" ", b"\t"):
            raise TrustError(f"line {no}: expected `ed25519 <base64 public key> [comment]`")
        token = line[7:].lstrip(b" \t\r")
        for sep in (b" ", b"\t", b"\r"):
            token = token.split(sep)[0]
        if count == max_keys:
            raise TrustError(f"line {no}: more than {max_keys} keys")
        count += 1
        try:
            raw = base64.b64decode(token, validate=True)
        except ValueError:
            raw = b""
        if len(raw) != 32 or base64.b64encode(raw) != token:
            raise TrustError(f"line {no}: the key is not the base64 of a 32-byte Ed25519 public key")
        keys[key_id(raw)] = raw
    return keys


def read_keys(path: str | os.PathLike) -> dict:
    """The keys file at `path` (plus_trust_read_keys): TrustError for an unsafe path (safe_path), a
    folder, a file over MAX_KEYS_FILE bytes, or a line it cannot read."""
    problem = safe_path("PLUS_EP_TRUSTED_KEYS", path)
    if problem:
        raise TrustError(problem)
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            kind = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise TrustError(f"PLUS_EP_TRUSTED_KEYS={path} is {kind}, not a keys file")
        if st.st_size > MAX_KEYS_FILE:
            raise TrustError(f"PLUS_EP_TRUSTED_KEYS={path} is larger than {MAX_KEYS_FILE} bytes")
        text = pathlib.Path(path).read_bytes()
    except OSError as exc:
        raise TrustError(f"PLUS_EP_TRUSTED_KEYS={path} cannot be read ({exc.strerror or exc})") from None
    try:
        return parse_keys(text)
    except TrustError as exc:
        raise TrustError(f"PLUS_EP_TRUSTED_KEYS={path} {exc}") from None


def trusted_keys(path=None) -> dict:
    """{key id: raw public key} of the keys file ($PLUS_EP_TRUSTED_KEYS when path is None)."""
    path = path or config.get("PLUS_EP_TRUSTED_KEYS")
    return read_keys(path) if path else {}


def _verified(text: str | None, message: bytes, keys: dict) -> str | None:
    """The key id when `text` ("ed25519 <id> <base64>") signs `message` by one of `keys`, else None."""
    if not text or not keys:
        return None
    parts = text.split(" ")
    if len(parts) != 3 or parts[0] != "ed25519" or parts[1] not in keys:
        return None
    ed25519, _ = _crypto()
    try:
        sig = base64.b64decode(parts[2], validate=True)
        if base64.b64encode(sig).decode() != parts[2]:
            return None
        ed25519.Ed25519PublicKey.from_public_bytes(keys[parts[1]]).verify(sig, SIGNATURE_TAG + message)
    except Exception:  # noqa: BLE001  (InvalidSignature, bad base64: not signed by that key)
        return None
    return parts[1]


def model_signer(model: onnx.ModelProto, keys: dict | None = None) -> str | None:
    """The key id of the model's valid whole-model signature by a listed key (else None)."""
    text = next((p.value for p in model.metadata_props if p.key == MODEL_SIGNATURE), None)
    if text is None:
        return None
    keys = trusted_keys() if keys is None else keys
    try:
        return _verified(text, model_digest(model), keys)
    except TrustError:
        return None


# ------------------------------------------------------------------------------------------- status
@dataclass
class NodeTrust:
    node: str
    digest: str                 # hex ("" when the node has none)
    how: str | None             # "manifest", "signature <key id>", or None (refused unless opted out)
    why: str = ""               # why not, when how is None


def status(model: onnx.ModelProto, cache_dir=None) -> list:
    """How the launcher would treat each kernel node of `model` (before any opt-out), with the reason
    for a node it refuses; a node whose function body is not the one it binds is refused here too."""
    try:
        keys, key_problem = trusted_keys(), ""
    except TrustError as exc:
        keys, key_problem = {}, str(exc)
        _warn_once(f"PlusEP: {exc}")
    folders = "; ".join(dir_problems(cache_dir))
    out = []
    for node in kernel_nodes(model):
        try:
            dig = node_digest(node)
        except TrustError as exc:
            out.append(NodeTrust(node.name, "", None, str(exc)))
            continue
        body = body_problem(model, node)
        if body:
            out.append(NodeTrust(node.name, dig.hex(), None, body))
            continue
        how = "manifest" if is_recorded(dig, cache_dir) else None
        if how is None and keys:
            sig = next((a.s.decode("utf-8", "replace") for a in node.attribute if a.name == SIGNATURE_ATTR), None)
            try:
                kid = _verified(sig, dig, keys)
            except TrustError:
                kid = None
            how = f"signature {kid}" if kid else None
        why = "" if how else "; ".join(x for x in (folders, key_problem) if x) or \
            "in no trust manifest and signed by no listed key"
        out.append(NodeTrust(node.name, dig.hex(), how, why))
    return out
