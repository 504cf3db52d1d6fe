"""Cluster instructions: barrier.cluster.arrive / wait, mapa, getctarank (semantics and address
encoding in cluster.py). Their class is "cluster", which also routes a kernel through the cluster
scheduler (a kernel without .reqnctapercluster runs as clusters of one CTA)."""
from __future__ import annotations

import numpy as np

from . import access as A
from .access import GENERIC_SHARED, OFFSET_MASK, RANK_SHIFT, addr_getter
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


# ------------------------------------------------------------------------------ atom / red (add)
_ATOM_T = {"u32": np.uint32, "s32": np.int32, "f32": np.float32}


_GLOBAL_ATOM_T = {"u32": np.uint32, "s32": np.int32, "u64": np.uint64, "b32": np.uint32, "b64": np.uint64,
                  "f32": np.float32}


def _global_atom(stmt, mo, red):
    """atom/red{.sem}{.scope}.global.{add,cas,exch}: one thread at a time in thread order (the CTAs of a launch
    run one after another), each a read and a write of global memory as the counters and checks see them."""
    kind = mo.take("add", "cas", "exch")
    ty = mo.type(tuple(_GLOBAL_ATOM_T))
    mo.done()
    ops = stmt.operands
    n_src = 2 if kind == "cas" else 1
    if kind is None or (kind != "add" and ty == "f32") or (red and kind != "add") or \
            len(ops) != (1 if red else 2) + n_src or ops[0 if red else 1][0] != "mem":
        raise unsupported(stmt, "global atomics: atom.global.{add,cas,exch}, red.global.add")
    dt = np.dtype(_GLOBAL_ATOM_T[ty])
    mem_op = ops[0 if red else 1]
    srcs = ops[-n_src:]

    def factory(M):
        ag = addr_getter(M, mem_op)
        gets = [M.rd(x, ty) for x in srcs]
        put = None if red else M.wr(ops[0], ty)
        T = M.T

        def run(m):
            tids = A.active(m, T)
            a = np.broadcast_to(ag(), (T,))[tids].astype(np.uint64)
            vals = [np.broadcast_to(g(), (T,))[tids].astype(dt) for g in gets]
            old = np.zeros(len(tids), dt)
            with np.errstate(over="ignore"):
                for k in range(len(tids)):
                    at, who = a[k:k + 1], tids[k:k + 1]
                    cur = A.global_read(M, op, at, dt.itemsize, who).view(dt)[0, 0]
                    if kind == "add":
                        new = cur + vals[0][k]
                    elif kind == "cas":
                        new = vals[1][k] if cur == vals[0][k] else cur
                    else:
                        new = vals[0][k]
                    A.global_write(M, op, at, np.array([new], dt).view(np.uint8).reshape(1, -1), who)
                    old[k] = cur
            if put is not None:
                full = np.zeros(T, dt)
                full[tids] = old
                put(full, m)
        return run
    op = Op(stmt.line, stmt.opcode, "op", "st.global", factory)
    return op


@handler("atom", "red")
def _atom(stmt):
    """atom/red{.sem}{.scope}.{shared,shared::cta,shared::cluster}.add.{u32,s32,f32}: applied in thread order
    (lowest thread first), so results are deterministic; atomics are exempt from the race checkers. Global
    memory: _global_atom."""
    mo = Mods(stmt)
    mo.take("relaxed", "acquire", "release", "acq_rel")
    mo.take("cta", "cluster", "gpu", "sys")
    red = stmt.opcode.startswith("red")
    if mo.flag("global"):
        return _global_atom(stmt, mo, red)
    space = mo.take("shared", "shared::cta", "shared::cluster")
    add = mo.flag("add")
    ty = mo.type(tuple(_ATOM_T))
    mo.done()
    ops = stmt.operands
    if space is None or not add or len(ops) != (2 if red else 3) or ops[-2][0] != "mem":
        raise unsupported(stmt, "only atom/red.add on shared / shared::cluster memory")
    dt = np.dtype(_ATOM_T[ty])

    def factory(M):
        ag = addr_getter(M, ops[-2])
        gv = M.rd(ops[-1], ty)
        put = None if red else M.wr(ops[0], ty)
        T = M.T

        def run(m):
            tids = A.active(m, T)
            a = np.broadcast_to(ag(), (T,))[tids]
            if space != "shared::cluster":
                a = a.astype(np.int64) & OFFSET_MASK
            v = np.broadcast_to(gv(), (T,))[tids].astype(dt)
            old = atomic_add(M, op, a, v, tids)
            if put is not None:
                full = np.zeros(T, dt)
                full[tids] = old
                put(full, m)
        return run
    op = Op(stmt.line, stmt.opcode, "op", "cluster" if space == "shared::cluster" else "st.shared", factory)
    return op


def atomic_add(M, op, addrs, vals, tids):
    """Old values of a thread-ordered sequence of adds of `vals` at shared::cluster `addrs`."""
    dt = vals.dtype
    size = dt.itemsize
    a = np.asarray(addrs).astype(np.int64)
    rank = (a >> RANK_SHIFT) - 1
    rank = np.where(rank < 0, M.rank, rank)
    cl = M.cluster
    n = cl.n if cl is not None else 1
    if ((rank < 0) | (rank >= n)).any():
        k = int(np.flatnonzero((rank < 0) | (rank >= n))[0])
        raise PtxError(f"atomic on shared::cluster address {int(a[k]):#x} (thread {int(tids[k])}) names cluster rank "
                       f"{int(rank[k])}; the cluster has {n} CTAs", form=op.form, line=op.line, kernel=M.name)
    off = a & OFFSET_MASK
    old = np.empty(len(tids), dt)
    for r in np.unique(rank).tolist():
        sel = np.flatnonzero(rank == r)
        target = M if r == M.rank else cl.machines[r]
        o = off[sel]
        if r == M.rank:
            A.shared_bounds(M, op, o, size, tids[sel])
        else:
            cl._remote(M, op, r, o, size, tids[sel], True, order=False)   # bounds, exited CTA, counters
        if target.checks is not None:
            idx = o[:, None] + np.arange(size)
            if not target.checks.written_sh[idx].all():
                k = int(np.flatnonzero(~target.checks.written_sh[idx].all(1))[0])
                M.checks.add("uninitialised shared read", M, op.line, tids[sel][k],
                             f"atomic reads shared byte {int(o[k])} of CTA {target.ctaid}, never written (poison)")
            target.checks.written_sh[idx] = True
        mem = target.smem
        for j, (adr, val) in enumerate(zip(o.tolist(), vals[sel])):   # thread order; few lanes per address
            cur = mem[adr:adr + size].view(dt)
            old[sel[j]] = cur[0]
            with np.errstate(over="ignore"):
                cur[0] = cur[0] + val
    return old
