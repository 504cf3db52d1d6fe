"""Census: every opcode-with-modifiers form NVRTC emits for every template x config x dtype x arch and
the golden sources (tests/support/ptx_sources.py) is implemented by the PTX interpreter. The list of
forms is generated from the PTX, never typed; a missing form fails with where it occurs."""
from __future__ import annotations

import time
from collections import Counter

from plus_ep.kernels.ptx.census import census
from tests.support.ptx_sources import census_sources, compile_all


def test_every_emitted_form_is_implemented():
    t0 = time.perf_counter()
    jobs = census_sources()
    texts = compile_all(jobs)
    failed = [(j[0], j[2], t) for j, t in zip(jobs, texts) if isinstance(t, Exception)]
    assert not failed, f"sources that do not compile: {failed[:5]}"
    total, lacking = Counter(), {}
    archs = Counter()
    seen = set()
    for (name, _, arch), text in zip(jobs, texts):
        body = "\n".join(ln for ln in text.splitlines() if not ln.startswith(".target"))
        archs[arch] += 1
        if body in seen:          # sm_90 and sm_90a PTX of one source differ only in .target
            continue
        seen.add(body)
        found, lacking_here = census(text)
        total.update(found)
        for form, (line, why) in lacking_here.items():
            lacking.setdefault(form, (f"{name} [{arch}] PTX line {line}", why))
    # the census must have seen the whole instruction mix of the templates
    assert len(jobs) >= 150 and set(archs) == {"sm_80", "sm_90", "sm_90a"}
    for must in ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
                 "cp.async.wait_group", "shfl.sync.bfly.b32", "fma.rn.f32", "cvt.rna.tf32.f32"):
        assert must in total, must
    assert any(f.startswith("wgmma.mma_async") for f in total)
    # the 8-bit TMA GEMM's wgmma forms, every signedness pair (tests/support/ptx_sources.py)
    assert {f.rsplit(".", 2)[-2] + "." + f.rsplit(".", 1)[-1] for f in total
            if f.startswith("wgmma.mma_async") and ".s32." in f} == {"s8.s8", "u8.s8", "s8.u8", "u8.u8"}
    assert not lacking, "forms the interpreter lacks:\n" + "\n".join(
        f"  {f}: first at {where} ({why})" for f, (where, why) in sorted(lacking.items()))
    print(f"census: {len(jobs)} compiles, {len(total)} forms, {sum(total.values())} static instructions, "
          f"{time.perf_counter() - t0:.1f}s")
