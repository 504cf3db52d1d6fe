"""The installed layout: one `plus_ep` namespace, every package folder installed, no import cycles
(imports inside functions included), the compiler core (graph_rewrites, kernels, warehouse) never
imports the API, CLI or zoo, graph_rewrites and warehouse never import kernels, no stage of a rewrite
imports a later stage, and only the CLI imports the zoo."""
from __future__ import annotations

import ast
import tomllib

from tests.support.imports import PACKAGE_DIRS, ROOT, _import_module_target, cycles, import_graph, modules

CORE = ("plus_ep.graph_rewrites", "plus_ep.kernels", "plus_ep.warehouse")
# the leaves beside the API that the core may import: they import nothing of plus_ep (config and limits:
# the standard library only; progress: that and tqdm)
LEAVES = ("plus_ep.config", "plus_ep.limits", "plus_ep.progress")
CORE_MAY_IMPORT = CORE + LEAVES
# the IR and the pattern library sit below the codegen: they never import it (the launcher's limits
# they need come from the plus_ep.limits leaf)
BELOW_KERNELS = ("plus_ep.graph_rewrites", "plus_ep.warehouse")
# the stages of a rewrite in the order they run (docs/architecture.md): a module may import its own stage
# and earlier ones, never a later one. Every graph_rewrites module has a stage.
STAGES = (
    ("plus_ep.validate", "plus_ep.graph_rewrites.index", "plus_ep.graph_rewrites.ops",
     "plus_ep.graph_rewrites.family"),                                    # read and check; the family contract
    ("plus_ep.graph_rewrites.graph", "plus_ep.graph_rewrites.shape_fold", "plus_ep.graph_rewrites.shape_reads",
     "plus_ep.graph_rewrites.contrib"),                                                     # view
    ("plus_ep.graph_rewrites.lowering", "plus_ep.graph_rewrites.primitives", "plus_ep.graph_rewrites.ir",
     "plus_ep.graph_rewrites.dims", "plus_ep.graph_rewrites.interpret"),                   # lower
    ("plus_ep.graph_rewrites.identify", "plus_ep.graph_rewrites.match", "plus_ep.graph_rewrites.horizontal",
     "plus_ep.graph_rewrites.partition", "plus_ep.graph_rewrites.placement", "plus_ep.warehouse"),  # identify
    ("plus_ep.kernels",),                                                                   # render, compile
    ("plus_ep.graph_rewrites.fuse",),                                                       # fuse
)


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


def test_no_import_cycles():
    """No cycle, counting the imports inside functions too: a lazy import that closes a circle only
    hides it (the circle is still there, and the first call pays for it)."""
    assert cycles(import_graph(module_level_only=False)) == []


def test_core_never_imports_the_api_cli_or_zoo():
    up = {m: sorted(t for t in ts if not t.startswith(CORE_MAY_IMPORT))
          for m, ts in import_graph(module_level_only=False).items() if m.startswith(CORE)}
    assert {m: ts for m, ts in up.items() if ts} == {}


def test_graph_rewrites_and_warehouse_never_import_kernels():
    down = {m: sorted(t for t in ts if t.startswith("plus_ep.kernels"))
            for m, ts in import_graph(module_level_only=False).items() if m.startswith(BELOW_KERNELS)}
    assert {m: ts for m, ts in down.items() if ts} == {}


def stage_of(module: str) -> int | None:
    """The index in STAGES of the stage `module` belongs to (its longest listed prefix), else None."""
    best = None
    for k, names in enumerate(STAGES):
        for name in names:
            if (module == name or module.startswith(name + ".")) and (best is None or len(name) > len(best[1])):
                best = (k, name)
    return best[0] if best else None


def later_imports(graph: dict) -> dict:
    """{module: [the modules of a later stage it imports]}, for every staged module that has any."""
    out = {}
    for m, ts in graph.items():
        k = stage_of(m)
        later = sorted(t for t in ts if k is not None and (stage_of(t) if stage_of(t) is not None else -1) > k)
        if later:
            out[m] = later
    return out


def test_no_stage_imports_a_later_one():
    """Identification never reads the node writer, the compile stage never reads fuse: a stage that
    needs something of a later one means that thing lives in the wrong stage."""
    assert later_imports(import_graph(module_level_only=False)) == {}


def test_every_graph_rewrites_module_has_a_stage():
    unstaged = sorted(m for m in modules() if m.startswith("plus_ep.graph_rewrites.") and stage_of(m) is None)
    assert unstaged == []


def test_the_stage_rule_sees_a_later_import():
    assert stage_of("plus_ep.graph_rewrites.contrib.decoders") == 1
    assert stage_of("plus_ep.kernels.compile.stage") == 4
    assert stage_of("plus_ep.rewrite") is None
    fake = {"plus_ep.graph_rewrites.identify": {"plus_ep.graph_rewrites.fuse", "plus_ep.graph_rewrites.match"},
            "plus_ep.graph_rewrites.fuse": {"plus_ep.graph_rewrites.partition"},
            "plus_ep.rewrite": {"plus_ep.graph_rewrites.fuse"}}
    assert later_imports(fake) == {"plus_ep.graph_rewrites.identify": ["plus_ep.graph_rewrites.fuse"]}


def test_only_the_cli_imports_the_zoo():
    """The model zoo (torch exports, test feeds) sits above the API: plus_ep.session, plus_ep.ep and
    the verify tools take their feeds from plus_ep.feeds, not from the zoo."""
    users = {m for m, ts in import_graph(module_level_only=False).items()
             if not m.startswith("plus_ep.zoo") and any(t.startswith("plus_ep.zoo") for t in ts)}
    assert users <= {"plus_ep.cli"}, sorted(users)


def test_leaves_are_leaves():
    """plus_ep.config and plus_ep.limits import nothing of the namespace, so the core may import them
    without a cycle."""
    g = import_graph(module_level_only=False)
    assert {leaf: g[leaf] for leaf in LEAVES} == {leaf: set() for leaf in LEAVES}
    assert "plus_ep.config" in import_graph()["plus_ep.kernels.compile.cache"]     # and the core does use them
    assert "plus_ep.limits" in import_graph()["plus_ep.graph_rewrites.horizontal"]


def test_the_graph_sees_imports():
    """The checks above are only as good as the graph: it must see the real edges, at module level and
    inside functions."""
    g, lazy = import_graph(), import_graph(module_level_only=False)
    assert "plus_ep.kernels.compile.nvrtc" in g["plus_ep.kernels.compile.cache"]
    assert "plus_ep.graph_rewrites.graph" in g["plus_ep.rewrite"]
    assert "plus_ep.kernels.compile.stage" not in g["plus_ep.rewrite"]        # imported inside rewrite_detailed
    assert "plus_ep.kernels.compile.stage" in lazy["plus_ep.rewrite"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    call = ast.parse('importlib.import_module(".families", __package__)').body[0].value
    assert _import_module_target("plus_ep.warehouse.registry", False, call) == "plus_ep.warehouse.families"


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


def test_kernels_public_face():
    """plus_ep.kernels names its public API lazily; no name hides a module of the package."""
    import plus_ep.kernels as k
    rooms = {name.split(".")[2] for name in modules() if name.startswith("plus_ep.kernels.")}
    assert not set(k.__all__) & rooms
    assert all(getattr(k, name) is not None for name in k.__all__)


def test_test_modules_have_unique_basenames():
    """pytest imports test modules by basename (no __init__.py in tests/): two folders holding
    test_x.py stop the whole collection, so the default test command runs nothing."""
    seen: dict = {}
    for f in sorted((ROOT / "tests").rglob("test_*.py")):
        seen.setdefault(f.name, []).append(str(f.relative_to(ROOT)))
    assert {k: v for k, v in seen.items() if len(v) > 1} == {}
