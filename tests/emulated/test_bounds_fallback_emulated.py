"""The spill fallback's image runs: T5's embedding + RMSNorm in miniature, whose sm_80 side kernel is the
one-block-per-SM compile (kernels/compile/jobs.py RELAXED_BOUNDS), verified on the CPU PTX interpreter
through the launcher against its original subgraph on onnxruntime."""
from __future__ import annotations

import numpy as np
from onnx import numpy_helper

import plus_ep
from plus_ep.kernels.wire.pack import parse as read_pack
from tests.support.t5_embedding_models import t5_embedding_rmsnorm


def test_relaxed_side_kernel_runs_on_the_interpreter():
    r = plus_ep.rewrite_detailed(t5_embedding_rmsnorm(), archs=["sm_80"], fp32_math="exact")
    assert not r.kernels.failures, r.kernels.failures
    node = next(n for n in r.model.graph.node if n.domain == "ai.plus_ep")
    pack = next(a for a in node.attribute if a.name == "plus_images_sm_80")
    (image,) = read_pack(numpy_helper.to_array(pack.t).tobytes())
    assert ".minnctapersm 1" in image.ptx                # the relaxed compile is what the launcher loads
    ids = np.array([[3, 0, 49, -1, 7]], np.int64)       # -1: Gather's negative index
    rep = plus_ep.verify(r.model, archs=["sm_80"], batch=1, seq=5, inputs={"ids": ids})
    text = plus_ep.verify_text(rep)
    assert rep["ok"], text
    (node,) = rep["nodes"]
    assert node["executed"] and node["n_findings"] == 0, text
    assert len(rep["outputs"]) == 3, text
