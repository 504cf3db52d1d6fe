"""bench/ is laid out by kind (bench/README.md is its map): the top holds only the kind folders, the README
and the `python -m bench` front end; no bench module is named like a product module; bench's imports,
lazy ones included, form no cycle; every bench path and `python -m bench.<module>` that the tree names
exists; the README names every module."""
from __future__ import annotations

import ast
import re
import subprocess

from tests.support.imports import ROOT, _resolve, cycles, modules

BENCH = ROOT / "bench"
KINDS = {"harness", "lease", "runs", "quality", "charts", "results"}
TOP_FILES = {"README.md", "__init__.py", "__main__.py"}
PATH = re.compile(r"(?<![\w./-])bench/[\w/]+\.(?:py|sh)\b")
MODULE = re.compile(r"python3? -m (bench(?:\.\w+)+)(?!\w|\.[<\w])")     # not a pattern like bench.runs.<name>


def _bench_modules() -> dict[str, object]:
    out = {}
    for f in sorted(BENCH.rglob("*.py")):
        parts = f.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _graph(mods) -> dict[str, set[str]]:
    """Every import of a bench module, inside functions too, to the bench modules it names."""
    graph = {}
    for name, f in mods.items():
        targets = set()
        for n in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(n, ast.Import):
                targets.update(a.name for a in n.names)
            elif isinstance(n, ast.ImportFrom):
                mod = _resolve(name, f.name == "__init__.py", n)
                targets.update(f"{mod}.{a.name}" if f"{mod}.{a.name}" in mods else mod for a in n.names)
        graph[name] = {t for t in targets if t in mods and t != name}
    return graph


def _tracked_text_files():
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.split()
    for f in out:
        p = ROOT / f
        if f.startswith("bench/results/") or not p.is_file():
            continue
        try:
            text = p.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        if "from bench/results/" not in text.split("\n", 1)[0]:     # pages generated from the records: history
            yield f, text


def test_top_level_holds_only_the_kinds():
    top = {p.name for p in BENCH.iterdir() if p.name != "__pycache__"}
    assert top - TOP_FILES == KINDS, sorted(top - TOP_FILES ^ KINDS)


def test_no_module_named_like_a_product_module():
    product = {name.rsplit(".", 1)[-1] for name in modules()} - {"__init__", "__main__"}
    clash = sorted(str(f.relative_to(ROOT)) for f in BENCH.rglob("*.py") if f.stem in product)
    assert clash == []


def test_no_import_cycle():
    mods = _bench_modules()
    graph = _graph(mods)
    assert sum(map(len, graph.values())) > 40                  # the check sees the edges
    assert cycles(graph) == []


def test_the_cycle_check_sees_a_lazy_cycle(tmp_path):
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("from bench.x import b\n")
    b.write_text("def f():\n    from bench.x import a\n")
    assert cycles(_graph({"bench.x.a": a, "bench.x.b": b})) == [["bench.x.a", "bench.x.b"]]


def test_every_named_bench_path_and_module_exists():
    mods = _bench_modules()
    missing = []
    for f, text in _tracked_text_files():
        for n, line in enumerate(text.splitlines(), 1):
            missing += [f"{f}:{n}: {p}" for p in PATH.findall(line) if not (ROOT / p).is_file()]
            missing += [f"{f}:{n}: {m}" for m in MODULE.findall(line)
                        if m not in mods or (mods[m].name == "__init__.py" and not (mods[m].parent / "__main__.py").is_file())]
    assert missing == []


def test_the_reference_check_finds_stale_names():
    old = "bench/" + "plan.py"                 # spelled in two parts: this file is checked too
    assert PATH.findall(f"see bench/lease/gpu_lease.sh and ({old})") == ["bench/lease/gpu_lease.sh", old]
    cmd = "python -m " + "bench.fusion"
    assert MODULE.findall(f"`{cmd} --size real`, {cmd}. python -m bench gpu, python -m bench.runs.<name>") == \
        ["bench.fusion", "bench.fusion"]


def test_readme_names_every_module():
    readme = (BENCH / "README.md").read_text()
    unnamed = [str(f.relative_to(ROOT)) for f in BENCH.rglob("*") if f.suffix in (".py", ".sh")
               and f.stem not in ("__init__", "__main__") and not re.search(rf"`{f.stem}(\.py|\.sh)?`", readme)]
    assert unnamed == []
