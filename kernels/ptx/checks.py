"""Checkers (on with `launch(checks=True)`): findings, not errors, collected per launch.

* shared-memory races: a byte written by one thread and read or written by another with no barrier
  between them (bar.sync orders the CTA; bar.warp.sync orders the lanes of one warp);
* reads of shared memory never written in this CTA (they read the poison fill);
* generic-proxy shared writes (st.shared, cp.async) read by wgmma (async proxy) with no
  fence.proxy.async by the writing thread in between;
* shared writes (st.shared, and cp.async from its issue on: the copy may land any time before its wait)
  to the operand bytes of a wgmma group not yet retired by wgmma.wait_group (the tensor core may still
  read them; the interpreter reads operands at the retiring wait, so the values alone cannot show it);
* writes to global memory read through `.nc` in the same launch (and `.nc` reads of memory this launch
  wrote);
* cp.async copies or wgmma groups left pending when the CTA exits;
* mbarriers and bulk (TMA) copies (bulk.py): a phase waited twice, a transaction-count mismatch, a tensor
  box wholly outside its map, shared memory read before the mbarrier phase that completes the copy writing
  it was waited on (by the reading thread, or the reading wgmma's warpgroup; a CTA barrier after the
  phase completed also orders it), bulk copies never completed;
* in cluster launches (cluster.py): DSMEM races between CTAs without a cluster barrier in between,
  uninitialised remote reads and DSMEM accesses to CTAs that have exited.

Out-of-bounds accesses are errors (PtxError), not findings: the interpreter cannot continue them.
One finding is kept per (kind, PTX line), with the number of occurrences.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Finding:
    kind: str
    kernel: str
    line: int | None
    thread: int | None
    cta: tuple
    message: str
    count: int = 1

    def __str__(self):
        where = f"kernel {self.kernel}" + (f", PTX line {self.line}" if self.line else "")
        who = (f", thread {self.thread}" if self.thread is not None else "") + f", CTA {self.cta}"
        more = f" [{self.count} occurrences]" if self.count > 1 else ""
        return f"{self.kind}: {self.message} ({where}{who}){more}"


class Checks:
    def __init__(self, kernel, memory):
        self.kernel = kernel
        self.memory = memory
        self.findings: list[Finding] = []
        self._seen: dict = {}
        self.nc_read = {}
        self.written = {}
        self.guarded = {}          # bar.sync PTX line -> shared accesses in the interval it opens

    @staticmethod
    def fork(launch: "Checks") -> "ClusterChecks":
        """Checker of one cluster rank: its own per-CTA shadow, the launch's findings and global shadows."""
        c = ClusterChecks.__new__(ClusterChecks)
        c.__dict__.update({k: launch.__dict__[k] for k in ("kernel", "memory", "findings", "_seen", "nc_read",
                                                           "written", "guarded")})
        return c

    def add(self, kind, M, line, thread, message):
        key = (kind, line)
        f = self._seen.get(key)
        if f is not None:
            f.count += 1
            return
        f = Finding(kind, M.name, line, None if thread is None else int(thread), M.ctaid, message)
        self._seen[key] = f
        self.findings.append(f)

    # ------------------------------------------------------------------------------- per CTA
    def begin_cta(self, M, size):
        self.written_sh = np.zeros(size, bool)
        self.w_tid = np.full(size, -1, np.int64)
        self.w_epoch = np.full(size, -1, np.int64)
        self.w_wep = np.zeros(size, np.int64)
        self.r_tid = np.full(size, -1, np.int64)
        self.r_epoch = np.full(size, -1, np.int64)
        self.r_wep = np.zeros(size, np.int64)
        self.dirty = np.zeros(size, bool)
        self.inflight = np.zeros(size, np.int32)   # wgmma jobs issued, not retired, reading each byte
        self.tma_bar = np.full(size, -1, np.int64)  # bulk-copied bytes: the mbarrier offset completing the copy
        self.tma_phase = np.zeros(size, np.int64)   # ... and the phase of it that does
        self.epoch = 0
        self.wep = np.zeros(M.W, np.int64)
        self.last_bar = None

    def end_cta(self, M):
        for off, b in M.mb.mbars.items():
            if b.copies:
                c = b.copies[0]
                self.add("bulk copy never completed", M, c.op.line, c.tid,
                         f"{len(b.copies)} bulk copies into this CTA were still pending on the mbarrier at shared offset "
                         f"{off:#x} when it exited (no thread waited on their phase)")
        if M.cp.entries:
            e = M.cp.entries[0]
            self.add("cp.async never waited", M, e[4].line, e[0][0],
                     "cp.async copies were still pending when the CTA exited (no cp.async.wait_group retired them)")
        for wg in range(len(M.wg.groups)):
            if M.wg.groups[wg] or M.wg.pending[wg]:
                job = (M.wg.groups[wg][0][0] if M.wg.groups[wg] else M.wg.pending[wg][0])
                self.add("wgmma never waited", M, job[0].line, 128 * wg,
                         "wgmma.mma_async results were never retired by wgmma.wait_group before the CTA exited")

    def barrier(self, M, line=None):
        self.epoch += 1
        self.wep += 1
        self.last_bar = line
        self.guarded.setdefault(line, 0)

    def warp_barrier(self, M, m):
        warps = np.arange(M.W) if m is None else np.unique(np.flatnonzero(m) // 32)
        self.wep[warps] += 1

    def exit(self, M, op, ex):
        pass

    def _ordered(self, other_tid, other_wep, tids_b):
        """Accesses by other_tid (recorded at warp epoch other_wep) ordered before tids_b by a warp barrier."""
        same_warp = (other_tid // 32) == (tids_b // 32)
        return same_warp & (self.wep[np.maximum(tids_b // 32, 0)] > other_wep)

    # ------------------------------------------------------------------------------- shared
    def shared_read(self, M, op, idx, tids, proxy):
        if self.last_bar is not None:
            self.guarded[self.last_bar] += 1
        t = np.broadcast_to(np.asarray(tids)[:, None], idx.shape)
        if proxy != "async":          # wgmma operands are checked when the wgmma is issued (bulk_read)
            tb = self.tma_bar[idx]
            if (tb >= 0).any():
                self.bulk_read(M, op, idx, t)
        unw = ~self.written_sh[idx]
        if unw.any():
            k = np.argwhere(unw)[0]
            self.add("uninitialised shared read", M, op.line, t[k[0], k[1]],
                     f"reads shared byte {int(idx[k[0], k[1]])} that no thread of this CTA wrote (poison)")
        wt, we = self.w_tid[idx], self.w_epoch[idx]
        if proxy == "async":
            # the four warps of the warpgroup read collectively: any write since the last bar.sync races
            race = (we == self.epoch) & (wt >= 0)
            if race.any():
                k = np.argwhere(race)[0]
                self.add("shared race", M, op.line, wt[k[0], k[1]],
                         f"wgmma reads shared byte {int(idx[k[0], k[1]])} written by thread {int(wt[k[0], k[1]])} "
                         f"with no barrier in between")
            d = self.dirty[idx]
            if d.any():
                k = np.argwhere(d)[0]
                self.add("missing fence.proxy.async", M, op.line, wt[k[0], k[1]],
                         f"wgmma (async proxy) reads shared byte {int(idx[k[0], k[1]])} written through the generic "
                         f"proxy by thread {int(wt[k[0], k[1]])} without a fence.proxy.async in between")
            flat = idx.reshape(-1)
            self.r_tid[flat] = -2                 # read by the whole warpgroup
            self.r_epoch[flat] = self.epoch
            return
        race = (we == self.epoch) & (wt >= 0) & (wt != t) & ~self._ordered(wt, self.w_wep[idx], t)
        if race.any():
            k = np.argwhere(race)[0]
            self.add("shared race", M, op.line, t[k[0], k[1]],
                     f"thread {int(t[k[0], k[1]])} reads shared byte {int(idx[k[0], k[1]])} written by thread "
                     f"{int(wt[k[0], k[1]])} with no barrier in between")
        flat, ft = idx.reshape(-1), t.reshape(-1)
        prev_t, prev_e = self.r_tid[flat], self.r_epoch[flat]
        new = np.where((prev_e == self.epoch) & (prev_t != ft) & (prev_t != -1), -2, ft)
        self.r_tid[flat] = new
        self.r_epoch[flat] = self.epoch
        self.r_wep[flat] = self.wep[ft // 32]
        # several readers of one byte within this instruction
        if flat.size:
            order = np.argsort(flat, kind="stable")
            fs, ts = flat[order], ft[order]
            dup = np.flatnonzero((fs[1:] == fs[:-1]) & (ts[1:] != ts[:-1]))
            if dup.size:
                self.r_tid[fs[dup]] = -2

    def shared_write(self, M, op, idx, tids):
        if self.last_bar is not None:
            self.guarded[self.last_bar] += 1
        self.inflight_write(M, op, idx, tids)
        t = np.broadcast_to(np.asarray(tids)[:, None], idx.shape)
        wt, we = self.w_tid[idx], self.w_epoch[idx]
        race = (we == self.epoch) & (wt >= 0) & (wt != t) & ~self._ordered(wt, self.w_wep[idx], t)
        rt, re_ = self.r_tid[idx], self.r_epoch[idx]
        race_r = (re_ == self.epoch) & (rt != -1) & (rt != t) & ((rt == -2) | ~self._ordered(rt, self.r_wep[idx], t))
        if race.any():
            k = np.argwhere(race)[0]
            self.add("shared race", M, op.line, t[k[0], k[1]],
                     f"thread {int(t[k[0], k[1]])} writes shared byte {int(idx[k[0], k[1]])} also written by thread "
                     f"{int(wt[k[0], k[1]])} with no barrier in between")
        elif race_r.any():
            k = np.argwhere(race_r)[0]
            who = "several threads" if rt[k[0], k[1]] == -2 else f"thread {int(rt[k[0], k[1]])}"
            self.add("shared race", M, op.line, t[k[0], k[1]],
                     f"thread {int(t[k[0], k[1]])} writes shared byte {int(idx[k[0], k[1]])} read by {who} "
                     f"with no barrier in between")
        flat, ft = idx.reshape(-1), t.reshape(-1)
        if flat.size:
            order = np.argsort(flat, kind="stable")
            fs, ts = flat[order], ft[order]
            dup = np.flatnonzero((fs[1:] == fs[:-1]) & (ts[1:] != ts[:-1]))
            if dup.size:
                self.add("shared race", M, op.line, ts[dup[0]],
                         f"threads {int(ts[dup[0]])} and {int(ts[dup[0] + 1])} write shared byte {int(fs[dup[0]])} "
                         f"in the same instruction")
        self.written_sh[flat] = True
        self.w_tid[flat] = ft
        self.w_epoch[flat] = self.epoch
        self.w_wep[flat] = self.wep[ft // 32]
        self.dirty[flat] = True
        self.tma_bar[flat] = -1

    def wgmma_operands(self, addrs, delta):
        """A wgmma job reading shared bytes `addrs` was issued (+1) or retired (-1)."""
        a = addrs.reshape(-1)
        np.add.at(self.inflight, a[(a >= 0) & (a < self.inflight.size)], delta)   # out of range: the read errs

    def inflight_write(self, M, op, idx, tids):
        """A write (or a cp.async issued) to bytes `idx` [n, size] of threads `tids`: a finding where a wgmma
        group not yet retired reads them."""
        hit = self.inflight[idx] > 0
        if hit.any():
            k = np.argwhere(hit)[0]
            self.add("write to an in-flight wgmma operand", M, op.line, np.asarray(tids)[k[0]],
                     f"{op.form} writes shared byte {int(idx[k[0], k[1]])}, an operand of a wgmma group not "
                     f"yet retired by wgmma.wait_group (the tensor core may still read it)")

    # ------------------------------------------------------------------------------- bulk copies
    def bulk_issued(self, M, op, idx, tid, bar_off, phase):
        """A bulk copy into this CTA's bytes `idx` (1-D) was issued; it completes on phase `phase` of the
        mbarrier at `bar_off`."""
        self.inflight_write(M, op, idx.reshape(-1, 1), np.full(idx.size, tid))
        self.tma_bar[idx] = bar_off
        self.tma_phase[idx] = phase

    def bulk_landed(self, M, idx):
        """A bulk copy wrote bytes `idx` (async proxy: no race or proxy-fence bookkeeping; bulk_read orders
        the reads)."""
        self.written_sh[idx] = True
        self.w_tid[idx] = -1
        self.w_epoch[idx] = self.epoch
        self.dirty[idx] = False

    def bulk_read(self, M, op, idx, t, group=None):
        """Reads of bytes `idx` by threads `t` (same shape; or, with `group`, by any thread of that array: a
        wgmma's warpgroup) that bulk copies write: each needs its copy's mbarrier phase waited on."""
        tb, need = self.tma_bar[idx], self.tma_phase[idx]
        for off in np.unique(tb[tb >= 0]).tolist():
            b = M.mb.mbars.get(int(off))
            if b is None:
                continue
            sel = tb == off
            ph = need[sel]
            seen = (b.observed[group].max() if group is not None else b.observed[t[sel]])
            late = np.array([self.epoch > b.done_epoch.get(int(p), 1 << 62) for p in np.unique(ph)])
            ok = (seen >= ph) | np.isin(ph, np.unique(ph)[late])
            if not np.all(ok):
                k = int(np.flatnonzero(~np.asarray(ok).reshape(-1))[0])
                byte = int(idx[sel].reshape(-1)[k])
                who = int(group[0]) if group is not None else int(t[sel].reshape(-1)[k])
                reader = f"the wgmma of warpgroup {who // 128}" if group is not None else f"thread {who}"
                state = "has not completed" if int(ph.reshape(-1)[k]) >= b.phase else "was not waited on by it"
                self.add("shared memory read before its mbarrier phase", M, op.line, who,
                         f"{reader} reads shared byte {byte}, written by a bulk copy that completes phase "
                         f"{int(ph.reshape(-1)[k])} of the mbarrier at shared offset {int(off):#x}, which {state} "
                         f"(a consumer reading a stage before its wait)")

    def fence_proxy_async(self, M, tids):
        self.dirty &= ~np.isin(self.w_tid, tids)

    # ------------------------------------------------------------------------------- global
    def _shadow(self, store, b):
        s = store.get(b.start)
        if s is None or s.size != b.nbytes:
            s = store[b.start] = np.zeros(b.nbytes, bool)
        return s

    def global_access(self, M, op, addrs, size, tids, kind):
        bufs = self.memory._bufs
        idx, _ = self.memory.locate(addrs, size)
        off = np.arange(size)
        for bi in np.unique(idx):
            b = bufs[bi]
            sel = idx == bi
            rel = (addrs[sel].astype(np.int64) - b.start)[:, None] + off
            if kind == "nc":
                w = self._shadow(self.written, b)
                hit = w[rel].any(1)
                if hit.any():
                    k = int(np.flatnonzero(hit)[0])
                    self.add(".nc read of written memory", M, op.line, np.asarray(tids)[sel][k],
                             f"ld.global.nc reads {b.name!r}+{int(rel[k, 0])}, which this launch wrote")
                self._shadow(self.nc_read, b)[rel] = True
            elif kind == "st":
                r = self.nc_read.get(b.start)
                if r is not None and r.size == b.nbytes:
                    hit = r[rel].any(1)
                    if hit.any():
                        k = int(np.flatnonzero(hit)[0])
                        self.add("write to .nc memory", M, op.line, np.asarray(tids)[sel][k],
                                 f"st.global writes {b.name!r}+{int(rel[k, 0])}, which this launch read through "
                                 f".nc (read-only for the kernel's lifetime)")
                self._shadow(self.written, b)[rel] = True


class ClusterChecks(Checks):
    """A rank's checker in a cluster launch: its shared accesses also feed the cross-CTA ordering model."""

    def shared_read(self, M, op, idx, tids, proxy):
        super().shared_read(M, op, idx, tids, proxy)
        _cluster_order(M, op, idx, tids, False)

    def shared_write(self, M, op, idx, tids):
        super().shared_write(M, op, idx, tids)
        _cluster_order(M, op, idx, tids, True)


def _cluster_order(M, op, idx, tids, write):
    """The CTA's own shared accesses in a cluster launch feed the cluster's ordering model
    (cluster.ClusterState.order), when the launch checks DSMEM."""
    cl = M.cluster
    if cl is not None and cl.shadow is not None:
        cl.order(M, op, M.rank, idx, tids, write)
