"""Every attention menu entry (kernels/families/flash_attention/configs.py: head dims 32, 64, 80, 96, 128, 256; SIMT fp32,
TF32 and f16/bf16 tensor cores) compiles with NVRTC for every arch of kernels/arch.py without register
spills, without a stack frame, and within the arch's shared memory; the Python mirror of each config's
shared memory size equals the template's (a static_assert in the source). This is the CI's spill check of
the menu: the hook-free sources of tests/support/template_attention_cases.py need fewer registers.

The sources carry hooks in the shape the codegen writes them (tests/support/template_attention_cases.py
HOOKS_BSHD: a Q element hook, a score hook adding a mask read from an input, an output hook, [B, S, H, D]
pointer hooks), since a score hook costs registers the default hooks do not: with them D = 256 spilled
at 32-key tiles where the hook-free source did not. Two load layouts alternate: K and V by cp.async with Q
through its hook, and Q and V by cp.async with K gathered key-major (a materialised Kᵀ, as rendered for
the zoo's BERT).

Default run: for every (math, head dim, element type, arch) one config of the menu, rotating over the
menu across archs so that every config is compiled on at least one arch; causal and the two layouts
alternate. 120 compiles through the session's kernel cache (tests/conftest.py), so a repeated source
compiles once. PLUS_ATTN_FULL=1 (as for tests/cpu/test_template_attention_compile.py) compiles every
config x element type x arch x causal x layout.
"""
from __future__ import annotations

import itertools

import pytest

from plus_ep.kernels import arch as arch_table
from plus_ep.kernels.families.flash_attention import configs as ac
from plus_ep.kernels.compile import nvrtc
from plus_ep.kernels.compile.cache import KernelCache
from tests.support.parallel import run_jobs
from tests.support.template_attention_cases import DTYPES, ENTRY, FULL, HOOKS_BSHD, HOOKS_BSHD_DEFINES, smem_assert

# the two load layouts of the tensor-core paths (ignored by SIMT)
LAYOUTS = (HOOKS_BSHD_DEFINES, {"PLUS_Q_STRIDED": 1, "PLUS_K_STRIDED": 0, "PLUS_K_KEY_MAJOR": 1, "PLUS_V_STRIDED": 1})


def _jobs():
    """(cfg, dtype, causal, layout, arch) to compile."""
    jobs = []
    for (math, d), menu in sorted(ac.CONFIGS.items()):
        for a, arch in enumerate(arch_table.ARCHS):
            for t, dtype in enumerate(DTYPES[math]):
                if FULL:
                    for cfg, causal, layout in itertools.product(menu, (0, 1), (0, 1) if math else (0,)):
                        jobs.append((cfg, dtype, causal, layout, arch))
                    continue
                cfg = menu[(a + t) % len(menu)]
                jobs.append((cfg, dtype, (a + t) % 2, (a // 2 + t) % 2 if math else 0, arch))
    return jobs


JOBS = _jobs()


def _job_id(job):
    cfg, dtype, causal, layout, arch = job
    return f"{cfg.name}-{dtype.strip('_')}-c{causal}-l{layout}-{arch}"


@pytest.fixture(scope="module")
def compiled():
    """All jobs on two threads (NVRTC releases the GIL), through the run's kernel cache."""
    cache = KernelCache()

    def one(job):
        cfg, dtype, causal, layout, arch = job
        src = ac.source(cfg, dtype, causal=causal, hooks=HOOKS_BSHD, extra_defines=LAYOUTS[layout]) + smem_assert(cfg)
        return cache.build(src, arch, name=f"{_job_id(job)}.cu")
    return run_jobs(JOBS, _job_id, one)


def test_every_config_and_arch_is_covered():
    covered = {(job[0].name, job[1]) for job in JOBS}
    for cfg in ac.all_configs():
        assert any((cfg.name, dt) in covered for dt in DTYPES[cfg.math]), cfg.name
    for (math, d) in ac.CONFIGS:
        for arch in arch_table.ARCHS:
            for dt in DTYPES[math]:
                assert any(j[0].math == math and j[0].head_dim == d and j[1] == dt and j[4] == arch for j in JOBS)
    assert set(ac.HEAD_DIMS) >= {32, 64, 80, 96, 128, 256}
    assert {m for m, _ in ac.CONFIGS} == {0, 1, 2}


@pytest.mark.parametrize("job", JOBS, ids=_job_id)
def test_menu_config_compiles_without_spills(compiled, job):
    cfg, dtype, causal, layout, arch = job
    r = compiled[_job_id(job)]
    if isinstance(r, Exception):
        raise r
    res = r.resources[ENTRY]
    assert res.spill_stores == 0 and res.spill_loads == 0, f"{_job_id(job)} spills: {res}"
    assert res.stack == 0, f"{_job_id(job)} uses a stack frame: {res}"
    assert not nvrtc.check_resources(r, dynamic_smem=cfg.smem_bytes, arch=arch)
    assert res.smem_static + cfg.smem_bytes <= nvrtc.smem_limit(arch) - arch_table.RESERVED_SMEM_PER_BLOCK
