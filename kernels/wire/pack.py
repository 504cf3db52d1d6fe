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
"""
from __future__ import annotations

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
