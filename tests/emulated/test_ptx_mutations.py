"""Mutation tests of the interpreter's strictness on real kernels: deleting any one `bar.sync`,
`cp.async.wait_group`, `wgmma.wait_group` or `fence.proxy.async` from NVRTC's PTX of a shipped template
must give a wrong result or a checker finding (or an interpreter error). A mutant that is not caught must be
provably equivalent on the run: a wait that retired nothing in the clean run, or a barrier whose removal
leaves the race checker silent (no conflicting shared accesses across it) and the result bit-identical;
an instruction the test shape never executes fails the test. Equivalent mutants are printed."""
from __future__ import annotations

import numpy as np
import pytest

from plus_ep.kernels.families.flash_attention import configs as ac
from plus_ep.kernels.ptx import Module, PtxError
from plus_ep.kernels.compile.ptx import compile_ptx
from tests.support.ptx_attention_cases import run_attention
from tests.support.ptx_gemm_cases import run_gemm
from tests.support.gemm_variants import Variant

KERNELS = {
    "simt": ("gemm", "sm_80", Variant("simt_64x64x8_w32x32", "float", 0, 1), (1, 40, 50, 37)),
    "f16": ("gemm", "sm_80", Variant("f16_64x64x32_w32x32_s4", "half", 0, 1), (1, 40, 50, 140)),
    "tf32": ("gemm", "sm_80", Variant("tf32_64x64x32_w32x32_s3", "float", 1, 1), (1, 40, 50, 140)),
    "wgmma": ("gemm", "sm_90a", Variant("wg_64x128x64_w64x128_s4", "half", 1, 1), (1, 40, 100, 330)),
    "attn_tc": ("attn", "sm_80", ("tc_d64_q64_kv64_w4", "half", 0, 1, False), None),   # strided: cp.async K/V
    "attn_simt": ("attn", "sm_80", ("simt_d64_q32_kv32_w4", "float", 0, 0, False), None),
}
TARGETS = ("bar.sync", "cp.async.wait_group", "wgmma.wait_group", "fence.proxy.async")


def _source_ptx(key):
    kind, arch, spec, _ = KERNELS[key]
    if kind == "gemm":
        from tests.support.ptx_sources import gemm_source, wgmma_source
        src = wgmma_source(spec) if spec.cfg.startswith("wg_") else gemm_source(spec)
    else:
        cfg = ac.by_name(spec[0])
        src = ac.source(cfg, spec[1], causal=spec[2], strided=spec[3])
    return compile_ptx(src, arch, name=f"{key}.cu")


def _mutants():
    out = []
    for key in KERNELS:
        lines = _source_ptx(key).splitlines()
        for target in TARGETS:
            where = [i for i, ln in enumerate(lines) if ln.strip().startswith(target)]
            for k in range(len(where)):
                out.append((key, target, k))
    return out


def _occurrence(lines, target, k):
    """Index of the k-th line starting with `target` (looked up again at run time: the templates may
    change between collection and the run)."""
    where = [i for i, ln in enumerate(lines) if ln.strip().startswith(target)]
    if k >= len(where):
        pytest.skip(f"the PTX changed since collection: {target} occurs {len(where)} times now")
    return where[k]


MUTANTS = _mutants()


def _run(key, mutate):
    kind, arch, spec, shape = KERNELS[key]
    if kind == "gemm":
        got, ref, bound, findings, r = run_gemm(arch, spec, *shape, mutate=mutate)
        return got, ref, bound, findings, r
    got, ref, bound, r = run_attention(ac.by_name(spec[0]), *spec[1:], arch=arch, mutate=mutate, Skv=150)
    return got, ref, bound, r.findings, r


_CLEAN = {}


def _clean_run(key):
    if key not in _CLEAN:
        _CLEAN[key] = _run(key, None)
    return _CLEAN[key]


def test_every_target_occurs():
    """The mutation set covers each of the four kinds of synchronisation somewhere."""
    assert {t for _, t, _ in MUTANTS} == set(TARGETS)


@pytest.mark.parametrize("key", list(KERNELS))
def test_unmutated_kernels_are_clean(key):
    got, ref, bound, findings, _ = _clean_run(key)
    assert not findings and (np.abs(got - ref) <= bound).all()


@pytest.mark.parametrize("mutant", MUTANTS, ids=[f"{k}-{t}-{i + 1}" for k, t, i in MUTANTS])
def test_mutation_is_caught(mutant):
    key, target, occurrence = mutant
    index = _occurrence(_source_ptx(key).splitlines(), target, occurrence)

    def mutate(src, arch):
        lines = compile_ptx(src, arch, name=f"{key}.cu").splitlines()
        assert lines[index].strip().startswith(target)
        del lines[index]
        return Module.parse("\n".join(lines) + "\n", name=f"{key}-without-{target}")

    try:
        got, ref, bound, findings, _ = _run(key, mutate)
    except PtxError:
        return                                          # caught as undefined behaviour
    wrong = not (np.abs(got - ref) <= bound).all()
    if wrong or findings:
        return
    # Not caught: acceptable only for an instruction that is a dynamic no-op in the unmutated run (a
    # drain wait that retires nothing, a barrier after which no thread touches shared memory), proven
    # from that run's counts; an instruction the test shape never executes is a failure of the test.
    line = index + 1
    clean = _clean_run(key)[4]
    assert clean.line_counts.get(line, 0) > 0, f"the test shape never executes PTX line {line} of {key}"
    if target in ("cp.async.wait_group", "wgmma.wait_group"):
        assert clean.sync_stats["retired"].get(line, 0) == 0, \
            f"deleting {target} at PTX line {line} of {key} went unnoticed although it retires work"
        print(f"equivalent mutant: {target} at PTX line {line} of {key} retires nothing on this run")
    elif target == "bar.sync":
        # no race finding without it: no two threads touched a shared byte in conflicting ways across it
        print(f"equivalent mutant: bar.sync at PTX line {line} of {key} orders no conflicting shared accesses "
              f"on this run ({clean.sync_stats['guarded'].get(line, 0)} accesses after it)")
    else:
        pytest.fail(f"deleting {target} at PTX line {line} of {key} went unnoticed")
    assert np.array_equal(got, _clean_run(key)[0]), "a no-op mutation changed the result"


WEAKENED = [(t, k) for t in ("wgmma.wait_group", "cp.async.wait_group")
            for k in range(sum(ln.strip().startswith(t) for ln in _source_ptx("wgmma").splitlines()))]


@pytest.mark.parametrize("target,occurrence", WEAKENED, ids=[f"{t}-{k + 1}" for t, k in WEAKENED])
def test_weakened_wait_is_caught(target, occurrence):
    """A wait that leaves one group more in flight (`wait_group N` -> `N + 1`) in the wgmma GEMM: the stage
    being refilled may still be read by an unretired wgmma group, or a tile is read before it landed. The
    interpreter reads wgmma operands only at the retiring wait and runs the warpgroups in lockstep, so a
    too-weak wgmma wait can leave the values right: the checker must report it (kernels/ptx/checks.py: a
    cp.async writes its destination from its issue on; writes to operands of unretired wgmma groups). Exempt,
    as above, only a wait that retires nothing in the clean run."""
    lines = _source_ptx("wgmma").splitlines()
    index = _occurrence(lines, target, occurrence)
    stmt = lines[index].strip()
    n = int(stmt.rstrip(";").split()[-1])

    def mutate(src, arch):
        ptx = compile_ptx(src, arch, name="wgmma.cu").splitlines()
        assert ptx[index].strip() == stmt
        ptx[index] = ptx[index].replace(f" {n};", f" {n + 1};")
        return Module.parse("\n".join(ptx) + "\n", name=f"wgmma-weakened-{target}")

    try:
        got, ref, bound, findings, _ = _run("wgmma", mutate)
    except PtxError:
        return
    if target == "wgmma.wait_group":
        # the checker names the hazard whatever the values: the in-loop wait (tile i-2's group retired in the
        # barrier interval whose cp.async refills its stage) is a race of the refill with the tensor core's
        # read; the drain wait (the last group still in flight) lets the epilogue's st.shared of the C tile
        # overwrite operand bytes that group reads
        want = "shared race" if n else "write to an in-flight wgmma operand"
        assert want in {f.kind for f in findings}, (stmt, [str(f) for f in findings])
    if findings or not (np.abs(got - ref) <= bound).all():
        return
    clean = _clean_run("wgmma")[4]
    assert clean.line_counts.get(index + 1, 0) > 0, f"the test shape never executes PTX line {index + 1}"
    assert clean.sync_stats["retired"].get(index + 1, 0) == 0, \
        f"weakening {stmt!r} at PTX line {index + 1} went unnoticed although it retires work"
