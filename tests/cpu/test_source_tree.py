"""A bare source tree imports the whole plus_ep namespace without pip (PYTHONPATH=<checkout>)."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("plus_ep", "graph_rewrites", "kernels", "warehouse")


def _copy(dst: Path) -> Path:
    for name in FOLDERS:
        shutil.copytree(ROOT / name, dst / name, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copy(ROOT / "pyproject.toml", dst / "pyproject.toml")
    return dst


def _where(tree: Path, cwd: Path) -> list[str]:
    code = ("import plus_ep, plus_ep.kernels.render, plus_ep.graph_rewrites.fuse, plus_ep.warehouse.registry as w;"
            "print(plus_ep.__file__); print(plus_ep.kernels.render.__file__);"
            "print(plus_ep.graph_rewrites.fuse.__file__); print(w.__file__)")
    env = dict(os.environ, PYTHONPATH=str(tree), PLUS_EP_REGISTER="0")
    out = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_a_copied_checkout_imports_its_own_folders(tmp_path):
    tree = _copy(tmp_path / "checkout")
    paths = _where(tree, tmp_path)
    assert len(paths) == 4
    for path in paths:
        assert Path(path).resolve().is_relative_to(tree.resolve()), paths


def test_an_installed_layout_adds_no_path(tmp_path):
    # site-packages holds plus_ep/ with its subpackages inside and no pyproject.toml beside it
    site = tmp_path / "site"
    shutil.copytree(ROOT / "plus_ep", site / "plus_ep", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    for name in FOLDERS[1:]:
        shutil.copytree(ROOT / name, site / "plus_ep" / name, ignore=shutil.ignore_patterns("__pycache__"))
    code = "import plus_ep; print(len(plus_ep.__path__))"
    env = dict(os.environ, PYTHONPATH=str(site), PLUS_EP_REGISTER="0")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1"]
