"""Match conditions of PluS Fig. 7: exact match and partial (intermediate-state) match.

Both compare canonical +Graphs (Primitive 4 applied) loop by loop in pre-order. Each returns None
on success or a reason naming the loop that failed, so `plus-ep explain` can say why growth stopped.
"""
from __future__ import annotations

from collections import Counter

from .ir import Loop, PGraph


def _name(path):
    return "loop" + ".".join(str(i) for i in path) if path else "top level"


def exact(pattern: PGraph, graph: PGraph) -> str | None:
    """Same loop tree, same parallelism, same key operations; a pattern size that is a symbol binds
    to one subgraph size everywhere it appears, an integer size must be equal."""
    bind: dict = {}

    def size_ok(p: Loop, g: Loop) -> bool:
        if isinstance(p.size, int):
            return p.size == g.size
        return bind.setdefault(str(p.size), str(g.size)) == str(g.size)

    def rec(ps, gs, path):
        if len(ps) != len(gs):
            return f"{_name(path)}: pattern has {len(ps)} nested loops, subgraph has {len(gs)}"
        for i, (p, g) in enumerate(zip(ps, gs)):
            here = path + (i,)
            if p.para != g.para:
                return (f"{_name(here)}: pattern is {'para' if p.para else 'non-para'}, "
                        f"subgraph is {'para' if g.para else 'non-para'}")
            if Counter(p.key_ops) != Counter(g.key_ops):
                return f"{_name(here)}: pattern ops {p.key_ops}, subgraph ops {g.key_ops}"
            if not size_ok(p, g):
                return f"{_name(here)}: size {g.size} does not fit pattern size {p.size}={bind.get(str(p.size), p.size)}"
            why = rec(p.loops(), g.loops(), here)
            if why:
                return why
        return None

    return rec(pattern.loops(), graph.loops(), ())


def partial(pattern: PGraph, graph: PGraph) -> str | None:
    """The four criteria of §4.2: (1) a parallelizable pattern loop needs a parallelizable subgraph
    loop; (2) a non-parallelizable one accepts either; (3) a pattern loop nests at least as many loops
    as the subgraph loop; (4) the subgraph's key operations appear in the pattern loop.

    A subgraph loop collapsed from a chain of parallel loops may also be split back: its inner part
    can still become the pattern's nested loop (a parallel loop that a later reduction turns
    non-parallel by Primitive 2 had been collapsed with its parents)."""
    def rec(ps, gs, path):
        if len(ps) < len(gs):
            return f"{_name(path)}: subgraph nests {len(gs)} loops, pattern only {len(ps)}"
        for i, (p, (g, k)) in enumerate(zip(ps, gs)):
            why = one(p, g, k, path + (i,))
            if why:
                return why
        return None

    def one(p, g, k, here):
        if p.para and not g.para:
            return f"{_name(here)}: pattern loop is para, subgraph loop is non-para"
        missing = Counter(g.key_ops) - Counter(p.key_ops)
        why = (f"{_name(here)}: subgraph ops {sorted(missing)} not in pattern loop {p.key_ops}"
               if missing else rec(p.loops(), [(c, _parts(c)) for c in g.loops()], here))
        if why is None:
            return None
        if g.para and k > 1 and p.loops():
            for rest in range(k - 1, 0, -1):
                if one(p.loops()[0], g, rest, here + (0,)) is None:
                    return None
        return why

    return rec(pattern.loops(), [(g, _parts(g)) for g in graph.loops()], ())


def _parts(loop: Loop) -> int:
    return max(1, len(loop.sizes))
