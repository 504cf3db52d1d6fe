"""The import graph of the installed `plus_ep` namespace, read from the sources (ast, nothing imported).

    graph = import_graph()          # {"plus_ep.kernels.compile.cache": {"plus_ep.kernels.compile.nvrtc", ...}, ...}
    cycles(graph)                   # [] when the module-level imports form no cycle
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# where each subpackage of the namespace lives in the checkout (pyproject's package-dir)
PACKAGE_DIRS = {"plus_ep": ROOT / "plus_ep", "plus_ep.graph_rewrites": ROOT / "graph_rewrites",
                "plus_ep.kernels": ROOT / "kernels", "plus_ep.warehouse": ROOT / "warehouse"}


def modules() -> dict[str, Path]:
    """Every module of the namespace: dotted name -> file."""
    out = {}
    for pkg, folder in PACKAGE_DIRS.items():
        for f in sorted(folder.rglob("*.py")):
            rel = f.relative_to(folder).with_suffix("").parts
            if rel[-1] == "__init__":
                rel = rel[:-1]
            if any(p in ("native",) for p in rel):
                continue
            out[".".join((pkg,) + rel)] = f
    return out


def _resolve(name: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = name.split(".")
    base = base if is_pkg else base[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _import_module_target(name: str, is_pkg: bool, node) -> str | None:
    """`importlib.import_module("<literal>"[, __package__])`: the module it names, else None."""
    if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)):
        return None
    fn = node.func
    called = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
    if called != "import_module":
        return None
    text = node.args[0].value
    level = len(text) - len(text.lstrip("."))
    if not level:
        return text
    return _resolve(name, is_pkg, ast.ImportFrom(module=text[level:] or None, names=[], level=level))


@functools.lru_cache(maxsize=2)      # the tree does not change during a test run; callers do not mutate it
def import_graph(module_level_only: bool = True) -> dict[str, set[str]]:
    """Edges from each module to the namespace modules it imports (import statements and
    importlib.import_module calls with a literal name). Imports inside functions are lazy (run on
    first call) and left out unless module_level_only is False."""
    mods = modules()
    graph: dict[str, set[str]] = {}
    for name, f in mods.items():
        tree = ast.parse(f.read_text(), str(f))
        nodes = tree.body if module_level_only else list(ast.walk(tree))
        if module_level_only:   # also imports under module-level if/try blocks
            nodes = [n for top in tree.body for n in ast.walk(top)
                     if not isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
        targets = set()
        for n in nodes:
            dynamic = _import_module_target(name, f.name == "__init__.py", n)
            if dynamic:
                targets.add(dynamic)
            elif isinstance(n, ast.Import):
                targets.update(a.name for a in n.names)
            elif isinstance(n, ast.ImportFrom):
                mod = _resolve(name, f.name == "__init__.py", n)
                for a in n.names:   # `from pkg import module` names a module
                    targets.add(f"{mod}.{a.name}" if f"{mod}.{a.name}" in mods else mod)
        graph[name] = {t for t in targets if t in mods and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out
