"""The attention template's sm_90a body (kernels/families/flash_attention/attention_sm90a.cuh: wgmma, TMA, producer
and consumer warpgroups) on the PTX interpreter against float64 numpy, at shapes spanning several query and key
tiles with ragged edges: head dims 64 and 128, f16 and bf16, non-causal and causal (bottom-right, through the score
hook), an additive mask with -inf entries, a key-padding term (the key-bias hook), fully masked rows, Sq < 64
(a consumer with no real row), Sq > Skv, K as a materialised Kᵀ (a 64-key box past Skv); and the planted bugs the checkers or the comparison must catch: a Q box
off by one row, expect_tx short, the consumers' or the producer's barrier phase flipped, a stage released before
its wgmma retired, a V descriptor stride off, P's fragment halves swapped."""
from __future__ import annotations

import numpy as np
import pytest

from plus_ep.kernels.families.flash_attention import configs as ac
from plus_ep.kernels.ptx import PtxError
from tests.support import wg_attention_cases as W
from tests.support.ptx_harness import UNIT

D64, D128 = ac.WGMMA_CONFIGS[64][0], ac.WGMMA_CONFIGS[128][0]


def _ok(got, ref, findings, dtype="half"):
    assert findings == [], [str(f) for f in findings]
    # fp32 logits and softmax; P rounded to 16 bits before P·V, O rounded once on store
    tol = 4 * UNIT[dtype] * np.maximum(1.0, np.abs(ref))
    bad = ~(np.abs(got - ref) <= tol)
    assert not bad.any(), f"{int(bad.sum())} of {bad.size} wrong, first at {np.argwhere(bad)[0]}: " \
                          f"{got[tuple(np.argwhere(bad)[0])]} vs {ref[tuple(np.argwhere(bad)[0])]}"


CASES = [
    (D64, dict(B=2, H=1, Sq=130, Skv=200)),
    (D128, dict(B=1, H=2, Sq=77, Skv=300, causal=True)),
    (D64, dict(B=1, H=2, Sq=200, Skv=131, causal=True)),
    (D64, dict(B=2, H=1, Sq=65, Skv=129, mask=True, key_bias=True, masked_rows=True)),
    (D128, dict(B=2, H=1, Sq=129, Skv=64, dtype="__nv_bfloat16", key_bias=True)),
    (D128, dict(B=1, H=1, Sq=33, Skv=257, mask=True)),
    (D64, dict(B=2, H=1, Sq=130, Skv=200, key_major=True)),
    (D128, dict(B=1, H=2, Sq=77, Skv=136, causal=True, key_bias=True, key_major=True)),
]


@pytest.mark.parametrize("cfg,kw", CASES, ids=["d64", "d128-causal", "d64-causal-sq-gt-skv", "d64-masks",
                                               "d128-bf16-keybias", "d128-short-q-mask", "d64-kt",
                                               "d128-kt-causal-keybias-last-box-past-skv"])
def test_matches_float64(cfg, kw):
    got, ref, findings, r = W.run(cfg, **kw)
    _ok(got, ref, findings, kw.get("dtype", "half"))
    assert r.counters["tensor_flops"].get("wgmma.fp16", 0) > 0 and not r.counters["tensor_flops"].get("mma.fp16")


def test_loads_each_operand_tile_once():
    """TMA reads Q once per block and each K and V tile once per block: global load bytes are those tiles' bytes."""
    B, H, Sq, Skv = 1, 1, 128, 256
    got, ref, findings, r = W.run(D64, B, H, Sq, Skv)
    _ok(got, ref, findings)
    assert r.counters["global_ld"]["bytes"] == (Sq + 2 * Skv) * 64 * 2


# ---------------------------------------------------------------------------------------------- planted bugs

def _mutated(old, new):
    def mutate(text):
        assert text.count(old) == 1, old
        return text.replace(old, new)
    return mutate


def _kinds(findings) -> set:
    return {f.kind for f in findings}


def test_q_box_off_by_one_row_is_a_wrong_result():
    got, ref, findings, _ = W.run(D64, 1, 1, 100, 130, mutate=_mutated("min(t.q0 + 64 * w, t.Sq - 1), bh, qbar);",
                                                                       "min(t.q0 + 64 * w + 1, t.Sq - 1), bh, qbar);"))
    assert not np.allclose(got, ref, atol=1e-2)


def test_expect_tx_short_is_a_transaction_mismatch():
    with pytest.raises(PtxError, match="transaction-count mismatch"):
        W.run(D64, 1, 1, 64, 200, mutate=_mutated("plus_mbar_arrive_expect_tx(bar, STAGE_BYTES);",
                                                  "plus_mbar_arrive_expect_tx(bar, STAGE_BYTES - 128);"))


def test_consumer_phase_flipped_is_caught():
    """Consumers waiting on the other parity pass the fresh full barrier at once: their wgmma reads a stage no copy
    has completed."""
    mutate = _mutated("plus_mbar_wait(full + 8 * stage, phase);", "plus_mbar_wait(full + 8 * stage, phase ^ 1u);")
    try:
        _, _, findings, _ = W.run(D64, 1, 1, 64, 300, mutate=mutate)
    except PtxError as e:
        assert "shared memory read before its mbarrier phase" in str(e) or "deadlock" in str(e), e
        return
    assert "shared memory read before its mbarrier phase" in _kinds(findings)


def test_producer_phase_flipped_deadlocks():
    with pytest.raises(PtxError, match="deadlock"):
        W.run(D64, 1, 1, 64, 300, mutate=_mutated("plus_mbar_wait(empty + 8 * stage, phase ^ 1u);",
                                                  "plus_mbar_wait(empty + 8 * stage, phase);"))


def test_stage_released_before_its_wgmma_retired_is_caught():
    """The consumer releases the stage while its P·V group still reads V: the producer's next copy into the stage
    writes an in-flight wgmma operand (or the consumers' later reads find it rewritten)."""
    mutate = _mutated("    plus_wgmma_commit();\n    plus_wgmma_wait<0>();\n    plus_wgmma_fence_regs(of);\n"
                      "    if (wt == 0) plus_mbar_arrive(empty + 8 * stage);",
                      "    if (wt == 0) plus_mbar_arrive(empty + 8 * stage);\n    plus_wgmma_commit();\n"
                      "    plus_wgmma_wait<0>();\n    plus_wgmma_fence_regs(of);")
    try:
        got, ref, findings, _ = W.run(D64, 1, 1, 128, 512, mutate=mutate)
    except PtxError as e:
        assert "in-flight wgmma operand" in str(e), e
        return
    assert "write to an in-flight wgmma operand" in _kinds(findings)


def test_v_descriptor_stride_off_is_a_wrong_result():
    got, ref, findings, _ = W.run(D128, 1, 1, 64, 130, mutate=_mutated(
        "plus_wgmma_desc_sw128(skv + KV_BYTES, KV_BOX_BYTES, 1024)", "plus_wgmma_desc_sw128(skv + KV_BYTES, KV_BOX_BYTES, 512)"))
    assert not np.allclose(got, ref, atol=1e-2)


def test_p_fragment_halves_swapped_is_a_wrong_result():
    """P's A fragment with its row halves swapped (rows g and g + 8 of a k16 slice exchanged)."""
    got, ref, findings, _ = W.run(D64, 1, 1, 64, 300, mutate=_mutated(
        "      a[1] = PlusMma16<T>::pack(s[2 * kk][2], s[2 * kk][3]);",
        "      a[1] = PlusMma16<T>::pack(s[2 * kk][0], s[2 * kk][1]);"))
    assert not np.allclose(got, ref, atol=1e-2)
