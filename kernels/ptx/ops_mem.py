"""ld / st / cp.async / fences."""
from __future__ import annotations

import numpy as np

from . import access as A
from . import ops_cluster as C
from .decode import Mods, Op, handler, unsupported
from .access import addr_getter
from .errors import PtxError
from .semantics import np_dtype

_CACHE = ("ca", "cg", "cs", "lu", "cv", "wb", "wt", "weak", "volatile", "relaxed", "acquire", "release",
          "L1::evict_normal", "L1::evict_unchanged", "L1::evict_first", "L1::evict_last", "L1::no_allocate",
          "L2::evict_normal", "L2::evict_first", "L2::evict_last", "L2::64B", "L2::128B", "L2::256B", "cta", "gpu",
          "sys")
LDST_T = ("b8", "u8", "s8", "b16", "u16", "s16", "f16", "bf16", "b32", "u32", "s32", "f32", "b64", "u64",
          "s64", "f64")


def _space(mo, stmt):
    """global | shared | cluster (.shared::cluster) | param | local | generic (no state space)."""
    sp = mo.take("global", "shared", "param", "local", "const", "shared::cta", "shared::cluster")
    if sp is None:
        return "generic"
    if sp == "const":
        raise unsupported(stmt, f".{sp} state space")
    return {"shared::cta": "shared", "shared::cluster": "cluster"}.get(sp, sp)


def _generic_read(M, op, a, size, tids, nc):
    """Generic addresses: the shared window (access.GENERIC_SHARED), the parameter window
    (access.GENERIC_PARAM: a __grid_constant__ parameter) or global memory."""
    sh = C.generic_split(a)
    pa = A.param_window(a) & ~sh
    if not sh.any() and not pa.any():
        return A.global_read(M, op, a, size, tids, nc=nc)
    out = np.empty((len(tids), size), np.uint8)
    if sh.any():
        out[sh] = C.dsmem_read(M, op, a[sh] - np.uint64(C.GENERIC_SHARED), size, tids[sh])
    if pa.any():
        out[pa] = A.param_read(M, op, a[pa] - np.uint64(A.GENERIC_PARAM), size, tids[pa])
    gl = ~sh & ~pa
    if gl.any():
        out[gl] = A.global_read(M, op, a[gl], size, tids[gl], nc=nc)
    return out


def _generic_write(M, op, a, data, tids):
    pa = A.param_window(a) & ~C.generic_split(a)
    if pa.any():
        k = int(np.flatnonzero(pa)[0])
        raise PtxError(f"thread {int(tids[k])} of CTA {M.ctaid} stores to the generic address {int(a[k]):#x} of a "
                       f"kernel parameter (parameters are read-only)", form=op.form, line=op.line, kernel=M.name)
    sh = C.generic_split(a)
    if sh.any():
        C.dsmem_write(M, op, a[sh] - np.uint64(C.GENERIC_SHARED), data[sh], tids[sh])
    if (~sh).any():
        A.global_write(M, op, a[~sh], data[~sh], tids[~sh])


def _vec(mo):
    v = mo.take("v2", "v4", "v8")
    return int(v[1:]) if v else 1


@handler("ld")
def _ld(stmt):
    mo = Mods(stmt)
    sp = _space(mo, stmt)
    nc = mo.flag("nc")
    cg = "cg" in mo.parts and sp == "global"
    for c in _CACHE:
        mo.take(c)
    n = _vec(mo)
    ty = mo.type(LDST_T)
    mo.done()
    if nc and sp not in ("global", "generic"):
        raise unsupported(stmt, ".nc outside .global")
    dst, src = stmt.operands
    if src[0] != "mem":
        raise unsupported(stmt, "address operand")
    dsts = dst[1] if dst[0] == "vec" else (dst,)
    if len(dsts) != n:
        raise unsupported(stmt, "vector size")
    esize = max(np.dtype(np_dtype(ty)).itemsize, 1)
    if ty in ("b8", "u8", "s8"):
        esize = 1
    cls = {"global": "ld.global", "shared": "ld.shared", "param": "ld.param", "cluster": "ld.shared",
           "generic": "ld.global", "local": "ld.local"}[sp]
    load_ty = {"b8": "u8"}.get(ty, ty)

    def factory(M):
        ag = addr_getter(M, src)
        puts = [M.wr(d, load_ty) for d in dsts]
        dt = np.dtype(np_dtype(load_ty))
        T = M.T

        def run(m):
            tids = A.active(m, T)
            a = np.broadcast_to(ag(), (T,))[tids]
            if sp == "global":
                raw = A.global_read(M, op, a, esize * n, tids, nc=nc, cg=cg)
            elif sp == "shared":
                raw = A.shared_read(M, op, a, esize * n, tids)
            elif sp == "param":
                raw = A.param_read(M, op, a, esize * n, tids)
            elif sp == "local":
                raw = A.local_access(M, op, a, esize * n, tids)
            elif sp == "cluster":
                raw = C.dsmem_read(M, op, a, esize * n, tids)
            else:
                raw = _generic_read(M, op, a, esize * n, tids, nc)
            vals = np.ascontiguousarray(raw).view(dt).reshape(len(tids), n)
            for k in range(n):
                full = np.zeros(T, dt)
                full[tids] = vals[:, k]
                puts[k](full, m)
        return run
    op = Op(stmt.line, stmt.opcode, "op", cls, factory)
    return op


@handler("st")
def _st(stmt):
    mo = Mods(stmt)
    sp = _space(mo, stmt)
    for c in _CACHE:
        mo.take(c)
    n = _vec(mo)
    ty = mo.type(LDST_T)
    mo.done()
    if sp == "param":
        raise unsupported(stmt, "st.param")
    dst, src = stmt.operands
    if dst[0] != "mem":
        raise unsupported(stmt, "address operand")
    srcs = src[1] if src[0] == "vec" else (src,)
    if len(srcs) != n:
        raise unsupported(stmt, "vector size")
    sty = {"b8": "u8"}.get(ty, ty)
    esize = np.dtype(np_dtype(sty)).itemsize
    cls = {"global": "st.global", "shared": "st.shared", "cluster": "st.shared", "generic": "st.global",
           "local": "st.local"}[sp]

    def factory(M):
        ag = addr_getter(M, dst)
        gets = [M.rd(s, sty) for s in srcs]
        dt = np.dtype(np_dtype(sty))
        T = M.T

        def run(m):
            tids = A.active(m, T)
            a = np.broadcast_to(ag(), (T,))[tids]
            vals = np.empty((len(tids), n), dt)
            for k in range(n):
                vals[:, k] = np.broadcast_to(gets[k](), (T,))[tids]
            data = vals.view(np.uint8).reshape(len(tids), n * esize)
            if sp == "global":
                A.global_write(M, op, a, data, tids)
            elif sp == "shared":
                A.shared_write(M, op, a, data, tids)
            elif sp == "cluster":
                C.dsmem_write(M, op, a, data, tids)
            elif sp == "local":
                A.local_access(M, op, a, data.shape[1], tids, data)
            else:
                _generic_write(M, op, a, data, tids)
        return run
    op = Op(stmt.line, stmt.opcode, "op", cls, factory)
    return op


# ------------------------------------------------------------------------------------------ cp.async

@handler("cp")
def _cp(stmt):
    p = stmt.opcode.split(".")
    if len(p) < 2 or p[1] != "async":
        raise unsupported(stmt)
    if p[2:3] == ["bulk"]:
        from .bulk import cp_bulk        # cp.async.bulk(.tensor): Hopper's bulk copies
        return cp_bulk(stmt)
    if p[2:] == ["commit_group"]:
        def factory(M):
            return lambda m: M.cp.commit(A.active(m, M.T))
        return Op(stmt.line, stmt.opcode, "op", "cp.async", factory)
    if p[2:] in (["wait_group"], ["wait_all"]):
        if p[2] == "wait_group":
            if len(stmt.operands) != 1 or stmt.operands[0][0] != "imm":
                raise unsupported(stmt, "wait_group needs an immediate")
            keep = stmt.operands[0][1]
        else:
            keep = 0

        def factory(M):
            def run(m):
                n = 0
                for cop, t, dst, data in M.cp.retire(A.active(m, M.T), keep):
                    A.shared_write(M, cop, dst, data, t, count=False)
                    n += len(t)
                M.retired[stmt.line] = M.retired.get(stmt.line, 0) + n
            return run
        return Op(stmt.line, stmt.opcode, "op", "cp.async", factory)
    mo = Mods(stmt)
    mo.take("async")
    cache = mo.take("ca", "cg")
    dsp = mo.take("shared") or mo.take("shared::cta")
    ssp = mo.take("global")
    mo.take("L2::64B", "L2::128B", "L2::256B")
    mo.done()
    if cache is None or dsp is None or ssp is None:
        raise unsupported(stmt)
    ops = stmt.operands
    if len(ops) not in (3, 4) or ops[2][0] != "imm":
        raise unsupported(stmt, "operands")
    size = ops[2][1]
    if size not in (4, 8, 16) or (cache == "cg" and size != 16):
        raise unsupported(stmt, f"copy size {size}")
    if len(ops) == 4 and ops[3][0] not in ("reg", "imm"):
        raise unsupported(stmt, "src-size operand")

    def factory(M):
        dg, sg = addr_getter(M, ops[0]), addr_getter(M, ops[1])
        zg = M.rd(ops[3], "u32") if len(ops) == 4 else None
        T = M.T

        def run(m):
            tids = A.active(m, T)
            d = np.broadcast_to(dg(), (T,))[tids]
            s = np.broadcast_to(sg(), (T,))[tids]
            A.shared_bounds(M, op, d, size, tids)
            if M.checks is not None:
                # the copy may land any time between its issue and the wait that retires it: for the race
                # checker it writes its destination at issue too (a thread reading or overwriting those
                # bytes in the same barrier interval races with it), while its data lands at the wait
                M.checks.shared_write(M, op, d.astype(np.int64)[:, None] + np.arange(size), tids)
            data = np.zeros((len(tids), size), np.uint8)
            if zg is None:
                data[:] = A.global_read(M, op, s, size, tids)
            else:
                n = np.broadcast_to(zg(), (T,))[tids].astype(np.int64)
                if (n > size).any():
                    raise unsupported(stmt, "src-size larger than cp-size")
                for k in np.unique(n):
                    if k == 0:
                        continue
                    sel = n == k
                    data[sel, :k] = A.global_read(M, op, s[sel], int(k), tids[sel])
            if M.counters is not None:
                M.counters.shared(M, op, d, size, tids, "cp.async")
            M.cp.issue(tids, d, data, op)
        return run
    op = Op(stmt.line, stmt.opcode, "op", "cp.async", factory)
    return op


@handler("fence", "membar")
def _fence(stmt):
    p = stmt.opcode.split(".")
    if p[0] == "fence" and p[1:] in (["proxy", "async", "global"], ["mbarrier_init", "release", "cluster"]):
        # async-proxy global writes (TMA stores, none here) / mbarrier.init made visible to the cluster:
        # one CTA runs at a time and mbarriers are created at once, so nothing to model
        return Op(stmt.line, stmt.opcode, "op", "fence", lambda M: (lambda m: None))
    if p[0] == "fence" and p[1:] in (["proxy", "async", "shared::cta"], ["proxy", "async"],
                                     ["proxy", "async", "shared::cluster"]):
        def factory(M):
            def run(m):
                if M.checks is not None:
                    M.checks.fence_proxy_async(M, A.active(m, M.T))
            return run
        return Op(stmt.line, stmt.opcode, "op", "fence", factory)
    if p[0] == "fence" and p[1:] in (["sc", "cluster"], ["acq_rel", "cluster"]):
        # data: nothing to model (sequential); checker: a later barrier.cluster.arrive.relaxed releases
        def factory(M):
            def run(m):
                if M.cluster is not None:
                    M.cluster.fence(M, m)
            return run
        return Op(stmt.line, stmt.opcode, "op", "fence", factory)
    if (p[0] == "membar" and p[1:] in (["cta"], ["gl"], ["sys"])) or \
            (p[0] == "fence" and p[1:] in (["sc", "cta"], ["acq_rel", "cta"], ["sc", "gpu"], ["acq_rel", "gpu"])):
        # one CTA runs at a time, sequentially consistent: nothing to model
        return Op(stmt.line, stmt.opcode, "op", "fence", lambda M: (lambda m: None))
    raise unsupported(stmt)
