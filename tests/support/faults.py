"""Shared pieces of the fault tests: a tiny kernel source for cache tests, a private copy of the
common header, and a file object that runs out of disk space half-way through a write."""
from __future__ import annotations

import errno
import os
import re
import shutil

SRC = r'''
#include "plus_common.cuh"
extern "C" __global__ void plus_scale(const PlusArgs args) {
  const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < args.v[0]) plus_store<float>(args.out[0], i, plus_f(plus_load<float>(args.in[0], i)) * %s);
}
'''


def src(scale="2.0f"):
    return SRC % scale


def freeze_templates(tmp_path, monkeypatch):
    """A private copy of kernels/templates/plus_common.cuh and the headers it includes (plus_abi.h,
    plus_quant.cuh, ...), and no family headers (an empty `families` folder inside it): cache keys hash every
    template, and the real folders may be edited while the tests run (which would, correctly, change the keys
    under them)."""
    from plus_ep.kernels.compile import nvrtc
    frozen = tmp_path / "frozen_templates"
    frozen.mkdir()
    todo = ["plus_common.cuh"]
    while todo:
        name = todo.pop()
        if (frozen / name).exists() or not (nvrtc.TEMPLATES_DIR / name).is_file():
            continue
        shutil.copy2(nvrtc.TEMPLATES_DIR / name, frozen / name)
        todo += re.findall(r'^\s*#\s*include\s+"([^"]+)"', (frozen / name).read_text(), re.M)
    (frozen / "families").mkdir()
    monkeypatch.setattr(nvrtc, "TEMPLATES_DIR", frozen)
    monkeypatch.setattr(nvrtc, "FAMILIES_DIR", frozen / "families")
    return frozen


class HalfWriter:
    """Wraps a file: takes half of what it is given, then reports a full disk (ENOSPC)."""

    def __init__(self, f, path=""):
        self.f, self.path = f, path

    def write(self, data):
        self.f.write(bytes(data)[: len(data) // 2])
        self.f.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.fspath(self.path))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()

    def __getattr__(self, name):
        return getattr(self.f, name)
