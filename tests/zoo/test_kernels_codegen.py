"""Codegen acceptance on CPU: every fused subgraph of the six families renders and every route
compiles with NVRTC for sm_80 and sm_90 (zero spills, shared memory within the limit); golden
sources from the export itself (tests/cpu/test_golden.py checks them without torch, from the export's
zeroed-weight graph kept in tests/golden/); rewritten models with embedded kernels still run their
function bodies on ORT CPU. Tests that export models skip without the [models] extra."""
import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tests.support import golden, zoo_models
from plus_ep.kernels.wire import plan as plan_text
from plus_ep.kernels.compile.cache import KernelCache
from plus_ep import zoo
from plus_ep.kernels.compile.stage import pack_images, unpack_images
from plus_ep.rewrite import rewrite_detailed

pytestmark = pytest.mark.zoo
MODELS_EXTRA = "zoo exports need the [models] extra (torch, transformers)"


def needs_models_extra():
    pytest.importorskip("torch", reason=MODELS_EXTRA)
    pytest.importorskip("transformers", reason=MODELS_EXTRA)


@pytest.fixture(scope="module")
def kcache(tmp_path_factory):
    return KernelCache(tmp_path_factory.mktemp("kernels"))


@pytest.mark.parametrize("family", zoo_models.FAMILIES)     # the new families: test_wild_families.py, test_gated_families.py
def test_every_subgraph_renders_and_compiles(family, kcache):
    needs_models_extra()
    for exporter in zoo.EXPORTERS:
        model = zoo.load(family, exporter, "small", layers=2)
        plain = rewrite_detailed(model)
        # sm_80 and sm_90a side by side (mma.sync and wgmma): nothing is left unfused for binding
        # (GPT-2's seq from shape tensors, Flatten dims), emitter or arch reasons
        r = rewrite_detailed(model, archs=["sm_80", "sm_90a"], cache=kcache, progress=False)
        assert r.kernels.failures == []
        assert len(r.subgraphs) == len(plain.subgraphs)
        fused = [n for n in r.model.graph.node if n.domain == "ai.plus_ep"]
        assert len(fused) == len(r.subgraphs)
        for n in fused:
            names = {a.name for a in n.attribute}
            assert {"plus_plan", "plus_images_sm_80", "plus_images_sm_90a"} <= names, n.name
            plan = next(a.s.decode() for a in n.attribute if a.name == "plus_plan")
            assert plan_text.parse(plan).archs == ["sm_80", "sm_90a"]     # a whole plan, both archs


def test_rewritten_model_with_kernels_runs_its_bodies_on_cpu(kcache):
    needs_models_extra()
    path = zoo.export("bert", "dynamo", "small", layers=2)
    r = rewrite_detailed(path, archs=["sm_80"], cache=kcache, progress=False)
    feeds = zoo.sample_inputs(path, batch=2, seq=9)
    want = ort.InferenceSession(path).run(None, feeds)
    got = ort.InferenceSession(r.model.SerializeToString()).run(None, feeds)
    for a, b in zip(want, got):
        assert np.abs(a - b).max() <= 1e-5
    onnx.checker.check_model(r.model)


def test_second_build_compiles_nothing(kcache, monkeypatch):
    needs_models_extra()
    model = zoo.load("vit", "torchscript", "small", layers=2)
    rewrite_detailed(model, archs=["sm_80"], cache=kcache, progress=False)
    monkeypatch.setenv("PLUS_EP_ASSERT_CACHED", "1")
    r = rewrite_detailed(model, archs=["sm_80"], cache=kcache, progress=False)
    assert r.kernels.compiled == 0 and r.kernels.cached > 0 and not r.kernels.failures


def test_golden_sources_from_the_export():
    """The golden sources rendered from the export itself, and the export's graph is still the one kept in
    tests/golden/ (the torch-free golden check renders from that copy)."""
    needs_models_extra()
    model = golden.export_model()
    bad = golden.differing(golden.render_cases(model))
    assert not bad, f"{bad} changed; if intended: python -m tests.support.golden --update"
    kept = golden.structure_model().graph
    assert golden.zero_weights(model).graph == kept, \
        f"the export's graph differs from {golden.STRUCTURE.name}: python -m tests.support.golden --update"


def test_image_pack_round_trip():
    from plus_ep.kernels.wire import pack as packfmt
    blobs = [b"\x7fELF" + bytes(range(7)), b"y" * 3, b"x" * 1000]
    ptx = ["// a\n.version 9.0\n", None, ".version 9.0\n" * 50]
    blob = pack_images(blobs, ptx)
    assert blob[:8] == packfmt.MAGIC == b"PLUSIMG2"
    assert unpack_images(blob) == blobs
    assert [im.ptx for im in packfmt.parse(blob)] == ptx
