"""The GPU lease's install step (bench/lease/install.py) in environments like the GPU machine's python3, a venv
holding the packages: the rehearsal's fresh environment sees the running environment's packages, not its base
interpreter's; with a setuptools too old for pyproject.toml (65.5, as a Python 3.11 venv has) pip fails with
setup.py's one line and the source path (no pip: carried prebuilt launcher, the tree on PYTHONPATH) imports the
whole namespace from the tree, launcher loaded, version metadata as when installed."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from bench.lease import install
from tests.support.imports import ROOT


def _purelib(python: Path) -> Path:
    return Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               check=True, capture_output=True, text=True).stdout.strip())


def _imports(python: Path, module: str) -> bool:
    return subprocess.run([str(python), "-c", f"import {module}"], capture_output=True).returncode == 0


def test_fresh_environment_sees_the_running_environment_not_its_base(tmp_path):
    parent = tmp_path / "parent"           # a venv with a package of its own, none of its base's
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(parent)],
                   check=True, capture_output=True, timeout=300)
    (_purelib(parent / "bin" / "python") / "lease_marker_pkg.py").write_text("WHERE = 'parent'\n")
    naive = tmp_path / "naive"             # what the rehearsal did: its base's packages, not the parent's
    subprocess.run([str(parent / "bin" / "python"), "-m", "venv", "--without-pip", "--system-site-packages",
                    str(naive)], check=True, capture_output=True, timeout=300)
    assert not _imports(naive / "bin" / "python", "lease_marker_pkg")
    fresh = install.fresh_venv(tmp_path / "fresh", str(parent / "bin" / "python"))
    assert _imports(fresh, "lease_marker_pkg")
    assert _purelib(fresh).is_relative_to(tmp_path / "fresh")
    # where cuda-pathfinder looks for NVRTC: its own site folder first, then the parent's
    code = "import json, site; print(json.dumps(site.getsitepackages()))"
    sites = json.loads(subprocess.run([str(fresh), "-c", code], check=True, capture_output=True, text=True).stdout)
    assert sites[:2] == [str(_purelib(fresh)), str(_purelib(parent / "bin" / "python"))], sites


def _old_setuptools_wheel() -> Path:
    found = sorted((Path(sysconfig.get_path("stdlib")) / "ensurepip" / "_bundled").glob("setuptools-*.whl"))
    if not found:
        pytest.skip("this Python bundles no setuptools wheel (3.12+)")
    return found[0]


def test_old_setuptools_takes_the_source_path(tmp_path):
    libs = [sorted((ROOT / "plus_ep").glob(f"{stem}*.so")) for stem in install.LIBRARIES]
    if not all(libs):
        pytest.skip("the launcher is not built (python setup.py build_ext --inplace)")
    user = install.fresh_venv(tmp_path / "user")       # a user's venv: its own old setuptools, the packages
    with zipfile.ZipFile(_old_setuptools_wheel()) as z:
        z.extractall(_purelib(user))
    venv = install.fresh_venv(tmp_path / "venv", str(user))   # the rehearsal's environment over it
    assert subprocess.run([str(venv), "-c", "import setuptools; print(setuptools.__version__)"],
                          capture_output=True, text=True).stdout.startswith("65.")
    carry = tmp_path / "carry"
    (carry / "prebuilt").mkdir(parents=True)
    for found in libs:
        shutil.copy2(found[0], carry / "prebuilt" / found[0].name)
    tree = install.tree_copy(tmp_path / "tree")
    assert not list((tree / "plus_ep").glob("*.so"))

    ok, detail = install.install(carry, "pip", str(venv), tree)
    assert not ok and "too old to build it (needs >= 77)" in detail, detail

    ok, detail = install.install(carry, "auto", str(venv), tree)
    assert ok, detail
    assert "too old to build it" in detail and "source path (no pip): the carried _launcher" in detail, detail
    got = install.check_import(tree, source=True, python=str(venv))
    assert Path(got["launcher"]).parent == tree / "plus_ep" and got["metadata"] == got["version"]
