"""The C launcher's layering (plus_ep/native): the unit graph, derived from `#include "..."` lines and
from calls of functions one unit defines in another, has no cycle, and every edge goes down the layers
dtype → plan/expr → bind → kernel → the shared ORT run → the two front ends (custom op, plugin EP).

A unit is a header with the sources that define what it declares: `plan.h` is plan.c + expr.c, `ep.h` is
ep.c + ep_factory.c + ep_memory.c + ep_stream.c; a source with no header of its own (ort_op.c,
emucuda.c) is a unit by itself. A header-only unit (the ORT ABI sheets, plus_abi.h) has a layer too.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.imports import cycles   # Tarjan over {unit: units it depends on}

NATIVE = Path(__file__).resolve().parents[2] / "plus_ep" / "native"

# Lower layers never reach higher ones (an edge A -> B needs LAYERS[B] < LAYERS[A]).
LAYERS = {
    "plus_abi": 0, "dtype": 0, "sha256": 0, "driver": 0, "ort_abi": 0,
    "plan": 1, "ep_abi": 1,
    "bind": 2, "pack": 2, "tmap": 2, "ep_base": 2,
    "kernel": 3, "plus_plan": 3,
    "trust": 4, "ort_tensor": 4,
    "ort_run": 5, "ep_context": 5,
    "ort_op": 6, "ep": 6,
}
STANDALONE = {"emucuda"}   # the emulated driver: its own library, no launcher unit reaches it or is reached

_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# a function definition at the start of a line: `type name(args) {` (not static: visible to other units)
_DEFINITION = re.compile(r"^(?!static\b)(?:[A-Za-z_][\w\s\*]*?[\s\*])(\w+)\s*\([^;{]*\)\s*(?:__attribute__\(\([^)]*\)\)\s*)?\{",
                         re.M)
_DECLARATION = re.compile(r"\b(\w+)\s*\([^;{}]*\)\s*(?:__attribute__\(\([^)]*\)\)\s*)?;")
_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_STRING = re.compile(r'"(?:\\.|[^"\\])*"')


def _code(path: Path) -> str:
    return _COMMENT.sub(" ", path.read_text())


def _unit_of_header(name: str) -> str:
    return Path(name).stem


def units(native: Path = NATIVE) -> dict:
    """{unit: set of file names}."""
    headers = {p.stem: p for p in native.glob("*.h")}
    declared = {}   # function -> header unit declaring it
    for stem, h in headers.items():
        for name in _DECLARATION.findall(_STRING.sub('""', _code(h))):
            declared.setdefault(name, stem)
    out: dict = {stem: {h.name} for stem, h in headers.items()}
    for c in sorted(native.glob("*.c")):
        if c.stem in headers:
            unit = c.stem
        else:
            owners = {declared[f] for f in _DEFINITION.findall(_code(c)) if f in declared}
            assert len(owners) <= 1, f"{c.name} defines functions of several headers: {sorted(owners)}"
            unit = owners.pop() if owners else c.stem
        out.setdefault(unit, set()).add(c.name)
    return out


def graph(native: Path = NATIVE) -> dict:
    """{unit: {unit it depends on: [why, ...]}} from includes and cross-unit calls."""
    us = units(native)
    file_unit = {f: u for u, fs in us.items() for f in fs}
    defined = {}   # function -> unit defining it
    for u, fs in us.items():
        for f in fs:
            if f.endswith(".c"):
                for name in _DEFINITION.findall(_code(native / f)):
                    defined[name] = u
    edges: dict = {u: {} for u in us}
    for f, u in file_unit.items():
        code = _code(native / f)
        for inc in _INCLUDE.findall(code):
            v = _unit_of_header(inc)
            if v != u:
                edges[u].setdefault(v, []).append(f'{f} includes "{inc}"')
        if f.endswith(".c"):
            body = _STRING.sub('""', code)
            for name in set(re.findall(r"(?<![.>\w])(\w+)\s*\(", body)):   # not d->cuInit(: a pointer
                v = defined.get(name)
                if v and v != u:
                    edges[u].setdefault(v, []).append(f"{f} calls {name}")
    return edges


def violations(edges: dict) -> list:
    bad = []
    for u, deps in sorted(edges.items()):
        for v, why in sorted(deps.items()):
            if u in STANDALONE or v in STANDALONE:
                bad.append(f"{u} -> {v} ({why[0]}): {u if u in STANDALONE else v} is a library of its own")
            elif u not in LAYERS or v not in LAYERS:
                bad.append(f"{u} -> {v}: give unit {u if u not in LAYERS else v} a layer in LAYERS")
            elif LAYERS[v] >= LAYERS[u]:
                bad.append(f"{u} (layer {LAYERS[u]}) -> {v} (layer {LAYERS[v]}): {why[0]}")
    return bad


def test_the_launcher_units_have_no_cycle():
    edges = graph()
    assert not cycles(edges), {tuple(c): {u: {v: w for v, w in edges[u].items() if v in c} for u in c}
                               for c in cycles(edges)}


def test_every_edge_goes_down_the_layers():
    assert not violations(graph())


def test_units_are_what_the_layers_name():
    us = units()
    assert us["plan"] >= {"plan.h", "plan.c", "expr.c"} and us["dtype"] == {"dtype.h", "dtype.c"}
    assert {"ep.c", "ep_factory.c", "ep_memory.c", "ep_stream.c"} <= us["ep"]
    assert set(us) <= set(LAYERS) | STANDALONE, sorted(set(us) - set(LAYERS) - STANDALONE)


def test_both_front_ends_run_through_the_shared_sequence():
    """gather -> bind -> launch lives in ort_run.c; each front end calls it and binds nothing itself."""
    edges = graph()
    for front in ("ort_op", "ep"):
        assert "plus_run_node" in " ".join(edges[front]["ort_run"]), edges[front]
        assert not any("plus_kernel_bind" in w or "plus_kernel_launch" in w or "plus_kernel_run_staged" in w
                       for w in edges[front].get("kernel", [])), edges[front]["kernel"]


@pytest.mark.parametrize("case", ["cycle", "upward"])
def test_the_checks_find_what_they_guard(tmp_path, case):
    """A copy of the launcher with one planted fault: the test's own checks must report it."""
    for p in NATIVE.glob("*.[ch]"):
        (tmp_path / p.name).write_text(p.read_text())
    if case == "cycle":   # the dtype helpers back in bind.c, used by plan.c: plan <-> bind
        (tmp_path / "bind.c").write_text((tmp_path / "bind.c").read_text() + "\nint plus_bind_helper(void) { return 0; }\n")
        (tmp_path / "plan.c").write_text((tmp_path / "plan.c").read_text() + "\nint plan_x(void) { return plus_bind_helper(); }\n")
        (tmp_path / "plan.h").write_text((tmp_path / "plan.h").read_text().replace(
            "#endif", "int plus_bind_helper(void);\n#endif"))
        edges = graph(tmp_path)
        assert any({"plan", "bind"} <= set(c) for c in cycles(edges)), cycles(edges)
    else:                 # kernel.c reaching up into the shared run
        (tmp_path / "kernel.c").write_text((tmp_path / "kernel.c").read_text() + "\nvoid k_x(void) { plus_run_node(0); }\n")
        assert any(v.startswith("kernel (layer 3) -> ort_run") for v in violations(graph(tmp_path)))
