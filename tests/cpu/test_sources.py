"""Generated sources (kernels/compile/sources.py): the CONTRACT §2 comment header, named symbols, one compile
for kernels that differ only in their header, and the dump and override folders."""
from __future__ import annotations

import logging
import re

import pytest

pytest.importorskip("cuda.bindings.nvrtc")

from plus_ep.kernels.compile import nvrtc, sources  # noqa: E402
from plus_ep.kernels.compile.cache import KernelCache, cache_key  # noqa: E402
from plus_ep.kernels.compile.jobs import Job, compile_all  # noqa: E402
from tests.support.faults import freeze_templates, src  # noqa: E402
from tests.support.imports import ROOT  # noqa: E402

GOLDEN = sorted((ROOT / "tests" / "golden").glob("*.cu"))


@pytest.fixture(autouse=True)
def frozen_templates(tmp_path, monkeypatch):
    return freeze_templates(tmp_path, monkeypatch)


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.name)
def test_golden_sources_carry_the_header_and_name_their_symbols(path):
    text = path.read_text()
    head = text[:len(text) - len(sources.body(text))]
    for field in ("node:    " + path.stem, "pattern: ", "variant: ", "+Graph:", "//   loop0 ["):
        assert field in head, field
    # a golden is one route's source: the first, or the route the golden is about (wg_attention: the sm_90a body)
    route = re.search(r"^// route:   (\d+) of (\d+), taken when `.+` is the first non-zero condition$", head, re.M)
    assert route and int(route[1]) < int(route[2]), head[:400]
    code = sources.body(text)
    assert code.startswith('#include "plus_common.cuh"\n')
    syms = re.search(r"^// symbols: (.*)$", head, re.M).group(1).split(", ")
    # every use of a symbol goes through its name; args.v[K] only in the declarations
    uses = [ln for ln in code.splitlines() if re.search(r"args\.v\[\d+\]", ln)]
    assert uses and all(re.fullmatch(r"  const long long \w+ = args\.v\[\d+\];", ln) for ln in uses), uses
    assert len(syms) >= 1


def test_name_symbols_declares_what_each_function_uses():
    raw = ('PLUS_DEV long long a(const PlusArgs& args) { return args.v[1] * 4LL; }\n'
           'PLUS_DEV long long b(const PlusArgs& args) { return 8LL; }\n'
           'extern "C" __global__ void k(const PlusArgs args) {\n'
           '  const long long half_n = args.v[0] / 2;\n'
           '  if (args.v[0] > args.v[2]) return;\n'
           '}\n')
    out = sources.name_symbols(raw, ["batch", "seq"])        # v[2] is not a symbol: it stays
    assert out == ('PLUS_DEV long long a(const PlusArgs& args) {\n'
                   '  const long long seq = args.v[1];\n'
                   ' return seq * 4LL; }\n'
                   'PLUS_DEV long long b(const PlusArgs& args) { return 8LL; }\n'
                   'extern "C" __global__ void k(const PlusArgs args) {\n'
                   '  const long long batch = args.v[0];\n'
                   '  const long long half_n = batch / 2;\n'
                   '  if (batch > args.v[2]) return;\n'
                   '}\n')


def test_symbol_names_never_shadow():
    code = "PLUS_DEV float f(const PlusArgs& args) { const long long row = 1; return plus_load<half>(0, row); }"
    assert sources.symbol_names(["row", "half", "N", "2d", "batch size", "plus_x", "row"], code) == \
        ["row_0", "half_1", "N", "d_2d", "batch_size", "plus_sym5", "row_6"]
    assert sources.symbol_names(["PLUS_DEV", "for"], code) == ["plus_sym0", "for_1"]


def test_a_finished_source_compiles(tmp_path):
    raw = src().replace("#include", "PLUS_DEV long long n_of(const PlusArgs& args) { return args.v[0]; }\n#include")
    raw = '#include "plus_common.cuh"\n' + raw.replace('#include "plus_common.cuh"\n', "")
    done = sources.finish(raw, ["n"], "plus_ep/scale/0", "scale", None, (0, 1, "1"), "only", "loop0 [n, para]\\")
    assert done.startswith("// PlusEP generated kernel source") and "// node:    plus_ep/scale/0\n" in done
    assert "const long long n = args.v[0];" in done and "if (i < n)" in done
    r = nvrtc.compile_cubin(done, "sm_80", name="scale.cu")
    assert "plus_scale" in r.resources


def test_kernels_differing_only_in_their_header_compile_once(tmp_path):
    a = sources.finish(src(), [], "plus_ep/x/0", "x", None, (0, 1, "1"), "v")
    b = sources.finish(src(), [], "plus_ep/x/7", "x", None, (0, 1, "1"), "v")
    assert a != b and sources.body(a) == sources.body(b)
    assert cache_key(a, "sm_80") == cache_key(b, "sm_80") == cache_key(src(), "sm_80")
    cache = KernelCache(tmp_path / "kc")
    ra, rb = compile_all([Job("plus_ep/x/0:v:sm_80", a, "sm_80"), Job("plus_ep/x/7:v:sm_80", b, "sm_80")],
                         cache=cache, progress=False)
    assert ra.cubin == rb.cubin and cache.stats.compiled == 1


def test_dump_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("PLUS_EP_DUMP_DIR", str(tmp_path / "dump"))
    monkeypatch.delenv("PLUS_EP_OVERRIDE_DIR", raising=False)
    job = Job("plus_ep/scale/3:only:sm_80", src(), "sm_80")
    (r,) = compile_all([job], cache=KernelCache(tmp_path / "kc"), progress=False)
    assert sources.file_name(job.name) == "plus_ep_scale_3.only.sm_80.cu"
    assert (tmp_path / "dump" / "plus_ep_scale_3.only.sm_80.cu").read_text() == src()
    assert [p.name for p in (tmp_path / "dump").iterdir()] == ["plus_ep_scale_3.only.sm_80.cu"]


def test_override_folder_replaces_the_source_and_keys_the_cache(tmp_path, monkeypatch, caplog):
    cache = KernelCache(tmp_path / "kc")
    job = Job("plus_ep/scale/3:only:sm_80", src("2.0f"), "sm_80")
    (plain,) = compile_all([job], cache=cache, progress=False)
    folder = tmp_path / "override"
    folder.mkdir()
    (folder / sources.file_name(job.name)).write_text(src("3.0f"))
    monkeypatch.setenv("PLUS_EP_OVERRIDE_DIR", str(folder))
    caplog.set_level(logging.WARNING, logger="plus_ep.kernels")
    (over,) = compile_all([job], cache=cache, progress=False)
    assert not over.cached and over.key == cache_key(src("3.0f"), "sm_80") != plain.key
    assert over.cubin != plain.cubin
    assert any("instead of the generated source" in r.getMessage() and "plus_ep_scale_3.only.sm_80.cu" in
               r.getMessage() for r in caplog.records)
    (again,) = compile_all([job], cache=cache, progress=False)
    assert again.cached and again.key == over.key                        # the override is cached by its text
    (folder / sources.file_name(job.name)).write_text(src("4.0f"))
    (edited,) = compile_all([job], cache=cache, progress=False)
    assert not edited.cached and edited.key not in (over.key, plain.key)   # editing it recompiles
    monkeypatch.delenv("PLUS_EP_OVERRIDE_DIR")
    (back,) = compile_all([job], cache=cache, progress=False)
    assert back.cached and back.key == plain.key
