"""Swin's window partition and its reverse folded into the neighbouring kernels' stores (issue 23): the
LayerNorm row kernel stores its rows already padded (pads 0), rolled by -shift and partitioned into windows
(kernels/codegen/forward.py follows Pad, the roll's Slice/Concat pairs, Reshape and Transpose), and the
projection's GEMM epilogue stores its result un-partitioned and rolled back. No copy kernel is left.
A Pad with real padding is pulled into an element-wise kernel (the constant outside the input). Kernels
executed on the CPU PTX interpreter through the launcher, sm_80 and sm_90a."""
import numpy as np

from plus_ep.graph_rewrites.lowering import roll_groups
from plus_ep.graph_rewrites.graph import GraphView
from plus_ep.report import data_kernels
from plus_ep.rewrite import rewrite_detailed
from plus_ep.verification.check import verify
from tests.support.window_models import padded_elementwise, window_block


def test_roll_groups_are_found():
    v = GraphView.build(window_block())
    groups = roll_groups(v)
    assert len(groups) == 4 and all(len(parts) == 2 for parts in groups.values())


def test_window_partition_and_reverse_fold_into_the_neighbours():
    m = window_block()
    r = rewrite_detailed(m, archs=["sm_80", "sm_90a"], fp32_math="exact", progress=False)
    assert r.kernels.failures == []
    assert sorted(sg.pattern.name for sg in r.subgraphs) == ["gemm", "layernorm", "layernorm"]
    assert data_kernels(r.model) == 3          # LN + partition, GEMM + reverse, residual + LN: no copy kernel
    rng = np.random.default_rng(3)
    x = (1.5 * rng.standard_normal((2, 36, 16)) + 0.2).astype(np.float32)
    rep = verify(r.model, inputs={"X": x}, progress=False)
    assert rep["summary"]["executed"] == 6 and rep["summary"]["findings"] == 0
    assert rep["ok"], [(o["name"], o["arch"], o["rel"]) for o in rep["outputs"]]


def test_padding_is_pulled_into_an_elementwise_kernel():
    m = padded_elementwise()
    r = rewrite_detailed(m, archs=["sm_80", "sm_90a"], progress=False)
    assert r.kernels.failures == [] and [sg.pattern.name for sg in r.subgraphs] == ["elementwise"]
    rng = np.random.default_rng(4)
    feeds = {"X": rng.standard_normal((2, 5, 6)).astype(np.float32),
             "Yin": rng.standard_normal((2, 8, 9)).astype(np.float32)}
    rep = verify(r.model, inputs=feeds, progress=False)
    assert rep["ok"] and rep["summary"]["findings"] == 0, rep["outputs"]
