"""The kernel image pack (node attribute `plus_images_<arch>`, CONTRACT.md §4): the one writer and
reader in Python; `plus_ep/native/pack.c` is the reader in C.

    from plus_ep.kernels import pack
    blob = pack.write([pack.Image(cubin, ptx_text), ...])   # bytes for a uint8 TENSOR attribute
    images = pack.parse(blob)                                # [Image(cubin=..., ptx=...)]

Format 2 ("PLUSIMG2"), all integers little-endian:

    "PLUSIMG2"  uint32 count
    count x (uint64 cubin_offset, uint64 cubin_size, uint64 ptx_offset, uint64 ptx_size)
    the cubins and the PTX texts, each at a 16-byte aligned offset from the start of the pack

A PTX entry holds the text NVRTC emitted for that cubin followed by one NUL (the size counts the
NUL), so the driver can JIT it in place with cuModuleLoadData; ptx_size 0 means no PTX. Format 1
("PLUSIMG1": uint32 count, count x (uint64 offset, uint64 size), cubins only) is still read.

The tie between a PTX text and its cubin (a pack-level fact, recorded when the compile result goes into
the pack, kernels/CONTRACT.md §4): the PTX entry's last line is a comment

    // plus_ep.pack tie: cubin sha256 <64 hex> ptx sha256 <64 hex>

naming the sha256 of the cubin NVRTC assembled from this PTX in the same compile and of the PTX text
before that line. `tie(cubin, ptx)` writes it, `tie_problem(image)` checks it: a cubin swapped between
two kernels, or a PTX copy edited after the compile, no longer matches. (A PTX comment: the driver's JIT
reads the text as before.) It catches accidents and stale packs, not a forger who rewrites the line.
"""
from __future__ import annotations

import hashlib
import struct

from ...limits import MAX_IMAGES
from dataclasses import dataclass

MAGIC = b"PLUSIMG2"
MAGIC_V1 = b"PLUSIMG1"
ALIGN = 16


@dataclass(frozen=True)
class Image:
    cubin: bytes
    ptx: str | None = None    # NVRTC's PTX for the cubin (None: the pack carries none)

    def __repr__(self) -> str:
        return f"Image(cubin=<{len(self.cubin)} bytes>, ptx={'None' if self.ptx is None else f'<{len(self.ptx)} chars>'})"


TIE = "// plus_ep.pack tie: cubin sha256 "


def tie(cubin: bytes, ptx: str) -> str:
    """`ptx` with its tie line to `cubin` (both from one NVRTC compile); an existing tie line is replaced."""
    body = untied(ptx)
    if body and not body.endswith("\n"):
        body += "\n"
    return (f"{body}{TIE}{hashlib.sha256(bytes(cubin)).hexdigest()} ptx sha256 "
            f"{hashlib.sha256(body.encode()).hexdigest()}\n")


def untied(ptx: str) -> str:
    """The PTX text without its tie line."""
    at = ptx.rfind(TIE)
    return ptx[:at] if at >= 0 and "\n" not in ptx[at:].rstrip("\n") else ptx


def tie_problem(image: Image) -> str | None:
    """Why `image`'s PTX is not tied to its cubin (None when it is, or when the image carries no PTX)."""
    if image.ptx is None:
        return None
    at = image.ptx.rfind(TIE)
    if at < 0:
        return "its PTX carries no tie to its cubin (a pack written before PTX ties: rewrite the model)"
    words = image.ptx[at + len(TIE):].split()
    if len(words) != 4 or words[1:3] != ["ptx", "sha256"]:
        return "its PTX tie line is malformed"
    cubin = hashlib.sha256(image.cubin).hexdigest()
    if words[0] != cubin:
        return (f"its cubin (sha256 {cubin[:12]}) is not the one its PTX was assembled into "
                f"(sha256 {words[0][:12]}): a GPU would run another kernel than the PTX verify executes")
    body = image.ptx[:at]
    if hashlib.sha256(body.encode()).hexdigest() != words[3]:
        return "its PTX was changed after the compile (the text no longer matches the digest recorded with its cubin)"
    return None


class PackError(ValueError):
    """Bytes that are not a well-formed image pack."""


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def write(images) -> bytes:
    """A format-2 pack of `images` (Image, or bytes for a cubin without PTX), in order."""
    items = [im if isinstance(im, Image) else Image(bytes(im)) for im in images]
    if len(items) > MAX_IMAGES:
        raise PackError(f"{len(items)} images exceed the pack limit of {MAX_IMAGES}")
    head = len(MAGIC) + 4 + 32 * len(items)
    offset = _align(head)
    table, body = [], bytearray()

    def place(blob: bytes) -> tuple[int, int]:
        nonlocal offset
        if not blob:
            return 0, 0
        at = offset
        body.extend(blob)
        body.extend(bytes(_align(len(blob)) - len(blob)))
        offset += _align(len(blob))
        return at, len(blob)

    for im in items:
        if not im.cubin:
            raise PackError("an image pack entry needs a non-empty cubin")
        c = place(bytes(im.cubin))
        if im.ptx is not None and "\0" in im.ptx:
            raise PackError("PTX text must not contain NUL characters")
        p = place(im.ptx.encode() + b"\0") if im.ptx is not None else (0, 0)
        table.append(struct.pack("<QQQQ", *c, *p))
    out = MAGIC + struct.pack("<I", len(items)) + b"".join(table)
    return out + bytes(_align(len(out)) - len(out)) + bytes(body)


def parse(blob) -> list[Image]:
    """The images of a format-1 or format-2 pack; PackError says what is wrong."""
    data = bytes(blob)
    if len(data) < 12 or data[:8] not in (MAGIC, MAGIC_V1):
        raise PackError(f"not a PlusEP image pack (it does not start with {MAGIC.decode()} or {MAGIC_V1.decode()})")
    v2 = data[:8] == MAGIC
    (count,) = struct.unpack_from("<I", data, 8)
    entry = 32 if v2 else 16
    table_end = 12 + count * entry
    if count > MAX_IMAGES or table_end > len(data):
        raise PackError(f"table of {count} entries does not fit in {len(data)} bytes")

    def piece(i: int, off: int, size: int, what: str) -> bytes:
        if off < table_end or off > len(data) or size > len(data) - off:
            raise PackError(f"{what} of image {i} (offset {off}, {size} bytes) lies outside the {len(data)}-byte pack")
        return data[off:off + size]

    out = []
    for i in range(count):
        if v2:
            co, cs, po, ps = struct.unpack_from("<QQQQ", data, 12 + entry * i)
        else:
            (co, cs), (po, ps) = struct.unpack_from("<QQ", data, 12 + entry * i), (0, 0)
        if cs == 0:
            raise PackError(f"image {i} has an empty cubin")
        cubin = piece(i, co, cs, "cubin")
        ptx = None
        if ps:
            raw = piece(i, po, ps, "PTX")
            if raw[-1:] != b"\0":
                raise PackError(f"PTX of image {i} is not NUL-terminated")
            ptx = raw[:-1].decode("utf-8")
        out.append(Image(cubin, ptx))
    return out


def pack_images(cubins, ptx=None) -> bytes:
    """write() from parallel lists: cubins and (optionally) their PTX texts."""
    cubins = list(cubins)
    ptx = list(ptx) if ptx is not None else [None] * len(cubins)
    return write([Image(bytes(c), p) for c, p in zip(cubins, ptx, strict=True)])


def unpack_images(blob) -> list[bytes]:
    """The cubins of a pack, in order."""
    return [im.cubin for im in parse(blob)]
