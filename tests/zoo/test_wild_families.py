"""Zoo families of issue 23 on both exporters: Swin (window attention: windows partitioned and rolled by
Reshape/Transpose/Slice/Concat, relative position bias, shifted-window mask), Whisper's encoder (Conv
front-end) and CLIP's text tower (causal + padding mask), tiny widths (tests/support/wild_models.py). Each
export is rewritten with kernels for sm_80 and sm_90a and stays within its data-kernel budget with nothing
left unfused; one export per family runs its kernels on the CPU PTX interpreter through the launcher
(plus_ep.verify, padded batch of 2 at an odd length). ResNet-18 (placement): PlusEP cuts no Relu or
Add + Relu out of a Conv chain ONNX Runtime fuses."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.zoo
pytest.importorskip("torch")
pytest.importorskip("transformers")

from plus_ep.report import data_kernels  # noqa: E402
from plus_ep.rewrite import rewrite_detailed  # noqa: E402
from tests.support.wild_models import BUDGET, TINY, blocks, tiny_path  # noqa: E402

FAMILY_CASES = [(f, e) for f in TINY for e in ("torchscript", "dynamo")]
# kernels run on the interpreter for one export per family, the exporters and archs alternating (the whole
# matrix, both archs and exporters at the zoo's small size, is bench/runs/wild_families.py's acceptance run)
VERIFY_CASES = [("swin", "dynamo", "sm_90a"), ("whisper", "torchscript", "sm_80"), ("clip", "dynamo", "sm_80")]


@pytest.fixture(scope="module")
def kcache(tmp_path_factory):
    from plus_ep.kernels.compile.cache import KernelCache
    return KernelCache(tmp_path_factory.mktemp("kernels"))


@pytest.mark.parametrize("family,exporter", FAMILY_CASES, ids=[f"{f}-{e}" for f, e in FAMILY_CASES])
def test_family_fuses_within_budget(family, exporter):
    """Kernels rendered for sm_80 and sm_90a (no NVRTC: what `plus-ep inspect` checks): nothing left unfused."""
    r = rewrite_detailed(tiny_path(family, exporter), archs=["sm_80", "sm_90a"], compile_kernels=False, warn=False)
    assert r.kernels.failures == []
    per_block, extra = BUDGET[family]
    n = blocks(family, TINY[family][0])
    assert data_kernels(r.model) <= per_block * n + extra, data_kernels(r.model)
    attention = sum(sg.pattern.name == "attention" for sg in r.subgraphs)
    assert attention == n      # Swin: QK^T + relative position bias (+ shifted-window mask) + softmax + PV


@pytest.mark.parametrize("family,exporter,arch", VERIFY_CASES, ids=[f"{f}-{e}-{a}" for f, e, a in VERIFY_CASES])
def test_family_kernels_verify(family, exporter, arch, kcache):
    from plus_ep.verification.check import verify
    r = rewrite_detailed(tiny_path(family, exporter), archs=[arch], cache=kcache, progress=False)
    assert r.kernels.failures == []
    rep = verify(r.model, batch=2, seq=7, progress=False)     # the zoo's feeds: last row padded
    s = rep["summary"]
    assert s["executed"] == len(r.subgraphs) and s["findings"] == 0, s
    assert rep["ok"], [(o["name"], o["rel"]) for o in rep["outputs"] if not o["ok"]]


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_resnet_conv_tails_stay_with_onnxruntime(exporter):
    """ResNet-18's structure at a quarter of its widths: every Relu and Add + Relu after a Conv is left to
    ONNX Runtime (its FusedConv), with the rule's reason; the rewrite then adds no kernel to ORT's graph
    (ORT_ENABLE_ALL on the CPU EP here: the CUDA EP's fusions cannot be computed without a GPU)."""
    import onnx
    from bench.harness.ort_offline import ort_enable_all
    from plus_ep import zoo
    path = zoo.export("resnet", exporter, "small", layers=2)
    r = rewrite_detailed(path)
    placed = r.identifier.placed
    assert r.subgraphs == [] and len(placed) == 17          # 17 Relu (8 after an Add) of 20 Convs
    assert all("FusedConv" in why and why.startswith("left to ONNX Runtime: Conv + ") for _, why in placed.values())
    assert sum(len(nodes) for nodes, _ in placed.values()) == 25
    ort_original, _ = ort_enable_all(path)
    onnx.save(r.model, path.with_suffix(".plus.tmp.onnx"))
    try:
        ort_rewritten, _ = ort_enable_all(path.with_suffix(".plus.tmp.onnx"))
    finally:
        path.with_suffix(".plus.tmp.onnx").unlink()
    assert data_kernels(ort_rewritten) <= data_kernels(ort_original)
