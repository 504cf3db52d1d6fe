"""The wheel a user installs: only `plus_ep` at the top of site-packages (PyPI's `kernels` is another
project), the templates and the launcher inside it, no development tools."""
from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(out), str(ROOT)], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        pytest.fail(f"pip wheel failed:\n{proc.stdout}\n{proc.stderr}")
    (whl,) = out.glob("plus_ep-*.whl")
    return whl


def test_only_plus_ep_at_the_top(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"plus_ep"}, sorted(tops)


def test_subpackages_templates_and_launcher_are_inside(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for want in ("plus_ep/kernels/build/cache.py", "plus_ep/kernels/templates/gemm.cuh", "plus_ep/kernels/CONTRACT.md",
                 "plus_ep/graph_rewrites/fuse.py", "plus_ep/warehouse/patterns/attention.py"):
        assert want in names
    assert any(n.startswith("plus_ep/_launcher") and n.endswith(".so") for n in names)
    assert not any("golden" in n or n.startswith("tests/") for n in names)


def test_source_digest_reads_the_installed_layout(wheel, tmp_path):
    """In a real install the subpackages sit inside plus_ep/: the model-cache key's source digest
    (plus_ep/config.py) finds them there and hashes each file once."""
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = ("import json; from plus_ep import config; roots = config.package_roots(); "
            "files = [n for n, _ in config.source_files(roots)]; "
            "print(json.dumps({'roots': {k: str(v) for k, v in roots.items()}, 'files': files, "
            "'digest': config.source_digest()}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    import json
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert all(Path(p).is_relative_to(site) for p in got["roots"].values()), got["roots"]
    assert len(got["files"]) == len(set(got["files"])) and len(got["digest"]) == 64
    for want in ("plus_ep/config.py", "plus_ep.kernels/render.py", "plus_ep.kernels/templates/gemm.cuh",
                 "plus_ep.graph_rewrites/fuse.py", "plus_ep.warehouse/registry.py"):
        assert want in got["files"]
    assert not [f for f in got["files"] if f.startswith("plus_ep/kernels/")]   # counted under its own root
