"""GEMM + residual + LayerNorm/RMSNorm in one launch without a cluster row (route kind "one",
kernels/families/gemm_rownorm/render.py, gemm_hooks.cuh plus_finish_rows): the GEMM epilogue stores the row input to fp32
scratch as in the two-kernel plan, and the last CTA of each row group to arrive on the group's arrival word
runs the row program over those rows. Each case renders a static-shape subgraph, runs its one launch on the
CPU PTX interpreter (checkers on, outputs and scratch poisoned, CTAs in a random order so the finishing CTA
is not always the last column tile) and compares with float64 numpy per element within a bound
(gemm_norm_cases.reference_bound), and with the two-kernel plan of the same subgraph."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

import plus_ep.kernels.families.gemm_rownorm.render as rownorm_render
from plus_ep.kernels.render import clear_render_cache
from tests.support.gemm_norm_cases import (device_array, host_value, norm_model, reference_bound, render_subgraph,
                                           run_route)

F16, BF16, F32 = TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.FLOAT


def _render(M, N, K, dt, arch, **kw):
    model, vals = norm_model(M, N, K, dt, **kw)
    rd, ins, outs = render_subgraph(model, arch=arch)
    return rd, vals, ins, outs


def _launch(rd, vals, ins, outs, M, N, dt, arch, order="random", ptx_edit=None):
    like = [device_array(np.zeros((M, N)), dt) for _ in outs]
    got, results = run_route(rd, 0, [device_array(vals[i], dt) for i in ins], like, arch=arch, cta_order=order,
                             seed=M, ptx_edit=ptx_edit)
    return dict(zip(outs, [host_value(g, dt) for g in got])), results


# (M, N, K, dtype, arch, options, grid of the one launch): the route model picks the one-launch plan for these
# (weight-dominated rows: BERT-base's FFN output at batch 1 x 128 tokens is the third)
CASES = [
    (40, 256, 2048, F16, "sm_90a", {"sum_out": True}, ("256,64,cdiv", "40,64,cdiv", "1,8,*")),
    (70, 300, 1536, BF16, "sm_90a", {"rms": True, "bias": False}, None),
    (128, 768, 3072, F16, "sm_90a", {}, ("768,128,cdiv", "128,64,cdiv", "1,8,*")),
    (33, 200, 1024, F16, "sm_80", {"gemm": True, "sum_out": True}, None),
]


@pytest.mark.parametrize("M,N,K,dt,arch,kw,grid", CASES)
def test_one_launch_finish_matches_float64(M, N, K, dt, arch, kw, grid):
    rd, vals, ins, outs = _render(M, N, K, dt, arch, **kw)
    (launch,) = rd.plan.routes[0].launches
    assert launch.entry == "plus_gemm" and "#define PLUS_HAS_ROW_FINISH 1" in rd.variants[0].source
    assert rd.variants[0].name.endswith("-finish")
    assert grid is None or tuple(launch.grid) == grid
    assert rd.plan.scratch[-1] == f"{M},8,+,8,*"          # the row groups' arrival words
    out, (res,) = _launch(rd, vals, ins, outs, M, N, dt, arch)
    assert res.findings == [], [str(f) for f in res.findings]
    s, y, bound = reference_bound(vals, dt, rms=kw.get("rms", False), bias=kw.get("bias", True))
    err = np.abs(out["Y"] - y)
    bad = ~(err <= bound)
    assert not bad.any(), f"{int(bad.sum())} elements outside their bound, max err {err.max():.3g}"
    if "S" in out:
        ulp = 2.0 ** (-10 if dt == F16 else -7)
        assert (np.abs(out["S"] - s) <= ulp * np.abs(s) + 1e-6).all()


def test_one_launch_equals_two_kernel_plan(monkeypatch):
    """fp32 (SIMT on sm_80): the one launch and the two-kernel plan store the same row input and run the same
    row program, over 128 threads a row or a warp a row (register mode): equal up to the order of the row sums,
    each within verify's LayerNorm bound of the exact result, so within twice that of each other (rows of
    variance ~4e-4 multiply a different rounding of the mean by rstd ~50)."""
    M, N, K = 21, 136, 1024
    one = _render(M, N, K, F32, "sm_80", sum_out=True)
    got_one, _ = _launch(*one, M, N, F32, "sm_80")
    monkeypatch.setattr(rownorm_render, "_finish_applies", lambda job, st: False)
    clear_render_cache()        # the same subgraph rendered again, now without the one-launch plan
    two = _render(M, N, K, F32, "sm_80", sum_out=True)
    assert [lc.entry for lc in two[0].plan.routes[0].launches] == ["plus_gemm", "plus_row"]
    got_two, _ = _launch(*two, M, N, F32, "sm_80", order="linear")
    clear_render_cache()
    assert np.array_equal(got_one["S"], got_two["S"])
    _, _, bound = reference_bound(one[1], F32, bias=True)
    err = np.abs(got_one["Y"].astype(np.float64) - got_two["Y"])
    assert (err <= 2 * bound).all(), f"max difference {err.max():.3g}, worst over the bound {(err / bound).max():.3g}"


def test_finish_counts_every_column_tile():
    """A finisher that believes one arrival fewer is enough (the count compared with gridDim.x - 1) normalises
    rows whose other column tiles have not stored their part yet: the poisoned scratch it reads then, or the
    unwritten rows of groups that never finish, fail the case. The edit must hit the PTX (else it tests
    nothing)."""
    M, N, K = 40, 256, 2048
    rd, vals, ins, outs = _render(M, N, K, F16, "sm_90a")
    hits = []

    def one_early(ptx):
        import re
        # the arrivals operand: %nctaid.x read before the ticket; subtract one right after it is read
        m = re.search(r"mov\.u32 \t?(%r\d+), %nctaid\.x;", ptx)
        assert m, "no %nctaid.x read in the PTX"
        hits.append(m.group(1))
        return ptx.replace(m.group(0), m.group(0) + f"\n\tadd.s32 \t{m.group(1)}, {m.group(1)}, -1;", 1)
    s, y, bound = reference_bound(vals, F16)
    try:
        out, (res,) = _launch(rd, vals, ins, outs, M, N, F16, "sm_90a", ptx_edit=one_early)
    except AssertionError:          # an output element no CTA wrote
        out = None
    assert out is None or res.findings or not (np.abs(out["Y"] - y) <= bound).all()
    assert hits


def test_arrival_words_serve_the_next_launch():
    """A second launch on the same scratch (arrival words as the first launch left them: reset to 0) finishes
    every row again, in another CTA order; and its words are 0 again afterwards."""
    from tests.support.run_rendered import launch_route
    M, N, K = 40, 256, 2048
    rd, vals, ins, outs = _render(M, N, K, F16, "sm_90a")
    like = [device_array(np.zeros((M, N)), F16) for _ in outs]
    got, (res,) = launch_route(rd, [device_array(vals[i], F16) for i in ins], like, "sm_90a", "gemm_norm",
                               cta_order="random", seed=7, repeat=2)
    assert res.findings == []
    s, y, bound = reference_bound(vals, F16)
    assert (np.abs(host_value(got[0], F16) - y) <= bound).all()
