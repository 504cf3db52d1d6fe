"""One-kernel GEMM + residual + LayerNorm/RMSNorm on sm_90a (kernels/families/gemm_rownorm/tile.py): the wgmma
GEMM's CTAs along a row form a thread-block cluster and normalise whole rows through distributed shared
memory. Each case renders a static-shape subgraph, runs its one launch on the CPU PTX interpreter
(clusters interleaved, checkers on) and compares with float64 numpy per element within a bound
(gemm_norm_cases.reference_bound); the first rows have a variance of ~4e-4, where the epsilon matters;
outputs start poisoned (an unwritten element fails)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from plus_ep.warehouse import load_warehouse
from tests.support.gemm_norm_cases import (SOFTMAX_PATTERN, device_array, host_value, norm_model, reference_bound,
                                           render_subgraph, reshaped_model, run_route, softmax_model)

F16, BF16 = TensorProto.FLOAT16, TensorProto.BFLOAT16


def _run(M, N, K, dt, ptx_edit=None, excluded=(), **kw):
    model, vals = norm_model(M, N, K, dt, **kw)
    rd, ins, outs = render_subgraph(model, excluded=excluded)
    like = [device_array(np.zeros((M, N)), dt) for _ in outs]
    got, results = run_route(rd, 0, [device_array(vals[i], dt) for i in ins], like, ptx_edit=ptx_edit)
    s, y, bound = reference_bound(vals, dt, rms=kw.get("rms", False), bias=kw.get("bias", True))
    return rd, dict(zip(outs, [host_value(g, dt) for g in got])), {"S": s, "Y": y, "bound": bound}, results


def _check(out, ref, dt):
    y, yr = out["Y"], ref["Y"]
    err = np.abs(y - yr)
    bad = ~(err <= ref["bound"])
    assert not bad.any(), (f"{int(bad.sum())} elements outside their bound, worst at "
                           f"{np.unravel_index(np.argmax(err / ref['bound']), err.shape)}: max err {err.max():.3g}")
    if "S" in out:     # the residual sum, stored as the graph holds it (rounded to dt): within an ulp
        ulp = 2.0 ** (-10 if dt == F16 else -7)
        assert (np.abs(out["S"] - ref["S"]) <= ulp * np.abs(ref["S"]) + 1e-6).all()


def _only(name):
    """`excluded` keeping one sm_90a tile: where the model prefers the two-kernel plan at the test's small shape."""
    from plus_ep.kernels.families.gemm import sm90a_configs as gc
    return frozenset(c.name for c in gc.CONFIGS + gc.CLUSTER_CONFIGS) - {name}


# clusters: (CTAs along a row = PLUS_CLUSTER_X, K splits inside the cluster, clusters run), as the route model
# chooses them for the shape (kernels/families/gemm/routes.py gemm_norm_routes), or for the one tile `_only` keeps
@pytest.mark.parametrize("M,N,K,dt,kw,clusters", [
    (45, 200, 64, F16, {"sum_out": True}, (4, 1, 1)),                   # ragged N (BN 64) and M, S also stored
    (150, 768, 32, BF16, {"rms": True, "bias": False}, (6, 1, 3)),      # BERT's N, three row tiles of clusters
    (10, 512, 32, BF16, {"sum_out": True}, (8, 1, 1)),                  # the largest portable cluster
    (7, 48, 40, F16, {}, (1, 1, 1)),                                     # one CTA per cluster
    (70, 300, 48, F16, {"gemm": True}, (5, 1, 2)),                      # ONNX Gemm: transB=1, bias as C
    # BN 512 (N <= 4096): 2 warpgroups on N
    (20, 2500, 64, F16, {"sum_out": True, "excluded": _only("wg_64x512x64_w64x256_s3")}, (5, 1, 1)),
    (12, 1100, 32, F16, {}, (5, 1, 1)),                                  # BN 256 (1024 < N <= 2048)
    # split-K inside the cluster: 3 x 2 CTAs
    (200, 768, 768, F16, {"sum_out": True, "excluded": _only("wg_64x256x64_w64x256_s4")}, (3, 2, 4)),
])
def test_one_launch_matches_float64(M, N, K, dt, kw, clusters):
    cx, csplit, runs = clusters
    rd, out, ref, results = _run(M, N, K, dt, **kw)
    (launch,) = rd.plan.routes[0].launches
    assert launch.entry == "plus_gemm" and launch.grid[0] == str(cx) and launch.grid[2] == str(csplit)
    assert not rd.plan.scratch
    assert f"#define PLUS_CLUSTER_X {cx}" in rd.variants[0].source
    assert (f"#define PLUS_SPLITK_CLUSTER {csplit}" in rd.variants[0].source) == (csplit > 1)
    (res,) = results
    assert res.findings == [], [str(f) for f in res.findings]
    assert res.counters["cluster"]["dims"] == [cx, 1, csplit]
    assert res.counters["cluster"]["clusters_run"] == runs
    if cx * csplit > 1:        # partials of the other ranks read through DSMEM, never counted as DRAM
        assert res.counters["dsmem_ld"]["requests"] > 0
    _check(out, ref, dt)


def test_fallback_tile_of_the_narrowest_width():
    """wg_64x64 (cluster-only) serves BN 64 when wg_128x64 is excluded (spilled or too big at build time)."""
    rd, out, ref, (res,) = _run(45, 200, 64, F16, sum_out=True, excluded=["wg_128x64x64_w64x64_s4"])
    assert [v.name for v in rd.variants] == ["wg_64x64x64_w64x64_s4/cluster4"]
    assert res.findings == [], [str(f) for f in res.findings]
    assert res.counters["cluster"]["clusters_run"] == 1
    _check(out, ref, F16)


def test_missing_cluster_barrier_is_caught():
    """Without the first cluster barrier (its arrive and wait) a CTA reads other ranks' partials before
    they are published: the interpreter's DSMEM checker reports it (or the rows come out wrong)."""
    def drop_first_barrier(ptx):
        for form in ("barrier.cluster.arrive.release.aligned;", "barrier.cluster.wait.acquire.aligned;"):
            assert form in ptx
            ptx = ptx.replace(form, "", 1)
        return ptx
    rd, out, ref, (res,) = _run(45, 200, 64, F16, ptx_edit=drop_first_barrier, sum_out=True)
    assert any("DSMEM" in str(f) for f in res.findings), [str(f) for f in res.findings]


def test_gemm_on_flattened_rows_with_reshaped_output():
    """GPT-2's layout: the GEMM runs on [B*S, K] and its result is reshaped to [B, S, N] before the residual
    add; the LayerNorm's output is reshaped back to [B*S, N]. The C tile still holds x's rows in order, so
    the cluster kernel applies (before: the two-kernel plan), and the reshaped store finds its element."""
    B, S, N, K = 3, 7, 160, 64
    model, vals = reshaped_model(B, S, N, K)
    rd, ins, outs = render_subgraph(model)
    assert rd.variants[0].name.endswith("/cluster3") and len(rd.plan.routes[0].launches) == 1
    like = {"Y": np.zeros((B * S, N), np.float16), "S": np.zeros((B, S, N), np.float16)}
    arrays = {**vals, "x2": vals["X"].reshape(B * S, K)}      # the input Reshape stays outside the subgraph
    got, (res,) = run_route(rd, 0, [a if a.dtype == np.int64 else a.astype(np.float16) for a in (arrays[i] for i in ins)],
                            [like[o] for o in outs])
    assert res.findings == [], [str(f) for f in res.findings]
    ref = {"X": vals["X"].reshape(B * S, K), "R": vals["R"].reshape(B * S, N), **{k: vals[k] for k in ("W", "B", "g", "bb")}}
    s_ref, y_ref, bound = reference_bound(ref, F16)
    out = dict(zip(outs, got))
    _check({"Y": out["Y"].astype(np.float32), "S": out["S"].reshape(B * S, N).astype(np.float32)},
           {"S": s_ref, "Y": y_ref, "bound": bound}, F16)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_gemm_softmax_user_pattern(arch, tmp_path):
    """The README's gemm_softmax pattern (template gemm_rownorm): a max and a sum pass, cluster-wide on
    sm_90a, where the logits are the GEMM output itself; on sm_80 the GEMM stores them to scratch and the last
    CTA of each row tile finishes its rows in the same launch (before: the row program's input was dropped
    from the scratch tensors and rendering failed). sm_90a rounds the logits to f16 as the graph holds them;
    the scratch keeps them in fp32."""
    (tmp_path / "gemm_softmax.py").write_text(SOFTMAX_PATTERN)
    model, vals = softmax_model(37, 300, 64)
    rd, ins, _ = render_subgraph(model, arch=arch, warehouse=load_warehouse(tmp_path, plugins=False),
                                 patterns=("gemm_softmax",))
    got, results = run_route(rd, 0, [device_array(vals[i], F16) for i in ins], [np.zeros((37, 300), np.float16)],
                             arch=arch)
    assert len(results) == 1 and all(r.findings == [] for r in results)
    assert ("PLUS_HAS_ROW_FINISH" in rd.variants[0].source) == (arch == "sm_80")
    logits = vals["X"].astype(np.float64) @ vals["W"].astype(np.float64)
    if arch == "sm_90a":
        logits = logits.astype(np.float16).astype(np.float64)
    ref = np.exp(logits - logits.max(-1, keepdims=True))
    ref /= ref.sum(-1, keepdims=True)
    assert np.abs(got[0].astype(np.float64) - ref).max() <= 1e-3
