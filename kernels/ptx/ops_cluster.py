"""Cluster instructions: barrier.cluster.arrive / wait, mapa, getctarank (semantics and address
encoding in cluster.py). Their class is "cluster", which also routes a kernel through the cluster
scheduler (a kernel without .reqnctapercluster runs as clusters of one CTA)."""
from __future__ import annotations

import numpy as np

from . import access as A
from .cluster import GENERIC_SHARED, OFFSET_MASK, RANK_SHIFT
from .decode import Mods, Op, handler, unsupported
from .errors import PtxError


def barrier_cluster(stmt):
    """barrier.cluster.arrive{.release|.relaxed}{.aligned}, barrier.cluster.wait{.acquire}{.aligned}."""
    mo = Mods(stmt)
    mo.take("cluster")
    which = mo.take("arrive", "wait")
    sem = mo.take("release", "relaxed", "acquire")
    aligned = mo.flag("aligned")
    mo.done()
    if which is None or stmt.operands or (which == "arrive" and sem == "acquire") or \
            (which == "wait" and sem not in (None, "acquire")):
        raise unsupported(stmt)
    if which == "wait":
        return Op(stmt.line, stmt.opcode, "cwait", "cluster")
    release = sem != "relaxed"

    def factory(M):
        def run(m):
            if M.cluster is None:
                raise PtxError("barrier.cluster outside a cluster launch", form=stmt.opcode, line=stmt.line,
                               kernel=M.name)
            M.cluster.arrive(M, op, m, release, aligned)
        return run
    op = Op(stmt.line, stmt.opcode, "op", "cluster", factory)
    return op


def _rank_field(M, op, addr):
    """Rank an address's field names (the executing CTA's rank for a shared::cta address)."""
    r = (addr.astype(np.int64) >> RANK_SHIFT) - 1
    return np.where(r < 0, M.rank, r)


@handler("mapa")
def _mapa(stmt):
    mo = Mods(stmt)
    space = mo.take("shared::cluster")
    ty = mo.type(("u32", "u64"))
    mo.done()
    if len(stmt.operands) != 3:
        raise unsupported(stmt, "operands")
    if space is None and ty != "u64":
        raise unsupported(stmt, "generic mapa takes .u64")
    d, a, b = stmt.operands
    base = 0 if space else GENERIC_SHARED

    def factory(M):
        put, ga, gb = M.wr(d, ty), M.rd(a, ty), M.rd(b, "u32")
        T = M.T

        def run(m):
            av = np.broadcast_to(ga(), (T,)).astype(np.uint64)
            bv = np.broadcast_to(gb(), (T,)).astype(np.int64)
            act = np.ones(T, bool) if m is None else m
            if base:
                if (act & (av < np.uint64(base))).any():
                    t = int(np.flatnonzero(act & (av < np.uint64(base)))[0])
                    raise PtxError(f"generic mapa of {int(av[t]):#x} (thread {t} of CTA {M.ctaid}): not a shared-memory "
                                   f"address", form=stmt.opcode, line=stmt.line, kernel=M.name)
                av = av - np.uint64(base)
            n = M.cluster.n if M.cluster is not None else 1
            if (act & ((bv < 0) | (bv >= n))).any():
                t = int(np.flatnonzero(act & ((bv < 0) | (bv >= n)))[0])
                raise PtxError(f"mapa to cluster rank {int(bv[t])} (thread {t} of CTA {M.ctaid}); the cluster has {n} "
                               f"CTAs", form=stmt.opcode, line=stmt.line, kernel=M.name)
            out = (((bv + 1) << RANK_SHIFT) | (av.astype(np.int64) & OFFSET_MASK)).astype(np.uint64) + np.uint64(base)
            put(out.astype(np.uint32) if ty == "u32" else out, m)
        return run
    return Op(stmt.line, stmt.opcode, "op", "cluster", factory)


@handler("getctarank")
def _getctarank(stmt):
    mo = Mods(stmt)
    space = mo.take("shared::cluster")
    ty = mo.type(("u32", "u64"))
    mo.done()
    if len(stmt.operands) != 2:
        raise unsupported(stmt, "operands")
    d, a = stmt.operands
    base = 0 if space else GENERIC_SHARED

    def factory(M):
        put, ga = M.wr(d, "u32"), M.rd(a, ty)
        T = M.T

        def run(m):
            av = np.broadcast_to(ga(), (T,)).astype(np.uint64)
            if base:
                act = np.ones(T, bool) if m is None else m
                if (act & (av < np.uint64(base))).any():
                    t = int(np.flatnonzero(act & (av < np.uint64(base)))[0])
                    raise PtxError(f"getctarank of {int(av[t]):#x} (thread {t}): not a shared-memory address",
                                   form=stmt.opcode, line=stmt.line, kernel=M.name)
                av = av - np.uint64(base)
            put(_rank_field(M, op, av).astype(np.uint32), m)
        return run
    op = Op(stmt.line, stmt.opcode, "op", "cluster", factory)
    return op


def dsmem_read(M, op, addrs, size, tids):
    """Bytes [n, size] at shared::cluster addresses (own CTA for plain shared::cta addresses)."""
    if M.cluster is None:
        return A.shared_read(M, op, _own_only(M, op, addrs, tids), size, tids)
    return M.cluster.read(M, op, addrs, size, tids)


def dsmem_write(M, op, addrs, data, tids):
    if M.cluster is None:
        return A.shared_write(M, op, _own_only(M, op, addrs, tids), data, tids)
    return M.cluster.write(M, op, addrs, data, tids)


def _own_only(M, op, addrs, tids):
    a = np.asarray(addrs).astype(np.int64)
    r = (a >> RANK_SHIFT) - 1
    if (r > 0).any():
        k = int(np.flatnonzero(r > 0)[0])
        raise PtxError(f"shared::cluster address {int(a[k]):#x} of thread {int(tids[k])} names cluster rank {int(r[k])} "
                       f"outside a cluster launch", form=op.form, line=op.line, kernel=M.name)
    return a & OFFSET_MASK


def generic_split(addrs):
    """Mask of generic addresses that fall in the shared window."""
    return np.asarray(addrs).astype(np.uint64) >= np.uint64(GENERIC_SHARED)
