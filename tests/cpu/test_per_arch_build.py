"""Per-arch kernel builds (issue 16 item 4): each arch gets its own routes, template and configs (wgmma on
sm_90a, mma.sync on sm_80, tiles that fit sm_86's shared memory) in one plan of `arch` route groups;
a variant that spills on an arch is replaced by a smaller configuration instead of losing the subgraph.
NVRTC is replaced by a recorder (the real compiles are the zoo tests'), so these run in seconds."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from plus_ep.kernels import arch as arch_table
from plus_ep.kernels.wire import plan as P
from plus_ep.kernels.compile.jobs import ResourceError
from plus_ep.kernels.compile.nvrtc import CompileResult
from plus_ep.kernels.wire.pack import parse as read_pack

from plus_ep.kernels.compile import stage as kernel_build
from plus_ep.kernels.target import Target
from plus_ep.rewrite import rewrite_detailed


def _fp16_gemm(m="batch", k=768, n=768):
    w = numpy_helper.from_array(np.ones((k, n), np.float16), "W")
    g = helper.make_graph([helper.make_node("MatMul", ["X", "W"], ["mm"]), helper.make_node("Relu", ["mm"], ["Y"])],
                          "gemm16", [helper.make_tensor_value_info("X", TensorProto.FLOAT16, [m, k])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT16, [m, n])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


class FakeNvrtc:
    """compile_all stand-in: records (variant, arch) and fails the ones `spill` names with the
    ResourceError a spilling cubin gets."""

    def __init__(self, spill=()):
        self.spill, self.calls = set(spill), []

    def __call__(self, jobs, cache=None, progress=None):
        out = []
        for job in jobs:
            _, variant, arch = job.name.rsplit(":", 2)
            self.calls.append((variant.split("/")[0], arch))
            res = CompileResult(cubin=f"{variant}@{arch}".encode(), log="", resources={}, seconds=0.0, arch=arch)
            if (variant.split("/")[0], arch) in self.spill:
                out.append(ResourceError(job.name, res, ["registers spill to local memory (108 bytes)"]))
            else:
                out.append(res)
        return out


def _build(monkeypatch, model, archs, fake):
    monkeypatch.setattr(kernel_build, "compile_all", fake)
    return rewrite_detailed(model, archs=archs)


def _plan_and_packs(res):
    node = next(n for n in res.model.graph.node if n.domain == "ai.plus_ep")
    attrs = {a.name: a for a in node.attribute}
    plan = P.parse(attrs["plus_plan"].s.decode())
    packs = {a[len("plus_images_"):]: read_pack(numpy_helper.to_array(attrs[a].t).tobytes())
             for a in attrs if a.startswith("plus_images_")}
    return plan, packs


def test_wgmma_and_mma_side_by_side(monkeypatch):
    """--arch sm_90a,sm_80 used to render wgmma kernels for both and lose every f16 GEMM on sm_80."""
    fake = FakeNvrtc()
    res = _build(monkeypatch, _fp16_gemm(), ["sm_90a", "sm_80"], fake)
    assert not res.kernels.failures, res.kernels.failures
    plan, packs = _plan_and_packs(res)
    groups = {r.archs for r in plan.routes}
    assert groups == {("sm_90a",), ("sm_80",)}
    wg = {v for v, a in fake.calls if a == "sm_90a"}
    mma = {v for v, a in fake.calls if a == "sm_80"}
    assert wg and all(v.startswith(("wg_", "ws_")) for v in wg)      # wgmma: the cp.async or the TMA tiles
    assert mma and not any(v.startswith("wg_") for v in mma)
    # each pack holds exactly its group's images, and every kernel line indexes one of them
    for arch, images in packs.items():
        routes = [r for r in plan.routes if arch in r.archs]
        assert routes and max(ln.image for r in routes for ln in r.launches) < len(images)
        assert all(im.cubin.decode().endswith("@" + arch) for im in images)


def test_same_render_for_all_archs_keeps_one_group(monkeypatch):
    res = _build(monkeypatch, _fp16_gemm(), ["sm_80", "sm_86"], FakeNvrtc())
    plan, _ = _plan_and_packs(res)
    if len({r.archs for r in plan.routes}) == 1:
        assert all(r.archs == () for r in plan.routes) and "\narch " not in plan.text()


def test_sm86_gets_configs_within_its_shared_memory(monkeypatch):
    fake = FakeNvrtc()
    res = _build(monkeypatch, _fp16_gemm(), ["sm_90", "sm_86"], fake)
    assert not res.kernels.failures
    plan, _ = _plan_and_packs(res)
    limit = arch_table.get("sm_86").smem_per_block
    for r in plan.routes:
        if "sm_86" in r.archs or not r.archs:
            assert all(not ln.smem.isdigit() or int(ln.smem) <= limit for ln in r.launches)


def test_spilling_variant_falls_back_to_a_smaller_config(monkeypatch):
    """Real-width BERT fp16 with sm_80,sm_90a lost its GEMMs to `f16_128x128x32_w64x64_s3 (sm_80):
    registers spill`; now that config is excluded for sm_80 and another one takes its place."""
    first = FakeNvrtc()
    _build(monkeypatch, _fp16_gemm(m=4096), ["sm_80", "sm_90a"], first)
    victim = next(v for v, a in first.calls if a == "sm_80")
    fake = FakeNvrtc(spill={(victim, "sm_80")})
    res = _build(monkeypatch, _fp16_gemm(m=4096), ["sm_80", "sm_90a"], fake)
    assert not res.kernels.failures, res.kernels.failures
    assert (victim, "sm_80") in fake.calls                   # tried, spilled, excluded
    _, packs = _plan_and_packs(res)
    assert packs["sm_80"] and all(victim not in im.cubin.decode() for im in packs["sm_80"])


def test_every_config_spilling_leaves_the_subgraph_with_the_reason(monkeypatch):
    from plus_ep.kernels.families.gemm import configs as gemm_configs
    cfgs = {c.name for c in gemm_configs.configs(gemm_configs.MATH_F16)}
    res = _build(monkeypatch, _fp16_gemm(), ["sm_80"], FakeNvrtc(spill={(c, "sm_80") for c in cfgs}))
    assert res.kernels.failures
    reason = res.kernels.failures[0][2]
    assert "spill" in reason or "no GEMM configuration left for sm_80" in reason


@pytest.mark.parametrize("head_dim", [32, 64, 80, 96, 128, 256])
def test_attention_menus_exist_for_head_dims(head_dim):
    from plus_ep.kernels.families.flash_attention import routes
    from plus_ep.kernels.codegen import symdim
    from plus_ep.kernels.routes import ALWAYS
    for arch in ("sm_80", "sm_86", "sm_90a"):
        for math_ in (0, 2):
            rts = routes.attention_routes(2, 12, "seq", "seq", head_dim, Target(arch), symdim.Symbols(), math_=math_)
            assert rts and rts[-1][0] == ALWAYS
            room = arch_table.get(arch).smem_per_block
            assert all(cfg.smem_bytes <= room for _, cfg in rts)


def test_tensor_core_attention_falls_back_to_simt_when_every_config_spills():
    """Head dim 256 in f16 with every tensor-core config excluded (as the kernel build excludes a config that
    spilled or does not fit the arch): the route model picks the SIMT configs instead of losing the subgraph."""
    from plus_ep.kernels.families.flash_attention import configs as ac
    from plus_ep.kernels.families.flash_attention import routes
    from plus_ep.kernels.codegen import symdim
    from plus_ep.kernels.routes import NoConfig
    tc = {c.name for c in ac.configs_for(2, 256)}
    rts = routes.attention_routes(2, 8, "seq", "seq", 256, Target("sm_80", excluded=tc), symdim.Symbols(), math_=2)
    assert rts and all(cfg.math == 0 for _, cfg in rts)
    simt = {c.name for c in ac.configs_for(0, 256)}
    with pytest.raises(NoConfig, match="no attention"):
        routes.attention_routes(2, 8, "seq", "seq", 256, Target("sm_80", excluded=tc | simt), symdim.Symbols(),
                                math_=2)
