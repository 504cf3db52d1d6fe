"""One CTA on the interpreter: which CTAs a launch runs (select_ctas) and the CTA's warp-synchronous
instruction loop (run_cta), shared by a plain launch (exec.py) and a cluster launch (cluster.py).
"""
from __future__ import annotations

import numpy as np

from . import bulk, ops_warp
from .errors import PtxError


def select_ctas(grid, sample, seed, order="linear"):
    gx, gy, gz = grid
    total = gx * gy * gz
    allc = [(x, y, z) for z in range(gz) for y in range(gy) for x in range(gx)]
    if sample is None or sample >= total:
        if order == "random":
            rng = np.random.default_rng(seed)
            return [allc[i] for i in rng.permutation(total)]
        return allc
    corners = []
    for z in (0, gz - 1):
        for y in (0, gy - 1):
            for x in (0, gx - 1):
                if (x, y, z) not in corners:
                    corners.append((x, y, z))
    rng = np.random.default_rng(seed)
    rest = [c for c in allc if c not in corners]
    k = max(0, int(sample) - len(corners))
    pick = [rest[i] for i in sorted(rng.choice(len(rest), size=min(k, len(rest)), replace=False))] if rest else []
    return corners[:max(int(sample), 1)] + pick


def run_cta(M, ops, fns, max_steps):
    """Run one CTA; a generator that yields the op it is blocked at (a cluster barrier or mbarrier wait
    in a cluster launch) and ends when every thread has exited. Threads parked at a wait (a non-.aligned
    cluster wait, an mbarrier try_wait, a named barrier, a bar.sync that the CTA's other live threads can
    only reach once they stop waiting) while others of the CTA still run hold pc = n + 2 + (their wait's
    index); when every live thread is parked they all retry if anything changed since (bulk.all_parked),
    else the CTA yields (cluster launch) or deadlocks (PtxError)."""
    T = M.T
    n = len(ops)
    alive = np.ones(T, bool)
    M.alive = alive
    pc = np.zeros(T, np.int64)
    converged, cur = True, 0
    base = None                        # mask of the converged group (None: every thread)
    steps = 0
    C = M.counters
    regs = M.regs
    thr, wrp = C.thread_counts, C.warp_counts
    W = M.W
    dead = 3 * n + 3                   # pc of exited threads: above every parked pc (n + 2 + index)
    urgent = None                      # threads an mbarrier arrive woke: they run first while unparked
    while True:
        if converged:
            p, m = cur, base
        else:
            live = np.where(alive, pc, dead)
            if urgent is not None:
                u = urgent & alive & (pc < n)
                if u.any():
                    live = np.where(u | ~alive, live, dead - 1)    # only the woken threads' PCs count
                else:
                    urgent = None
            p = int(live.min())
            m = alive & (pc == p)
            if np.array_equal(m, alive):
                converged, cur = True, p
                base = None if alive.all() else alive.copy()
                m = base
        if p >= n:
            if p > n + 1:                      # every live thread is parked (cluster, mbarrier, named barrier)
                if not bulk.all_parked(M, ops, pc, alive, n):
                    yield ops[p - n - 2]       # nothing left to change here: the cluster's other CTAs run
                pc[:] = np.where(alive & (pc > n + 1), pc - (n + 2), pc)
                converged = False
                continue
            raise PtxError("threads ran past the last instruction", kernel=M.name)
        steps += 1
        if steps > max_steps:
            raise PtxError(f"more than {max_steps} CTA steps (an endless loop?) at PTX line {ops[p].line}",
                           kernel=M.name)
        op = ops[p]
        gm = m
        if op.guard is not None:
            g = regs.get(op.guard[0])
            if g is None:
                g = M.reg(op.guard[0])
            g = ~g if op.guard[1] else g.copy()
            gm = g if m is None else (g & m)
        # counters: warps issuing, threads executing (predicated-off threads excluded)
        if m is None:
            wrp[p] += W
        else:
            wrp[p] += int(m.reshape(W, 32).any(1).sum()) if T % 32 == 0 else int(np.unique(np.flatnonzero(m) // 32).size)
        thr[p] += T if gm is None else int(gm.sum())
        kind = op.kind
        if kind == "op":
            if gm is None or gm.any():
                fns[p](gm)
        elif kind == "bra":
            t = op.target_index
            if converged:
                if gm is None:
                    cur = t
                    continue
                act = gm if m is None else gm
                nt = int(act.sum())
                na = T if m is None else int(m.sum())
                if nt == na:
                    cur = t
                elif nt == 0:
                    cur = p + 1
                else:
                    if op.uni:
                        raise PtxError("bra.uni diverges: threads disagree on the branch", form=op.form,
                                       line=op.line, kernel=M.name)
                    mm = np.ones(T, bool) if m is None else m
                    pc[mm] = np.where(gm[mm], t, p + 1)
                    converged = False
                continue
            taken = m if gm is None else gm
            pc[m] = np.where(taken[m], t, p + 1)
            continue
        elif kind == "ret":
            ex = np.ones(T, bool) if gm is None else gm
            if M.checks is not None:
                M.checks.exit(M, op, ex)
            alive &= ~ex
            if not alive.any():
                return steps
            if converged:
                mm = np.ones(T, bool) if m is None else m
                if (mm & alive).any():
                    base = alive.copy()
                    cur = p + 1
                    continue
                pc[:] = np.where(alive, pc, dead)
                converged = False
                continue
            pc[m & alive] = p + 1
            continue
        elif kind == "wait":                   # mbarrier try_wait / test_wait, named barrier sync
            park = fns[p](gm) if (gm is None or gm.any()) else None
            if park is not None:
                if converged:
                    pc[:] = np.where(alive, p, dead)
                    converged = False
                pc[alive if m is None else m] = p + 1
                pc[park] = n + 2 + p
                continue
        elif kind == "arrive":                 # mbarrier arrive: the threads it woke run first
            rel = fns[p](gm) if (gm is None or gm.any()) else None
            if rel is not None:
                rel &= alive & (pc > n + 1)
                pc[rel] -= n + 2
                urgent = rel if urgent is None else (urgent | rel)
        elif kind == "bar":
            here = np.ones(T, bool) if gm is None else gm
            if not np.array_equal(here, alive) and not converged and \
                    ((pc[alive & ~here] > n + 1) | (pc[alive & ~here] < p)).all():
                # every absent thread is parked at a wait or still behind (warp-specialised code: the producer
                # at the final barrier while consumers wait on mbarriers): wait for them here
                pc[here] = n + 2 + p
                M.mb.waits[op.line] = (f"bar.sync reached by {int(here.sum())} of the {int(alive.sum())} live threads; "
                                       f"the others wait elsewhere")
                continue
            if not np.array_equal(here, alive):
                absent = np.flatnonzero(alive & ~here)
                raise PtxError(f"bar.sync reached by {int(here.sum())} of the {int(alive.sum())} live threads of "
                               f"CTA {M.ctaid}; absent: threads {ops_warp._lanes(absent)}", form=op.form,
                               line=op.line, kernel=M.name)
            if M.checks is not None:
                M.checks.barrier(M, op.line)
        elif kind == "cwait":
            cl = M.cluster
            state = cl.try_wait(M, op, gm)
            while isinstance(state, str) and state == "block":   # the whole CTA waits: the cluster's
                yield op                                         # other CTAs run
                state = cl.try_wait(M, op, gm)
            if not isinstance(state, str) or state == "park":   # some threads wait, the others run on
                if converged:
                    pc[:] = np.where(alive, p, dead)
                    converged = False
                mm = alive if m is None else m
                here = (mm if gm is None else gm) if isinstance(state, str) else state
                pc[here] = n + 2 + p
                pc[mm & ~here] = p + 1
                continue
        if converged:
            cur = p + 1
        else:
            pc[m] = p + 1
