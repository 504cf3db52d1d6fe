"""The cubin reader: what a compiled cubin (a CUDA ELF64 image) itself says about its entry functions and
its target, read without the CUDA driver or any NVIDIA tool.

    from plus_ep.kernels.compile import cubin
    cubin.read_cubin(image)["plus_gemm"]   # CubinInfo(registers=..., smem_static=..., frame=..., ...)
    cubin.cubin_arch(image)                # "sm_90a"

`read_cubin` gives each entry's registers (EIATTR_REGCOUNT in `.nv.info`), frame and minimum stack sizes
and static shared memory (the size of `.nv.shared.<entry>`, less the 1 KB system reservation that sm_90
cubins fold into it); nvrtc.compile_cubin cross-checks the ptxas log's figures against it, the kernel
cache checks a cached cubin with it, and the emulated CUDA driver (plus_ep/verification/emulator.py) takes
the register counts from it.
`cubin_arch` gives the arch the SASS is for (the kernel cache refuses an entry for another arch).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field

from .. import arch as arch_table

_SM90_RESERVED_SMEM = arch_table.RESERVED_SMEM_PER_BLOCK

_EIATTR_FRAME_SIZE = 0x11
_EIATTR_MIN_STACK_SIZE = 0x12
_EIATTR_REGCOUNT = 0x2F
_EIFMT_SVAL = 0x04
_SHT_SYMTAB = 2
_SHT_NOBITS = 8
_STT_FUNC = 2
_STO_CUDA_ENTRY = 0x10


@dataclass
class CubinInfo:
    """What the cubin itself says about each entry function."""
    registers: int | None = None
    smem_static: int = 0
    frame: int = 0
    min_stack: int = 0
    attrs: dict = field(default_factory=dict)


def read_cubin(cubin: bytes) -> dict[str, CubinInfo]:
    """Entry functions of a cubin with registers (EIATTR_REGCOUNT), frame and stack sizes from `.nv.info`
    and static shared memory from `.nv.shared.<entry>`. A minimal ELF64 little-endian reader."""
    d = bytes(cubin)
    if len(d) < 64 or d[:4] != b"\x7fELF" or d[4] != 2 or d[5] != 1:
        raise ValueError("not an ELF64 little-endian cubin")
    shoff, = struct.unpack_from("<Q", d, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", d, 0x3A)
    if shoff + shnum * shentsize > len(d) or shentsize < 64 or shstrndx >= shnum:
        raise ValueError("truncated cubin (section table out of range)")
    secs = [struct.unpack_from("<IIQQQQIIQQ", d, shoff + i * shentsize) for i in range(shnum)]

    def cstr(sec_index: int, off: int) -> str:
        base = secs[sec_index][4] + off
        end = d.index(b"\0", base)
        return d[base:end].decode("utf-8", "replace")

    def body(i: int) -> bytes:
        _, typ, _, _, off, size, *_ = secs[i]
        if typ == _SHT_NOBITS:
            return b""
        if off + size > len(d):
            raise ValueError("truncated cubin (section data out of range)")
        return d[off:off + size]

    names = [cstr(shstrndx, s[0]) for s in secs]
    symtab = next((i for i, s in enumerate(secs) if s[1] == _SHT_SYMTAB), None)
    if symtab is None:
        raise ValueError("cubin without a symbol table")
    strtab = secs[symtab][6]
    syms = []  # (name, info, other)
    raw = body(symtab)
    for off in range(0, len(raw) - 23, 24):
        st_name, st_info, st_other, _, _, _ = struct.unpack_from("<IBBHQQ", raw, off)
        syms.append((cstr(strtab, st_name), st_info, st_other))

    out: dict[str, CubinInfo] = {}
    for name, info, other in syms:
        if info & 0xF == _STT_FUNC and other & _STO_CUDA_ENTRY:
            out[name] = CubinInfo()

    reserved = _SM90_RESERVED_SMEM if any(n.startswith(".nv.shared.reserved") for n in names) else 0
    for i, n in enumerate(names):
        if n.startswith(".nv.shared.") and not n.startswith(".nv.shared.reserved"):
            fn = n[len(".nv.shared."):]
            if fn in out:
                out[fn].smem_static = max(0, secs[i][5] - reserved)

    for i, n in enumerate(names):
        if n != ".nv.info" and not n.startswith(".nv.info."):
            continue
        data, p = body(i), 0
        owner = n[len(".nv.info."):] if n.startswith(".nv.info.") else None
        while p + 4 <= len(data):
            fmt, attr, val = data[p], data[p + 1], struct.unpack_from("<H", data, p + 2)[0]
            if fmt == _EIFMT_SVAL:
                payload, p = data[p + 4:p + 4 + val], p + 4 + val
            else:
                payload, p = None, p + 4
            if owner is None and payload is not None and len(payload) == 8 and attr in (
                    _EIATTR_REGCOUNT, _EIATTR_FRAME_SIZE, _EIATTR_MIN_STACK_SIZE):
                sym, value = struct.unpack("<II", payload)
                fn = syms[sym][0] if sym < len(syms) else None
                if fn in out:
                    if attr == _EIATTR_REGCOUNT:
                        out[fn].registers = value
                    elif attr == _EIATTR_FRAME_SIZE:
                        out[fn].frame = value
                    else:
                        out[fn].min_stack = value
            elif owner in out:
                out[owner].attrs[attr] = payload if payload is not None else val
    return out


_EM_CUDA = 190
_ELFOSABI_CUDA_V7 = 0x33     # e_flags & 0xff is the SM (CUDA <= 12.x cubins)
_ELFOSABI_CUDA_V8 = 0x41     # (e_flags >> 8) & 0xff is the SM (CUDA 13 cubins)
_RE_TKINFO_ARCH = re.compile(rb"-arch[= ]+(sm_\d+a?)\b")


def cubin_arch(cubin: bytes) -> str:
    """The arch a cubin's SASS is for ("sm_80", "sm_90", "sm_90a"), from the ELF header's e_flags
    (SM number) and, for the arch-specific "a" targets, the ptxas command line ptxas leaves in the
    `.note.nv.tkinfo` section. Raises ValueError for anything that is not a CUDA ELF cubin."""
    d = bytes(cubin)
    if len(d) < 64 or d[:4] != b"\x7fELF" or d[4] != 2 or d[5] != 1:
        raise ValueError("not an ELF64 little-endian cubin")
    osabi = d[7]
    e_machine, = struct.unpack_from("<H", d, 18)
    flags, = struct.unpack_from("<I", d, 0x30)
    if e_machine != _EM_CUDA:
        raise ValueError(f"ELF machine {e_machine} is not CUDA ({_EM_CUDA})")
    if osabi == _ELFOSABI_CUDA_V8:
        sm = (flags >> 8) & 0xFF
    elif osabi == _ELFOSABI_CUDA_V7:
        sm = flags & 0xFF
    else:
        raise ValueError(f"unknown CUDA ELF OS/ABI 0x{osabi:02x}")
    arch = f"sm_{sm}"
    try:   # the note is informational: without it the SM number is all we know
        shoff, = struct.unpack_from("<Q", d, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", d, 0x3A)
        secs = [struct.unpack_from("<IIQQQQ", d, shoff + i * shentsize) for i in range(shnum)]
        names_off = secs[shstrndx][4]
        for s in secs:
            name = d[names_off + s[0]:d.index(b"\0", names_off + s[0])]
            if name == b".note.nv.tkinfo":
                m = _RE_TKINFO_ARCH.search(d[s[4]:s[4] + s[5]])
                if m and m.group(1).decode().rstrip("a") == arch:
                    arch = m.group(1).decode()
                break
    except (struct.error, ValueError, IndexError):
        pass
    return arch


# ---- the comparison of a shipped cubin with one assembled here (plus_ep/verification/cubin_check.py)
TOOL_NOTE = ".note.nv.tkinfo"     # the assembler's name, version, build and options: differs by tool build


def tool_note(cubin: bytes) -> list[str]:
    """The NUL-separated strings of the cubin's tool note (["ptxas", "Cuda compilation tools, release
    13.0, V13.0.88", "Build ...", "-v  -arch sm_90a "]), [] when it has none."""
    for name, _, body in _sections(bytes(cubin))[1]:
        if name == TOOL_NOTE:
            desc = body[12 + (struct.unpack_from("<I", body, 0)[0] + 3) // 4 * 4:] if len(body) >= 12 else b""
            return [s.decode("utf-8", "replace") for s in desc.split(b"\0") if s and all(32 <= c < 127 for c in s)]
    return []


def _sections(d: bytes):
    """(ELF header fields, [(name, header tuple, body)], program headers) of an ELF64 LE image."""
    if len(d) < 64 or d[:4] != b"\x7fELF" or d[4] != 2 or d[5] != 1:
        raise ValueError("not an ELF64 little-endian cubin")
    hdr = struct.unpack_from("<16sHHIQQQIHHHHHH", d, 0)
    phoff, shoff, phentsize, phnum, shentsize, shnum, shstrndx = hdr[5], hdr[6], hdr[9], hdr[10], hdr[11], hdr[12], hdr[13]
    if shentsize < 64 or shoff + shnum * shentsize > len(d) or shstrndx >= shnum or \
            (phnum and (phentsize < 56 or phoff + phnum * phentsize > len(d))):
        raise ValueError("truncated cubin (header tables out of range)")
    secs = [struct.unpack_from("<IIQQQQIIQQ", d, shoff + i * shentsize) for i in range(shnum)]

    def body(s) -> bytes:
        if s[1] == _SHT_NOBITS:
            return b""
        if s[4] + s[5] > len(d):
            raise ValueError("truncated cubin (section data out of range)")
        return d[s[4]:s[4] + s[5]]

    strtab = body(secs[shstrndx])
    names = [strtab[s[0]:strtab.index(b"\0", s[0])].decode("utf-8", "replace") if s[0] < len(strtab) else "?"
             for s in secs]
    phdrs = [struct.unpack_from("<IIQQQQQQ", d, phoff + i * phentsize) for i in range(phnum)]
    return hdr, [(n, s, body(s)) for n, s in zip(names, secs)], phdrs


def canonical(cubin: bytes) -> bytes:
    """The cubin with what an assembler build changes left out: the tool note's contents (and the file
    offsets it shifts). Everything else is kept: the ELF header, each section's name, header fields and
    bytes, each program header (its offset as the section it points into), and a ValueError for any
    nonzero byte outside the headers and sections (code hidden between them). Two cubins with the same
    canonical form load the same code."""
    d = bytes(cubin)
    hdr, secs, phdrs = _sections(d)
    out = [repr(hdr[:5] + hdr[7:]).encode()]           # all but e_phoff, e_shoff
    covered = [(0, 64), (hdr[6], hdr[6] + hdr[12] * hdr[11]), (hdr[5], hdr[5] + hdr[10] * hdr[9])]
    for name, s, body in secs:
        keep = b"" if name == TOOL_NOTE else body
        out.append(repr((name, s[1], s[2], s[3], s[5] if name != TOOL_NOTE else -1, s[6], s[7], s[8], s[9])).encode()
                   + b"\0" + keep)
        if s[1] != _SHT_NOBITS:
            covered.append((s[4], s[4] + s[5]))

    def where(off: int):
        if off == hdr[5]:
            return ("phdrs", 0)
        for k, (name, s, _) in enumerate(secs):
            if s[1] != _SHT_NOBITS and s[4] <= off < s[4] + s[5] and name != TOOL_NOTE:
                return (k, off - s[4])
        for k, (_, s, _) in enumerate(secs):
            if s[4] == off:
                return (k, 0)
        return ("file", off)
    for p in phdrs:        # what a segment loads: its start, the sections inside it, the zero fill past the file
        inside = [k for k, (_, s, _) in enumerate(secs) if s[1] != _SHT_NOBITS and s[5] and p[2] <= s[4]
                  and s[4] + s[5] <= p[2] + p[5]]
        out.append(repr((p[0], p[1], where(p[2]), inside, p[3], p[4], p[6] - p[5], p[7])).encode())
    covered.sort()
    at = 0
    for lo, hi in covered + [(len(d), len(d))]:
        if lo > at and any(d[at:lo]):
            raise ValueError(f"nonzero bytes at offsets {at}..{lo} outside every header and section")
        at = max(at, hi)
    return b"\n".join(out)
