"""Global memory of the interpreter: host buffers mapped at their own addresses.

    mem = GlobalMemory()
    mem.map(ptr, nbytes, "A")          # real host memory (a malloc'd pointer, an array's .ctypes.data)
    addr = mem.map_array(arr, "B")     # convenience: maps a numpy array, returns its address
    mem.unmap(addr)

Device addresses are host addresses: a kernel's pointer p reads the bytes at p through a numpy view
(ctypes), so a driver can hand the interpreter malloc'd pointers. Every access is checked against the
mapped buffers; one outside all of them is a PtxError naming the nearest buffer.
"""
from __future__ import annotations

import bisect
import ctypes
from dataclasses import dataclass, field

import numpy as np

from .errors import PtxError


@dataclass
class Buffer:
    start: int
    nbytes: int
    name: str
    view: np.ndarray                      # uint8 view of the host bytes
    keep: object = None                   # keeps a mapped numpy array alive
    nc_read: np.ndarray | None = field(default=None, repr=False)    # checker shadow: read through .nc
    written: np.ndarray | None = field(default=None, repr=False)    # checker shadow: stored this launch

    @property
    def end(self) -> int:
        return self.start + self.nbytes


class GlobalMemory:
    def __init__(self):
        self._bufs: list[Buffer] = []
        self._starts: list[int] = []

    # ------------------------------------------------------------------------------- mapping
    def map(self, address: int, nbytes: int, name: str, _keep=None) -> int:
        address, nbytes = int(address), int(nbytes)
        if address <= 0 or nbytes < 0:
            raise ValueError(f"cannot map {name!r} at {address:#x} ({nbytes} bytes)")
        for b in self._bufs:
            if address < b.end and b.start < address + max(nbytes, 1):
                raise ValueError(f"{name!r} [{address:#x}, +{nbytes}) overlaps mapped buffer {b.name!r} "
                                 f"[{b.start:#x}, +{b.nbytes})")
        view = (np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(address)) if nbytes
                else np.zeros(0, np.uint8))
        i = bisect.bisect(self._starts, address)
        self._bufs.insert(i, Buffer(address, nbytes, name, view, _keep))
        self._starts.insert(i, address)
        return address

    def map_array(self, array: np.ndarray, name: str) -> int:
        """Map a C-contiguous, writeable numpy array; returns its address (kernel writes land in it)."""
        if not (array.flags.c_contiguous and array.flags.writeable):
            raise ValueError(f"{name!r}: map_array needs a C-contiguous writeable array")
        return self.map(array.ctypes.data, array.nbytes, name, _keep=array)

    def unmap(self, address: int) -> None:
        i = bisect.bisect_left(self._starts, int(address))
        if i >= len(self._starts) or self._starts[i] != int(address):
            raise KeyError(f"no buffer mapped at {int(address):#x}")
        del self._starts[i]
        del self._bufs[i]

    @property
    def buffers(self) -> list[Buffer]:
        return list(self._bufs)

    # ------------------------------------------------------------------------------- lookup
    def nearest(self, address: int) -> str:
        if not self._bufs:
            return "no buffers are mapped"
        best = min(self._bufs, key=lambda b: 0 if b.start <= address < b.end else
                   min(abs(address - b.start), abs(address - b.end)))
        if address < best.start:
            rel = f"{best.start - address} bytes before"
        elif address >= best.end:
            rel = f"{address - best.end} bytes past the end of"
        else:
            rel = f"at offset {address - best.start} of"
        return f"{rel} {best.name!r} [{best.start:#x}, +{best.nbytes})"

    def locate(self, addrs: np.ndarray, size: int):
        """Buffer index of each address, or raise-ready info: returns (idx array, bad mask)."""
        a = addrs.astype(np.uint64)
        starts = np.array(self._starts, np.uint64) if self._starts else np.zeros(0, np.uint64)
        i = np.searchsorted(starts, a, side="right").astype(np.int64) - 1
        if not self._bufs:
            return i, np.ones(a.shape, bool)
        ends = np.array([b.end for b in self._bufs], np.uint64)
        ok = (i >= 0) & (a + np.uint64(size) <= ends[np.maximum(i, 0)])
        return i, ~ok

    def _views(self, addrs, size, where):
        idx, bad = self.locate(addrs, size)
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise _Oob(k, int(addrs[k]), size, self.nearest(int(addrs[k])))
        return idx

    def gather(self, addrs: np.ndarray, size: int) -> np.ndarray:
        """bytes [n, size] read at each address."""
        idx = self._views(addrs, size, "load")
        out = np.empty((len(addrs), size), np.uint8)
        off = np.arange(size, dtype=np.int64)
        for bi in np.unique(idx):
            b = self._bufs[bi]
            sel = idx == bi
            rel = (addrs[sel].astype(np.int64) - b.start)[:, None] + off
            out[sel] = b.view[rel]
        return out

    def scatter(self, addrs: np.ndarray, data: np.ndarray) -> None:
        """Write data [n, size] at each address (in thread order: a later thread wins)."""
        size = data.shape[1]
        idx = self._views(addrs, size, "store")
        off = np.arange(size, dtype=np.int64)
        for bi in np.unique(idx):
            b = self._bufs[bi]
            sel = idx == bi
            rel = (addrs[sel].astype(np.int64) - b.start)[:, None] + off
            b.view[rel] = data[sel]

    def buffer_of(self, addrs: np.ndarray, size: int):
        return self._views(addrs, size, "access")


class _Oob(Exception):
    def __init__(self, k, addr, size, where):
        self.k, self.addr, self.size, self.where = k, addr, size, where


def oob_error(kernel: str, line: int, form: str, tid: int, ctaid, e: _Oob, space: str = "global") -> PtxError:
    return PtxError(f"out-of-bounds {space} access of {e.size} bytes at {e.addr:#x} by thread {tid} "
                    f"of CTA {tuple(ctaid)}: {e.where}", form=form, line=line, kernel=kernel)
