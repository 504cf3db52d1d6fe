"""Hopper's asynchronous machinery: mbarriers, bulk and tensor (TMA) copies, named barriers, setmaxnreg.

Semantics (PTX ISA 9.0, "Parallel Synchronization and Communication Instructions: mbarrier" and "Data
Movement: cp.async.bulk(.tensor)"), as the interpreter runs them:

* An mbarrier (a `.b64` in shared memory, kept here in a side table keyed by its CTA and offset) has an
  expected arrival count, a pending count, a transaction count (tx, bytes) and a phase number. `init`
  sets pending = expected = count, tx = 0, phase 0. `arrive` (and `arrive.expect_tx`, which first adds its
  bytes to tx) lowers pending; `expect_tx` raises tx; a bulk copy's completion lowers tx by its bytes. When
  pending and tx are both 0 the phase completes: phase += 1, pending = expected. `try_wait.parity p` is
  true once the current phase's parity differs from p (the phase of parity p completed); `try_wait` with
  an arrive's state token once the phase it was taken in completed. `arrive_drop` also lowers the expected
  count of later phases.
* Waiting: a try_wait / test_wait that would return false parks its threads (they stop, the CTA's other
  threads run on); parked threads retry whenever something changed (an arrival, a copy completed, a
  named barrier passed). An arrive that completes a phase threads of its CTA wait on wakes them, and they
  run before the arriving threads go on (adversarial: a stage released before its reader is done is
  overwritten first). A CTA whose every live thread is parked with nothing left to change is a deadlock:
  PtxError listing every wait (the barrier, its phase, pending arrivals and bytes); in a cluster launch
  the CTA yields first, as remote arrivals and multicast copies may still come. So a spin loop over
  try_wait or test_wait costs one retry per change, never a busy loop.
* Bulk copies, modelled adversarially like cp.async: the global source is read when the copy is issued
  (out-of-bounds elements of a tensor box are zero, or NaN with the map's NaN fill), and the shared
  destination is written only when a thread waits on the copy's mbarrier and the phase needs it (the
  wait "lands" every copy pending on that barrier, then counts their bytes). A consumer that reads a stage
  before waiting reads stale or poison bytes. Tensor copies (`cp.async.bulk.tensor.{1-5}d`, tile mode) take
  the box from a tensor map (tensormap.py; a __grid_constant__ parameter or global memory) at integer
  coordinates, write it in box order (dimension 0 fastest) under the map's swizzle, and count the whole
  box's bytes; `.multicast::cluster` writes the same offset, and completes the mbarrier at the same
  offset, in every CTA of the cluster its 16-bit mask names.
* Named barriers (ops_warp.py) and setmaxnreg (tensorcore.py) park and count through this module's state.

Checkers (findings, checks.py keeps one per kind and PTX line):
* "mbarrier phase waited twice": a thread's try_wait.parity returned for a phase that thread had already
  waited on (the parity was not flipped for the next round, so it reads the old stage again);
* "transaction-count mismatch": the copies that complete on a phase bring more bytes than its tx
  expected (the phase would never complete on a GPU); fewer shows as a deadlock naming the missing bytes;
* "TMA box outside the tensor map": a tensor copy whose box lies wholly outside the tensor in some
  dimension (only fill, no data);
* "shared memory read before its mbarrier phase": a read (ld.shared, ldmatrix, a wgmma operand) of bytes a
  bulk copy writes, by a thread (warpgroup, for wgmma) that has not waited on the phase of the copy's
  mbarrier, with no CTA barrier since that phase completed;
* "bulk copy never completed": copies still pending when their CTA exits; writes of a copy into operands
  of a wgmma group still in flight are "write to an in-flight wgmma operand" (checks.py).
"""
from __future__ import annotations

import numpy as np

from . import access as A
from . import tensormap as TM
from .decode import Mods, Op, handler, unsupported
from .errors import PtxError
from .errors import lanes as _lanes

TX_MAX = (1 << 20) - 1          # arrival and transaction counts are 20-bit (PTX ISA: mbarrier contents)
TOKEN = np.uint64(0x4D42_0000_0000_0000)   # state tokens: this tag | the phase the arrive was made in
_NONE = -2                      # observed phase of a thread that waited on nothing yet


class MBarrier:
    """One mbarrier object of a CTA."""

    def __init__(self, count: int, T: int, line: int):
        self.count = self.pending = int(count)
        self.phase = 0                  # completed phases; the current phase's parity is phase % 2
        self.tx = 0
        self.copies = []                # bulk copies pending on this barrier (they land at a wait)
        self.observed = np.full(T, _NONE, np.int64)   # per thread of the CTA: the last phase it waited on
        self.waiters = np.zeros(T, bool)              # threads parked on it
        self.done_epoch = {}            # phase -> the checker's CTA epoch when it completed
        self.line = line

    def complete_if_ready(self, M) -> bool:
        if self.pending == 0 and self.tx == 0:
            self.done_epoch[self.phase] = M.checks.epoch if M.checks is not None else 0
            if len(self.done_epoch) > 8:
                self.done_epoch.pop(min(self.done_epoch))
            self.phase += 1
            self.pending = self.count
            return True
        return False

    def describe(self, off) -> str:
        return (f"mbarrier at shared offset {off:#x} (initialised at PTX line {self.line}): phase {self.phase} "
                f"(parity {self.phase % 2}), {self.pending} of {self.count} arrivals pending, tx {self.tx} bytes, "
                f"{len(self.copies)} copies pending")


class BulkState:
    """Per CTA (a Machine's `mb`): its mbarriers, named barriers and the progress counter parked threads
    retry on."""

    def __init__(self, T: int):
        self.T = T
        self.reset()

    def reset(self):
        self.mbars: dict = {}           # shared offset -> MBarrier
        self.named: dict = {}           # barrier id -> [arrived mask, released mask, count]
        self.progress = 0
        self.snapshot = -1              # progress when every live thread was last found parked
        self.waits: dict = {}           # PTX line -> what the threads parked there wait for

    def bar(self, M, op, off: int, tid) -> MBarrier:
        b = self.mbars.get(int(off))
        if b is None:
            raise PtxError(f"thread {int(tid)} of CTA {M.ctaid} uses shared offset {int(off):#x} as an mbarrier; "
                           f"no mbarrier.init initialised one there", form=op.form, line=op.line, kernel=M.name)
        return b


def bump(M):
    """Something parked threads may wait for happened (an arrival, a copy, a phase, a named barrier)."""
    M.mb.progress += 1
    if M.cluster is not None:
        M.cluster.progress += 1


def all_parked(M, ops, pc, alive, n) -> bool:
    """Every live thread is parked: True when parked threads should retry (something changed since they
    were last all parked); False when nothing can change in this CTA (yield in a cluster launch, else
    deadlock: raises PtxError describing every wait)."""
    mb = M.mb
    if mb.progress != mb.snapshot:
        mb.snapshot = mb.progress
        return True
    if M.cluster is not None:
        return False
    raise deadlock(M, ops, pc, alive, n)


def deadlock(M, ops, pc, alive, n) -> PtxError:
    lines = sorted({int(p) - n - 2 for p in pc[alive] if p > n + 1})
    parts = []
    for i in lines:
        who = np.flatnonzero(alive & (pc == n + 2 + i))
        what = M.mb.waits.get(ops[i].line, "waits")
        what = what() if callable(what) else what
        parts.append(f"threads {_lanes(who)} at PTX line {ops[i].line} ({ops[i].form}): {what}")
    return PtxError(f"deadlock in CTA {M.ctaid}: every live thread waits and nothing can change: " + "; ".join(parts),
                    line=ops[lines[0]].line if lines else None, kernel=M.name)


# ------------------------------------------------------------------------------------------ addresses

def _shared_target(M, op, addr, tid):
    """(machine, offset) of a shared::cta or shared::cluster address (the executing CTA for a plain offset)."""
    a = int(addr)
    rank = (a >> A.RANK_SHIFT) - 1
    off = a & A.OFFSET_MASK
    if rank < 0 or rank == M.rank:
        return M, off
    cl = M.cluster
    if cl is None or rank >= cl.n:
        raise PtxError(f"shared::cluster address {a:#x} of thread {int(tid)} names cluster rank {rank}"
                       + ("" if cl is None else f"; the cluster has {cl.n} CTAs") + " (outside a cluster launch)"
                       * (cl is None), form=op.form, line=op.line, kernel=M.name)
    return cl.machines[rank], off


def _bar_offset(M, op, addr, tid, size=8):
    off = int(addr)
    if off % 8:
        raise PtxError(f"mbarrier address {off:#x} of thread {int(tid)} is not 8-byte aligned", form=op.form,
                       line=op.line, kernel=M.name)
    return off


def _space(mo, stmt, allow_cluster=True):
    sp = mo.take("shared", "shared::cta", "shared::cluster")
    if sp == "shared::cluster" and not allow_cluster:
        raise unsupported(stmt, ".shared::cluster")
    if sp is None:
        raise unsupported(stmt, "only shared-memory mbarriers (.shared, .shared::cta, .shared::cluster) are implemented")
    return sp


# ------------------------------------------------------------------------------------------ mbarrier

@handler("mbarrier")
def _mbarrier(stmt):
    mo = Mods(stmt)
    kind = mo.take("init", "inval", "arrive", "arrive_drop", "expect_tx", "complete_tx", "try_wait", "test_wait")
    if kind is None:
        raise unsupported(stmt, "mbarrier operation (init, inval, arrive[_drop][.expect_tx], expect_tx, complete_tx, "
                                "try_wait, test_wait)")
    if kind in ("try_wait", "test_wait"):
        return _wait(stmt, mo, kind)
    expect = kind in ("arrive", "arrive_drop") and mo.flag("expect_tx")
    mo.take("release", "relaxed")
    mo.take("cta", "cluster")
    sp = _space(mo, stmt, allow_cluster=kind not in ("init", "inval"))
    mo.type(("b64",))
    mo.done()
    ops = stmt.operands
    if kind in ("init",):
        if len(ops) != 2 or ops[0][0] != "mem":
            raise unsupported(stmt, "operands")
        mem, cnt = ops
    elif kind == "inval":
        if len(ops) != 1 or ops[0][0] != "mem":
            raise unsupported(stmt, "operands")
        mem, cnt = ops[0], None
    elif kind in ("expect_tx", "complete_tx"):
        if len(ops) != 2 or ops[0][0] != "mem":
            raise unsupported(stmt, "operands")
        mem, cnt = ops
    else:   # arrive / arrive_drop: state, [addr] {, count | txCount}
        if len(ops) not in (2, 3) or ops[1][0] != "mem" or (expect and len(ops) != 3):
            raise unsupported(stmt, "operands")
        mem, cnt = ops[1], (ops[2] if len(ops) == 3 else None)
        if sp == "shared::cluster" and not (ops[0][0] == "sym" and ops[0][1] == "_"):
            raise unsupported(stmt, "a remote (.shared::cluster) arrive returns no state: its destination must be _")

    def factory(M):
        ag = A.addr_getter(M, mem)
        gc = M.rd(cnt, "u32") if cnt is not None else None
        put = None
        if kind in ("arrive", "arrive_drop") and not (ops[0][0] == "sym" and ops[0][1] == "_"):
            put = M.wr(ops[0], "b64")
        T = M.T

        def run(m):
            tids = A.active(m, T)
            addrs = np.broadcast_to(ag(), (T,))[tids]
            cv = np.broadcast_to(gc(), (T,))[tids].astype(np.int64) if gc is not None else None
            tokens = np.zeros(T, np.uint64)
            released = np.zeros(T, bool)
            for k, t in enumerate(tids.tolist()):
                tm, off = _shared_target(M, op, addrs[k], t) if sp == "shared::cluster" else (M, int(addrs[k]))
                off = _bar_offset(M, op, off, t)
                A.shared_bounds(tm, op, np.array([off]), 8, np.array([t]))
                if kind == "init":
                    c = int(cv[k])
                    if not 1 <= c <= TX_MAX:
                        raise PtxError(f"mbarrier.init count {c} (thread {t}): must be 1 .. 2^20-1", form=op.form,
                                       line=op.line, kernel=M.name)
                    M.mb.mbars[off] = MBarrier(c, T, op.line)
                    if M.checks is not None:      # the object's bytes are initialised (not poison)
                        M.checks.written_sh[off:off + 8] = True
                    continue
                if kind == "inval":
                    M.mb.mbars.pop(off, None)
                    continue
                b = tm.mb.bar(M, op, off, t)
                if kind in ("expect_tx", "complete_tx"):
                    n = int(cv[k])
                    if not 0 <= n <= TX_MAX:
                        raise PtxError(f"{kind} of {n} bytes: must be 0 .. 2^20-1", form=op.form, line=op.line,
                                       kernel=M.name)
                    b.tx += n if kind == "expect_tx" else -n
                    if kind == "complete_tx":
                        b.complete_if_ready(tm)
                    bump(tm)
                    continue
                count, tx = 1, 0
                if expect:
                    tx = int(cv[k])
                elif cv is not None:
                    count = int(cv[k])
                if not 1 <= count <= TX_MAX or not 0 <= tx <= TX_MAX:
                    raise PtxError(f"mbarrier arrive count {count} / tx {tx} out of range", form=op.form,
                                   line=op.line, kernel=M.name)
                tokens[t] = TOKEN | np.uint64(b.phase)
                b.tx += tx
                if count > b.pending:
                    raise PtxError(f"thread {t} of CTA {M.ctaid} arrives {count} time(s) on the {b.describe(off)}: "
                                   f"more arrivals than the phase expects (undefined behaviour)", form=op.form,
                                   line=op.line, kernel=M.name)
                b.pending -= count
                if kind == "arrive_drop":
                    b.count -= count
                check_tx(tm, b, off, op.line, t)
                if b.complete_if_ready(tm) and tm is M and b.waiters.any():
                    released |= b.waiters            # the threads parked on this phase
                    b.waiters[:] = False
                bump(tm)
            if put is not None:
                mk = np.zeros(T, bool)
                mk[tids] = True
                put(tokens, mk)
            # the threads this arrive released: the scheduler runs them first (cta.py), so a stage released
            # too early is overwritten before its reader finishes
            return released if released.any() else None
        return run
    cls = "cluster" if sp == "shared::cluster" else "barrier"
    op = Op(stmt.line, stmt.opcode, "arrive" if kind in ("arrive", "arrive_drop") else "op", cls, factory)
    return op


def _wait(stmt, mo, kind):
    """mbarrier.try_wait / test_wait {.parity}: kind "wait" (returns the threads that park)."""
    parity = mo.flag("parity")
    mo.take("acquire", "relaxed")
    mo.take("cta", "cluster")
    sp = _space(mo, stmt, allow_cluster=False)
    mo.type(("b64",))
    mo.done()
    del sp
    ops = stmt.operands
    if len(ops) not in (3, 4) or ops[1][0] != "mem":
        raise unsupported(stmt, "operands")
    dst, mem, st = ops[:3]

    def factory(M):
        ag = A.addr_getter(M, mem)
        gs = M.rd(st, "u32" if parity else "b64")
        put = M.wr(dst, "pred")
        T = M.T

        def run(m):
            tids = A.active(m, T)
            addrs = np.broadcast_to(ag(), (T,))[tids]
            sv = np.broadcast_to(gs(), (T,))[tids]
            park = np.zeros(T, bool)
            done = np.zeros(T, bool)
            for off in np.unique(addrs).tolist():
                sel = addrs == off
                who = tids[sel]
                off = _bar_offset(M, op, off, who[0])
                b = M.mb.bar(M, op, off, who[0])
                want = _wanted_phase(M, op, b, sv[sel], parity, who)
                ok = want < b.phase
                if not ok.all() and b.copies:
                    land(M, b, off)           # the copies this phase waits for complete now
                    ok = want < b.phase
                if ok.any():
                    _observe(M, op, b, off, who[ok], want[ok])
                    done[who[ok]] = True
                    b.waiters[who[ok]] = False
                if not ok.all():
                    park[who[~ok]] = True
                    b.waiters[who[~ok]] = True
                    M.mb.waits[op.line] = (lambda ph=int(want[~ok].min()), b=b, off=off:
                                           f"wait for phase {ph} of the {b.describe(off)}" + _mismatch(b))
            if done.any():
                put(np.ones(T, bool), done)
            return park if park.any() else None
        return run
    op = Op(stmt.line, stmt.opcode, "wait", "barrier")
    op.factory = factory
    return op


def _wanted_phase(M, op, b, sv, parity, who):
    """Per waiting thread: the phase whose completion its wait asks for."""
    if parity:
        p = sv.astype(np.int64)
        if ((p != 0) & (p != 1)).any():
            raise PtxError(f"mbarrier try_wait.parity with parity {int(p[(p != 0) & (p != 1)][0])} (0 or 1)",
                           form=op.form, line=op.line, kernel=M.name)
        # the latest phase of parity p that is complete or current: the current one when its parity is p
        cur = b.phase
        return np.where(cur % 2 == p, cur, cur - 1).astype(np.int64)
    tok = sv.astype(np.uint64)
    if ((tok & ~np.uint64(0xFFFF_FFFF_FFFF)) != TOKEN).any():
        t = int(who[np.flatnonzero((tok & ~np.uint64(0xFFFF_FFFF_FFFF)) != TOKEN)[0]])
        raise PtxError(f"thread {t}: mbarrier try_wait/test_wait with a state that no mbarrier.arrive returned",
                       form=op.form, line=op.line, kernel=M.name)
    return (tok & np.uint64(0xFFFF_FFFF_FFFF)).astype(np.int64)


def _observe(M, op, b, off, who, phases):
    """Threads `who` saw phases `phases` complete: record it; a phase a thread had waited on already is a
    finding (a phase bit not flipped for the next round)."""
    again = phases <= b.observed[who]
    if again.any() and M.checks is not None:
        t = int(who[np.flatnonzero(again)[0]])
        M.checks.add("mbarrier phase waited twice", M, op.line, t,
                     f"thread {t} waits again on phase {int(phases[again][0])} of the mbarrier at shared offset "
                     f"{off:#x}, which it had already waited on (a phase parity not flipped for the next round: "
                     f"the wait returns at once and the stage it guards is read again)")
    b.observed[who] = np.maximum(b.observed[who], phases)


def _mismatch(b) -> str:
    if b.pending == 0 and b.tx > 0 and not b.copies:
        return (f"; transaction-count mismatch: every arrival is in but {b.tx} expected bytes have no copy in "
                f"flight (expect_tx counts more than the copies bring)")
    if b.tx < 0 and b.pending == 0:
        return f"; transaction-count mismatch: the copies brought {-b.tx} bytes more than expect_tx announced"
    return ""


def check_tx(M, b, off, line, tid):
    """With every arrival of the phase in, a negative transaction count means the copies brought more bytes than
    expect_tx announced (before that, a copy may complete before its expect_tx: legal)."""
    if b.tx < 0 and b.pending == 0 and M.checks is not None:
        M.checks.add("transaction-count mismatch", M, line, tid,
                     f"bulk copies completing on the mbarrier at shared offset {off:#x} (phase {b.phase}) brought "
                     f"{-b.tx} bytes more than its expect_tx announced (on a GPU the phase never completes)")


def land(M, b, off):
    """Complete every copy pending on mbarrier `b` (of machine M, at `off`): write its bytes into M's
    shared memory and count them off the barrier's tx."""
    copies, b.copies = b.copies, []
    for c in copies:
        idx = c.idx
        M.smem[idx] = c.data
        if M.checks is not None:
            M.checks.bulk_landed(M, idx)
        b.tx -= c.nbytes
    check_tx(M, b, off, copies[-1].op.line, copies[-1].tid)
    b.complete_if_ready(M)
    bump(M)


class _Copy:
    __slots__ = ("idx", "data", "nbytes", "op", "tid", "phase")

    def __init__(self, idx, data, nbytes, op, tid, phase):
        self.idx, self.data, self.nbytes, self.op, self.tid, self.phase = idx, data, nbytes, op, tid, phase


# ------------------------------------------------------------------------------------------ bulk copies

def _tensor_map(M, op, addr, tid):
    """The TensorMap at a generic address (a parameter, or global memory)."""
    a = int(addr)
    if A.param_window(np.array([a]))[0]:
        raw = A.param_read(M, op, np.array([a - A.GENERIC_PARAM]), TM.SIZE, np.array([tid]))[0]
    else:
        if a % TM.ALIGN:
            raise PtxError(f"tensor map address {a:#x} (thread {tid}) is not 64-byte aligned", form=op.form,
                           line=op.line, kernel=M.name)
        raw = A.global_read(M, op, np.array([a], np.uint64), TM.SIZE, np.array([tid]))[0]
    key = bytes(raw)
    cache = M.__dict__.setdefault("_tmaps", {})
    tm = cache.get(key)
    if tm is None:
        try:
            tm = TM.decode(key)
        except TM.TensorMapError as e:
            raise PtxError(f"thread {tid} of CTA {M.ctaid}: the tensor map operand at {a:#x} is invalid: {e}",
                           form=op.form, line=op.line, kernel=M.name) from None
        cache[key] = tm
    return tm


def _fill(tm, n):
    """n bytes of out-of-bounds fill for the map's element type."""
    if tm.oob_fill == TM.OOB_ZERO:
        return np.zeros(n, np.uint8)
    nan = {2: np.uint16(0x7FFF), 4: np.uint32(0x7FFFFFFF), 8: np.uint64(0x7FFF_FFFF_FFFF_FFFF)}[tm.elem_bytes]
    return np.full(n // tm.elem_bytes, nan).view(np.uint8)


def _issue(M, op, tid, targets, bar_off, dst_off, data, nbytes, space):
    """Record one copy (already read) into each target CTA: checks, then pending on its mbarrier."""
    for tm_, off in targets:
        b = tm_.mb.bar(M, op, bar_off, tid)
        idx = off
        if int(idx.min(initial=0)) < 0 or int(idx.max(initial=-1)) >= tm_.smem.size:
            raise PtxError(f"bulk copy of {nbytes} bytes to shared offset {dst_off:#x} of CTA {tm_.ctaid} (thread "
                           f"{tid} of CTA {M.ctaid}) exceeds its {tm_.smem.size} bytes of shared memory",
                           form=op.form, line=op.line, kernel=M.name)
        if tm_.checks is not None:
            tm_.checks.bulk_issued(tm_, op, idx, tid, bar_off, b.phase)
        b.copies.append(_Copy(idx, data, nbytes, op, tid, b.phase))
    bump(M)


def _targets(M, op, dst, bar, mask, tid, multicast):
    """[(machine, dst offset)] and the mbarrier offset of one copy."""
    if multicast:
        cl = M.cluster
        n = cl.n if cl is not None else 1
        ranks = [r for r in range(16) if (int(mask) >> r) & 1]
        if not ranks or max(ranks) >= n:
            raise PtxError(f"multicast ctaMask {int(mask):#06x} (thread {tid}) names CTAs outside the cluster of {n}",
                           form=op.form, line=op.line, kernel=M.name)
        off = int(dst) & A.OFFSET_MASK
        return [(cl.machines[r] if cl is not None else M, off) for r in ranks], int(bar) & A.OFFSET_MASK
    tm_, off = _shared_target(M, op, dst, tid)
    bm, boff = _shared_target(M, op, bar, tid)
    if bm is not tm_:
        raise PtxError(f"bulk copy (thread {tid}): the destination and the mbarrier lie in different CTAs",
                       form=op.form, line=op.line, kernel=M.name)
    return [(tm_, off)], boff


def cp_bulk(stmt):
    """cp.async.bulk.tensor / cp.async.bulk (global -> shared, mbarrier completion); ops_mem's `cp` handler
    hands them over."""
    mo = Mods(stmt)
    mo.take("async")
    mo.take("bulk")
    tensor = mo.flag("tensor")
    dims = mo.take("1d", "2d", "3d", "4d", "5d") if tensor else None
    dsp = mo.take("shared::cluster", "shared::cta")
    ssp = mo.take("global")
    tile = mo.flag("tile")
    comp = mo.flag("mbarrier::complete_tx::bytes")
    multicast = mo.flag("multicast::cluster")
    hint = mo.flag("L2::cache_hint")
    mo.done()
    if dsp is None or ssp is None or not comp or (tensor and dims is None) or (tile and not tensor):
        raise unsupported(stmt, "only global -> shared bulk copies with mbarrier completion (tile mode) are implemented")
    ops = stmt.operands
    nextra = int(multicast) + int(hint)
    if tensor:
        rank = int(dims[0])
        if len(ops) != 3 + nextra or ops[0][0] != "mem" or ops[1][0] != "tensor" or ops[2][0] != "mem":
            raise unsupported(stmt, "operands [dst], [tensorMap, {coords}], [mbar]")
        coords = ops[1][2]
        if coords[0] != "vec" or len(coords[1]) != rank:
            raise unsupported(stmt, f"{rank} coordinates")
    elif len(ops) != 4 + nextra or ops[0][0] != "mem" or ops[1][0] != "mem" or ops[3][0] != "mem":
        raise unsupported(stmt, "operands [dst], [src], size, [mbar]")
    mask_op = ops[(3 if tensor else 4)] if multicast else None

    def factory(M):
        gd = A.addr_getter(M, ops[0])
        gb = A.addr_getter(M, ops[2] if tensor else ops[3])
        gm = M.rd(mask_op, "u16") if mask_op is not None else None
        if tensor:
            base = ops[1][1]
            if base[0] == "sym" and base[1] in M.param_syms:     # a parameter named directly: its generic address
                pa = np.uint64(A.GENERIC_PARAM + M.param_syms[base[1]])
                gmap = lambda: pa          # noqa: E731
            else:
                gmap = A.addr_getter(M, ("mem", base, 0))
            gcs = [M.rd(c, "s32") for c in coords[1]]
        else:
            gsrc = A.addr_getter(M, ops[1])
            gsize = M.rd(ops[2], "u32")
        T = M.T

        def run(m):
            tids = A.active(m, T)
            dv = np.broadcast_to(gd(), (T,))
            bv = np.broadcast_to(gb(), (T,))
            mv = np.broadcast_to(gm(), (T,)) if gm is not None else None
            if tensor:
                av = np.broadcast_to(gmap(), (T,))
                cv = [np.broadcast_to(g(), (T,)) for g in gcs]
            else:
                sv, nv = np.broadcast_to(gsrc(), (T,)), np.broadcast_to(gsize(), (T,))
            for t in tids.tolist():
                dst = int(dv[t])
                targets, bar_off = _targets(M, op, dst, int(bv[t]), mv[t] if mv is not None else 0, t, multicast)
                if tensor:
                    tmap = _tensor_map(M, op, av[t], t)
                    if tmap.rank != rank:
                        raise PtxError(f"cp.async.bulk.tensor.{rank}d with a rank-{tmap.rank} {tmap.describe()}",
                                       form=op.form, line=op.line, kernel=M.name)
                    c = [int(x[t]) for x in cv]
                    data, lin, nbytes = _tensor_box(M, op, tmap, c, t)
                else:
                    nbytes = int(nv[t])
                    src = int(sv[t])
                    if nbytes % 16 or src % 16 or nbytes <= 0:
                        raise PtxError(f"cp.async.bulk of {nbytes} bytes from {src:#x}: size and source must be "
                                       f"multiples of 16 bytes", form=op.form, line=op.line, kernel=M.name)
                    data = A.global_read(M, op, np.array([src], np.uint64), nbytes, np.array([t]), count=False)[0]
                    if M.counters is not None:
                        chunks = np.uint64(src) + np.arange(0, nbytes, 16, dtype=np.uint64)
                        M.counters.global_(M, op, chunks, 16, np.full(chunks.size, t), "ld")
                    lin = np.arange(nbytes, dtype=np.int64)
                    tmap = None
                off0 = targets[0][1]
                align = 128 if tensor else 16
                if off0 % align:
                    raise PtxError(f"bulk copy destination shared offset {off0:#x} (thread {t}) is not {align}-byte "
                                   f"aligned", form=op.form, line=op.line, kernel=M.name)
                span = TM.SWIZZLE_SPAN[tmap.swizzle] if tmap is not None else 0
                placed = [(tm_, TM.swizzle(np.int64(off) + lin, span)) for tm_, off in targets]
                _issue(M, op, t, placed, bar_off, off0, data, nbytes, dsp)
        return run
    op = Op(stmt.line, stmt.opcode, "op", "cp.async", factory)
    return op


def _tensor_box(M, op, tmap, coords, tid):
    """(bytes of the box in shared-memory order, their byte offsets from the destination before the
    swizzle, the box's bytes) of one tiled tensor copy; global reads, checks and counters done."""
    if any(e != 1 for e in tmap.element_strides):
        raise PtxError(f"element strides {list(tmap.element_strides)} of the {tmap.describe()} are not implemented "
                       f"(only 1)", form=op.form, line=op.line, kernel=M.name)
    if tmap.interleave != TM.INTERLEAVE_NONE:
        raise PtxError(f"interleaved tensor maps are not implemented ({tmap.describe()})", form=op.form,
                       line=op.line, kernel=M.name)
    span = TM.SWIZZLE_SPAN[tmap.swizzle]
    es = tmap.elem_bytes
    if span and tmap.box[0] * es != span:
        raise PtxError(f"a {span}-byte swizzle with a {tmap.box[0] * es}-byte inner box is not implemented (the box's "
                       f"inner dimension must fill the span)", form=op.form, line=op.line, kernel=M.name)
    d = tmap.outside(coords)
    if d is not None and M.checks is not None:
        M.checks.add("TMA box outside the tensor map", M, op.line, tid,
                     f"the box at coordinates {coords} lies wholly outside the {tmap.describe()} along dimension "
                     f"{d} (extent {tmap.dims[d]}): the copy brings nothing but fill")
    addrs, inside = tmap.box_addresses(coords)
    data = _fill(tmap, addrs.size * es).reshape(addrs.size, es)
    if inside.any():
        a = addrs[inside].astype(np.uint64)
        data[inside] = A.global_read(M, op, a, es, np.full(a.size, tid), count=False)
        if M.counters is not None:      # the in-bounds bytes, as 16-byte requests of one issue
            chunks = np.unique(a & ~np.uint64(15))
            M.counters.global_(M, op, chunks, 16, np.full(chunks.size, tid), "ld")
    lin = (np.arange(addrs.size, dtype=np.int64)[:, None] * es + np.arange(es)).reshape(-1)
    return data.reshape(-1), lin, tmap.box_bytes


# ------------------------------------------------------------------------------------------ prefetch

@handler("prefetch", "prefetchu")
def _prefetch(stmt):
    """prefetch{.global|.param|.const}.tensormap and the L1/L2 prefetches: hints, no effect here."""
    if len(stmt.operands) != 1 or stmt.operands[0][0] != "mem":
        raise unsupported(stmt, "operands")
    return Op(stmt.line, stmt.opcode, "op", "other", lambda M: (lambda m: None))


__all__ = ["BulkState", "MBarrier", "all_parked", "bump", "cp_bulk", "deadlock", "land"]
