"""One launch ABI: PlusArgs and the launcher's limits live in kernels/templates/plus_abi.h, which the
kernels (plus_common.cuh) and the launcher (plus_ep/native/plan.h) both include; plus_ep/limits.py
mirrors every number for the Python side and must agree with the C."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from plus_ep import limits
from tests.support.imports import PACKAGE_DIRS

TEMPLATES = PACKAGE_DIRS["plus_ep.kernels"] / "templates"
NATIVE = PACKAGE_DIRS["plus_ep"] / "native"
DEFINE = re.compile(r"^\s*#\s*define\s+PLUS_MAX_(\w+)\s+(\d+)", re.M)


def _abi() -> dict:
    return {name: int(v) for name, v in DEFINE.findall((TEMPLATES / "plus_abi.h").read_text())}


def test_python_limits_are_the_headers():
    py = {name[len("MAX_"):]: getattr(limits, name) for name in dir(limits) if name.startswith("MAX_")}
    py.pop("IMAGES")                                     # the pack's bound: pack.c, below
    assert _abi() == py
    assert limits.ARGS_BYTES == 864                      # plus_abi.h's static_assert


def test_pack_bound_is_pack_c():
    m = re.search(r"#define PACK_MAX_IMAGES (\d+)", (NATIVE / "pack.c").read_text())
    assert int(m.group(1)) == limits.MAX_IMAGES


def test_one_definition_both_sides_include():
    common = (TEMPLATES / "plus_common.cuh").read_text()
    plan_h = (NATIVE / "plan.h").read_text()
    assert re.search(r'#include "plus_abi.h"', common)
    assert re.search(r'#include "\.\./\.\./kernels/templates/plus_abi.h"', plan_h)
    for name, text in (("plus_common.cuh", common), ("plan.h", plan_h)):
        assert not DEFINE.search(text), f"{name} defines a PLUS_MAX_* of its own"
        assert "struct PlusArgs" not in text, f"{name} defines PlusArgs again"


def test_core_reads_the_launchers_limits():
    from plus_ep.graph_rewrites import fuse
    from plus_ep.kernels import render
    from plus_ep.kernels.wire import pack
    assert fuse.MAX_HOST_INPUTS == limits.MAX_SHAPEV
    assert (render.MAX_IN, render.MAX_OUT, render.MAX_SYM) == (limits.MAX_IN, limits.MAX_OUT, limits.MAX_SYM)
    assert pack.MAX_IMAGES == limits.MAX_IMAGES


@pytest.mark.skipif(shutil.which("gcc") is None and shutil.which("cc") is None, reason="needs a C compiler")
def test_the_launchers_struct_is_the_mirrors(tmp_path):
    """The C compiler's view through plan.h: the layout the kernels' PlusArgs must have."""
    src = tmp_path / "abi.c"
    src.write_text('#include <stddef.h>\n#include <stdio.h>\n#include "plan.h"\n'
                   'int main(void) { printf("%zu %zu %zu %zu %d\\n", sizeof(PlusArgs), offsetof(PlusArgs, out), '
                   'offsetof(PlusArgs, scratch), offsetof(PlusArgs, v), PLUS_MAX_SHAPEV); return 0; }\n')
    exe = tmp_path / "abi"
    cc = shutil.which("gcc") or shutil.which("cc")
    subprocess.run([cc, "-std=c11", "-Wall", "-Werror", f"-I{NATIVE}", str(src), "-o", str(exe)], check=True)
    got = [int(x) for x in subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()]
    L = limits
    assert got == [L.ARGS_BYTES, 8 * L.MAX_IN, 8 * (L.MAX_IN + L.MAX_OUT), 8 * (L.MAX_IN + L.MAX_OUT + L.MAX_SCRATCH),
                   L.MAX_SHAPEV]
