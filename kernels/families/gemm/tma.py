"""Tensor maps of the TMA GEMM (gemm_sm90a_ws.cuh): whether a GEMM's operands can have them, the
plan's `tmap` records for a config (kernels/CONTRACT.md §3) and the hooks that name a map per batch index.

    t = operands(em, dt, M, N, K, trans_b, batch, [(ka, a_shape)], [(kb, b_shape, N)], ldb)   # or None
    t.hooks()                  # PLUS_HAS_TMA_MAPS, PLUS_TMAPS, plus_tma_a / plus_tma_b (/ plus_tma_b1)
    t.records(cfg, syms)       # the kernel line's tmap tuples (kernels/wire/plan.py tmap)

A map reads rows of whole 16-byte chunks (K and B's row stride static multiples of 8 16-bit or 16 8-bit elements)
of an f16, bf16, int8 or uint8 tensor that either has the launch's whole batch (its batch dims equal the output's: batch coordinate b)
or one matrix for every batch index (coordinate 0); anything else (a partly broadcast batch, a symbolic or
odd row length) keeps the cp.async templates. Maps are 3-D: (inner, rows, batch). A: (K, M, batches of A);
B: (N, K, ...) with B_TRANS 0, (K, N, ...) with B_TRANS 1; a gated B1 is B0's map moved by `b1_offset`
elements. Boxes: A [64 k][BM m], B [64 k][64 n] (B_TRANS 0, BN/64 of them) or [64 k][BN n] (B_TRANS 1; BN/2
per product gated), all under the 128-byte swizzle; 8-bit boxes are 128 elements wide (cfg.bk: one 128-byte row),
B_TRANS 0: [128 k][128 n] (the kernel transposes them in shared memory).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from onnx import TensorProto

from ...codegen import symdim
from ...wire.plan import MAX_TMAPS_PER_KERNEL, tmap

TMA_DTYPES = (TensorProto.FLOAT16, TensorProto.BFLOAT16)
TMA_8BIT = (TensorProto.INT8, TensorProto.UINT8)


def batch_kind(shape, batch) -> str | None:
    """How an operand of dims `shape` ([..., rows, cols]) spans the launch's `batch` dims: "full" (one matrix
    per batch index, contiguous), "one" (one matrix for all), or None (partly broadcast: no map)."""
    own = list(shape[:-2])
    if not batch or all(symdim.parse(d) == 1 for d in own):   # no launch batch: M folds A's leading dims
        return "one"
    if len(own) == len(batch) and all(symdim.parse(a) == symdim.parse(b) for a, b in zip(own, batch)):
        return "full"
    return None


def _whole_chunks(x, elem: int = 2) -> bool:
    """`x` elements of `elem` bytes are a static, positive number of 16-byte chunks."""
    e = symdim.parse(x)
    return bool(e.is_Integer and int(e) > 0 and (int(e) * elem) % 16 == 0)


@dataclass
class Operands:
    """The tensor maps of one GEMM launch (a horizontal group: one B per member, one A or one per member)."""
    dt: int
    M: object
    K: object
    nbatch: object             # the batch of one member (the group's launch batch is G x this)
    trans_b: bool
    a: list                    # [(job input index, "full" | "one")]: one, or one per member
    b: list                    # [(job input index, "full" | "one", member N, B's row stride)] per member
    b1: tuple | None = None    # gated: (job input index, kind, N, row stride, offset of B1 in elements)
    members: int = 1
    ns: list = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.a) + len(self.b) + (1 if self.b1 else 0)

    def hooks(self) -> str:
        """The generated map hooks: member g = batch index / nbatch picks its maps; the batch coordinate is
        the index within the member's batch for a "full" operand, else 0."""
        nb = self.nbatch

        def fn(name, entries, base):
            lines = [f"PLUS_DEV const PlusTmap* {name}(const PlusTmaps& maps, long long plus_bg, int& z) {{",
                     f"  const long long plus_g = plus_bg / {_c(nb)}, b = plus_bg % {_c(nb)};",
                     "  (void)plus_g; (void)b;"]
            if len(set(entries)) == 1:
                lines.append(f"  z = {'(int)b' if entries[0] == 'full' else '0'};")
            else:       # members of one group whose operands span the batch differently
                lines.append("  z = " + " : ".join(f"plus_g == {g} ? {'(int)b' if e == 'full' else '0'}"
                                                   for g, e in enumerate(entries[:-1]))
                             + f" : {'(int)b' if entries[-1] == 'full' else '0'};")
            lines.append(f"  return &maps.m[{base}{' + plus_g' if len(entries) > 1 else ''}];")
            lines.append("}")
            return "\n".join(lines) + "\n"
        out = f"#define PLUS_TMAPS {self.count}\n#include \"plus_tma.cuh\"\n#define PLUS_HAS_TMA_MAPS 1\n"
        out += fn("plus_tma_a", [k for _, k in self.a], 0)
        out += fn("plus_tma_b", [x[1] for x in self.b], len(self.a))
        if self.b1:
            out += fn("plus_tma_b1", [self.b1[1]], len(self.a) + len(self.b))
        return out

    def records(self, cfg, syms, gated: bool = False, cluster: int = 1) -> tuple:
        """The launch's `tmap` records for config `cfg` (its BM, BN); `cluster` CTAs multicast one n tile's B,
        each loading 1/cluster of its rows (B_TRANS 1: the box shrinks)."""
        rpn = syms.rpn
        nbatch = self.nbatch
        out = []
        for k, kind in self.a:
            nb = nbatch if kind == "full" else 1
            out.append(tmap(self.dt, "in", k, (rpn(self.K), rpn(self.M), rpn(nb)),
                            (rpn(self.K), rpn(self.M * self.K)), (cfg.bk, cfg.bm, 1), 128))
        bn = (cfg.bn // 2 if gated else cfg.bn) // cluster
        bs = list(self.b) + ([self.b1[:4]] if self.b1 else [])
        offsets = ["0"] * len(self.b) + ([rpn(self.b1[4])] if self.b1 else [])
        for (k, kind, n, ld), off in zip(bs, offsets):
            nb = nbatch if kind == "full" else 1
            if self.trans_b:
                out.append(tmap(self.dt, "in", k, (rpn(self.K), rpn(n), rpn(nb)), (rpn(ld), rpn(n * ld)),
                                (cfg.bk, bn, 1), 128, off))
            else:
                out.append(tmap(self.dt, "in", k, (rpn(n), rpn(self.K), rpn(nb)), (rpn(ld), rpn(self.K * ld)),
                                (cfg.bk, cfg.bk, 1), 128, off))
        return tuple(out)


def _c(x) -> str:
    e = symdim.parse(x)
    return f"{int(e)}LL" if e.is_Integer else str(e)


def operands(dt, M, K, nbatch, trans_b, batch, a_list, b_list, b1=None, members=1) -> Operands | None:
    """The maps of a GEMM, or None when an operand cannot have one. `a_list`: [(job input index, shape)] (one,
    or one per member); `b_list`: [(job input index, shape, N, B's row stride)] per member; `b1`: a gated
    product's (job input index, shape, N, row stride, offset in elements) or None; `batch`: the launch's
    batch dims of one member."""
    elem = 1 if dt in TMA_8BIT else 2
    if not (dt in TMA_DTYPES or (dt in TMA_8BIT and b1 is None)) or not _whole_chunks(K, elem):
        return None
    a = []
    for k, shape in a_list:
        kind = batch_kind(shape, batch)
        if kind is None:
            return None
        a.append((k, kind))
    b = []
    for k, shape, n, ld in b_list + ([b1[:4]] if b1 else []):
        kind = batch_kind(shape, batch)
        if kind is None or not _whole_chunks(ld, elem) or not symdim.parse(n).is_Integer:
            return None
        b.append((k, kind, symdim.parse(n), symdim.parse(ld)))
    t = Operands(dt, symdim.parse(M), symdim.parse(K), symdim.parse(nbatch), bool(trans_b), a, b[:len(b_list)],
                 (*b[-1], symdim.parse(b1[4])) if b1 else None, members, [x[2] for x in b[:len(b_list)]])
    if t.count > MAX_TMAPS_PER_KERNEL:
        return None
    return t


__all__ = ["Operands", "batch_kind", "operands"]
