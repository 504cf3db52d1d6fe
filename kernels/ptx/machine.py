"""State of one CTA being interpreted: registers (one numpy array per register, over the CTA's threads),
special registers, shared and parameter memory, and operand binding for decoded ops.

Registers are stored by width (bool / uint16 / uint32 / uint64); an instruction reads them through a
typed view made once (`float32` view of a `.b32` register, ...), so reading an operand costs nothing.
"""
from __future__ import annotations

import numpy as np

from .errors import PtxError
from .parse import TYPE_BITS
from .semantics import np_dtype

CLUSTER_SREGS = tuple(f"%{r}.{c}" for r in ("cluster_ctaid", "cluster_nctaid", "clusterid", "nclusterid")
                      for c in "xyz") + ("%cluster_ctarank", "%cluster_nctarank", "%is_explicit_cluster")
_STORE = {1: np.bool_, 8: np.uint16, 16: np.uint16, 32: np.uint32, 64: np.uint64}


class Machine:
    def __init__(self, kernel, threads: int, block):
        self.kernel = kernel
        self.name = kernel.name
        self.T = threads
        self.W = -(-threads // 32)
        self.block = block
        self.regs: dict = {}
        self._views: dict = {}
        self.regtypes = kernel.fn.regs
        t = np.arange(threads, dtype=np.uint32)
        bx, by, bz = block
        self.tid_linear = t
        self.sregs = {"%tid.x": t % bx, "%tid.y": (t // bx) % by, "%tid.z": t // (bx * by),
                      "%ntid.x": np.uint32(bx), "%ntid.y": np.uint32(by), "%ntid.z": np.uint32(bz),
                      "%laneid": t % 32, "%warpid": t // 32,
                      "%ctaid.x": np.zeros(1, np.uint32), "%ctaid.y": np.zeros(1, np.uint32),
                      "%ctaid.z": np.zeros(1, np.uint32), "%nctaid.x": np.zeros(1, np.uint32),
                      "%nctaid.y": np.zeros(1, np.uint32), "%nctaid.z": np.zeros(1, np.uint32),
                      "%gridid": np.zeros(1, np.uint64)}      # set per launch (exec.py Kernel.launch)
        for nm in CLUSTER_SREGS:                # set per CTA by the cluster scheduler (cluster.py)
            self.sregs[nm] = np.zeros(1, np.uint32)
        self.cluster = None                     # the ClusterState of a cluster launch
        self.rank = 0                           # %cluster_ctarank of the CTA this machine runs
        self.ctaid = (0, 0, 0)
        self.smem = np.zeros(0, np.uint8)
        self.params = np.zeros(0, np.uint8)
        self.gmem = None
        self.counters = None
        self.checks = None
        self.asyncs = None
        self.approx = "exact"
        self.rng = np.random.default_rng(0)
        self.shared_syms: dict = {}
        self.param_syms: dict = {}
        self.local_syms: dict = {}              # .local arrays: offset in the local state space
        self.global_syms: dict = {}             # module-scope .global variables: their global address
        self.lmem = np.zeros((threads, 0), np.uint8)   # each thread's .local bytes
        self.alive = np.ones(threads, bool)

    # ------------------------------------------------------------------------------ registers
    def reg(self, name: str) -> np.ndarray:
        r = self.regs.get(name)
        if r is None:
            ty = self.regtypes.get(name)
            if ty is None:
                raise PtxError(f"undeclared register {name}", kernel=self.name)
            r = np.zeros(self.T, _STORE[TYPE_BITS[ty] if ty != "pred" else 1])
            self.regs[name] = r
        return r

    def view(self, name: str, ty: str) -> np.ndarray:
        key = (name, ty)
        v = self._views.get(key)
        if v is None:
            raw = self.reg(name)
            dt = np.dtype(np_dtype(ty))
            if raw.dtype == np.bool_ or dt == np.bool_:
                if raw.dtype != dt:
                    raise PtxError(f"register {name} (.{self.regtypes[name]}) used as .{ty}", kernel=self.name)
                v = raw
            elif dt.itemsize == raw.dtype.itemsize:
                v = raw.view(dt)
            else:
                v = None
            self._views[key] = v
        return v

    def width(self, name: str) -> int:
        ty = self.regtypes[name]
        return 1 if ty == "pred" else max(TYPE_BITS[ty], 16)

    # ------------------------------------------------------------------------------ operands
    def rd(self, op, ty: str):
        """A zero-argument callable giving operand `op` as type `ty` (array over threads, or scalar)."""
        kind = op[0]
        dt = np_dtype(ty)
        if kind == "reg":
            v = self.view(op[1], ty)
            if v is not None:
                return lambda: v
            raw = self.reg(op[1])
            bits = np.dtype(dt).itemsize * 8
            if raw.dtype.itemsize * 8 > bits:          # wider register: use the low bits
                mask = (1 << bits) - 1
                udt = np.dtype(f"u{bits // 8}")
                return lambda: (raw & raw.dtype.type(mask)).astype(udt).view(dt)
            signed = ty.startswith("s")                 # narrower register: extend
            if signed:
                sdt = np.dtype(f"i{raw.dtype.itemsize}")
                return lambda: raw.view(sdt).astype(dt)
            return lambda: raw.astype(np.dtype(f"u{np.dtype(dt).itemsize}")).view(dt)
        if kind == "imm":
            return _const(_imm(op[1], ty))
        if kind == "f32":
            val = np.array(op[1], np.uint32).view(np.float32)
            if ty == "f32":
                return _const(np.float32(val))
            if ty == "f64":
                return _const(np.float64(val))
            return _const(np.array(op[1]).astype(dt))
        if kind == "f64":
            val = np.array(op[1], np.uint64).view(np.float64)
            return _const(np.array(val).astype(dt)[()])
        if kind == "sreg":
            v = self.sregs.get(op[1])
            if v is None:
                raise PtxError(f"special register {op[1]} is not supported", kernel=self.name)
            if ty in ("u32", "b32", "s32"):
                vv = v.view(dt) if isinstance(v, np.ndarray) else dt(v)
                return lambda: vv
            return lambda: np.asarray(v).astype(dt)
        if kind == "sym":
            addr = self.symbol_address(op[1])
            return _const(np.array(addr).astype(dt)[()])
        if kind == "not":
            g = self.rd(op[1], ty)
            return lambda: ~g()
        raise PtxError(f"operand {op} cannot be read as .{ty}", kernel=self.name)

    def wr(self, op, ty: str):
        """A callable put(value, mask) storing into register operand `op` as type `ty`."""
        if op[0] == "pair":
            raise PtxError("pair destination outside shfl/setp", kernel=self.name)
        if op[0] != "reg":
            if op[0] == "sym" and op[1] == "_":
                return lambda val, m: None
            raise PtxError(f"destination {op} is not a register", kernel=self.name)
        v = self.view(op[1], ty)
        if v is not None:
            def put(val, m, d=v):
                if m is None:
                    d[...] = val
                else:
                    np.copyto(d, val, casting="unsafe", where=m)
            return put
        raw = self.reg(op[1])
        dt = np.dtype(np_dtype(ty))
        if raw.dtype.itemsize > dt.itemsize:           # wider register: zero/sign-extend
            ext = np.dtype(f"i{dt.itemsize}") if ty.startswith("s") else np.dtype(f"u{dt.itemsize}")
            sraw = np.dtype(f"i{raw.dtype.itemsize}")

            def put(val, m, d=raw):
                x = np.asarray(val).astype(dt, copy=False).view(ext) if np.asarray(val).dtype.itemsize == \
                    dt.itemsize else np.asarray(val).astype(dt).view(ext)
                y = x.astype(sraw if ext.kind == "i" else raw.dtype).view(raw.dtype) if np.ndim(x) else \
                    np.array(x).astype(sraw if ext.kind == "i" else raw.dtype).view(raw.dtype)
                if m is None:
                    d[...] = y
                else:
                    np.copyto(d, y, casting="unsafe", where=m)
            return put
        udt = np.dtype(f"u{raw.dtype.itemsize}")

        def put(val, m, d=raw):                        # narrower register: truncate
            y = np.asarray(val).astype(dt).view(np.dtype(f"u{dt.itemsize}")).astype(udt)
            if m is None:
                d[...] = y
            else:
                np.copyto(d, y, casting="unsafe", where=m)
        return put

    def symbol_address(self, name: str) -> int:
        if name in self.shared_syms:
            return self.shared_syms[name]
        if name in self.param_syms:
            return self.param_syms[name]
        if name in self.local_syms:
            return self.local_syms[name]
        if name in self.global_syms:
            return self.global_syms[name]
        raise PtxError(f"unknown symbol {name} (module-scope .global variables are not supported)",
                       kernel=self.name)


def _const(v):
    return lambda: v


def _imm(value: int, ty: str):
    dt = np.dtype(np_dtype(ty))
    if dt == np.bool_:
        return np.bool_(value != 0)
    if dt.kind == "f":
        return dt.type(value)
    bits = dt.itemsize * 8
    u = value & ((1 << bits) - 1)
    return np.array(u, np.dtype(f"u{dt.itemsize}")).view(dt)[()]
