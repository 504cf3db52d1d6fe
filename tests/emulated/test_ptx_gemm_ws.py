"""The TMA GEMM template (kernels/families/gemm/gemm_sm90a_ws.cuh) on the PTX interpreter against float64 numpy, at
shapes spanning several tiles with ragged edges (M, N past a tile, K not a multiple of 64), persistent CTAs taking
several work units, every config, both B layouts, f16 and bf16, hooked and gated epilogues, a K split through
scratch, the m-fastest epilogue; and the planted bugs the checkers must catch: a TMA box off by one, expect_tx
off, a barrier phase flipped (consumer and producer side), a consumer releasing a stage before its wgmma group
retired, a consumer reading the next stage."""
from __future__ import annotations

import numpy as np
import pytest

from plus_ep.kernels.families.gemm import sm90a_configs as gc
from plus_ep.kernels.ptx import PtxError
from tests.support.ptx_harness import UNIT
from tests.support.ws_gemm_cases import Case, run


def _ok(got, ref, findings, dtype="half", rel=None):
    assert findings == [], [str(f) for f in findings]
    tol = (rel if rel is not None else 2 * UNIT[dtype]) * np.maximum(1.0, np.abs(ref))
    bad = np.abs(got - ref) > tol
    assert not bad.any(), f"{int(bad.sum())} of {bad.size} wrong, first at {np.argwhere(bad)[0]}: " \
                          f"{got[tuple(np.argwhere(bad)[0])]} vs {ref[tuple(np.argwhere(bad)[0])]}"


@pytest.mark.parametrize("cfg", [c.name for c in gc.WS_CONFIGS])
def test_every_config_several_units_per_cta(cfg):
    c = Case(cfg)
    cl = gc.ws_cluster(gc.WS_BY_NAME[cfg])
    # 4 units on 3 CTAs (clusters): one takes two; with multicast, the second pair's second m tile lies past M
    M, N = cl * gc.WS_BY_NAME[cfg].bm + 37, gc.WS_BY_NAME[cfg].bn + 40
    got, ref, findings, r = run(c, 1, M, N, 200, grid=3)
    _ok(got, ref, findings)


@pytest.mark.parametrize("case,shape", [
    (Case("ws_64x128x64_s8", "half", 1), (2, 100, 136, 72)),
    (Case("ws_128x128x64_s6_c2", "__nv_bfloat16", 1, hooks="epilogue"), (1, 300, 136, 136)),
    (Case("ws_64x128x64_s8", "__nv_bfloat16", 0), (1, 70, 264, 128)),
    (Case("ws_128x128x64_s6", "__nv_bfloat16", 1, hooks="epilogue"), (2, 130, 72, 136)),
    (Case("ws_64x128x64_s8", "half", 0, splitk=2, hooks="epilogue"), (1, 65, 136, 320)),
    (Case("ws_64x128x64_s8", "half", 0, m_fastest=1), (1, 100, 72, 64)),
    # three 64-column boxes of B over a multicast pair (rank 0 loads two, rank 1 one); K-major: 96 rows each
    (Case("ws_128x192x64_s5_c2", "__nv_bfloat16", 0, hooks="epilogue"), (2, 300, 400, 136)),
    (Case("ws_128x192x64_s5_c2", "half", 1, m_fastest=1), (1, 520, 200, 72)),
    # whole chunks only (M, N multiples of the tile), several units per CTA: the epilogue's unguarded path
    (Case("ws_128x192x64_s5", "half", 0, hooks="epilogue"), (1, 256, 384, 128)),
    # four CTAs share B: MN-major, three boxes (rank 3 loads none); K-major, 48 rows each; M past the last group
    (Case("ws_128x192x64_s5_c4", "half", 0, hooks="epilogue"), (2, 700, 200, 136)),
    (Case("ws_128x192x64_s5_c4", "__nv_bfloat16", 1), (1, 1100, 392, 72)),
], ids=["f16-trans", "multicast-trans", "bf16", "bf16-trans-hooked", "splitk2", "m-fastest", "192-multicast-hooked",
        "192-multicast-trans-m-fastest", "192-whole-chunks", "192-c4-hooked", "192-c4-trans"])
def test_variants(case, shape):
    got, ref, findings, _ = run(case, *shape, grid=2)
    _ok(got, ref, findings, case.dtype, rel=1e-6 if case.hooks != "default" else None)


@pytest.mark.parametrize("b_trans", [0, 1])
def test_gated_products(b_trans):
    got, ref, findings, _ = run(Case("ws_64x128x64_s8", "half", b_trans, hooks="gated"), 2, 70, 72, 136, grid=3)
    _ok(got, ref, findings, rel=1e-5)


def test_loads_once_per_operand_tile():
    """TMA reads each A and B tile of a unit once: global load bytes equal the tiles' in-bounds bytes."""
    got, ref, findings, r = run(Case("ws_64x128x64_s8"), 1, 64, 128, 128, grid=1)
    _ok(got, ref, findings)
    assert r.counters["global_ld"]["bytes"] == (64 * 128 + 128 * 128) * 2


# ---------------------------------------------------------------------------------------------- planted bugs

def _mutated(old, new):
    def mutate(text):
        assert text.count(old) >= 1, old
        return text.replace(old, new)
    return mutate


def _kinds(findings) -> set:
    return {f.kind for f in findings}


def test_box_off_by_one_row_is_a_wrong_result():
    got, ref, findings, _ = run(Case(), 1, 100, 136, 128, grid=2,
                                mutate=_mutated("plus_tma_load_3d(sa, ma, k0, (int)min(t.m0, M - 1), za, bar);",
                                                "plus_tma_load_3d(sa, ma, k0, (int)min(t.m0, M - 1) + 1, za, bar);"))
    assert not np.allclose(got, ref)


def test_expect_tx_off_by_one_box_row_is_a_transaction_mismatch():
    with pytest.raises(PtxError, match="transaction-count mismatch"):
        run(Case(), 1, 100, 136, 128, grid=2,
            mutate=_mutated("plus_mbar_arrive_expect_tx(bar, STAGE_BYTES);",
                            "plus_mbar_arrive_expect_tx(bar, STAGE_BYTES - 128);"))


def test_consumer_phase_flipped_is_caught():
    """Consumers waiting on the other parity pass the fresh full barrier at once: their wgmma reads a stage no copy
    has completed yet (then they wait on a phase twice)."""
    mutate = _mutated("plus_mbar_wait(full + 8 * stage, phase);", "plus_mbar_wait(full + 8 * stage, phase ^ 1u);")
    try:
        _, _, findings, _ = run(Case(), 1, 100, 136, 200, grid=2, mutate=mutate)
    except PtxError as e:
        assert "shared memory read before its mbarrier phase" in str(e), e
        return
    assert "shared memory read before its mbarrier phase" in _kinds(findings)


def test_producer_phase_flipped_deadlocks():
    with pytest.raises(PtxError, match="deadlock"):
        run(Case(), 1, 100, 136, 200, grid=2,
            mutate=_mutated("plus_mbar_wait(empty + 8 * stage, phase ^ 1u);", "plus_mbar_wait(empty + 8 * stage, phase);"))


def test_stage_released_before_its_wgmma_retired_is_caught():
    """The consumer also releases the stage its wgmma group still reads (before wgmma.wait_group): the producer's
    next copy into it writes an in-flight wgmma operand (then the stage is over-released)."""
    with pytest.raises(PtxError, match="write to an in-flight wgmma operand"):
        run(Case(), 1, 100, 136, 640, grid=1,
            mutate=_mutated("        plus_wgmma_commit();\n        plus_wgmma_wait<1>();",
                            "        plus_wgmma_commit();\n        if (wt == 0) plus_mbar_arrive(empty + 8 * stage);\n"
                            "        plus_wgmma_wait<1>();"))


def test_consumer_reading_the_next_stage_is_caught():
    got, ref, findings, _ = run(Case(), 1, 100, 136, 640, grid=1,
                                mutate=_mutated("(plus_u64)((plus_u32)stage * (STAGE_BYTES >> 4));",
                                                "(plus_u64)((plus_u32)((stage + 1) % STAGES) * (STAGE_BYTES >> 4));"))
    assert "shared memory read before its mbarrier phase" in _kinds(findings)
    assert not np.allclose(got, ref)


# ---------------------------------------------------------------------------------------------- golden source

def test_golden_tma_gemm_bias_gelu_runs_as_its_plan_says():
    """tests/golden/tma_gemm_bias_gelu.cu (route 0: the B multicast over a two-CTA cluster) launched as its plan
    says (grid, block, smem, and the tensor maps of its tmap records encoded here from the plan's expressions),
    against float64 GELU(x W + b)."""
    import math
    import pathlib

    from plus_ep.kernels.ptx import tensormap as TM
    from plus_ep.kernels.wire.plan import parse
    from plus_ep.verification.shapes import rpn
    from tests.support import ptx_harness as H
    golden = pathlib.Path(__file__).resolve().parents[1] / "golden"
    plan = parse((golden / "tma_gemm_bias_gelu.plan").read_text())
    syms = {0: 1, 1: 100}                                  # M = 100 rows, N = 384 (3 tiles): route 0, the golden's
    route = next(r for r in plan.routes if rpn(r.cond, syms))
    (launch,) = route.launches
    assert launch.image == 0
    rng = np.random.default_rng(4)
    x = (rng.integers(-4, 5, (1, 100, 128)) / 8).astype(np.float16)
    w = (rng.integers(-4, 5, (128, 384)) / 8).astype(np.float16)
    bias = (rng.integers(-4, 5, 384) / 8).astype(np.float16)
    dev = H.Device()
    ptrs = [dev.upload(x, "X"), dev.upload(w, "W"), dev.upload(bias, "B")]
    out = np.zeros((1, 100, 384), np.float16)
    pout = dev.output(out)
    args = H.plus_args(ins=ptrs, outs=(pout,), v=(1, 100))
    maps = []
    for dtype, buf, index, offset, dims, strides, box, swizzle in launch.tmaps:
        assert (dtype, buf, swizzle) == (10, "in", 128)
        d = [rpn(e, syms) for e in dims]
        s = [rpn(e, syms) * 2 for e in strides]
        maps.append(TM.encode_tiled(TM.F16, ptrs[index] + rpn(offset, syms) * 2, d, s, box, swizzle=TM.SWIZZLE_128B))
    mod = H.module((golden / "tma_gemm_bias_gelu.cu").read_text(), "sm_90a", "golden_tma_gemm_bias_gelu")
    k = mod.kernel(launch.entry)
    params = bytearray(k.param_bytes)
    params[:len(args)] = args
    off = k._param_offsets[k.params[1][0]]
    params[off:off + 128 * len(maps)] = b"".join(maps)
    grid = tuple(rpn(e, syms) for e in launch.grid)
    block = tuple(rpn(e, syms) for e in launch.block)
    r = k.launch(grid, block, rpn(launch.smem, syms), bytes(params), dev.mem, checks=True)
    assert r.findings == [], [str(f) for f in r.findings]
    got = dev.download(pout, out).astype(np.float64)
    h = x.astype(np.float64).reshape(100, 128) @ w.astype(np.float64) + bias.astype(np.float64)
    want = (0.5 * h * (1 + np.vectorize(math.erf)(h / math.sqrt(2)))).reshape(1, 100, 384)
    assert np.abs(got - want).max() <= 2e-3 * max(1.0, np.abs(want).max())
