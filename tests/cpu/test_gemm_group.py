"""Horizontal GEMM groups at identification (warehouse/families/gemm_group.py, Identifier.group_horizontal):
Q/K/V siblings reading one A merge into one gemm_group subgraph, also when their N differ (GQA: a ragged
group); a non-convex union, more outputs than a kernel has and a single sibling are refused with a reason
that `plus-ep explain` prints."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort

import plus_ep
from tests.support.qkv_models import H, nonconvex_model, qkv_model, siblings_model


def _groups(model):
    r = plus_ep.rewrite_detailed(model)
    return r, [sg for sg in r.subgraphs if sg.pattern.name == "gemm_group"], r.identifier.groups


def test_qkv_siblings_form_one_group_keeping_each_epilogue():
    r, groups, log = _groups(qkv_model())
    assert len(r.subgraphs) == 1 and len(groups) == 1
    g = groups[0]
    ops = sorted(r.view.nodes[i].op_type for i in g.nodes)
    assert ops == sorted(["MatMul", "Add", "Reshape", "Transpose"] * 3)
    assert [p.b for p in g.roles.members] == ["Wq", "Wk", "Wv"] and g.roles.a == "X"
    assert len(g.parts) == 3 and sorted(g.outputs) == ["K", "Q", "V"]
    assert [e["status"] for e in log] == ["grouped"]
    fused = [n for n in r.model.graph.node if n.domain == "ai.plus_ep"]
    assert len(fused) == 1 and sorted(fused[0].output) == ["K", "Q", "V"]
    # the rewritten model (function body on ORT CPU) equals the original
    x = np.random.default_rng(0).standard_normal((2, 3, H)).astype(np.float32)
    want = ort.InferenceSession(qkv_model().SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"X": x})
    got = ort.InferenceSession(r.model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"X": x})
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_smaller_n_siblings_join_a_ragged_group():
    """GQA: Q is wider than K and V; all three are one group (PLUS_HAS_GROUP_N: each member its own N)."""
    model = qkv_model(projections=(("q", H, False), ("k", H // 2, True), ("v", H // 2, False)))
    r, groups, log = _groups(model)
    assert len(groups) == 1 and [p.b for p in groups[0].roles.members] == ["Wq", "Wk", "Wv"]
    assert [s.pattern.name for s in r.subgraphs] == ["gemm_group"]
    assert [e["status"] for e in log] == ["grouped"]
    x = np.random.default_rng(1).standard_normal((2, 5, H)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"X": x})
    got = ort.InferenceSession(r.model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"X": x})
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_ragged_group_hooks_give_each_member_its_n():
    """The rendered group: plus_gemm_shape's N is the widest member's, plus_group_n / plus_group_ldb switch on
    the member, and the grid covers the widest N."""
    from plus_ep.kernels.render import render
    from plus_ep.kernels.target import Target
    r, groups, _ = _groups(qkv_model(projections=(("q", H, False), ("k", H // 2, True), ("v", H // 2, False))))
    ins, outs = r.view.graph_index.boundary(groups[0].nodes)
    rd = render(r.view, groups[0], ins, outs, Target("sm_80", "exact"), node_name="qkv")
    src = rd.variants[0].source
    assert f"return PlusGemmShape{{3LL, (batch * seq), {H}LL, {H}LL}};" in src, src
    assert "#define PLUS_HAS_GROUP_N 1" in src
    assert f"return plus_g == 0 ? {H}LL : plus_g == 1 ? {H // 2}LL : {H // 2}LL;" in src


def test_too_many_outputs_start_a_second_group():
    r, groups, log = _groups(siblings_model(10))
    assert [len(g.parts) for g in groups] == [8, 2]                        # PLUS_MAX_OUT is 8
    too_many = [e for e in log if e["status"] == "refused"]
    assert too_many and all("too many inputs/outputs" in e["reason"] and "limits 64/8" in e["reason"]
                            for e in too_many)


def test_non_convex_union_is_refused():
    r, groups, log = _groups(nonconvex_model())
    assert not groups and [s.pattern.name for s in r.subgraphs].count("gemm") == 2
    assert len(log) == 1 and log[0]["status"] == "refused" and "not convex" in log[0]["reason"], log
    assert "ReduceSum" in log[0]["reason"]


def test_disabled_pattern_leaves_three_gemms():
    r = plus_ep.rewrite_detailed(qkv_model(), disable=["gemm_group"])
    assert [s.pattern.name for s in r.subgraphs] == ["gemm"] * 3 and not r.identifier.groups


def test_explain_prints_groups_and_refusals(tmp_path):
    p, q = tmp_path / "gqa.onnx", tmp_path / "nonconvex.onnx"
    onnx.save(qkv_model(projections=(("q", H, False), ("k", H // 2, True), ("v", H // 2, False))), p)
    onnx.save(nonconvex_model(), q)
    out = subprocess.run([sys.executable, "-m", "plus_ep", "explain", str(p), "--pattern", "gemm_group"],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    assert "grouped (3 members, A 'X'): MatMul node 'q/MatMul', MatMul node 'k/MatMul', MatMul node 'v/MatMul'" in out
    out = subprocess.run([sys.executable, "-m", "plus_ep", "explain", str(q), "--pattern", "gemm_group"],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    assert "refused (A 'X')" in out and "not convex" in out, out


def test_group_whose_kernels_fail_falls_back_to_its_members(monkeypatch, tmp_path):
    """A group that cannot be rendered is not left unfused: its members are built as separate nodes. The
    failing renderer is really asked (an empty cache folder and render cache: no stored render of the group
    stands in for it)."""
    import dataclasses
    from collections import OrderedDict

    from plus_ep.kernels import render as render_mod
    from plus_ep.kernels.codegen.pull import RenderError
    from plus_ep.kernels.families import gemm_group as kernel_half
    calls = []

    def boom(job):
        calls.append(job.node_name)
        raise RenderError(f"{job.node_name}: forced failure")
    monkeypatch.setenv("PLUS_EP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(render_mod, "_RENDERS", OrderedDict())
    monkeypatch.setattr(kernel_half, "KERNEL", dataclasses.replace(kernel_half.KERNEL, render=boom))
    r = plus_ep.rewrite_detailed(qkv_model(), archs=["sm_80"], fp32_math="exact")
    assert calls, "the group's renderer was never called"
    assert [s.pattern.name for s in r.subgraphs] == ["gemm"] * 3 and not r.kernels.failures
    fused = [n for n in r.model.graph.node if n.domain == "ai.plus_ep"]
    assert len(fused) == 3 and all(any(a.name == "plus_images_sm_80" for a in n.attribute) for n in fused)
