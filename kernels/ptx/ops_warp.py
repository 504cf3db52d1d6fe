"""Control flow, barriers and warp-synchronous data movement (bra, ret, bar, shfl.sync), and the lane
checks every warp-synchronous instruction goes through."""
from __future__ import annotations

import numpy as np

from .decode import Mods, Op, handler, unsupported
from .errors import PtxError
from .errors import lanes as _lanes
from .bulk import bump
from .ops_cluster import barrier_cluster


def whole_warps(M, op, m, what="warp-synchronous .aligned instruction"):
    """Warps taking part (any active lane); every one of them must be fully active."""
    if m is None:
        return np.arange(M.W)
    mw = m.reshape(M.W, 32)
    anyw = mw.any(1)
    partial = anyw & ~mw.all(1)
    if partial.any():
        w = int(np.flatnonzero(partial)[0])
        missing = w * 32 + np.flatnonzero(~mw[w])
        raise PtxError(f"{what} executed by part of warp {w} only: threads {_lanes(missing)} of CTA {M.ctaid} "
                       f"are not there (diverged or exited)", form=op.form, line=op.line, kernel=M.name)
    return np.flatnonzero(anyw)


def member_check(M, op, m, membermask):
    """The lanes executing == the lanes the member mask names, per warp."""
    act = np.ones(M.T, bool) if m is None else m
    mm = np.broadcast_to(np.asarray(membermask).astype(np.uint64), (M.T,))
    lane = np.arange(M.T) % 32
    named = ((mm >> lane.astype(np.uint64)) & np.uint64(1)).astype(bool)
    aw = act.reshape(M.W, 32)
    for w in np.flatnonzero(aw.any(1)):
        ex = np.flatnonzero(aw[w])
        masks = mm.reshape(M.W, 32)[w][ex]
        if (masks != masks[0]).any():
            raise PtxError(f"member masks differ within warp {w} of CTA {M.ctaid}", form=op.form, line=op.line,
                           kernel=M.name)
        want = np.flatnonzero(named.reshape(M.W, 32)[w] | np.zeros(32, bool)) if True else None
        want = np.flatnonzero((int(masks[0]) >> np.arange(32)) & 1)
        if not np.array_equal(ex, want):
            miss = sorted(set(want) - set(ex))
            extra = sorted(set(ex) - set(want))
            parts = []
            if miss:
                parts.append(f"named lanes absent: threads {_lanes(w * 32 + np.array(miss))}")
            if extra:
                parts.append(f"lanes outside the mask execute it: threads {_lanes(w * 32 + np.array(extra))}")
            raise PtxError(f"warp {w} of CTA {M.ctaid}: member mask {int(masks[0]):#010x} does not match the "
                           f"executing lanes ({'; '.join(parts)})", form=op.form, line=op.line, kernel=M.name)


@handler("bra")
def _bra(stmt):
    mo = Mods(stmt)
    uni = mo.flag("uni")
    mo.done()
    if len(stmt.operands) != 1 or stmt.operands[0][0] not in ("sym", "reg"):
        raise unsupported(stmt, "branch target")
    op = Op(stmt.line, stmt.opcode, "bra", "control", None, target=stmt.operands[0][1], uni=uni)
    return op


@handler("ret", "exit")
def _ret(stmt):
    mo = Mods(stmt)
    mo.flag("uni")
    mo.done()
    return Op(stmt.line, stmt.opcode, "ret", "control")


@handler("bar", "barrier")
def _bar(stmt):
    p = stmt.opcode.split(".")
    rest = p[1:]
    if p[0] == "barrier" and rest[:1] == ["cluster"]:
        return barrier_cluster(stmt)
    if rest in (["sync"], ["cta", "sync"], ["aligned"], ["cta", "sync", "aligned"], ["sync", "aligned"]) or \
            (p[0] == "barrier" and rest in (["sync"], ["sync", "aligned"])):
        ops = stmt.operands
        if len(ops) != 1 or ops[0] != ("imm", 0):
            return named_barrier(stmt, sync=True)    # another barrier, or a thread count: a named barrier
        return Op(stmt.line, stmt.opcode, "bar", "barrier")
    if rest in (["arrive"], ["cta", "arrive"], ["arrive", "aligned"], ["cta", "arrive", "aligned"]):
        return named_barrier(stmt, sync=False)
    if rest == ["warp", "sync"]:
        if len(stmt.operands) != 1:
            raise unsupported(stmt)
        op = Op(stmt.line, stmt.opcode, "op", "barrier")

        def factory(M):
            g = M.rd(stmt.operands[0], "b32")

            def run(m):
                member_check(M, op, m, g())
                if M.checks is not None:
                    M.checks.warp_barrier(M, m)
            return run
        op.factory = factory
        return op
    raise unsupported(stmt)


@handler("shfl")
def _shfl(stmt):
    mo = Mods(stmt)
    if not mo.flag("sync"):
        raise unsupported(stmt, "shfl without .sync")
    mode = mo.take("bfly", "up", "down", "idx")
    mo.type(("b32",))       # the only type shfl has: consume it
    mo.done()
    if mode is None or len(stmt.operands) != 5:
        raise unsupported(stmt)
    d, a, b, c, mm = stmt.operands
    op = Op(stmt.line, stmt.opcode, "op", "shfl")

    def factory(M):
        if d[0] == "pair":
            put, pput = M.wr(d[1], "b32"), M.wr(d[2], "pred")
        else:
            put, pput = M.wr(d, "b32"), None
        ga, gb, gc, gm = M.rd(a, "b32"), M.rd(b, "u32"), M.rd(c, "u32"), M.rd(mm, "b32")
        T = M.T
        lane = (np.arange(T) % 32).astype(np.int64)
        base = (np.arange(T) // 32 * 32).astype(np.int64)

        def run(m):
            mask = gm()
            member_check(M, op, m, mask)
            av = np.broadcast_to(ga(), (T,))
            bv = np.broadcast_to(gb(), (T,)).astype(np.int64) & 31
            cv = np.broadcast_to(gc(), (T,)).astype(np.int64)
            seg = (cv >> 8) & 31
            maxl = (lane & seg) | (cv & 31 & ~seg)
            minl = lane & seg
            if mode == "bfly":
                j = lane ^ bv
                ok = j <= maxl
            elif mode == "down":
                j = lane + bv
                ok = j <= maxl
            elif mode == "up":
                j = lane - bv
                ok = j >= maxl
            else:
                j = minl | (bv & ~seg)
                ok = j <= maxl
            j = np.where(ok, j, lane)
            src = base + j
            act = np.ones(T, bool) if m is None else m
            bad = act & ~act[src]
            if bad.any():
                t = int(np.flatnonzero(bad)[0])
                raise PtxError(f"thread {t} of CTA {M.ctaid} reads lane {int(j[t])}, which does not execute this "
                               f"shfl.sync", form=op.form, line=op.line, kernel=M.name)
            put(av[src], m)
            if pput is not None:
                pput(ok, m)
        return run
    op.factory = factory
    return op


def named_barrier(stmt, sync: bool):
    """bar.sync / barrier.sync{.aligned} a{, b} with a != 0 or a thread count, bar.arrive / barrier.arrive a, b:
    barrier a completes when b threads (all of the CTA without b) have arrived; a `sync` parks its threads until
    then (kind "wait", cta.py), an `arrive` does not wait. Threads parked here pass when they retry after the
    barrier completed. The CTA-wide `bar.sync 0` keeps its converged form (cta.py)."""
    ops = stmt.operands
    if len(ops) not in (1, 2) or (not sync and len(ops) != 2):
        raise unsupported(stmt, "operands")

    def factory(M):
        ga = M.rd(ops[0], "u32")
        gb = M.rd(ops[1], "u32") if len(ops) == 2 else None
        T = M.T

        def run(m):
            tids = np.arange(T) if m is None else np.flatnonzero(m)
            whole_warps(M, op, m, "bar.sync / bar.arrive (whole warps)")
            av = np.broadcast_to(ga(), (T,))[tids].astype(np.int64)
            bv = np.broadcast_to(gb(), (T,))[tids].astype(np.int64) if gb is not None else np.full(tids.size, T)
            park = np.zeros(T, bool)
            for bid in np.unique(av).tolist():
                sel = av == bid
                who = tids[sel]
                cnt = np.unique(bv[sel])
                if bid < 0 or bid > 15 or cnt.size != 1 or cnt[0] <= 0 or cnt[0] % 32 or cnt[0] > T:
                    raise PtxError(f"named barrier {bid} with thread count(s) {cnt.tolist()} (barriers 0..15; one "
                                   f"count, a positive multiple of 32 up to the CTA's {T} threads)", form=op.form,
                                   line=op.line, kernel=M.name)
                st = M.mb.named.get(bid)
                if st is None:
                    st = M.mb.named[bid] = [np.zeros(T, bool), np.zeros(T, bool), int(cnt[0]), np.zeros(T, bool)]
                arrived, released, count, waiting = st
                if count != int(cnt[0]) and arrived.any():
                    raise PtxError(f"named barrier {bid}: thread count {int(cnt[0])} while {int(arrived.sum())} threads "
                                   f"wait with count {count}", form=op.form, line=op.line, kernel=M.name)
                st[2] = count = int(cnt[0])
                back = who[released[who]]          # parked here before, their barrier completed meanwhile
                released[back] = False
                still = who[waiting[who]]          # parked here before, still incomplete: park again
                park[still] = True
                new = who[~released[who] & ~waiting[who] & ~np.isin(who, back)]
                if new.size == 0:
                    continue
                if arrived[new].any():
                    raise PtxError(f"threads {_lanes(new[arrived[new]])} arrive at named barrier {bid} twice",
                                   form=op.form, line=op.line, kernel=M.name)
                arrived[new] = True
                bump(M)
                n = int(arrived.sum())
                if n > count:
                    raise PtxError(f"named barrier {bid}: {n} threads arrive, its count is {count}", form=op.form,
                                   line=op.line, kernel=M.name)
                if n == count:
                    released |= waiting             # threads parked at a sync pass when they retry
                    waiting[:] = False
                    arrived[:] = False
                    if M.checks is not None:
                        M.checks.barrier(M, op.line)
                elif sync:
                    park[new] = True
                    waiting[new] = True
                    M.mb.waits[op.line] = (lambda st=st, bid=bid:
                                           f"named barrier {bid}: {int(st[0].sum())} of {st[2]} threads arrived")
            return park if park.any() else None
        return run
    op = Op(stmt.line, stmt.opcode, "wait" if sync else "op", "barrier")
    op.factory = factory
    return op
