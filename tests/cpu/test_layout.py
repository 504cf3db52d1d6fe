"""The installed layout: one `plus_ep` namespace, every package folder installed, no import cycles,
and the compiler core (graph_rewrites, kernels, warehouse) never imports the API, CLI or zoo."""
from __future__ import annotations

import tomllib

from tests.support.imports import PACKAGE_DIRS, ROOT, cycles, import_graph, modules

CORE = ("plus_ep.graph_rewrites", "plus_ep.kernels", "plus_ep.warehouse")
# what the core may import from above it: the configuration leaf (stdlib only, imports nothing of plus_ep)
CORE_MAY_IMPORT = CORE + ("plus_ep.config",)


def _pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_package_dirs_match_pyproject():
    cfg = _pyproject()
    want = {k: str(v.relative_to(ROOT)) for k, v in PACKAGE_DIRS.items()}
    assert cfg["package-dir"] == want


def test_every_package_folder_is_installed():
    listed = set(_pyproject()["packages"])
    folders = {name for name, f in modules().items() if f.name == "__init__.py"}
    assert folders == listed, f"not in pyproject's packages: {sorted(folders - listed)}; " \
                              f"listed but absent: {sorted(listed - folders)}"


def test_no_top_level_package_but_plus_ep():
    assert {p.split(".")[0] for p in _pyproject()["packages"]} == {"plus_ep"}


def test_no_module_level_import_cycles():
    assert cycles(import_graph()) == []


def test_core_never_imports_the_api_cli_or_zoo():
    up = {m: sorted(t for t in ts if not t.startswith(CORE_MAY_IMPORT))
          for m, ts in import_graph(module_level_only=False).items() if m.startswith(CORE)}
    assert {m: ts for m, ts in up.items() if ts} == {}


def test_config_is_a_leaf():
    """plus_ep.config imports nothing of the namespace, so the core may import it without a cycle."""
    assert import_graph(module_level_only=False)["plus_ep.config"] == set()
    assert "plus_ep.config" in import_graph()["plus_ep.kernels.build.cache"]     # and the core does use it


def test_the_graph_sees_imports():
    """The checks above are only as good as the graph: it must see the real edges."""
    g = import_graph()
    assert "plus_ep.kernels.build.nvrtc" in g["plus_ep.kernels.build.cache"]
    assert "plus_ep.graph_rewrites.graph" in g["plus_ep.rewrite"]


def test_no_test_module_imports_another():
    """Shared code lives in tests/support; a test module imports no other test module (a test module
    imported elsewhere runs its collection twice and couples two groups). Test functions defined in a
    tests/support case library may be imported: that is how one case runs on two backends."""
    import ast
    test_modules = {f.stem for f in (ROOT / "tests").rglob("test_*.py")}
    bad = []
    for f in sorted((ROOT / "tests").rglob("test_*.py")):
        for n in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(n, ast.Import):
                mods = [a.name for a in n.names]
            elif isinstance(n, ast.ImportFrom):
                mods = [n.module or ""] + [a.name for a in n.names if a.name in test_modules]
            else:
                continue
            if any(part in test_modules for m in mods for part in m.split(".")):
                bad.append(f"{f.relative_to(ROOT)}:{n.lineno}")
    assert bad == []
