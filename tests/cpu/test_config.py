"""plus_ep/config.py owns every PLUS_EP_* variable and the cache layout; the rewritten-model key covers
PlusEP's own sources and the loaded warehouse; the CLI and the session share one kernel cache."""
from __future__ import annotations

import ast
import os
import pathlib
import re
import shutil
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from plus_ep import config, model_cache
from plus_ep.warehouse import load_warehouse
from tests.support.imports import PACKAGE_DIRS, ROOT

NAME = re.compile(r"PLUS_EP_[A-Z0-9_]*[A-Z0-9]")


# ---- the table ----------------------------------------------------------------------------------
def test_the_docs_hold_the_table():
    assert config.markdown_table() in (ROOT / "docs" / "reference" / "environment.md").read_text()


def _tree(suffixes):
    for folder in [*PACKAGE_DIRS.values(), ROOT / "tests", ROOT / "bench", ROOT / ".ci"]:
        for f in folder.rglob("*"):
            if f.is_file() and f.suffix in suffixes and "__pycache__" not in f.parts:
                yield f


def _python_literals(f: pathlib.Path) -> set[str]:
    """Whole string constants (f-string parts included) that are a PLUS_EP_* name."""
    try:
        tree = ast.parse(f.read_text(), str(f))
    except SyntaxError:     # a file being edited by someone else this very moment: not ours to judge
        return set()
    return {n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and NAME.fullmatch(n.value)}


def test_every_variable_the_tree_reads_is_in_the_table():
    found: dict[str, set] = {}
    for f in _tree({".py"}):
        for name in _python_literals(f):
            found.setdefault(name, set()).add(str(f.relative_to(ROOT)))
    for f in _tree({".c", ".h"}):       # getenv("PLUS_EP_X"), env_on("PLUS_EP_X"): a whole string literal
        for name in re.findall(r'"(PLUS_EP_[A-Z0-9_]*[A-Z0-9])"', f.read_text(errors="replace")):
            found.setdefault(name, set()).add(str(f.relative_to(ROOT)))
    for f in _tree({".sh", ""}):
        for name in re.findall(r"\$\{?(PLUS_EP_[A-Z0-9_]*[A-Z0-9])", f.read_text(errors="replace")):
            found.setdefault(name, set()).add(str(f.relative_to(ROOT)))
    prefixes = {k for k in found if any(v != k and v.startswith(k) for v in config.VARIABLES)}  # startswith()
    unknown = {k: sorted(v) for k, v in found.items() if k not in config.VARIABLES and k not in prefixes}
    assert unknown == {}, "add these to plus_ep/config.py's VARIABLES (python -m tests.support.docs_pages)"
    # the scan sees the C side and the shell side too
    assert {"PLUS_EP_DISABLE", "PLUS_EP_CUDA_LIBRARY", "PLUS_EP_VIRTUAL_GPU", "PLUS_EP_CACHE_DIR"} <= set(found)
    assert "bench/lease/gpu_lease.sh" in found["PLUS_EP_CUDA_LIBRARY"]


def test_only_config_reads_the_environment():
    reads = re.compile(r"""(?:environ\.get|getenv)\(\s*["']PLUS_EP_|environ\[\s*["']PLUS_EP_[A-Z0-9_]+["']\s*\](?!\s*=)""")
    offenders = [str(f.relative_to(ROOT)) for f in _tree({".py"})
                 if f.name not in ("config.py", "test_config.py") and reads.search(f.read_text())]
    assert offenders == [], "read PLUS_EP_* variables through plus_ep.config (get, flag, integer, path)"


def test_config_is_standard_library_only():
    tree = ast.parse((PACKAGE_DIRS["plus_ep"] / "config.py").read_text())
    mods = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    mods |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 0}
    assert mods and mods <= set(sys.stdlib_module_names), mods - set(sys.stdlib_module_names)
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level]


def test_unknown_names_are_refused(monkeypatch):
    unknown = "PLUS_EP_" + "NOT_A_THING"        # spelled in two parts: the scan above must not see it
    monkeypatch.setenv(unknown, "1")
    with pytest.raises(KeyError, match=f"{unknown} is not a PlusEP variable"):
        config.get(unknown)
    monkeypatch.setenv("PLUS_EP_FUZZ_EXAMPLES", "many")
    with pytest.raises(ValueError, match="PLUS_EP_FUZZ_EXAMPLES='many': expected an integer"):
        config.integer("PLUS_EP_FUZZ_EXAMPLES", 100)


# ---- the layout ---------------------------------------------------------------------------------
def test_cache_layout(tmp_path, monkeypatch):
    from plus_ep.kernels.compile.cache import KernelCache
    from plus_ep.zoo.cache import cache_dir as zoo_dir
    monkeypatch.setenv("PLUS_EP_CACHE_DIR", str(tmp_path / "root"))
    monkeypatch.delenv("PLUS_EP_ZOO_DIR", raising=False)
    root = tmp_path / "root"
    assert (config.kernel_cache_dir(), config.model_cache_dir(), zoo_dir()) == \
        (root / "kernels", root / "models", root / "zoo")
    assert KernelCache().root == root / "kernels"
    assert model_cache.entry("k" * 64) == str(root / "models" / f"{'k' * 64}.onnx")
    assert config.kernel_cache_dir(tmp_path / "opt") == tmp_path / "opt" / "kernels"   # a session's cache_dir
    monkeypatch.setenv("PLUS_EP_ZOO_DIR", str(tmp_path / "zoo"))
    assert zoo_dir() == tmp_path / "zoo"
    monkeypatch.delenv("PLUS_EP_CACHE_DIR")
    assert config.cache_root() == pathlib.Path("~/.cache/plus_ep").expanduser()


# ---- the model-cache key ------------------------------------------------------------------------
def _copy_sources(dst: pathlib.Path) -> dict:
    roots = {}
    for pkg, folder in config.package_roots().items():
        for name, f in config.source_files({pkg: folder}):
            target = dst / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, target)
        roots[pkg] = dst / pkg
    return roots


def test_source_digest_covers_every_source_kind():
    names = [n for n, _ in config.source_files(config.package_roots())]
    for want in ("plus_ep/config.py", "plus_ep.graph_rewrites/identify.py", "plus_ep.kernels/render.py",
                 "plus_ep.warehouse/registry.py", "plus_ep.kernels/families/gemm/gemm.cuh",
                 "plus_ep/native/plan.c", "plus_ep/native/plus_plan.h"):
        assert want in names
    assert not [n for n in names if "__pycache__" in n]
    assert set(config.package_roots()) == set(PACKAGE_DIRS)   # the digest sees every installed folder


def test_changing_a_rewriter_source_changes_the_model_key(tmp_path, monkeypatch):
    wh = load_warehouse(plugins=False)
    a, b = _copy_sources(tmp_path / "a"), _copy_sources(tmp_path / "b")

    def key_with(roots):
        monkeypatch.setattr(config, "package_roots", lambda: roots)
        config.source_digest.cache_clear()
        return model_cache.model_key(b"model", "sm_90", (), "exact", wh)

    try:
        assert key_with(a) == key_with(b)                   # content, not where the tree is
        with open(b["plus_ep.graph_rewrites"] / "identify.py", "a") as f:
            f.write("\n# a changed rewriter\n")
        assert key_with(a) != key_with(b)
    finally:
        config.source_digest.cache_clear()


USER_PATTERN = '''
from plus_ep.warehouse import pattern

@pattern("my_double_relu", before="gemm")
def my_double_relu(b):
    return b.Relu(b.Relu(b.input("x", ["M", "N"])))
'''


def test_adding_or_editing_a_user_pattern_changes_the_model_key(tmp_path):
    folder = tmp_path / "patterns"
    folder.mkdir()
    plain = load_warehouse(plugins=False)
    (folder / "mine.py").write_text(USER_PATTERN)
    mine = load_warehouse(folder, plugins=False)
    assert "my_double_relu" in [p.name for p in mine]
    keys = {model_cache.model_key(b"model", "sm_90", (), "exact", plain),
            model_cache.model_key(b"model", "sm_90", (), "exact", mine)}
    (folder / "mine.py").write_text(USER_PATTERN.replace("b.Relu(b.Relu(", "b.Relu(b.Sigmoid("))
    keys.add(model_cache.model_key(b"model", "sm_90", (), "exact", load_warehouse(folder, plugins=False)))
    assert len(keys) == 3
    # a warehouse already loaded keeps its key when its file is edited afterwards: it still runs the old code
    loaded = load_warehouse(folder, plugins=False)
    before = loaded.digest()
    (folder / "mine.py").write_text(USER_PATTERN.replace("b.Relu(b.Relu(", "b.Tanh(b.Relu("))
    assert loaded.digest() == before != load_warehouse(folder, plugins=False).digest()
    # the same warehouse loaded twice: the same key (nothing random in it)
    assert load_warehouse(folder, plugins=False).digest() == load_warehouse(folder, plugins=False).digest()
    # order is priority: the same patterns in another order are another warehouse
    from plus_ep.warehouse import Warehouse
    assert Warehouse(reversed(plain.patterns)).digest() != plain.digest()


def test_model_key_covers_the_options():
    wh = load_warehouse(plugins=False)
    base = model_cache.model_key(b"model", "sm_90", (), "exact", wh)
    assert len({base, model_cache.model_key(b"model", "sm_80", (), "exact", wh),
                model_cache.model_key(b"model", "sm_90", ("gemm",), "exact", wh),
                model_cache.model_key(b"model", "sm_90", (), "tf32", wh),
                model_cache.model_key(b"other", "sm_90", (), "exact", wh)}) == 5


# ---- one kernel cache for the CLI and the session -----------------------------------------------
def _small_model(path: pathlib.Path) -> pathlib.Path:
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((32, 48)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(48).astype(np.float32), "B")
    nodes = [helper.make_node("MatMul", ["X", "W"], ["m"], name="mm"),
             helper.make_node("Add", ["m", "B"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["Y"], name="relu")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["n", 32])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["n", 48])], [w, b])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)
    return path


def _images(model: onnx.ModelProto) -> dict:
    return {(n.name, a.name): numpy_helper.to_array(a.t).tobytes()
            for n in model.graph.node if n.domain == "ai.plus_ep" for a in n.attribute
            if a.name.startswith("plus_images_")}


def test_a_kernel_the_cli_compiled_is_a_hit_for_the_session(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    src, out = _small_model(tmp_path / "m.onnx"), tmp_path / "m.plus.onnx"
    env = {**os.environ, "PLUS_EP_CACHE_DIR": str(root)}
    env.pop("PLUS_EP_ASSERT_CACHED", None)
    r = subprocess.run([sys.executable, "-m", "plus_ep", "rewrite", str(src), "-o", str(out), "--arch", "sm_90"],
                       env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    cli_images = _images(onnx.load(out))
    assert cli_images, "the CLI fused nothing: the test model no longer exercises the kernel cache"
    assert (root / "kernels").is_dir() and not (root / "models").exists()

    # The session's rewrite, with compiling forbidden: every kernel must come from the CLI's entries.
    from plus_ep.model_cache import rewritten_model
    monkeypatch.setenv("PLUS_EP_CACHE_DIR", str(root))
    monkeypatch.setenv("PLUS_EP_ASSERT_CACHED", "1")
    got = onnx.load_model_from_string(rewritten_model(src.read_bytes(), "sm_90", {}))
    assert _images(got) == cli_images
    assert len(list((root / "models").glob("*.onnx"))) == 1
