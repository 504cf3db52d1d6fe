"""The template-family contract (graph_rewrites/family.py): every family is one name with two halves, its graph
half `warehouse/families/<name>.py` and its kernel half `kernels/families/<name>/`; no product code outside
them and the registries names a family or one of its kernel entry points (the generic stages consult the
Family object instead); the registry checks what a pattern declares."""
from __future__ import annotations

import ast
import dataclasses
import importlib
import re

import pytest

from plus_ep import warehouse
from plus_ep.graph_rewrites.family import Family, Roles
from plus_ep.kernels.families import KernelFamily, NoKernelHalf, declared, kernel_half, of_entry
from plus_ep.warehouse.registry import FAMILIES
from tests.support.imports import ROOT, import_graph

# the registries may name every family: the graph halves' priority order, the pattern registry (its default
# family) and the kernel halves' lookup
REGISTRIES = ("warehouse/families/__init__.py", "warehouse/registry.py", "kernels/families/__init__.py")
PRODUCT = ("plus_ep", "graph_rewrites", "warehouse", "kernels")
C_SOURCES = ("plus_ep/native", "kernels/templates")


def _families() -> list[KernelFamily]:
    return declared()


def _names() -> dict:
    """{a family's name or a kernel entry point it defines: the families that own it}."""
    owners: dict = {}
    for kf in _families():
        for name in (kf.family.name, *kf.entries):
            owners.setdefault(name, set()).add(kf.family.name)
    return owners


def _homes(families) -> list:
    return [p for f in families for p in (ROOT / "warehouse" / "families" / f"{f}.py", ROOT / "kernels" / "families" / f)]


def _string_constants(text: str):
    """(line, value) of every string constant of Python source `text` that is not a docstring."""
    tree = ast.parse(text)
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs:
            yield n.lineno, n.value


def _code_of(c_text: str) -> str:
    """C source without its comments (line numbers kept), as the Python scan skips docstrings."""
    c_text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), c_text, flags=re.S)
    return re.sub(r"//[^\n]*", "", c_text)


def stray_names(files, owners: dict) -> list:
    """[(file, line, name)] of family names and kernel entries outside their families' halves and the
    registries: Python string constants (not docstrings), and words of C sources. `files`: (path, text)."""
    allowed = {ROOT / r for r in REGISTRIES}
    words = re.compile(r"\b(" + "|".join(sorted(map(re.escape, owners), key=len, reverse=True)) + r")\b")
    out = []
    for path, text in files:
        if path in allowed:
            continue
        found = _string_constants(text) if path.suffix == ".py" else \
            ((k + 1, m.group(1)) for k, line in enumerate(_code_of(text).splitlines()) for m in words.finditer(line))
        for line, value in found:
            if value in owners and not any(path == h or h in path.parents for h in _homes(owners[value])):
                out.append((str(path.relative_to(ROOT)), line, value))
    return out


def _product_files() -> list:
    py = [p for d in PRODUCT for p in (ROOT / d).rglob("*.py") if "__pycache__" not in p.parts]
    c = [p for d in C_SOURCES for p in (ROOT / d).rglob("*") if p.suffix in (".c", ".h", ".cuh")]
    return [(p, p.read_text()) for p in py + c]


def test_every_family_is_one_name_with_two_halves():
    kfs = _families()
    assert {kf.family.name for kf in kfs} == set(FAMILIES) and len(kfs) >= 7
    for kf in kfs:
        f = kf.family
        graph_half = importlib.import_module(f"plus_ep.warehouse.families.{f.name}")
        assert f in vars(graph_half).values(), f"warehouse/families/{f.name}.py does not declare {f}"
        assert (ROOT / "kernels" / "families" / f.name / "__init__.py").is_file()
        assert f.kernels == f"plus_ep.kernels.families.{f.name}" and kernel_half(f) is kf
        assert (f.roles is None) == (f.find_roles is None), f
        if f.roles is not None:
            assert dataclasses.is_dataclass(f.roles) and issubclass(f.roles, Roles), f
        for p in warehouse.default_warehouse():
            if p.family is f:
                assert p.define.__module__ == graph_half.__name__, f"pattern {p.name} lives outside its family"


def test_no_family_name_outside_its_family_and_the_registries():
    """`grep` for each family's name and kernel entry points finds them only in its own two halves, the
    registries and tests: the generic stages branch on the Family object, never on a name."""
    assert stray_names(_product_files(), _names()) == []


def test_the_name_scan_sees_a_planted_name():
    generic = ROOT / "graph_rewrites" / "horizontal.py"
    branch = generic.read_text() + '\n\ndef _gated(p):\n    """gemm_gated (a docstring may say it)"""\n' \
        '    return p.family.name == "gemm_gated"\n'
    assert [(f, v) for f, _, v in stray_names([(generic, branch)], _names())] == \
        [("graph_rewrites/horizontal.py", "gemm_gated")]
    own = ROOT / "kernels" / "families" / "gemm_gated" / "render.py"
    assert stray_names([(own, branch)], _names()) == []
    c = ROOT / "plus_ep" / "native" / "plan.c"
    assert stray_names([(c, "/* launches plus_attention */\n// plus_attention\n")], _names()) == []
    assert stray_names([(c, "/* a */ launch(\"plus_attention\");\n")], _names()) == \
        [("plus_ep/native/plan.c", 1, "plus_attention")]


def test_kernel_halves_never_import_the_render_stage():
    """kernels/render.py imports a family's kernel half by the module path its Family names: a kernel half
    that imported the render or compile stage back would be a cycle the import graph cannot see."""
    graph = import_graph(module_level_only=False)
    back = {m: sorted(t for t in ts if t.startswith(("plus_ep.kernels.render", "plus_ep.kernels.compile.stage")))
            for m, ts in graph.items() if m.startswith("plus_ep.kernels.families.")}
    assert {m: ts for m, ts in back.items() if ts} == {}


def test_kernel_entries_find_their_family():
    kf = of_entry("plus_attention")
    assert kf is not None and kf.family.name == "flash_attention" and kf.hidden_tiles is not None
    assert of_entry("plus_no_such_kernel") is None


def test_the_registry_checks_what_a_pattern_declares():
    wh = warehouse.Warehouse()
    gemm = FAMILIES["gemm"]
    p = warehouse.Pattern("mine", lambda b: b.Relu(b.input("x", ["M"])), family="gemm")
    wh.add(p)
    assert p.family is gemm and p.roles is gemm.find_roles            # named, and the family's finder by default
    q = warehouse.Pattern("plain", lambda b: b.Relu(b.input("x", ["M"])))
    wh.add(q)
    assert q.family is FAMILIES["pointwise"]                            # no family: point-wise kernels
    with pytest.raises(ValueError, match="is horizontal, but family 'gemm' declares no groups"):
        wh.add(warehouse.Pattern("siblings", family=gemm, horizontal=True))
    with pytest.raises(ValueError, match="second template family named 'gemm'"):
        wh.add(warehouse.Pattern("twin", family=Family("gemm", "another object under the same name")))
    first = wh.add(warehouse.Pattern("early", family=gemm), before=gemm)
    assert [x.name for x in wh] == ["early", "mine", "plain"] and first.family is gemm


def test_a_family_without_its_kernel_half_is_refused_when_rendering():
    orphan = Family("orphan_family", "declared, no kernel half")
    with pytest.raises(NoKernelHalf, match="plus_ep.kernels.families.orphan_family does not import"):
        kernel_half(orphan)
    borrowed = Family("borrowed", "names another family's kernel half", kernels="plus_ep.kernels.families.gemm")
    with pytest.raises(NoKernelHalf, match="declares no KERNEL"):
        kernel_half(borrowed)


def test_a_role_finder_must_return_its_familys_roles(tmp_path):
    """Identification refuses a finder that returns something other than its family's Roles (a dict of
    string keys, as before the contract) instead of handing it to the renderer."""
    import textwrap

    import plus_ep
    from tests.support.graphs import Graph
    (tmp_path / "mine.py").write_text(textwrap.dedent('''
        from plus_ep.warehouse import pattern

        def _dict_roles(view, members):
            return {"gemm": members[0]}

        @pattern("gemm_dict_roles", before="gemm", family="gemm", roles=_dict_roles)
        def gemm_dict_roles(b):
            return b.MatMul(b.input("x", ["M", "K"]), b.input("w", ["K", "N"]))
    '''))
    g = Graph()
    g.op("MatMul", g.input("X", ["batch", 8]), g.init("W", __import__("numpy").ones((8, 4), "float32")), out="Y")
    g.output("Y", ["batch", 4])
    with pytest.raises(TypeError, match="returned a dict, not its family's GemmRoles"):
        plus_ep.rewrite_detailed(g.model(), warehouse=warehouse.load_warehouse(tmp_path, plugins=False))
