"""The kernel disk cache and compile_all: keys, warm starts, damaged entries, concurrent builders."""

import hashlib
import json
import logging
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("cuda.bindings.nvrtc")

from plus_ep.kernels.compile import cache as kcache  # noqa: E402
from plus_ep.kernels.compile import nvrtc  # noqa: E402
from plus_ep.kernels.compile.cache import CacheMiss, KernelCache  # noqa: E402
from plus_ep.kernels.compile.jobs import Job, ResourceError, compile_all  # noqa: E402
from plus_ep.kernels.compile.nvrtc import CompileError, CompileResult  # noqa: E402
from tests.support.faults import freeze_templates, src  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]

@pytest.fixture(autouse=True)
def frozen_templates(tmp_path, monkeypatch):
    """A private copy of kernels/templates (no family headers): the key hashes every template, and the
    real folders may be edited while the tests run (which would, correctly, change the keys under them)."""
    return freeze_templates(tmp_path, monkeypatch)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.delenv("PLUS_EP_ASSERT_CACHED", raising=False)
    return KernelCache(tmp_path / "kc")


def test_root_from_environment(tmp_path, monkeypatch):
    """PLUS_EP_CACHE_DIR is the cache root (plus_ep/config.py): kernels live in <root>/kernels."""
    monkeypatch.setenv("PLUS_EP_CACHE_DIR", str(tmp_path / "env"))
    assert KernelCache().root == tmp_path / "env" / "kernels"
    monkeypatch.delenv("PLUS_EP_CACHE_DIR")
    assert KernelCache().root == pathlib.Path("~/.cache/plus_ep/kernels").expanduser()


def test_build_then_hit_compiles_nothing(cache, monkeypatch):
    r1 = cache.build(src(), "sm_80", name="scale.cu")
    assert not r1.cached and cache.stats.compiled == 1 and cache.stats.misses == 1
    entry = cache.path(r1.key)
    assert entry.parent.name == r1.key[:2] and entry.parent.parent == cache.root
    assert (entry / "kernel.cu").read_text() == src()
    meta = json.loads((entry / "meta.json").read_text())
    assert meta["cubin"] == {"sha256": hashlib.sha256(r1.cubin).hexdigest(), "size": len(r1.cubin)}
    assert meta["arch"] == "sm_80" and meta["name"] == "scale.cu" and meta["schema"] == kcache.SCHEMA
    assert meta["resources"]["plus_scale"]["registers"] == r1.resources["plus_scale"].registers
    assert not list(entry.glob(".*.tmp"))

    # A warm start in a fresh cache object compiles nothing: a miss would raise.
    monkeypatch.setenv("PLUS_EP_ASSERT_CACHED", "1")
    warm = KernelCache(cache.root)
    r2 = warm.build(src(), "80", name="scale.cu")
    assert r2.cached and r2.cubin == r1.cubin and r2.resources == r1.resources and r2.log == r1.log
    assert (warm.stats.hits, warm.stats.misses, warm.stats.compiled) == (1, 0, 0)

    with pytest.raises(CacheMiss) as info:
        warm.build(src("3.0f"), "sm_80", name="scale3.cu")
    key3 = warm.key(src("3.0f"), "sm_80")
    assert "scale3.cu" in str(info.value) and key3 in str(info.value)
    assert warm.stats.misses == 1 and warm.stats.compiled == 0


def test_key_covers_every_input(cache, tmp_path, monkeypatch, frozen_templates):
    k = cache.key(src(), "sm_90")
    assert k == cache.key(src(), "90") == kcache.cache_key(src(), "sm_90") and len(k) == 64
    assert cache.key(src("3.0f"), "sm_90") != k
    assert cache.key(src(), "sm_90a") != k
    assert cache.key(src(), "sm_80") != k
    assert cache.key(src(), "sm_90", ["-Xptxas=-O2"]) != k
    assert cache.key(src(), "sm_90", ["--maxrregcount=64"]) != cache.key(src(), "sm_90", ["--maxrregcount=128"])
    monkeypatch.setenv("PLUS_EP_LINEINFO", "1")
    assert cache.key(src(), "sm_90") != k
    monkeypatch.delenv("PLUS_EP_LINEINFO")

    # A template edit changes the key (the templates are read again on every key).
    templates = tmp_path / "templates"
    shutil.copytree(frozen_templates, templates)
    monkeypatch.setattr(nvrtc, "TEMPLATES_DIR", templates)
    assert cache.key(src(), "sm_90") == k  # same contents elsewhere, same key
    with open(templates / "plus_common.cuh", "a") as f:
        f.write("\n// edited\n")
    k_edit = cache.key(src(), "sm_90")
    assert k_edit != k
    (templates / "new_template.cuh").write_text("#pragma once\n")
    assert cache.key(src(), "sm_90") not in (k, k_edit)

    # Headers in an extra -I folder count too.
    extra = tmp_path / "expert"
    extra.mkdir()
    (extra / "mine.cuh").write_text("// v1\n")
    k1 = cache.key(src(), "sm_90", [f"-I{extra}"])
    (extra / "mine.cuh").write_text("// v2\n")
    assert cache.key(src(), "sm_90", [f"-I{extra}"]) != k1

    # The compiler's version is part of the key.
    monkeypatch.setattr(nvrtc, "compiler_id", lambda: "nvrtc 99.9 (99.9.1)")
    assert cache.key(src(), "sm_90") not in (k, k_edit)


def test_header_change_rebuilds(cache, monkeypatch):
    r1 = cache.build(src(), "sm_80")
    monkeypatch.setattr(nvrtc, "header_digest", lambda extra_dirs=(): "0" * 64)
    r2 = cache.build(src(), "sm_80")
    assert not r2.cached and r2.key != r1.key and cache.stats.compiled == 2


@pytest.mark.parametrize("damage", ["truncate", "flip", "meta", "missing"])
def test_damaged_entry_is_detected_and_rebuilt(cache, caplog, damage):
    r1 = cache.build(src(), "sm_80", name="scale.cu")
    entry = cache.path(r1.key)
    cubin = entry / "kernel.cubin"
    if damage == "truncate":
        cubin.write_bytes(r1.cubin[: len(r1.cubin) // 2])
    elif damage == "flip":
        data = bytearray(r1.cubin)
        data[len(data) // 2] ^= 0xFF
        cubin.write_bytes(bytes(data))
    elif damage == "meta":
        (entry / "meta.json").write_text("{ not json")
    else:
        cubin.unlink()
    caplog.set_level(logging.WARNING, logger="plus_ep.kernels")
    assert cache.get(r1.key) is None
    assert any("damaged" in rec.getMessage() for rec in caplog.records)
    assert not entry.exists() and cache.stats.corrupt == 1
    r2 = cache.build(src(), "sm_80", name="scale.cu")
    assert not r2.cached and r2.cubin == r1.cubin
    assert cache.get(r1.key).cubin == r1.cubin  # valid again


def test_entry_without_meta_is_a_plain_miss(cache):
    key = cache.key(src(), "sm_80")
    cache.path(key).mkdir(parents=True)
    (cache.path(key) / "kernel.cubin").write_bytes(b"half-written")
    assert cache.get(key) is None and cache.stats.corrupt == 0
    r = cache.build(src(), "sm_80")
    assert not r.cached and cache.get(key).cubin == r.cubin


def test_compile_error_is_not_cached(cache):
    with pytest.raises(CompileError):
        cache.build("this is not CUDA", "sm_80", name="bad.cu")
    with pytest.raises(CompileError):
        cache.build("this is not CUDA", "sm_80", name="bad.cu")
    assert cache.stats.compiled == 2 and cache.stats.hits == 0


_WORKER = textwrap.dedent("""
    import json, os, sys, time
    sys.path.insert(0, sys.argv[1])
    from plus_ep.kernels.compile.cache import KernelCache
    from plus_ep.kernels.compile import nvrtc
    nvrtc.TEMPLATES_DIR = __import__("pathlib").Path(sys.argv[5])
    nvrtc.FAMILIES_DIR = nvrtc.TEMPLATES_DIR / "families"      # tests/support/faults.py freeze_templates
    nvrtc.nvrtc_version(); nvrtc.header_digest()   # warm up before the start line
    go = sys.argv[3]
    while not os.path.exists(go):
        time.sleep(0.005)
    c = KernelCache(sys.argv[2])
    r = c.build(sys.argv[4], "sm_90", name="race.cu")
    print(json.dumps({"cached": r.cached, "sha": __import__("hashlib").sha256(r.cubin).hexdigest(),
                      "key": r.key}))
""")


def test_two_processes_build_one_key(tmp_path, frozen_templates):
    root, go = tmp_path / "kc", tmp_path / "go"
    env = {k: v for k, v in os.environ.items() if k != "PLUS_EP_ASSERT_CACHED"}
    # A slower kernel (a few unrolled loops) keeps the compile window open while both processes race.
    source = src() + r'''
extern "C" __global__ void race_work(const PlusArgs args) {
  float acc = 0.0f;
#pragma unroll
  for (int i = 0; i < 256; ++i) acc += plus_load<float>(args.in[0], threadIdx.x * 256 + i) * (float)i;
  plus_store<float>(args.out[0], threadIdx.x, acc);
}
'''
    procs = [subprocess.Popen([sys.executable, "-c", _WORKER, str(REPO), str(root), str(go), source,
                               str(frozen_templates)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(2)]
    import time
    time.sleep(1.0)
    go.write_text("go")
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        outs.append(json.loads(out.strip().splitlines()[-1]))
    assert sorted(o["cached"] for o in outs) == [False, True]  # exactly one compiled
    assert outs[0]["sha"] == outs[1]["sha"] and outs[0]["key"] == outs[1]["key"]
    key = outs[0]["key"]
    entries = [p for p in root.glob("??/*") if p.is_dir()]
    assert entries == [root / key[:2] / key]
    assert not list(entries[0].glob(".*"))  # no temp files left behind
    assert KernelCache(root).get(key).cubin is not None


# ------------------------------------------------------------------------------------ compile_all

SPILL = r'''
extern "C" __global__ void __launch_bounds__(1024, 2) spills(const float* __restrict__ in, float* out, int n) {
  float acc[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = in[threadIdx.x + i * 1024];
  for (int k = 0; k < n; ++k) {
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = acc[i] * acc[(i + 1) & 63] + in[k + i];
  }
#pragma unroll
  for (int i = 0; i < 64; ++i) out[threadIdx.x + i * 1024] = acc[i];
}
'''


def test_compile_all_isolates_failures(cache, capsys):
    jobs = [
        Job("a.cu", src(), "sm_80"),
        Job("broken.cu", "extern \"C\" __global__ void k() { int x = }", "sm_80"),
        Job("a_again.cu", src(), "80"),                    # identical to job 0: compiled once
        Job("b.cu", src("4.0f"), "sm_90a"),
        Job("old.cu", src(), "sm_70"),                     # unsupported arch
        Job("spills.cu", SPILL, "sm_80"),                  # compiles, but spills
        Job("smem.cu", src(), "sm_86", dynamic_smem=120 * 1024),   # over the sm_86 limit
    ]
    results = compile_all(jobs, cache=cache, workers=2, progress=False)
    assert len(results) == len(jobs)
    a, broken, a_again, b, old, spills, smem = results
    assert isinstance(a, CompileResult) and isinstance(b, CompileResult) and a_again is a
    assert b.arch == "sm_90a" and set(b.resources) == {"plus_scale"}
    assert isinstance(broken, CompileError) and not isinstance(broken, ResourceError)
    assert broken.name == "broken.cu" and "error" in broken.log
    assert isinstance(old, ValueError) and "sm_70" in str(old)
    assert isinstance(spills, ResourceError) and "spill" in str(spills) and spills.result.cubin
    assert isinstance(smem, ResourceError) and "sm_86" in str(smem)
    # a, broken, b, spills, smem-variant (same source as a but sm_86): 5 compiles, one deduplicated.
    assert cache.stats.compiled == 5
    assert capsys.readouterr().err == ""  # progress=False is silent

    again = compile_all(jobs, cache=cache, workers=2, progress=False)
    assert all(r.cached for r in (again[0], again[3]))
    assert cache.stats.compiled == 6  # only the broken one tried again


def test_compile_all_progress_and_log(cache, capsys, caplog):
    caplog.set_level(logging.INFO, logger="plus_ep.kernels")
    jobs = [Job(f"k{i}.cu", src(f"{i}.0f"), arch) for i in range(2) for arch in ("sm_80", "sm_90")]
    results = compile_all(jobs, cache=cache, progress=True)
    assert all(isinstance(r, CompileResult) for r in results)
    err = capsys.readouterr().err
    assert "compiling kernels" in err and "/4 [" in err      # the tqdm bar (plus_ep/progress.py), 4 jobs
    assert any("4 compiled, 0 cached" in rec.getMessage() for rec in caplog.records)


def test_compile_all_without_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PLUS_EP_CACHE_DIR", str(tmp_path / "unused"))
    results = compile_all([Job("a.cu", src(), "sm_89")], cache=False, progress=False)
    assert isinstance(results[0], CompileResult) and not results[0].cached
    assert not (tmp_path / "unused").exists()
    assert compile_all([], cache=False, progress=False) == []


def test_compile_all_dict_dynamic_smem(cache):
    jobs = [Job("a.cu", src(), "sm_80", dynamic_smem={"plus_scale": 200 * 1024}),
            Job("a.cu", src(), "sm_80", dynamic_smem={"plus_scale": 100 * 1024})]
    bad, good = compile_all(jobs, cache=cache, progress=False)
    assert isinstance(bad, ResourceError) and "plus_scale" in bad.problems[0]
    assert isinstance(good, CompileResult)


def test_threads_building_one_key_compile_once(cache):
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: cache.build(src("5.0f"), "sm_80"), range(4)))
    assert cache.stats.compiled == 1 and cache.stats.hits == 3
    assert sum(not r.cached for r in results) == 1 and len({r.cubin for r in results}) == 1
