"""+Loop and +Graph (PluS §4.1): loop trees with size, parallelism and operations.

A +Graph is an ordered forest of +Loops. Each +Loop has a size (int or symbolic str), a parallelism
flag, the operations computed in it, and an ordered body of child loops and statements (ONNX nodes
executed at that level). Program order is pre-order over bodies, so the tree is executable (see
interpret.py). `canonical()` applies Primitive 4 (nested-loop collapsing) on a copy; `render()` prints
the paper's form; `structural_hash()` ignores tensor names and sizes.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Union

from . import dims

Dim = Union[int, str]

# Operations that decide a codegen schedule (PluS "skeleton operations"); everything else is trivial.
KEY_OPS = frozenset({"dot", "reduceSum", "reduceMean", "reduceMax", "reduceMin", "reduceProd",
                     "reduceL1", "reduceL2", "reduceLogSumExp", "reduceSumSquare", "argMax", "argMin"})


@dataclass(eq=False)
class Stmt:
    """One ONNX node executed at a loop level (its whole-tensor semantics)."""
    node: object                      # onnx.NodeProto
    op: str                           # operation tag, e.g. "add", "dot", "reduceMax"
    absorbed: bool = False            # a prologue op folded into its consumer's loads
    data_inputs: tuple = ()           # the inputs the loops iterate (not axes/shape operands)
    axes: dict = field(default_factory=dict)   # tensor -> {axis: Loop iterating exactly it}

    @property
    def inputs(self):
        return list(self.data_inputs) if self.data_inputs else [t for t in self.node.input if t]

    @property
    def outputs(self):
        return [t for t in self.node.output if t]


@dataclass(eq=False)
class Loop:
    size: Dim
    para: bool
    ops: list = field(default_factory=list)          # operation tags, in program order
    body: list = field(default_factory=list)         # Loop | Stmt, in program order
    tensors: set = field(default_factory=set)        # input tensors indexed by this loop (P4 cond. 3)
    sizes: list = field(default_factory=list)        # collapsed sizes (after Primitive 4)

    def loops(self):
        return [b for b in self.body if isinstance(b, Loop)]

    def stmts(self):
        return [b for b in self.body if isinstance(b, Stmt)]

    @property
    def key_ops(self):
        return [o for o in self.ops if o in KEY_OPS]

    def add_op(self, op: str):
        self.ops.append(op)

    def copy(self) -> "Loop":
        new = Loop(self.size, self.para, list(self.ops), [], set(self.tensors), list(self.sizes))
        new.body = [b.copy() if isinstance(b, Loop) else b for b in self.body]
        return new


mul_dims = dims.mul


@dataclass(eq=False)
class PGraph:
    """A +Graph: the ordered top-level body of a fused subgraph's loop tree."""
    body: list = field(default_factory=list)
    inputs: list = field(default_factory=list)       # subgraph boundary inputs (tensor names)
    outputs: list = field(default_factory=list)      # subgraph boundary outputs

    def loops(self):
        return [b for b in self.body if isinstance(b, Loop)]

    def walk(self):
        """Pre-order (depth, loop) pairs."""
        def rec(items, depth):
            for it in items:
                if isinstance(it, Loop):
                    yield depth, it
                    yield from rec(it.body, depth + 1)
        yield from rec(self.body, 0)

    def statements(self):
        """Statements in program order."""
        def rec(items):
            for it in items:
                if isinstance(it, Loop):
                    yield from rec(it.body)
                else:
                    yield it
        return list(rec(self.body))

    def copy(self) -> "PGraph":
        return PGraph([b.copy() if isinstance(b, Loop) else b for b in self.body],
                      list(self.inputs), list(self.outputs))

    # -- Primitive 4 ---------------------------------------------------------------------------
    def canonical(self, strict: bool = True) -> "PGraph":
        """Primitive 4 on a copy: collapse a loop with its only nested loop when that loop has the
        same parallelism and indexes exactly the same input tensors.

        strict=False drops the third condition: that is the form pattern matching compares, so a
        broadcast operand (a mask over batch only, position embeddings over rows) does not split a
        pattern into one variant per broadcast layout; templates take per-operand strides."""
        g = self.copy()

        def collapse(loop: Loop):
            while True:
                inner = loop.body[0] if len(loop.body) == 1 else None
                if not (isinstance(inner, Loop) and inner.para == loop.para
                        and (inner.tensors == loop.tensors or not strict)):
                    break
                loop.sizes = (loop.sizes or [loop.size]) + (inner.sizes or [inner.size])
                loop.size = mul_dims(loop.size, inner.size)
                loop.ops = loop.ops + inner.ops
                loop.body = inner.body
            for child in loop.loops():
                collapse(child)

        for top in g.loops():
            collapse(top)
        return g

    # -- printing and hashing ------------------------------------------------------------------
    def render(self, names: dict | None = None, tensors: bool = True) -> str:
        """The paper's form, one loop per line, indented by nesting:
        ``loop1 [N, non-para, (reduceMax)] {x2}:{x3}``."""
        names = dict(names) if names is not None else self._tensor_names()
        lines = []
        for i, (depth, loop) in enumerate(self.walk()):
            ops = ", ".join(loop.ops)
            head = f"loop{i} [{loop.size}, {'para' if loop.para else 'non-para'}"
            head += f", ({ops})]" if ops else "]"
            if tensors:
                ins, outs = loop_boundary(loop, self)
                head += " {" + ",".join(names.get(t, t) for t in ins) + "}:{"
                head += ",".join(names.get(t, t) for t in outs) + "}"
            lines.append("  " * depth + head)
        return "\n".join(lines)

    def _tensor_names(self) -> dict:
        names: dict = {}
        for t in self.inputs:
            names.setdefault(t, f"x{len(names)}")
        for st in self.statements():
            for t in st.inputs + st.outputs:
                names.setdefault(t, f"x{len(names)}")
        return names

    def skeleton(self, sizes: bool = False):
        """Nested tuple of (para, key ops[, size], children) — what pattern matching looks at."""
        def rec(loop: Loop):
            head = (loop.para, tuple(sorted(loop.key_ops)))
            if sizes:
                head += (str(loop.size),)
            return head + (tuple(rec(c) for c in loop.loops()),)
        return tuple(rec(top) for top in self.loops())

    def structural_hash(self) -> str:
        """sha256 over the skeleton: tensor names and sizes do not count."""
        return hashlib.sha256(repr(self.skeleton()).encode()).hexdigest()[:16]

    def __str__(self):
        return self.render()


def loop_boundary(loop: Loop, graph: PGraph):
    """(inputs, outputs) of a loop's subtree: tensors read there but produced elsewhere, and
    tensors produced there and read elsewhere (or leaving the subgraph)."""
    inside = PGraph(loop.body).statements()
    produced = {t for st in inside for t in st.outputs}
    ins: list = []
    for st in inside:
        for t in st.inputs:
            if t not in produced and t not in ins:
                ins.append(t)
    inside_ids = {id(s) for s in inside}
    used_outside = {t for st in graph.statements() if id(st) not in inside_ids for t in st.inputs}
    outs = [t for st in inside for t in st.outputs
            if t in used_outside or t in graph.outputs]
    return ins, list(dict.fromkeys(outs))
