"""Asynchronous completion, modelled adversarially.

* `cp.async`: the source is read at issue, but the shared-memory destination is written only when a
  `cp.async.wait_group N` (or `wait_all`) executed by the issuing thread retires the copy's commit group.
  Copies never committed never land. Until then the destination keeps its old bytes (poison if never
  written), so a missing or too-weak wait reads stale or poison data. The race checker also counts the
  destination as written at issue (a real copy may land that early), so a copy into bytes another thread
  reads or an in-flight wgmma group may still read, in the same barrier interval, is a finding.
* `wgmma.mma_async`: operands are read from shared memory and the accumulators are updated only at the
  `wgmma.wait_group N` that retires the warpgroup's group, so reading accumulators early, or
  overwriting an operand stage before the wait, gives wrong results.
"""
from __future__ import annotations

import numpy as np


class CpAsyncState:
    def __init__(self, T: int):
        self.committed = np.zeros(T, np.int64)     # commit_group count per thread
        self.entries = []                            # [tids, group, dst addrs, data, op]

    def reset(self):
        self.committed[:] = 0
        self.entries = []

    def issue(self, tids, dst, data, op):
        self.entries.append([tids, self.committed[tids].copy(), dst, data, op, np.full(len(tids), -1)])

    def commit(self, tids):
        # entries issued since the last commit get group = committed (already recorded); bump the counter
        self.committed[tids] += 1

    def retire(self, tids, keep: int):
        """Land every copy of threads `tids` whose group is older than the `keep` newest committed ones.
        Returns [(op, tids, dst, data)] to write, in issue order."""
        sel = np.zeros(self.committed.size, bool)
        sel[tids] = True
        out, remaining = [], []
        for e in self.entries:
            t, g, dst, data, op, _ = e
            done = sel[t] & (g < self.committed[t] - keep)
            if done.any():
                out.append((op, t[done], dst[done], data[done]))
            if (~done).any():
                if done.any():
                    e = [t[~done], g[~done], dst[~done], data[~done], op, None]
                remaining.append(e)
        self.entries = remaining
        return out


class WgmmaState:
    """Per-warpgroup queues: pending (issued, not committed) jobs and committed groups."""

    def __init__(self, n_wg: int):
        self.pending = [[] for _ in range(n_wg)]
        self.groups = [[] for _ in range(n_wg)]

    def reset(self):
        for p in self.pending:
            p.clear()
        for g in self.groups:
            g.clear()
