"""Byte-level access to the state spaces (global, shared, param, local) for decoded ops, with the
out-of-bounds errors, the checker hooks and the memory counters in one place."""
from __future__ import annotations

import numpy as np

from .errors import PtxError
from .memory import _Oob, oob_error

# The shared::cluster address window (32 bits, cluster.py): `(rank + 1) << RANK_SHIFT | offset`; generic
# addresses of shared memory are that window plus GENERIC_SHARED (above every host address).
RANK_SHIFT = 24
OFFSET_MASK = (1 << RANK_SHIFT) - 1
GENERIC_SHARED = 0xFE00_0000_0000_0000
# generic addresses of a thread's .local frame: the frame offset plus GENERIC_LOCAL (cvta.local and back). NVRTC's
# stack for sinf/cosf's slow argument reduction takes that round trip and then uses ld/st.local; a generic load or
# store inside the window is not implemented (it reads global memory: out of bounds, a loud error)
GENERIC_LOCAL = 0xFD00_0000_0000_0000
# Generic addresses of kernel parameters (`cvta.param`: a __grid_constant__ parameter's address, e.g. a tensor
# map's): the parameter's offset plus GENERIC_PARAM, a window below the local one.
GENERIC_PARAM = 0xFC00_0000_0000_0000


def param_window(addrs):
    """Mask of generic addresses in the parameter window [GENERIC_PARAM, GENERIC_LOCAL)."""
    a = np.asarray(addrs).astype(np.uint64)
    return (a >= np.uint64(GENERIC_PARAM)) & (a < np.uint64(GENERIC_LOCAL))


def _tids(M, m):
    return M.tid_linear if m is None else np.flatnonzero(m)


def active(m, T):
    return np.arange(T) if m is None else np.flatnonzero(m)


def shared_bounds(M, op, addrs, size, tids):
    a = addrs.astype(np.int64)
    bad = (a < 0) | (a + size > M.smem.size)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise PtxError(f"out-of-bounds shared access of {size} bytes at {int(a[k]):#x} by thread {int(tids[k])} "
                       f"of CTA {M.ctaid}: the CTA has {M.smem.size} bytes of shared memory "
                       f"({_shared_where(M, int(a[k]))})", form=op.form, line=op.line, kernel=M.name)
    return a


def _shared_where(M, addr):
    if not M.shared_syms:
        return "no shared variables"
    names = sorted(M.shared_syms.items(), key=lambda kv: kv[1])
    inside = [n for n, base in names if base <= addr]
    return f"nearest variable {inside[-1] if inside else names[0][0]}"


def shared_read(M, op, addrs, size, tids, proxy="generic"):
    """bytes [n, size] at shared addresses (the poison of unwritten bytes included)."""
    a = shared_bounds(M, op, addrs, size, tids)
    idx = a[:, None] + np.arange(size)
    if M.checks is not None:
        M.checks.shared_read(M, op, idx, tids, proxy)
    if M.counters is not None and proxy == "generic":
        M.counters.shared(M, op, a, size, tids, "ld")
    return M.smem[idx]


def shared_write(M, op, addrs, data, tids, count=True):
    size = data.shape[1]
    a = shared_bounds(M, op, addrs, size, tids)
    idx = a[:, None] + np.arange(size)
    if M.checks is not None:
        M.checks.shared_write(M, op, idx, tids)
    if M.counters is not None and count:
        M.counters.shared(M, op, a, size, tids, "st")
    M.smem[idx] = data


def local_access(M, op, addrs, size, tids, data=None):
    """Each thread's own .local bytes at `addrs` (offsets in its local frame): read [n, size], or write
    `data`. Private memory: no race or counter bookkeeping."""
    a = addrs.astype(np.int64)
    bad = (a < 0) | (a + size > M.lmem.shape[1])
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise PtxError(f"out-of-bounds local access of {size} bytes at {int(a[k]):#x} by thread {int(tids[k])} "
                       f"of CTA {M.ctaid}: its frame has {M.lmem.shape[1]} bytes", form=op.form, line=op.line,
                       kernel=M.name)
    rows, cols = tids[:, None], a[:, None] + np.arange(size)
    if data is None:
        return M.lmem[rows, cols]
    M.lmem[rows, cols] = data
    return None


def global_read(M, op, addrs, size, tids, nc=False, cg=False, count=True):
    """`cg`: an ld.global.cg (L2 only), counted apart as global_ld_cg (profile.py: the row finish's reads);
    `count` False: the caller counts the access itself (a bulk copy's box, as 16-byte chunks)."""
    try:
        out = M.gmem.gather(addrs, size)
    except _Oob as e:
        raise oob_error(M.name, op.line, op.form, int(tids[e.k]), M.ctaid, e) from None
    if M.checks is not None:
        M.checks.global_access(M, op, addrs, size, tids, "nc" if nc else "ld")
    if M.counters is not None and count:
        M.counters.global_(M, op, addrs, size, tids, "ld_cg" if cg else "ld")
    return out


def global_write(M, op, addrs, data, tids):
    size = data.shape[1]
    try:
        M.gmem.buffer_of(addrs, size)
    except _Oob as e:
        raise oob_error(M.name, op.line, op.form, int(tids[e.k]), M.ctaid, e) from None
    if M.checks is not None:
        M.checks.global_access(M, op, addrs, size, tids, "st")
    if M.counters is not None:
        M.counters.global_(M, op, addrs, size, tids, "st")
    M.gmem.scatter(addrs, data)


def param_read(M, op, addrs, size, tids):
    a = addrs.astype(np.int64)
    bad = (a < 0) | (a + size > M.params.size)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise PtxError(f"out-of-bounds .param read of {size} bytes at offset {int(a[k])} by thread "
                       f"{int(tids[k])} (the kernel's parameters are {M.params.size} bytes)",
                       form=op.form, line=op.line, kernel=M.name)
    return M.params[a[:, None] + np.arange(size)]


def addr_getter(M, memop):
    """callable -> uint64 addresses (array over threads or scalar) of a ("mem", base, offset) operand."""
    _, base, off = memop
    if base is None:
        return lambda: np.uint64(off & (2**64 - 1))
    if base[0] == "sym":
        a = np.uint64((M.symbol_address(base[1]) + off) & (2**64 - 1))
        return lambda: a
    if base[0] == "reg":
        w = M.width(base[1])
        g = M.rd(base, "u64" if w == 64 else "u32")
        o = np.uint64(off & (2**64 - 1))
        if w == 64:
            return (lambda: g() + o) if off else g
        return lambda: g().astype(np.uint64) + o
    raise ValueError(base)
