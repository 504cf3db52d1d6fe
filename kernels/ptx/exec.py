"""Module / Kernel / LaunchResult and the scheduler: one CTA at a time, vectorised over its threads.

Scheduling: every thread has a PC. While all live threads share one PC the CTA steps as one (mask
None); after a divergent branch the threads with the lowest PC step first, which reconverges structured
code as NVVM lays it out. `bar.sync` must be reached by every live thread of the CTA, and every
warp-synchronous instruction by exactly the lanes it names; otherwise PtxError names the kernel, the
PTX line and the threads. A kernel with a cluster shape (or cluster instructions) is launched by
cluster.launch_clusters, which runs each cluster's CTAs interleaved through the same cta.run_cta.
"""
from __future__ import annotations

import itertools
import time
import weakref
from dataclasses import dataclass, field

import numpy as np

from . import bulk, ops_alu, ops_cluster, ops_mem, ops_warp, tensorcore  # noqa: F401  (register the handlers)
from .asyncops import CpAsyncState, WgmmaState
from .checks import Checks
from .cluster import launch_clusters
from .cta import run_cta, select_ctas
from .counters import Counters
from .decode import Op, decode
from .errors import PtxError, with_findings
from .machine import Machine
from .memory import GlobalMemory
from .parse import global_bytes, parse

MAX_STEPS = 20_000_000
_GRID_IDS = itertools.count(1)     # %gridid of each launch in this process (a context's launch number)


@dataclass
class LaunchResult:
    counters: dict
    findings: list
    ctas: list = field(default_factory=list)
    seconds: float = 0.0
    line_counts: dict = field(default_factory=dict)   # PTX line -> threads that executed it
    sync_stats: dict = field(default_factory=dict)    # "retired": wait line -> copies/jobs retired;
                                                      # "guarded": bar.sync line -> shared accesses after it

    def raise_for_findings(self) -> None:
        if self.findings:
            lines = "\n".join(str(f) for f in self.findings[:50])
            more = f"\n... {len(self.findings) - 50} more" if len(self.findings) > 50 else ""
            raise PtxError(f"{len(self.findings)} checker finding(s):\n{lines}{more}", findings=self.findings)


class Kernel:
    def __init__(self, module: "Module", fn):
        self.module = module
        self.fn = fn
        self.name = fn.name
        self.params = [(n, s, a) for n, s, a, _ in fn.params]
        self._param_offsets = {n: o for n, _, _, o in fn.params}
        self.param_bytes = max((o + s for _, s, _, o in fn.params), default=0)
        self.ops: list[Op] = []
        self._machines: dict = {}      # (threads, block, approx) -> (Machine, bound closures)
        for st in fn.stmts:
            op = decode(st)
            self.ops.append(op)
        self.labels = fn.labels
        # thread-block clusters: the entry's .reqnctapercluster shape; a kernel that uses cluster
        # instructions or registers without one runs as clusters of one CTA (the PTX default)
        self.cluster_dims = fn.cluster
        self.explicit_cluster = fn.explicit_cluster
        self.max_cluster_rank = fn.max_cluster_rank
        if self.cluster_dims is None and (self.explicit_cluster or any(op.cls == "cluster" for op in self.ops) or
                                          _uses_cluster_sregs(fn.stmts)):
            self.cluster_dims = (1, 1, 1)
        for op in self.ops:
            if op.kind == "bra":
                if op.target not in self.labels:
                    raise PtxError(f"branch to unknown label {op.target}", form=op.form, line=op.line,
                                   kernel=self.name)
                op.target_index = self.labels[op.target]
        # shared memory: static variables this kernel references, then the dynamic (extern) window
        used = set()
        names = {**module.parsed.shared, **getattr(fn, "shared_local", {})}
        for st in fn.stmts:
            _collect_syms(st.operands, names, used)
        off, self.shared_layout, self.dynamic_shared = 0, {}, []
        for nm, var in names.items():
            if nm in used and var.size is not None:
                off = -(-off // var.align) * var.align
                self.shared_layout[nm] = off
                off += var.size
        self.static_shared_bytes = off
        # .local arrays (per thread): offsets in the local state space, where ld/st.local address them
        off, self.local_layout = 0, {}
        for nm, var in getattr(fn, "local_vars", {}).items():
            off = -(-off // var.align) * var.align
            self.local_layout[nm] = off
            off += var.size
        self.local_bytes = off
        # module-scope .global variables this kernel references (sinf/cosf's 2/pi table): mapped into
        # the launch's global memory on first use (Module.global_addresses)
        used_globals: set = set()
        for st in fn.stmts:
            _collect_syms(st.operands, module.parsed.globals, used_globals)
        self.used_globals = sorted(used_globals)
        self._dyn_align = max([16] + [v.align for nm, v in names.items() if v.size is None and nm in used])
        self._dyn_names = [nm for nm, v in names.items() if v.size is None and nm in used]

    def __repr__(self):
        return f"Kernel({self.name!r}, {len(self.ops)} instructions, params={self.params})"

    # ------------------------------------------------------------------------------------ launch
    def launch(self, grid, block, shared_bytes: int = 0, params: bytes = b"", memory: GlobalMemory | None = None,
               checks: bool = True, approx: str = "exact", seed: int = 0, sample_ctas: int | None = None,
               max_steps: int = MAX_STEPS, cta_order: str = "linear", cluster=None) -> LaunchResult:
        """`cluster`: a launch-time cluster shape (cuLaunchKernelEx's attribute), for kernels compiled
        without .reqnctapercluster; None runs the compile-time shape (or none)."""
        t0 = time.perf_counter()
        self._gridid = next(_GRID_IDS)      # %gridid: every CTA of this launch reads the same, no two launches do
        grid = tuple(int(x) for x in (tuple(grid) + (1, 1, 1))[:3])
        block = tuple(int(x) for x in (tuple(block) + (1, 1, 1))[:3])
        if min(grid) < 1 or min(block) < 1:
            raise PtxError(f"empty launch grid={grid} block={block}", kernel=self.name)
        T = block[0] * block[1] * block[2]
        if T > 1024:
            raise PtxError(f"block of {T} threads exceeds 1024", kernel=self.name)
        if approx not in ("exact", "perturb"):
            raise ValueError("approx must be 'exact' or 'perturb'")
        params = bytes(params)
        if len(params) != self.param_bytes:
            raise PtxError(f"{len(params)} parameter bytes given, the kernel's .param declarations take "
                           f"{self.param_bytes}", kernel=self.name)
        memory = memory if memory is not None else GlobalMemory()
        if self.cluster_dims is not None or cluster is not None:
            return launch_clusters(self, grid, block, shared_bytes, params, memory, checks, approx, seed,
                                   sample_ctas, max_steps, cta_order, t0, cluster)
        key = (T, block, approx)
        M, fns = self._take_machine(key, T, block, seed)
        smem_size = self._prepare(M, grid, shared_bytes, params, memory, checks, approx, T)
        if fns is None:
            fns = self._bind(M)
        ctas = select_ctas(grid, sample_ctas, seed, cta_order)
        for cta in ctas:
            M.ctaid = cta
            for k, nm in enumerate(("%ctaid.x", "%ctaid.y", "%ctaid.z")):
                M.sregs[nm][:] = cta[k]
            M.smem = np.full(smem_size, 0xFF, np.uint8)           # poison: NaN in every float width
            M.lmem = np.full((T, self.local_bytes), 0xFF, np.uint8)
            M.cp.reset()
            M.wg.reset()
            M.mb.reset()
            if M.checks is not None:
                M.checks.begin_cta(M, smem_size)
            try:
                for _ in run_cta(M, self.ops, fns, max_steps):
                    raise PtxError("a CTA blocked outside a cluster launch", kernel=self.name)   # (run_cta raises first)
            except PtxError as e:
                raise with_findings(e, M.checks) from None
            if M.checks is not None:
                M.checks.end_cta(M)
        res = self._result(M, grid, block, ctas, t0)
        self._release(M)
        if len(self._machines) < 4:
            self._machines[key] = (M, fns)
        return res

    # ------------------------------------------------------------------- launch helpers (shared
    # with the cluster scheduler in cluster.py)
    def _take_machine(self, key, T, block, seed):
        """A machine (and its bound closures, None when new) for this launch shape: taken out of the
        cache while in use, so concurrent launches build their own (binding costs more than a small
        launch)."""
        cached = self._machines.pop(key, None)
        if cached is None:
            M, fns = Machine(self, T, block), None
            M.rng = np.random.default_rng(seed)
        else:
            M, fns = cached
            M.rng.bit_generator.state = np.random.default_rng(seed).bit_generator.state
        return M, fns

    def _bind(self, M):
        return [op.factory(M) if op.factory is not None else None for op in self.ops]

    def _prepare(self, M, grid, shared_bytes, params, memory, checks, approx, T) -> int:
        """Per-launch state of a machine; returns the CTA's shared-memory size in bytes."""
        M.gmem = memory
        M.approx = approx
        M.params = np.frombuffer(params, np.uint8).copy()
        M.param_syms = dict(self._param_offsets)
        dyn_base = -(-self.static_shared_bytes // self._dyn_align) * self._dyn_align
        M.shared_syms = dict(self.shared_layout)
        for nm in self._dyn_names:
            M.shared_syms[nm] = dyn_base
        M.local_syms = dict(self.local_layout)
        M.global_syms = self.module.global_addresses(memory, self.used_globals) if self.used_globals else {}
        M.counters = Counters(self, T)
        M.checks = Checks(self, memory) if checks else None
        M.cp = CpAsyncState(T)
        M.retired = {}
        M.wg = WgmmaState(-(-T // 128))
        M.mb = bulk.BulkState(T)
        for nm, v in (("%nctaid.x", grid[0]), ("%nctaid.y", grid[1]), ("%nctaid.z", grid[2])):
            M.sregs[nm][:] = v
        M.sregs["%gridid"][:] = self._gridid
        return dyn_base + int(shared_bytes) if self._dyn_names else self.static_shared_bytes

    def _result(self, M, grid, block, ctas, t0) -> LaunchResult:
        res = LaunchResult(M.counters.summary(grid, block, len(ctas)),
                           M.checks.findings if M.checks is not None else [], ctas,
                           time.perf_counter() - t0)
        lc = {}
        for op, n in zip(self.ops, M.counters.thread_counts.tolist()):
            lc[op.line] = lc.get(op.line, 0) + n
        res.line_counts = lc
        res.sync_stats = {"retired": dict(M.retired),
                          "guarded": dict(M.checks.guarded) if M.checks is not None else {}}
        return res

    @staticmethod
    def _release(M):
        M.gmem = M.checks = M.counters = None          # nothing of this launch stays alive in the cache
        M.smem = np.zeros(0, np.uint8)
        M.cluster = None


def _uses_cluster_sregs(stmts) -> bool:
    return any(o[0] == "sreg" and "cluster" in o[1] for st in stmts for o in st.operands)


def _collect_syms(ops, names, used):
    for o in ops:
        if o[0] == "sym" and o[1] in names:
            used.add(o[1])
        elif o[0] in ("vec",):
            _collect_syms(o[1], names, used)
        elif o[0] == "mem" and o[1] is not None:
            _collect_syms((o[1],), names, used)


class Module:
    def __init__(self, text: str, name: str = "module"):
        self.name = name
        self.text = text
        self.parsed = parse(text)
        self._globals = weakref.WeakKeyDictionary()      # GlobalMemory -> {name: address}
        self.kernels = {nm: Kernel(self, fn) for nm, fn in self.parsed.functions.items()}

    @classmethod
    def parse(cls, ptx_text: str, name: str = "module") -> "Module":
        try:
            return cls(ptx_text, name)
        except PtxError as e:
            if e.kernel is None and name:
                e.args = (f"{e.args[0]} [module {name}]",)
            raise

    def global_addresses(self, memory, names) -> dict:
        """Addresses of module-scope .global variables `names` in `memory`, each mapped (its initializer's
        bytes) the first time a launch into that memory needs it."""
        have = self._globals.setdefault(memory, {})
        for nm in names:
            if nm not in have:
                align, size = self.parsed.globals[nm]
                if size is None:
                    raise PtxError(f"module-scope .global {nm} has no size", kernel=None)
                ty, init = self.parsed.global_init.get(nm, ("b8", ""))
                buf = np.frombuffer(global_bytes(size, ty, init), np.uint8).copy()
                have[nm] = memory.map_array(buf, f"{self.name}:{nm}")
        return {nm: have[nm] for nm in names}

    def kernel(self, name: str) -> Kernel:
        k = self.kernels.get(name)
        if k is None:
            raise PtxError(f"module {self.name!r} has no entry {name!r} (entries: {', '.join(self.kernels)})",
                           kernel=name)
        return k

    def __repr__(self):
        return f"Module({self.name!r}, kernels={list(self.kernels)})"
