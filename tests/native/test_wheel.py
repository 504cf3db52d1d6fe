"""The wheel a user installs: only `plus_ep` at the top of site-packages (PyPI's `kernels` is another
project), the templates and the launcher inside it, no development tools."""
from __future__ import annotations

import re
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
    for want in ("plus_ep/kernels/compile/cache.py", "plus_ep/kernels/families/gemm/gemm.cuh", "plus_ep/kernels/CONTRACT.md",
                 "plus_ep/graph_rewrites/fuse.py", "plus_ep/warehouse/families/flash_attention.py"):
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
    for want in ("plus_ep/config.py", "plus_ep.kernels/render.py", "plus_ep.kernels/families/gemm/gemm.cuh",
                 "plus_ep.graph_rewrites/fuse.py", "plus_ep.warehouse/registry.py"):
        assert want in got["files"]
    assert not [f for f in got["files"] if f.startswith("plus_ep/kernels/")]   # counted under its own root


def test_wheel_is_tagged_for_what_it_is(wheel):
    """py3-none-<platform>: the launcher and the emulated driver are plain shared libraries (no PyInit_,
    no libpython), so one wheel serves every CPython >= 3.10; LICENSE and the short description inside."""
    name = wheel.name
    assert "-py3-none-linux_" in name, name
    z = zipfile.ZipFile(wheel)
    info = next(n for n in z.namelist() if n.endswith(".dist-info/WHEEL"))
    wheel_meta = z.read(info).decode()
    assert "Root-Is-Purelib: false" in wheel_meta and "Tag: py3-none-" in wheel_meta, wheel_meta
    meta = z.read(info.replace("WHEEL", "METADATA")).decode()
    assert "License-Expression: Apache-2.0" in meta and "Requires-Python: >=3.10" in meta
    assert "onnx-graphsurgeon" not in meta and "Requires-Dist: tqdm" in meta
    # no onnxruntime distribution unless asked for: a plugin EP runs in the host's ORT (ORT's packaging rule)
    ort = sorted(line for line in meta.splitlines()                  # the ORT distributions, not onnxruntime-genai
                 if re.match(r"Requires-Dist: onnxruntime(-gpu)?[ ><=;]", line))
    assert ort == ['Requires-Dist: onnxruntime-gpu>=1.25; extra == "gpu"',
                   'Requires-Dist: onnxruntime>=1.25; extra == "cpu"'], ort
    assert len(meta.split("\n\n", 1)[1].splitlines()) < 40 and "README.md" in meta       # the short description
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in z.namelist())
    for lib in [n for n in z.namelist() if n.endswith(".so")]:
        data = z.read(lib)
        assert b"PyInit_" not in data and b"libpython" not in data, lib


def test_manylinux_repair(wheel, tmp_path):
    """auditwheel (the [test] extra) grafts nothing and retags the wheel manylinux_<glibc>."""
    if subprocess.run([sys.executable, "-c", "import auditwheel"], capture_output=True).returncode:
        pytest.skip("auditwheel is not installed (pip install -e '.[test]')")
    r = subprocess.run([sys.executable, "-m", "auditwheel", "repair", "-w", str(tmp_path), str(wheel)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    (fixed,) = tmp_path.glob("plus_ep-*.whl")
    assert "-py3-none-manylinux_" in fixed.name, fixed.name
    assert not [n for n in zipfile.ZipFile(fixed).namelist() if n.startswith("plus_ep.libs/")]    # nothing grafted
