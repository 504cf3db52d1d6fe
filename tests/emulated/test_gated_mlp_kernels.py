"""Gated MLPs and ragged GQA projection groups rewritten for sm_80 and sm_90a and verified end to end: `plus_ep.verify`
runs every kernel's PTX on the CPU interpreter through the launcher and compares each output with the fused
node's function body on ORT. Separate gate/up weights (SwiGLU, GeGLU with the up projection first) and one
combined weight split by Slice (halves in either order) or Split; SIMT fp32, TF32 and f16 (mma.sync on sm_80,
wgmma on sm_90a); the ragged Q/K/V group with a long K, whose short-row routes split K."""
from __future__ import annotations

import pytest
from onnx import TensorProto

import plus_ep
from plus_ep.kernels.families.gemm.routes import forced_exclusions
from plus_ep.kernels.render import render
from plus_ep.kernels.target import Target
from tests.support import gated_models as M

F32, F16 = TensorProto.FLOAT, TensorProto.FLOAT16


@pytest.fixture(autouse=True)
def cp_async_wgmma(monkeypatch):
    """sm_90a on the cp.async wgmma tiles (gemm_sm90a.cuh), whose gated, unaligned and cluster split-K paths these
    tests pin; the TMA tiles' gated kernels are tests/emulated/test_gemm_tma_routes.py's."""
    monkeypatch.setenv("PLUS_EP_GEMM_TILES", "wg_*")


def _sources(r, arch):
    sg = r.subgraphs[0]
    ins, outs = r.view.graph_index.boundary(sg.nodes)
    target = Target(arch, r.fp32_math, forced_exclusions(arch))
    return [v.source for v in render(r.view, sg, ins, outs, target, node_name="g").variants]


def _verify(model, fp32_math, pattern, want_defines, seq=5):
    r = plus_ep.rewrite_detailed(model, archs=["sm_80", "sm_90a"], fp32_math=fp32_math)
    assert not r.kernels.failures, r.kernels.failures
    assert [s.pattern.name for s in r.subgraphs] == [pattern]
    for arch, want in want_defines.items():
        got = {ln for src in _sources(r, arch) for ln in src.splitlines() if ln.startswith(("#define PLUS_", "#include"))}
        assert want <= got, (arch, sorted(got))
    rep = plus_ep.verify(r.model, batch=2, seq=seq)
    assert rep["ok"], plus_ep.verify_text(rep)
    assert sorted(x["arch"] for x in rep["nodes"]) == ["sm_80", "sm_90a"]
    for row in rep["nodes"]:
        assert row["executed"] and row["n_findings"] == 0 and all(o["ok"] for o in row["outputs"]), row
    return r, rep


GATED = {"#define PLUS_GATED 1", "#define PLUS_HAS_EPILOGUE_GATED 1"}


@pytest.mark.parametrize("model,math,pattern,defines", [
    (lambda: M.gated_pair_model(F32), "exact", "gemm_gated",
     {"sm_80": GATED | {"#define PLUS_MATH 0"}}),
    (lambda: M.gated_pair_model(F16), "exact", "gemm_gated",
     {"sm_80": GATED | {'#include "gemm.cuh"'}, "sm_90a": GATED | {'#include "gemm_sm90a.cuh"'}}),
    (lambda: M.gated_pair_model(F32, act="gelu", up_first=True), "tf32", "gemm_gated",
     {"sm_80": GATED | {"#define PLUS_MATH 1"}}),
    (lambda: M.gated_combined_model(F16, swap=True, inter=36), "exact", "gemm_gated_split",
     {"sm_90a": GATED | {'#include "gemm_sm90a.cuh"', "#define PLUS_ALIGNED 0"}}),
    (lambda: M.gated_combined_model(F16, form="split", inter=48), "exact", "gemm_gated_split",
     {"sm_80": GATED | {"#define PLUS_ALIGNED 1"}, "sm_90a": GATED | {"#define PLUS_ALIGNED 1"}}),
    (lambda: M.gated_combined_model(F32), "tf32", "gemm_gated_slice", {"sm_80": GATED}),
], ids=["pair-f32-simt", "pair-f16-mma-wgmma", "pair-geglu-upfirst-tf32", "slice-swapped-f16-unaligned",
        "split-f16-aligned", "slice-tf32"])
def test_gated_mlp_is_one_verified_kernel(model, math, pattern, defines):
    _verify(model(), math, pattern, defines)


@pytest.mark.parametrize("dtype,math", [(F32, "tf32"), (F16, "exact")], ids=["tf32", "f16-mma-wgmma"])
def test_ragged_group_with_split_k(dtype, math):
    """Q 32 wide, K and V 16: one launch, each member its own N and ldb; at 2 x 5 rows and K = 1024 the route
    splits K: through scratch, so the reduction kernel skips the columns past a member's N, or (sm_90a wgmma,
    where the route model prefers it) inside a thread-block cluster, whose ranks share one C tile and so leave
    together when it lies past their member's N."""
    r, rep = _verify(M.gqa_long_k_model(dtype), math, "gemm_group",
                     {"sm_80": {"#define PLUS_HAS_GROUP_N 1"}, "sm_90a": {"#define PLUS_HAS_GROUP_N 1"}})
    for row in rep["nodes"]:
        cluster = any(ln.startswith("#define PLUS_SPLITK_CLUSTER ") and not ln.endswith(" 1")
                      for src in _sources(r, row["arch"]) for ln in src.splitlines())
        want = ["plus_gemm"] if cluster else ["plus_gemm", "plus_splitk_reduce"]
        assert row["kernels"] == want, (row["arch"], row["kernels"])
    assert dtype == F32 or any(row["kernels"] == ["plus_gemm"] for row in rep["nodes"]), rep["nodes"]
