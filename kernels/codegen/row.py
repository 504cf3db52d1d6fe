"""Row programs: softmax, LayerNorm, RMSNorm, reductions and their element-wise neighbours.

One thread block owns one row (the outer, non-reduced index); it runs the subgraph's reductions in
program order, each a strided pass over the row followed by a block reduction, then stores the
row-shaped outputs. Element values are pulled (pull.py), so any element-wise prologue and epilogue
and any layout of the reduced axes work; reduction results are per-row scalars bound in the emitter.

Register mode (a static row length of at most REGISTER_BLOCK elements): each thread owns the elements
j = me + W * e (e < E = cdiv(L, W)) of its row, W = 32 (a warp per row, THREADS / 32 rows per block,
warp reductions, no barrier) when L <= REGISTER_WARP, else W = THREADS (a block per row). The rows'
inputs are pulled once into E registers per thread (`xr<k>[e]`) and every later pass and store reads them
there, so a LayerNorm loads each element once instead of once per pass.

Tile mode (`tile_hook`, the sm_90a GEMM's PLUS_HAS_ROW_TILE hook, kernels/families/gemm_rownorm/tile.py): the same
program over a CTA's BM x BN slice of rows whose CTAs form a thread-block cluster along the row. A pass is
a warp per four rows, each lane over its columns lane + 32 k, the four rows reduced across the warp together
(plus_warp_reduce4), the rows' partials in a shared array, a cluster barrier, then one thread per row combines
the partials of every rank in rank order (plus_cluster.cuh) and computes the row's scalars (mean, rstd, ...)
into shared `plus_rt_stat`, which later passes read. The first pass also rewrites the staged accumulator to
the row program's input x in place; values that vary along the row only (gamma, beta, a GEMM bias) are loaded
once per CTA into registers.
"""
from __future__ import annotations

import re

import sympy

from ...graph_rewrites import ops
from . import dtypes, row_check, symdim
from .cexpr import attr, lit
from .forward import forward_map
from .pointwise import bounds
from .pull import Emitter, RenderError, describe

REDUCE_OPS = {name: op.reduce for name, op in ops.OPS.items() if op.reduce}   # op -> combine kind
ROW_OPS = set(REDUCE_OPS) | ops.with_role("row")
_COMBINE = {"sum": ("0.0f", "{a} + {v}", "plus_block_sum"), "max": ("-CUDART_INF_F", "fmaxf({a}, {v})", "plus_block_max"),
            "min": ("CUDART_INF_F", "fminf({a}, {v})", "plus_block_min"), "prod": ("1.0f", "{a} * {v}", "plus_block_prod")}
THREADS = 256
REGISTER_WARP = 1024    # register mode, a warp per row: rows of at most this many elements (32 per lane)
REGISTER_BLOCK = 4096   # register mode, a block per row: at most this many (16 per thread)
SPREAD = 256            # register mode, a warp per row: at least this many blocks while rows last
FINISH_FN = "plus_row_finish"   # the rows as a device function of the one-launch GEMM + row program


def bind_at(em: Emitter, t: str, when, value):
    """Bind `t` in `em` so that a read at an index where when(idx) holds is value(idx) -> (expr, ctype), and every
    other read is pulled as before (the earlier binding, else t's producer or input). E.g. a row's input at
    (row, j) from its register copy `xr0[e]`, anywhere else loaded."""
    prev = em.bound.get(t)

    def read(idx):
        if when(idx):
            return value(idx)
        if prev is not None:
            return prev(idx)
        del em.bound[t]
        try:
            return em.value(t, idx)
        finally:
            em.bound[t] = read
    em.bound[t] = read


def reduced_axes(em: Emitter, node) -> list:
    rank = len(em.shape(node.input[0]))
    if node.op_type in REDUCE_OPS:
        axes = attr(node, "axes")
        if axes is None and len(node.input) > 1 and node.input[1]:
            axes = em._const_ints(node, 1)
        if not axes:
            if attr(node, "noop_with_empty_axes", 0):
                raise RenderError(f"{describe(node)}: empty axes with noop_with_empty_axes")
            axes = list(range(rank))
    elif node.op_type in ("Softmax", "LogSoftmax"):
        axes = [attr(node, "axis", -1)]
    else:
        a = attr(node, "axis", -1)
        a = a + rank if a < 0 else a
        axes = list(range(a, rank))
    return sorted(a + rank if a < 0 else a for a in axes)


class RowProgram:
    """Renders the row kernel `entry` for the row-op nodes of a subgraph."""

    def __init__(self, em: Emitter, row_nodes: list, entry="plus_row"):
        self.em, self.nodes, self.entry = em, row_nodes, entry
        first = row_nodes[0]
        self.x_shape = em.shape(first.input[0])
        self.axes = reduced_axes(em, first)
        for n in row_nodes[1:]:
            shp, ax = em.shape(n.input[0]), reduced_axes(em, n)
            if len(shp) != len(self.x_shape) or ax != self.axes or any(
                    sympy.simplify(a - b) != 0 for a, b in zip(shp, self.x_shape)):
                raise RenderError(f"{describe(n)}: reduces a different row than {describe(first)}")
        self.outer = [d for k, d in enumerate(self.x_shape) if k not in self.axes]
        self.inner = [d for k, d in enumerate(self.x_shape) if k in self.axes]
        self.rows = symdim.numel(self.outer)
        self.length = symdim.numel(self.inner)
        self.trailing = self.axes == list(range(len(self.x_shape) - len(self.axes), len(self.x_shape)))
        self.tile = False           # tile mode (tile_hook): passes over a CTA's slice, cluster-wide reductions
        self.scalars: list = []     # tile mode: per-row scalars, in plus_rt_stat[k][r] order
        self._open = None           # tile mode: (memo, indent, first new scalar) of the open per-row scope
        self._passes = 0
        self.external = set(em.bound)   # tensors the caller bound (a GEMM-side x): not the rows' statistics
        self._fwd = None
        self._reg = None            # register mode: (W, E) while body() renders (module docstring)
        self._elem = False          # register mode: inside a loop over this thread's elements (e, j)
        self._outer_idx = None      # register mode: the row's outer index, named once per row
        self._x_fn = None           # tile mode: the hook rewriting the staged accumulator to x, until the first pass
        self._x_args = ""           # tile mode: its trailing arguments (the GEMM-side values along the row)

    # ---- indices -----------------------------------------------------------------------------
    def x_index(self, row="row", j="j") -> list:
        o = iter(self._outer_idx if self._outer_idx and row == "row" else self.em.delinear(row, self.outer))
        i = iter(self.em.delinear(j, self.inner))
        return [next(i) if k in self.axes else next(o) for k in range(len(self.x_shape))]

    def index_of(self, t, row="row", j="j") -> list:
        """Index of a row-shaped tensor `t` at (row, j)."""
        shp = self.em.shape(t)
        if len(shp) == len(self.x_shape) and all(sympy.simplify(a - b) == 0 for a, b in zip(shp, self.x_shape)):
            return self.x_index(row, j)
        if self.trailing and sympy.simplify(symdim.numel(shp) - self.rows * self.length) == 0:
            return self.em.delinear(f"{row} * {self.em.c(self.length)} + {j}", shp)
        raise RenderError(f"output '{t}' of shape {shp} is not laid out like the rows {self.x_shape}")

    def _forward(self) -> dict:
        """tensor -> (index, conditions) of the element that element (row, j) of the rows becomes, for every
        tensor reached from the rows (x and the row-shaped results) element-wise, through Transposes,
        the Reshape family, Casts, Slices and Splits (forward.py)."""
        if self._fwd is None:
            em, fwd = self.em, {}
            seeds = [self.nodes[0].input[0]] + [o for n in self.nodes for o in n.output[:1] if o]
            for seed in seeds:
                shp = em.shape(seed)
                if len(shp) == len(self.x_shape) and all(
                        sympy.simplify(a - b) == 0 for a, b in zip(shp, self.x_shape)):
                    for t, where in forward_map(em, seed, self.x_index()).items():
                        fwd.setdefault(t, where)
            dep = {o for n in self.nodes for o in n.output if o}
            for n in em.nodes:
                if any(i in dep for i in n.input if i):
                    dep.update(o for o in n.output if o)
            self._fwd = {t: w for t, w in fwd.items() if t in dep}     # the statistics-bearing ones
        return self._fwd

    def store_index(self, t):
        """(index, conditions) at which the thread at (row, j) stores row-shaped output `t`: the element
        that (row, j) becomes when `t` is the rows' result in another layout (e.g. returned transposed),
        so it is normalised with its own row's statistics; else `t`'s element at (row, j) (index_of)."""
        fwd = self._forward()
        if t in fwd:
            return fwd[t]
        return self.index_of(t), []

    def split_stores(self, stores: dict) -> tuple:
        """(per-row outputs, row-shaped outputs) of `stores`; RenderError for an output that is neither."""
        per_row, row_shaped = {}, {}
        for t, where in stores.items():
            if t in self._forward():
                row_shaped[t] = where
                continue
            try:
                self.index_of(t)
                row_shaped[t] = where
            except RenderError:
                if self.per_row_index(t) is None:
                    raise
                per_row[t] = where
        return per_row, row_shaped

    # ---- code --------------------------------------------------------------------------------
    def _scalar(self, name, expr):
        """A per-row scalar `name` = expr (over earlier scalars and reduction results)."""
        self.em.emit(f"const float {name} = {expr};")
        if self.tile:
            self.scalars.append(name)

    def _pass(self, name, kind, value_fn):
        """One reduction pass: `name` = reduce(kind) over j of value_fn(idx)."""
        if self.tile:
            return self._tile_pass(name, kind, value_fn)
        em = self.em
        ident, comb, block = _COMBINE[kind]
        if self._reg:
            em.emit(f"float {name}_acc = {ident};")
            scope = self._open_elements()
            v = value_fn(self.x_index())
            em.emit(f"{name}_acc = {comb.format(a=name + '_acc', v=v)};")
            self._close_elements(scope)
            reduce = (f"{block.replace('plus_block_', 'plus_warp_')}({name}_acc)" if self._reg[0] == 32
                      else f"{block}({name}_acc, red)")
            em.emit(f"const float {name} = {reduce};")
            return name
        em.emit(f"float {name}_acc = {ident};")
        em.emit("for (long long j = threadIdx.x; j < L; j += blockDim.x) {")
        saved_memo, saved_indent = dict(em.memo), em.indent
        em.indent += "  "
        v = value_fn(self.x_index())
        em.emit(f"{name}_acc = {comb.format(a=name + '_acc', v=v)};")
        em.indent, em.memo = saved_indent, saved_memo
        em.emit("}")
        em.emit(f"const float {name} = {block}({name}_acc, red);")
        return name

    def _x(self, node, idx):
        e, ct = self.em.value(node.input[0], idx)
        return e if ct == "float" else f"((float)({e}))"

    def _bind_reduce(self, node, k):
        em, kind = self.em, REDUCE_OPS[node.op_type]
        L = "(float)L"
        if kind in ("sum", "mean"):
            r = self._pass(f"r{k}", "sum", lambda idx: self._x(node, idx))
            val = f"{r} / {L}" if kind == "mean" else r
        elif kind in ("max", "min", "prod"):
            val = self._pass(f"r{k}", kind, lambda idx: self._x(node, idx))
            if kind != "prod":
                val = self._first_nan(node, val)
        elif kind in ("sumsq", "l2"):
            r = self._pass(f"r{k}", "sum", lambda idx: f"({self._x(node, idx)}) * ({self._x(node, idx)})")
            val = f"sqrtf({r})" if kind == "l2" else r
        elif kind == "l1":
            val = self._pass(f"r{k}", "sum", lambda idx: f"fabsf({self._x(node, idx)})")
        else:  # lse
            mx = self._pass(f"r{k}m", "max", lambda idx: self._x(node, idx))
            self._scalar(f"r{k}o", f"isinf({mx}) ? 0.0f : {mx}")   # onnxruntime: an infinite max shifts by 0
            s = self._pass(f"r{k}", "sum", lambda idx: f"expf({self._x(node, idx)} - r{k}o)")
            val = f"r{k}o + logf({s})"
        self._scalar(f"red{k}", val)
        em.bound[node.output[0]] = lambda idx, k=k: (f"red{k}", "float")

    def _first_nan(self, node, val):
        """onnxruntime's ReduceMax/ReduceMin start from the row's first element and keep an element only when
        it compares greater (less): a NaN is the result when it is the first element and is skipped anywhere
        else. The passes skip every NaN (fmaxf/fminf); here the first element decides."""
        if getattr(self, "tile", False):    # the GEMM row tile has no first element at hand: NaN is skipped
            return val
        em = self.em
        first = f"{val}f"
        em.emit(f"float {first} = 0.0f;")
        em.emit("if (L > 0) {")
        saved_memo, saved_indent = dict(em.memo), em.indent
        em.indent += "  "
        em.emit("const long long j = 0;")
        em.emit(f"{first} = {self._x(node, self.x_index())};")
        em.indent, em.memo = saved_indent, saved_memo
        em.emit("}")
        return f"(isnan({first}) ? {first} : {val})"

    def _bind_softmax(self, node, k):
        mx = self._pass(f"r{k}m", "max", lambda idx: self._x(node, idx))
        s = self._pass(f"r{k}s", "sum", lambda idx: f"expf({self._x(node, idx)} - {mx})")
        log = node.op_type == "LogSoftmax"

        def at(idx):
            x = self._x(node, idx)
            expr = f"{x} - {mx} - logf({s})" if log else f"expf({x} - {mx}) / {s}"
            return self.em.tmp(expr, "float"), "float"
        self.em.bound[node.output[0]] = at

    def _bind_norm(self, node, k):
        em = self.em
        eps = lit(attr(node, "epsilon", 1e-5))
        rms = node.op_type == "RMSNormalization"
        if rms:
            ms = self._pass(f"r{k}q", "sum", lambda idx: f"({self._x(node, idx)}) * ({self._x(node, idx)})")
            self._scalar(f"rstd{k}", f"rsqrtf({ms} / (float)L + {eps})")
        else:
            s = self._pass(f"r{k}s", "sum", lambda idx: self._x(node, idx))
            self._scalar(f"mean{k}", f"{s} / (float)L")
            q = self._pass(f"r{k}q", "sum", lambda idx: f"({self._x(node, idx)} - mean{k}) * "
                                                         f"({self._x(node, idx)} - mean{k})")
            self._scalar(f"rstd{k}", f"rsqrtf({q} / (float)L + {eps})")
        out_shape = em.shape(node.output[0])

        def at(idx):
            x = self._x(node, idx)
            centred = x if rms else f"({x} - mean{k})"
            y = f"{centred} * rstd{k}"
            for w, op in ((1, "*"), (2, "+")):
                if len(node.input) > w and node.input[w]:
                    g, ct = em.value(node.input[w], em.broadcast(idx, em.shape(node.input[w]), out_shape))
                    y = f"({y}) {op} {g}"
            return em.tmp(y, "float"), "float"
        em.bound[node.output[0]] = at
        if len(node.output) > 1 and node.output[1] and not rms:
            em.bound[node.output[1]] = lambda idx, k=k: (f"mean{k}", "float")
        if len(node.output) > 2 and node.output[2]:
            em.bound[node.output[2]] = lambda idx, k=k: (f"rstd{k}", "float")

    def _bind_all(self):
        for k, node in enumerate(self.nodes):
            if node.op_type in REDUCE_OPS:
                self._bind_reduce(node, k)
            elif node.op_type in ("Softmax", "LogSoftmax"):
                self._bind_softmax(node, k)
            else:
                self._bind_norm(node, k)

    def _stores(self, stores: dict, index=None):
        """Store each output at its index (store_index: row-shaped, the element (row, j) becomes; or
        `index`, e.g. per_row_index), under the conditions of a sliced output."""
        em = self.em
        for t, (ptr, dt) in stores.items():
            idx, conds = (index(t), []) if index else self.store_index(t)
            saved_memo, saved_indent = dict(em.memo), em.indent
            if conds:
                em.emit(f"if ({' && '.join(conds)}) {{")
                em.indent = saved_indent + "  "
            val, ct = em.value(t, idx)
            em.emit(dtypes.store(dt, ptr, em.linear(idx, em.shape(t)),
                                 dtypes.convert(val, ct, dtypes.compute(dt))))
            if conds:
                em.indent, em.memo = saved_indent, saved_memo
                em.emit("}")

    def per_row_index(self, t, row="row"):
        """Index of `t` at `row` when `t` holds one value per row (a reduction's own output, keepdims 0 or
        1, or an element-wise function of such outputs): its non-unit dims are the rows' outer dims."""
        shp = self.em.shape(t)
        mine = [d for d in shp if sympy.simplify(d - 1) != 0]
        outer = [d for d in self.outer if sympy.simplify(d - 1) != 0]
        if len(mine) == len(outer) and all(sympy.simplify(a - b) == 0 for a, b in zip(mine, outer)):
            return self.em.delinear(row, shp)
        return None

    def body(self, stores: dict) -> str:
        """The kernel; `stores` maps output tensor -> (pointer expr, dtype). Row-shaped outputs are stored
        by every thread over the row; per-row outputs (a reduction's result) once, by thread 0 (lane 0 of
        the row's warp in register mode)."""
        self._reg = self.register_mode()
        if self._reg:
            return self._register_body(stores)
        inner = self._rows_code(stores)
        return (f'extern "C" __global__ void {bounds(THREADS)} {self.entry}(const PlusArgs args) {{\n'
                f"  __shared__ float red[33];\n"
                f"  const long long rows = {self.em.c(self.rows)};\n"
                f"  const long long L = {self.em.c(self.length)};\n"
                f"  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {{\n"
                f"{inner}\n"
                f"    __syncthreads();\n"
                f"  }}\n}}\n")

    def finish(self, stores: dict) -> str:
        """The same rows as a device function `FINISH_FN(args, lo, hi)` over rows [lo, hi) for the CTA that
        calls it (any multiple of 32 threads): the one-launch GEMM + row program (gemm_hooks.cuh
        plus_finish_rows), where the last GEMM CTA to write a group of rows finishes them."""
        inner = self._rows_code(stores)
        return (f"PLUS_DEV void {FINISH_FN}(const PlusArgs& args, long long lo, long long hi) {{\n"
                f"  __shared__ float red[33];\n"
                f"  const long long rows = {self.em.c(self.rows)};\n"
                f"  const long long L = {self.em.c(self.length)};\n"
                f"  for (long long row = lo; row < hi && row < rows; ++row) {{\n"
                f"{inner}\n"
                f"    __syncthreads();\n"
                f"  }}\n}}\n")

    def _rows_code(self, stores: dict) -> str:
        """The per-row code of body() and finish(): passes, scalars, stores of one row `row`."""
        em = self.em
        row_check.check(self, stores)
        em.reset()
        em.indent = "    "
        self._bind_all()
        per_row, row_shaped = self.split_stores(stores)
        self._per_row_stores(per_row, "threadIdx.x == 0")
        em.emit("for (long long j = threadIdx.x; j < L; j += blockDim.x) {")
        saved_indent = em.indent
        em.indent += "  "
        self._stores(row_shaped)
        em.indent = saved_indent
        em.emit("}")
        return em.take()

    def _per_row_stores(self, per_row: dict, who: str):
        """Store the per-row outputs once per row, by the thread for which `who` holds."""
        if not per_row:
            return
        em = self.em
        em.emit(f"if ({who}) {{")
        saved_indent, saved_memo = em.indent, dict(em.memo)
        em.indent += "  "
        self._stores(per_row, self.per_row_index)
        em.indent, em.memo = saved_indent, saved_memo
        em.emit("}")

    def launch(self, syms):
        """(grid, block, dynamic shared memory) of body(): a block per row, or (register mode, a warp per row)
        min(rows, max(cdiv(rows, THREADS / 32), SPREAD)) blocks, so that a few rows still spread over the SMs
        (128 rows: 128 blocks of one busy warp; 2048 rows: 256 blocks of 8); at most 65535, each looping."""
        rows = syms.rpn(self.rows)
        reg = self.register_mode()
        per = THREADS // reg[0] if reg else 1
        # a warp per row: THREADS / 32 rows per block, but at least SPREAD blocks while there are rows for them
        grid = f"{rows},{per},cdiv,{SPREAD},max,{rows},min,65535,min" if per > 1 else f"{rows},65535,min"
        return (grid, "1", "1"), (str(THREADS), "1", "1"), "0"

    # ---- register mode (module docstring) ------------------------------------------------------
    def register_mode(self) -> tuple | None:
        """(W, E) of register mode for these rows, or None (a symbolic or longer row: the strided passes).
        E.g. rows of 768: (32, 24), a warp per row with 24 elements per lane; rows of 3000: (256, 12)."""
        length = symdim.parse(self.length)
        if not length.is_Integer or not 0 < int(length) <= REGISTER_BLOCK:
            return None
        n = int(length)
        w = 32 if n <= REGISTER_WARP else THREADS
        return w, -(-n // w)

    def _open_elements(self):
        """Open the unrolled loop over this thread's elements e (column j = me + W * e) of the row."""
        w, e_count = self._reg
        em = self.em
        scope = (dict(em.memo), em.indent)
        em.emit("#pragma unroll")
        em.emit(f"for (int e = 0; e < {e_count}; ++e) {{")
        em.indent += "  "
        em.emit(f"const long long j = me + {w}LL * e;")
        if w * e_count != int(symdim.parse(self.length)):
            em.emit("if (j < L) {")
            em.indent += "  "
        self._elem = True
        return scope

    def _close_elements(self, scope):
        em = self.em
        memo, indent = scope
        w, e_count = self._reg
        if w * e_count != int(symdim.parse(self.length)):
            em.indent = indent + "  "
            em.emit("}")
        em.indent, em.memo = indent, memo
        em.emit("}")
        self._elem = False

    def _name_outer_index(self):
        """Name the row's outer index once per row (`const long long o0 = (row) / seq;`), so that element
        loads index with it instead of dividing per element (linear() still folds it back into `row`)."""
        em = self.em
        names = []
        for k, part in enumerate(em._delinear("row", self.outer)):
            names.append(part if part in ("row", "0") else f"o{k}")
            if part not in ("row", "0"):
                em.emit(f"const long long o{k} = {part};")
        if len(self.outer) > 1:
            em._delin.append((tuple(names), list(self.outer), "row"))
        self._outer_idx = names

    def _cache_inputs(self):
        """Pull each row node's input x once into registers xr<k>[e] and bind x to them at (row, j) inside
        element loops; any other read of x (another element, outside the loops) is pulled as before."""
        em = self.em
        rowdep = {o for n in self.nodes for o in n.output if o}
        for n in em.nodes:
            if any(i in rowdep for i in n.input if i):
                rowdep.update(o for o in n.output if o)
        cached = []
        for node in self.nodes:
            x = node.input[0]
            if x in cached or x in rowdep or len(em.shape(x)) != len(self.x_shape) or any(
                    sympy.simplify(a - b) != 0 for a, b in zip(em.shape(x), self.x_shape)):
                continue
            cached.append(x)
        for k, x in enumerate(cached):
            name = f"xr{k}"
            at = len(em.lines)
            scope = self._open_elements()
            canon = list(self.x_index())
            val, ct = em.value(x, canon)
            em.emit(f"{name}[e] = {val};")
            self._close_elements(scope)
            em.lines.insert(at, f"{em.indent}{ct} {name}[{self._reg[1]}];")
            self._bind_register(x, canon, f"{name}[e]", ct)

    def _bind_register(self, t, canon, expr, ct):
        """Inside an element (column) loop, read `t` at index `canon` as `expr` (its register copy); any other
        read of `t` is pulled as before."""
        bind_at(self.em, t, lambda idx: self._elem and list(idx) == canon, lambda idx: (expr, ct))

    def _register_body(self, stores: dict) -> str:
        em, (w, _) = self.em, self._reg
        row_check.check(self, stores)
        em.reset()
        em.indent = "    "
        self._name_outer_index()
        self._cache_inputs()
        self._bind_all()
        per_row, row_shaped = self.split_stores(stores)
        self._per_row_stores(per_row, "me == 0")
        scope = self._open_elements()
        self._stores(row_shaped)
        self._close_elements(scope)
        lines = em.lines
        for k in range(len(self.outer)):          # an outer index no load or store reads
            decl = f"{em.indent}const long long o{k} = "
            if not any(re.search(rf"\bo{k}\b", ln) for ln in lines if not ln.startswith(decl)):
                em.lines = lines = [ln for ln in lines if not ln.startswith(decl)]
        inner = em.take()
        if w == 32:
            # warp w of block b takes rows b + w * gridDim.x (+ a multiple of gridDim.x * THREADS / 32): with
            # fewer rows than blocks x warps, the first warp of every block is busy before any second one
            head = ("  const int me = threadIdx.x & 31;   // this lane's first column; a warp per row\n"
                    "  for (long long row = blockIdx.x + (long long)gridDim.x * (threadIdx.x >> 5); "
                    f"row < rows; row += (long long)gridDim.x * {THREADS // 32}) {{\n")
            tail = ""
        else:
            head = ("  __shared__ float red[33];\n  const int me = threadIdx.x;\n"
                    "  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {\n")
            tail = "    __syncthreads();\n"
        return (f'extern "C" __global__ void {bounds(THREADS)} {self.entry}(const PlusArgs args) {{\n'
                f"  const long long rows = {em.c(self.rows)};\n"
                f"  const long long L = {em.c(self.length)};\n"
                f"{head}{inner}\n{tail}  }}\n}}\n")

    # ---- tile mode (the sm_90a GEMM's row tile over a thread-block cluster) ---------------------
    def _open_scope(self, loop: str):
        self.em.emit(loop + " {")
        self.em.indent += "  "
        self._decls.append([])

    def _declare(self, name: str, line: str):
        """Emit a declaration of `name` in the innermost scope; _close_scope drops it if nothing reads it."""
        self._decls[-1].append((len(self.em.lines), name))
        self.em.emit(line)

    def _close_scope(self, indent):
        lines = self.em.lines
        for at, name in reversed(self._decls.pop()):
            if not any(re.search(rf"\b{name}\b", ln) for ln in lines[at + 1:]):
                del lines[at]
        self.em.indent = indent
        self.em.emit("}")

    def _row_scope(self, loop: str):
        """Open `loop` over the tile's rows r (row = m0 + r), with this row's scalars so far."""
        self._open_scope(loop)
        self._row_values()

    def _row_values(self):
        """Declare row r's number and its scalars so far (dropped when nothing reads them)."""
        self._declare("row", "const long long row = m0 + r;")
        for k, name in enumerate(self.scalars):
            self._declare(name, f"const float {name} = plus_rt_stat[{k}][r];")

    def _column_loop(self):
        """Open the loop over this lane's columns c = lane + 32 k of the CTA's slice (k < BN / 32, unrolled); the
        first pass's loop first rewrites the staged accumulator to x in place (`x_fn`)."""
        self.em.emit("#pragma unroll")
        self._open_scope("for (int k = 0; k < PLUS_BN / 32; ++k)")
        self.em.emit("const int c = lane + 32 * k;")
        self.em.emit("if (c >= cols) continue;")
        if self._x_fn:
            self.em.emit(f"tile[r * ld + c] = {self._x_fn}(args, b, m0 + r, n0 + c, tile[r * ld + c]{self._x_args});"
                         "   // x, in place")
            self._x_fn = None
        self._declare("j", "const long long j = n0 + c;")
        self._elem = True

    def _column_weights(self, x_cols=()) -> list:
        """Values that vary along the row only, loaded once per CTA into registers w<n>[PLUS_BN / 32] by this
        lane's columns: each norm's scale and bias (a LayerNorm's gamma, beta), read there by every row's
        stores, and the tensors `x_cols` (GEMM-side, e.g. a bias added before the norm), whose register names
        (`w<n>[k]`, in order) are returned for the x hook's trailing arguments."""
        em = self.em
        out_shape = list(self.x_shape)
        weights = [t for node in self.nodes if node.op_type not in REDUCE_OPS
                   and node.op_type not in ("Softmax", "LogSoftmax") for t in node.input[1:3] if t]
        names = []
        for n, t in enumerate([t for t in weights if self._along_row(t)] + list(x_cols)):
            shp = em.shape(t)
            canon = em.broadcast(self.x_index(), shp, out_shape)
            memo, indent = dict(em.memo), em.indent
            at = len(em.lines)
            em.emit("#pragma unroll")
            em.emit("for (int k = 0; k < PLUS_BN / 32; ++k) {")
            em.indent += "  "
            em.emit("const int c = lane + 32 * k;")
            em.emit("if (c >= cols) continue;")
            em.emit("const long long j = n0 + c;")
            val, ct = em.value(t, canon)
            em.emit(f"w{n}[k] = {val};")
            em.indent, em.memo = indent, memo
            em.emit("}")
            em.lines.insert(at, f"{indent}{ct} w{n}[PLUS_BN / 32];")
            if t in x_cols:
                names.append(f"w{n}[k]")
            else:
                self._bind_register(t, canon, f"w{n}[k]", ct)
        return names

    def _along_row(self, t) -> bool:
        """`t` (broadcast against the rows) varies along the reduced axes only, and the emitter pulls it."""
        shp = self.em.shape(t)
        off = len(self.x_shape) - len(shp)
        return off >= 0 and t not in self.em.bound and all(
            sympy.simplify(d - 1) == 0 for k, d in enumerate(shp) if off + k not in self.axes)

    def _close(self):
        """Close the open per-row scope of the last pass: its new scalars go to plus_rt_stat."""
        if self._open is None:
            return
        memo, indent, first = self._open
        for k in range(first, len(self.scalars)):
            self.em.emit(f"plus_rt_stat[{k}][r] = {self.scalars[k]};")
        self._close_scope(indent)
        self.em.emit("__syncthreads();")
        self.em.memo, self._open = memo, None

    def _tile_pass(self, name, kind, value_fn):
        em = self.em
        ident, comb, _ = _COMBINE[kind]
        part = f"plus_rt_part[{self._passes % 2}]"      # double-buffered: see tile_hook
        self._passes += 1
        self._close()
        memo, indent = dict(em.memo), em.indent
        combine = comb.format(a="a", v="v")
        # four rows per warp at a time, reduced together (plus_warp_reduce4): lane l ends with row r4 + l / 8
        self._open_scope("for (int r4 = warp * 4; r4 < rows; r4 += nwarps * 4)")
        em.emit(f"float {name}_acc[4];")
        em.emit("#pragma unroll")
        self._open_scope("for (int i = 0; i < 4; ++i)")
        em.emit("const int r = r4 + i;")
        em.emit(f"{name}_acc[i] = {ident};")
        em.emit("if (r >= rows) continue;")
        self._row_values()
        self._column_loop()
        v = value_fn(self.x_index())
        em.emit(f"{name}_acc[i] = {comb.format(a=name + '_acc[i]', v=v)};")
        self._elem = False
        self._close_scope(indent + "    ")
        self._close_scope(indent + "  ")
        em.emit(f"const float {name}_row = plus_warp_reduce4({name}_acc, [](float a, float v) {{ return {combine}; }});")
        em.emit(f"if ((lane & 7) == 0 && r4 + (lane >> 3) < rows) {part}[r4 + (lane >> 3)] = {name}_row;")
        self._close_scope(indent)
        em.memo = dict(memo)
        em.emit("plus_cluster_sync();")
        self._row_scope("for (int r = threadIdx.x; r < rows; r += blockDim.x)")
        self._open = (memo, indent, len(self.scalars))
        self._scalar(name, f"plus_cluster_reduce<PLUS_CLUSTER_X>(&{part}[r], {ident}, "
                           f"[](float a, float v) {{ return {combine}; }})")
        return name

    def tile_hook(self, stores: dict, x_fn: str, x_cols=()) -> str:
        """The sm_90a GEMM's `plus_row_tile` hook (CONTRACT.md §2.1): the row program over the CTA's slice
        of the staged accumulator tile. `x_fn` names a hook (args, b, m, n, acc) -> float that stores the
        GEMM-side outputs and returns the row program's input x (the emitter reads x as `tile[r * ld + c]`);
        `stores` maps row-program outputs to (pointer expr, dtype). Every reduction is cluster-wide.

        Partials are double-buffered by pass parity: a CTA overwrites plus_rt_part[p % 2] in pass p + 2 only
        after the cluster barrier of pass p + 1, which every rank reaches after reading pass p's partials.
        The trailing barrier (arrive after the last remote read, wait before returning) keeps this CTA's
        shared memory alive while other ranks still read it."""
        if not self.trailing:
            raise RenderError(f"{describe(self.nodes[0])}: the row tile reduces trailing axes only")
        em = self.em
        if self.split_stores(stores)[0]:
            raise RenderError(f"{describe(self.nodes[0])}: the row tile stores no per-row outputs")
        row_check.check(self, stores, tile=True)
        self.tile, self.scalars, self._open, self._passes, self._decls = True, [], None, 0, []
        em.reset()
        em.indent = "  "
        extra = self._column_weights(x_cols)
        self._x_fn = x_fn
        self._x_args = "".join(f", {e}" for e in extra)
        self._bind_all()
        self._close()
        em.emit("plus_cluster_arrive();      // every remote read is done: release the other ranks")
        memo, indent = dict(em.memo), em.indent
        self._row_scope("for (int r = warp; r < rows; r += nwarps)")
        self._column_loop()
        self._stores(stores)
        self._elem = False
        self._close_scope(indent + "  ")
        self._close_scope(indent)
        em.memo = memo
        em.emit("plus_cluster_wait();        // no rank still reads this CTA's partials")
        inner = em.take()
        parts = min(self._passes, 2)
        stat = max(1, len(self.scalars))
        return ('#include "plus_cluster.cuh"\n'
                "#define PLUS_HAS_ROW_TILE 1\n"
                "PLUS_DEV void plus_row_tile(const PlusArgs& args, long long b, float* tile, int ld, long long m0,\n"
                "                            long long n0, int rows, int cols) {\n"
                f"  __shared__ float plus_rt_part[{max(parts, 1)}][PLUS_BM];   // this CTA's per-row partials\n"
                f"  __shared__ float plus_rt_stat[{stat}][PLUS_BM];   // per-row scalars, the same in every rank\n"
                "  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;\n"
                f"  const long long L = {em.c(self.length)};\n"
                f"{inner}\n}}\n")
