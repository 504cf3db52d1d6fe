"""Row and point-wise kernels that spill fall back instead of losing their subgraph (issue 16 item 4).

Real-size t5/torchscript kept 2 RMSNorm subgraphs unfused (bench/results/2026-11-23-kernel-fusion-real.json):
the side kernel storing the embedding Gather (and its Cast) spilled 16 bytes on sm_80 under
`__launch_bounds__(256)` (ptxas capped it at 32 registers). The same subgraph in miniature here, compiled
with the real NVRTC (about a second): the spilling kernel is compiled again with one block per SM
(kernels/compile/jobs.py, RELAXED_BOUNDS) and the node is fused."""
from __future__ import annotations

from onnx import numpy_helper

import plus_ep
from plus_ep.kernels.compile import jobs as kcompile
from plus_ep.kernels.compile import nvrtc
from plus_ep.kernels.wire.pack import parse as read_pack
from tests.support.t5_embedding_models import t5_embedding_rmsnorm

def _pack(model, arch):
    node = next(n for n in model.graph.node if n.domain == "ai.plus_ep")
    attr = next(a for a in node.attribute if a.name == f"plus_images_{arch}")
    return read_pack(numpy_helper.to_array(attr.t).tobytes())


def test_spilling_side_kernel_is_compiled_again_with_one_block_per_sm():
    r = plus_ep.rewrite_detailed(t5_embedding_rmsnorm(), archs=["sm_80"], fp32_math="exact")
    assert not r.kernels.failures, r.kernels.failures
    assert [n.op_type for n in r.model.graph.node] == ["Fused"]
    source = r.kernels.rendered[0].variants[0].source
    assert {"plus_row", "plus_pointwise0"} <= kcompile.bounded_entries(source)
    # the reproducer: under the default bounds this side kernel spills on sm_80 (NVRTC 13.0)
    plain = nvrtc.compile_cubin(source, "sm_80")
    assert kcompile.spilling_entries(plain) == {"plus_pointwise0"}, plain.resources
    # the packed image is the relaxed compile: its PTX asks for one block per SM, and it does not spill
    (image,) = _pack(r.model, "sm_80")
    assert ".minnctapersm 1" in image.ptx
    relaxed = nvrtc.compile_cubin(source, "sm_80", options=kcompile.RELAXED_BOUNDS)
    assert not kcompile.spilling_entries(relaxed) and image.cubin == relaxed.cubin


def test_a_fallback_that_still_spills_fails_and_says_so(monkeypatch):
    """When the relaxed compile spills too (here: a 'fallback' of 8 blocks per SM, the same 32-register
    cap), the job fails with the spill and names the fallback it tried."""
    source = plus_ep.rewrite_detailed(t5_embedding_rmsnorm(), archs=["sm_80"], fp32_math="exact"
                                      ).kernels.rendered[0].variants[0].source
    monkeypatch.setattr(kcompile, "RELAXED_BOUNDS", ("-DPLUS_BOUNDS_MIN_BLOCKS=8",))
    (res,) = kcompile.compile_all([kcompile.Job("capped", source, "sm_80")], cache=False)
    assert isinstance(res, kcompile.ResourceError), res
    assert "plus_pointwise0: registers spill" in str(res) and "PLUS_BOUNDS_MIN_BLOCKS=8" in str(res), str(res)
