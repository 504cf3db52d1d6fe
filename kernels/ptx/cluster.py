"""Thread-block clusters (sm_90): launch, interleaved scheduling of a cluster's CTAs, distributed
shared memory (DSMEM) and the cluster barrier, with their checkers.

Usage: nothing new to call. A kernel compiled with `__cluster_dims__(X, Y, Z)` carries
`.reqnctapercluster X, Y, Z` in its PTX; `Kernel.cluster_dims` gives the shape and `Kernel.launch`
runs such a grid cluster by cluster (the grid must be a multiple of the shape: PtxError otherwise, as
the driver refuses the launch; at most 16 CTAs per cluster, more than 8 is recorded in the counters
as non-portable). `sample_ctas=N` runs whole clusters (N CTAs rounded up to clusters).

    k = Module.parse(ptx).kernel("k")          # k.cluster_dims == (4, 1, 1)
    res = k.launch(grid=(8, 2, 1), block=(128, 1, 1), params=..., memory=mem)
    res.counters["dsmem_ld"]                   # {"requests", "bytes"} of remote shared reads
    res.findings                               # DSMEM races, reads of exited CTAs, ...

Scheduling: the CTAs of one cluster run interleaved, each until it blocks at a cluster barrier wait
whose phase is incomplete (or exits); then the next CTA of the cluster runs. A wait completes when
every live (non-exited) thread of the cluster has arrived as often as the waiting thread. A round in
which no CTA arrives, passes a wait or exits is a deadlock: PtxError naming the kernel, the PTX lines
and the CTAs. Each rank has its own Machine (registers, shared memory, cp.async/wgmma state).

Address encoding (shared::cluster window, 32 bits): `(rank + 1) << 24 | offset`; an address below
2**24 is a plain shared::cta offset and names the executing CTA (the PTX rule for shared::cta
addresses used with .shared::cluster). `mapa` sets the rank field; `getctarank` reads it. Generic
addresses of shared memory (`cvta.shared`, generic `mapa`, generic `ld`/`st`) are that window plus
GENERIC_SHARED (above every host address, so never a global buffer).

Checker model (launch(checks=True)): per thread, the number of cluster arrives and of completed
waits; an arrive releases (default, or `.relaxed` after a `fence.acq_rel/sc.cluster` by the thread;
which arrives released is kept per CTA, not per thread), every wait acquires. Arriving twice without
waiting, or waiting without having arrived (the phase would need the waiting thread itself: a deadlock
on a GPU) are errors. A byte written by one CTA and read or written by another is ordered only when
the writer released at an arrive after the write and the other thread has since waited on that phase.
Findings: DSMEM races (either direction, local vs remote included; the last reader of a byte is
remembered, not all of them), remote reads of bytes the target CTA never had written, and DSMEM
accesses to a CTA that has exited. Out-of-window or out-of-cluster accesses are errors.
"""
from __future__ import annotations

import numpy as np

from . import access as A
from .access import GENERIC_SHARED, OFFSET_MASK, RANK_SHIFT  # noqa: F401  (the address encoding)
from .checks import Checks
from .cta import run_cta, select_ctas
from .errors import PtxError, with_findings
from .errors import lanes as _lanes

MAX_CLUSTER = 16          # CTAs per cluster (16 needs the non-portable opt-in on a GPU; 8 is portable)
_NEVER = 1 << 62


def cluster_address(rank: int, offset) -> int:
    """shared::cluster address of `offset` in the shared memory of the CTA of cluster rank `rank`."""
    return ((int(rank) + 1) << RANK_SHIFT) | (int(offset) & OFFSET_MASK)


class ClusterState:
    """One running cluster: its machines (by rank), barrier counts and the DSMEM checker shadow."""

    def __init__(self, kernel, dims, machines, checks: bool):
        self.kernel = kernel
        self.dims = dims
        self.n = len(machines)
        self.machines = machines
        T = machines[0].T
        self.arr = [np.zeros(T, np.int64) for _ in machines]      # arrives per thread
        self.waited = [np.zeros(T, np.int64) for _ in machines]   # phases waited on per thread
        self.fenced = [np.zeros(T, bool) for _ in machines]       # fence.*.cluster since the last arrive
        self.frel = np.full((self.n, 8), _NEVER, np.int64)         # [rank, c]: first releasing arrive > c
        self.exited = [False] * self.n
        self.ordered_phase = [0] * self.n                          # phases already counted as a CTA barrier
        self.progress = 0
        self.blocked = {}                                          # rank -> op it waits at
        self.checks = checks
        self.shadow = None

    def begin(self, sizes):
        if self.checks:
            self.shadow = [(np.full(s, -1, np.int16), np.zeros(s, np.int64), np.full(s, -1, np.int16),
                            np.zeros(s, np.int64)) for s in sizes]   # writer rank, its c; reader rank, its c

    # ------------------------------------------------------------------------------ barrier
    def arrive(self, M, op, m, release: bool, aligned: bool):
        r = M.rank
        tids = A.active(m, M.T)
        if aligned:
            _all_live(M, op, m, "barrier.cluster.arrive.aligned")
        a = self.arr[r]
        if (a[tids] > self.waited[r][tids]).any():
            t = int(tids[np.flatnonzero(a[tids] > self.waited[r][tids])[0]])
            raise PtxError(f"thread {t} of CTA {M.ctaid} (cluster rank {r}) arrives at the cluster barrier again "
                           f"before waiting on its previous arrive", form=op.form, line=op.line, kernel=M.name)
        a[tids] += 1
        k = int(a[tids].max())
        if k >= self.frel.shape[1] - 1:
            grow = np.full((self.n, self.frel.shape[1] * 2), _NEVER, np.int64)
            grow[:, :self.frel.shape[1]] = self.frel
            self.frel = grow
        if release or self.fenced[r][tids].any():
            for kk in np.unique(a[tids]):
                row = self.frel[r, :int(kk)]
                row[row > kk] = kk
        self.fenced[r][tids] = False
        self.progress += 1

    def fence(self, M, m):
        self.fenced[M.rank][A.active(m, M.T)] = True

    def try_wait(self, M, op, gm):
        """"pass" (and record it), "block" (the whole CTA waits), "park" (all of `gm` waits, other threads
        of the CTA run on) or a mask of the threads of `gm` that wait (the others passed)."""
        r = M.rank
        tids = A.active(gm, M.T)
        aligned = "aligned" in op.form.split(".")
        if aligned:
            _all_live(M, op, gm, "barrier.cluster.wait.aligned")
        a, w = self.arr[r][tids], self.waited[r][tids]
        if (a <= w).any():
            t = int(tids[np.flatnonzero(a <= w)[0]])
            raise PtxError(f"cluster deadlock: thread {t} of CTA {M.ctaid} (cluster rank {r}) waits at the cluster "
                           f"barrier without having arrived (barrier.cluster.arrive) since its last wait; the phase "
                           f"needs its own arrival and never completes", form=op.form, line=op.line, kernel=M.name)
        # phase k is complete once every live thread of the cluster has arrived k times
        done = min((int(self.arr[q][self.machines[q].alive].min()) for q in range(self.n)
                    if not self.exited[q] and self.machines[q].alive.any()), default=_NEVER)
        ok = a <= done
        if not ok.all():
            self.blocked[r] = op
            if not ok.any():
                return "block" if gm is None or np.array_equal(gm, M.alive) else "park"
            tids = tids[ok]               # threads on different phases: the ones whose phase is done pass
        else:
            self.blocked.pop(r, None)
        need = int(self.arr[r][tids].max())
        self.waited[r][tids] = self.arr[r][tids]
        if M.checks is not None and need > self.ordered_phase[r]:
            # a cluster barrier also orders the CTA's own threads: one CTA epoch per completed phase, at
            # the first pass (accesses of threads that arrived but still run before their own wait
            # then count as ordered: a missed race at worst, never a false one)
            self.ordered_phase[r] = need
            M.checks.barrier(M, op.line)
        self.progress += 1
        if ok.all():
            return "pass"
        wait = np.zeros(M.T, bool)
        wait[A.active(gm, M.T)[~ok]] = True
        return wait                       # these threads park, the others go on

    def exit_cta(self, r):
        self.exited[r] = True
        self.blocked.pop(r, None)
        self.progress += 1

    def deadlock(self, live) -> PtxError:
        parts = []
        for r in live:
            M = self.machines[r]
            op = self.blocked.get(r)
            where = f"waits at PTX line {op.line}" if op is not None else "is blocked"
            parts.append(f"CTA {M.ctaid} (rank {r}) {where} after {int(self.arr[r][M.alive].min(initial=0))} "
                         f"arrive(s)")
        missing = [f"rank {q} (CTA {self.machines[q].ctaid}): threads "
                   f"{_lanes(np.flatnonzero(self.machines[q].alive & (self.arr[q] <= self.waited[q])))} have not arrived"
                   for q in live if (self.machines[q].alive & (self.arr[q] <= self.waited[q])).any()]
        waits = [f"rank {r}: {w() if callable(w) else w}" for r in live for w in self.machines[r].mb.waits.values()]
        line = min((op.line for op in self.blocked.values()), default=None)
        return PtxError("cluster deadlock: no CTA of the cluster can proceed: " + "; ".join(parts) +
                        (". Not arrived: " + "; ".join(missing) if missing else "") +
                        (". Waiting: " + "; ".join(waits) if waits else "") +
                        " (threads of one CTA that arrive on different paths of a non-.aligned barrier run "
                        "lowest-PC first)", line=line, kernel=self.kernel.name)

    # ------------------------------------------------------------------------------ DSMEM
    def _split(self, M, op, addrs, tids):
        a = np.asarray(addrs).astype(np.int64)
        rank = (a >> RANK_SHIFT) - 1
        rank = np.where(rank < 0, M.rank, rank)
        bad = rank >= self.n
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise PtxError(f"shared::cluster address {int(a[k]):#x} of thread {int(tids[k])} of CTA {M.ctaid} names "
                           f"cluster rank {int(rank[k])}, the cluster has {self.n} CTAs", form=op.form, line=op.line,
                           kernel=M.name)
        return rank, a & OFFSET_MASK

    def _remote(self, M, op, r, off, size, tids, write, order=True):
        T = self.machines[r]
        if off.size and int((off + size).max()) > T.smem.size:
            k = int(np.flatnonzero(off + size > T.smem.size)[0])
            raise PtxError(f"out-of-bounds DSMEM access of {size} bytes at offset {int(off[k]):#x} of CTA {T.ctaid} "
                           f"(cluster rank {r}) by thread {int(tids[k])} of CTA {M.ctaid}: the target has "
                           f"{T.smem.size} bytes of shared memory", form=op.form, line=op.line, kernel=M.name)
        idx = off[:, None] + np.arange(size)
        if M.checks is not None:
            if self.exited[r]:
                M.checks.add("DSMEM access to an exited CTA", M, op.line, tids[0],
                             f"{'writes' if write else 'reads'} shared memory of CTA {T.ctaid} (cluster rank {r}), "
                             f"which has exited (its shared memory is gone; a trailing cluster barrier keeps it)")
            if not write and T.checks is not None:
                unw = ~T.checks.written_sh[idx]
                if unw.any():
                    k = np.argwhere(unw)[0]
                    M.checks.add("uninitialised DSMEM read", M, op.line, tids[k[0]],
                                 f"reads shared byte {int(idx[k[0], k[1]])} of CTA {T.ctaid} (cluster rank {r}), which "
                                 f"no thread of that CTA wrote (poison)")
            if order:
                self.order(M, op, r, idx, tids, write)
        if M.counters is not None:
            M.counters.dsmem("st" if write else "ld", tids, size)
        return idx

    def read(self, M, op, addrs, size, tids):
        rank, off = self._split(M, op, addrs, tids)
        own = rank == M.rank
        if own.all():
            return A.shared_read(M, op, off, size, tids)
        out = np.empty((len(tids), size), np.uint8)
        if own.any():
            out[own] = A.shared_read(M, op, off[own], size, tids[own])
        for r in np.unique(rank[~own]).tolist():
            sel = rank == r
            idx = self._remote(M, op, r, off[sel], size, tids[sel], False)
            out[sel] = self.machines[r].smem[idx]
        return out

    def write(self, M, op, addrs, data, tids):
        rank, off = self._split(M, op, addrs, tids)
        own = rank == M.rank
        if own.all():
            return A.shared_write(M, op, off, data, tids)
        if own.any():
            A.shared_write(M, op, off[own], data[own], tids[own])
        size = data.shape[1]
        for r in np.unique(rank[~own]).tolist():
            sel = rank == r
            idx = self._remote(M, op, r, off[sel], size, tids[sel], True)
            T = self.machines[r]
            if T.checks is not None:          # the target sees the bytes as written (by no thread of its own)
                T.checks.written_sh[idx] = True
                T.checks.w_tid[idx] = -1
            T.smem[idx] = data[sel]

    # ------------------------------------------------------------------------------ ordering checker
    def order(self, M, op, t, idx, tids, write):
        """Cross-CTA ordering of an access by M's threads `tids` to bytes `idx` of rank t's shared memory."""
        if self.shadow is None:
            return
        x = M.rank
        wr, wc, rr, rc = self.shadow[t]
        tt = np.broadcast_to(np.asarray(tids)[:, None], idx.shape)
        waited = self.waited[x][tt]
        w_rank = wr[idx]
        race = (w_rank >= 0) & (w_rank != x)
        if race.any():
            race &= self.frel[np.maximum(w_rank, 0), wc[idx]] > waited
        what = None
        if race.any():
            k = np.argwhere(race)[0]
            what = (k, f"written by CTA rank {int(w_rank[k[0], k[1]])}")
        elif write:
            r_rank = rr[idx]
            race = (r_rank >= 0) & (r_rank != x)
            if race.any():
                race &= self.frel[np.maximum(r_rank, 0), rc[idx]] > waited
            if race.any():
                k = np.argwhere(race)[0]
                what = (k, f"read by CTA rank {int(r_rank[k[0], k[1]])}")
        if what is not None:
            k, who = what
            M.checks.add("DSMEM race", M, op.line, tt[k[0], k[1]],
                         f"CTA rank {x} {'writes' if write else 'reads'} shared byte {int(idx[k[0], k[1]])} of CTA rank "
                         f"{t}, {who} with no cluster barrier (arrive.release / wait.acquire) in between")
        c = self.arr[x][tt]
        flat = idx.reshape(-1)
        if write:
            wr[flat] = x
            wc[flat] = c.reshape(-1)
        else:
            rr[flat] = x
            rc[flat] = c.reshape(-1)


def _all_live(M, op, m, what):
    here = np.ones(M.T, bool) if m is None else m
    if not np.array_equal(here, M.alive):
        absent = np.flatnonzero(M.alive & ~here)
        raise PtxError(f"{what} reached by {int(here.sum())} of the {int(M.alive.sum())} live threads of CTA "
                       f"{M.ctaid}; absent: threads {_lanes(absent)}", form=op.form, line=op.line, kernel=M.name)


# ---------------------------------------------------------------------------------- launch
def cluster_shape(kernel, launch_dims):
    """The launch's cluster shape: the compile-time one, or the launch-time one (not both different)."""
    fixed = kernel.module.parsed.functions[kernel.name].cluster
    if launch_dims is not None:
        launch_dims = tuple(int(x) for x in (tuple(launch_dims) + (1, 1, 1))[:3])
        if min(launch_dims) < 1:
            raise PtxError(f"cluster shape {launch_dims} has a zero extent", kernel=kernel.name)
        if fixed is not None and launch_dims != fixed:
            raise PtxError(f"launch-time cluster shape {launch_dims} differs from the kernel's "
                           f".reqnctapercluster {fixed}", kernel=kernel.name)
        return launch_dims
    if fixed is None and kernel.explicit_cluster:
        raise PtxError("the kernel is .explicitcluster without .reqnctapercluster: it needs a launch-time cluster "
                       "shape (launch(cluster=...))", kernel=kernel.name)
    return kernel.cluster_dims


def check_shape(kernel, grid, dims):
    n = dims[0] * dims[1] * dims[2]
    if kernel.max_cluster_rank is not None and n > kernel.max_cluster_rank:
        raise PtxError(f"cluster shape {dims} has {n} CTAs, more than the kernel's .maxclusterrank "
                       f"{kernel.max_cluster_rank}", kernel=kernel.name)
    if n > MAX_CLUSTER:
        raise PtxError(f"cluster shape {dims} has {n} CTAs; at most {MAX_CLUSTER} per cluster", kernel=kernel.name)
    if any(g % d for g, d in zip(grid, dims)):
        raise PtxError(f"grid {tuple(grid)} is not a multiple of the cluster shape {dims} (.reqnctapercluster); "
                       f"the driver refuses such a launch", kernel=kernel.name)
    return n


def launch_clusters(kernel, grid, block, shared_bytes, params, memory, checks, approx, seed, sample_ctas,
                    max_steps, cta_order, t0, launch_dims=None):
    dims = cluster_shape(kernel, launch_dims)
    n = check_shape(kernel, grid, dims)
    T = block[0] * block[1] * block[2]
    key = (T, block, approx, "cluster", n)
    cached = kernel._machines.pop(key, None)
    pairs = cached if cached is not None else [kernel._take_machine(None, T, block, seed) for _ in range(n)]
    machines = [M for M, _ in pairs]
    counters = shared_checks = None
    sizes = []
    for M, _ in pairs:
        if cached is not None:
            M.rng.bit_generator.state = np.random.default_rng(seed).bit_generator.state
        sizes.append(kernel._prepare(M, grid, shared_bytes, params, memory, checks, approx, T))
        if counters is None:
            counters, shared_checks, retired = M.counters, M.checks, M.retired
        M.counters, M.retired = counters, retired
        M.checks = Checks.fork(shared_checks) if shared_checks is not None else None
    pairs = [(M, fns if fns is not None else kernel._bind(M)) for M, fns in pairs]
    cgrid = tuple(g // d for g, d in zip(grid, dims))
    nsample = None if sample_ctas is None else -(-int(sample_ctas) // n)
    explicit = kernel.explicit_cluster or kernel.module.parsed.functions[kernel.name].cluster is not None or \
        launch_dims is not None
    ctas = []
    for cid in select_ctas(cgrid, nsample, seed, cta_order):
        cl = ClusterState(kernel, dims, machines, checks)
        cl.begin(sizes)
        gens = []
        for r, (M, fns) in enumerate(pairs):
            rx, ry, rz = r % dims[0], (r // dims[0]) % dims[1], r // (dims[0] * dims[1])
            cta = (cid[0] * dims[0] + rx, cid[1] * dims[1] + ry, cid[2] * dims[2] + rz)
            ctas.append(cta)
            M.ctaid, M.rank, M.cluster = cta, r, cl
            sr = M.sregs
            for k, c in enumerate("xyz"):
                sr[f"%ctaid.{c}"][:] = cta[k]
                sr[f"%cluster_ctaid.{c}"][:] = (rx, ry, rz)[k]
                sr[f"%cluster_nctaid.{c}"][:] = dims[k]
                sr[f"%clusterid.{c}"][:] = cid[k]
                sr[f"%nclusterid.{c}"][:] = cgrid[k]
            sr["%cluster_ctarank"][:] = r
            sr["%cluster_nctarank"][:] = n
            sr["%is_explicit_cluster"][:] = int(explicit)
            M.smem = np.full(sizes[r], 0xFF, np.uint8)
            M.lmem = np.full((T, kernel.local_bytes), 0xFF, np.uint8)
            M.alive = np.ones(T, bool)
            M.cp.reset()
            M.wg.reset()
            M.mb.reset()
            if M.checks is not None:
                M.checks.begin_cta(M, sizes[r])
            gens.append(run_cta(M, kernel.ops, fns, max_steps))
        try:
            _schedule(cl, gens)
        except PtxError as e:
            raise with_findings(e, shared_checks) from None
    res = kernel._result(machines[0], grid, block, ctas, t0)
    res.counters["cluster"] = {"dims": list(dims), "ctas": n, "non_portable": n > 8,
                               "clusters_run": len(ctas) // n}
    for M in machines:
        kernel._release(M)
    if len(kernel._machines) < 4:
        kernel._machines[key] = pairs
    return res


def _schedule(cl, gens):
    live = list(range(cl.n))
    while live:
        before = cl.progress
        for r in list(live):
            try:
                next(gens[r])
            except StopIteration:
                live.remove(r)
                M = cl.machines[r]
                cl.exit_cta(r)
                if M.checks is not None:
                    M.checks.end_cta(M)
        if live and cl.progress == before:
            raise cl.deadlock(live)
