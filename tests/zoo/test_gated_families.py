"""Zoo families of issue 23 items 4, 5 and 7 on both exporters, tiny widths, realistic random weights
(tests/support/gated_zoo.py): Llama and Qwen2 (GQA, RoPE, SwiGLU with separate gate/up projections), Phi-3 (one
combined QKV projection read by the attention at its column offsets, one combined gate/up projection split into
halves), DeBERTa-v2 (disentangled attention). Every export is rendered for sm_80 and sm_90a with nothing left
unfused and within its data-kernel budget, each layer's projections and MLP in the expected kernels; one export
per family runs its kernels on the CPU PTX interpreter through the launcher (plus_ep.verify, padded batch of 2
at an odd length), exporters and archs alternating (bench/runs/gated_families.py runs the whole matrix at the zoo's
small size)."""
from __future__ import annotations

from collections import Counter

import pytest

pytestmark = pytest.mark.zoo
pytest.importorskip("torch")
pytest.importorskip("transformers")

from plus_ep.kernels.render import render  # noqa: E402
from plus_ep.kernels.target import Target  # noqa: E402
from plus_ep.report import data_kernels  # noqa: E402
from plus_ep.rewrite import rewrite_detailed  # noqa: E402
from tests.support.gated_zoo import BUDGET, FAMILIES, LAYERS, tiny_path  # noqa: E402

CASES = [(f, e) for f in FAMILIES for e in ("torchscript", "dynamo")]
VERIFY = [("llama", "torchscript", "sm_90a"), ("qwen2", "dynamo", "sm_80"), ("phi3", "torchscript", "sm_80"),
          ("deberta_v2", "dynamo", "sm_90a")]
# fused subgraphs per layer by pattern (Phi-3's gate/up: the Slice or the Split form of the combined projection)
PER_LAYER = {"llama": {"gemm_group": 1, "attention": 1, "gemm_gated": 1},
             "qwen2": {"gemm_group": 1, "attention": 1, "gemm_gated": 1},
             "phi3": {"attention": 1}, "deberta_v2": {"gemm_group": 2, "attention": 1}}


@pytest.mark.parametrize("family,exporter", CASES, ids=[f"{f}-{e}" for f, e in CASES])
def test_family_fuses_within_budget(family, exporter):
    r = rewrite_detailed(tiny_path(family, exporter))
    per_layer, extra = BUDGET[family]
    assert data_kernels(r.model) <= per_layer * LAYERS + extra, data_kernels(r.model)
    patterns = Counter(sg.pattern.name for sg in r.subgraphs)
    for name, n in PER_LAYER[family].items():
        assert patterns[name] == n * LAYERS, patterns
    if family == "phi3":
        assert patterns["gemm_gated_slice"] + patterns["gemm_gated_split"] == LAYERS, patterns
    failures = []          # every subgraph renders for both archs (what a build compiles; no NVRTC here)
    for k, sg in enumerate(r.subgraphs):
        ins, outs = r.view.graph_index.boundary(sg.nodes)
        for arch in ("sm_80", "sm_90a"):
            try:
                render(r.view, sg, ins, outs, Target(arch, "tf32"), node_name=f"{sg.pattern.name}/{k}")
            except ValueError as exc:
                failures.append(str(exc))
    assert not failures, failures


@pytest.mark.parametrize("family,exporter,arch", VERIFY, ids=[f"{f}-{e}-{a}" for f, e, a in VERIFY])
def test_family_kernels_verify(family, exporter, arch, tmp_path):
    from plus_ep.kernels.compile.cache import KernelCache
    from plus_ep.verification.check import verify
    r = rewrite_detailed(tiny_path(family, exporter), archs=[arch], cache=KernelCache(tmp_path), progress=False)
    assert r.kernels.failures == []
    rep = verify(r.model, batch=2, seq=7, progress=False)     # the zoo's feeds: last row padded
    s = rep["summary"]
    assert s["executed"] == len(r.subgraphs) and s["findings"] == 0, s
    assert rep["ok"], [(o["name"], o["rel"]) for o in rep["outputs"] if not o["ok"]]
