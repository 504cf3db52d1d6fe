"""A fused attention subgraph, rendered and compiled to PTX by NVRTC, executed on the CPU PTX
interpreter and compared with onnxruntime on the original graph: a fully masked row (every key -inf)
is NaN without the graph's NaN guard and 0 with it, as ORT computes it."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from plus_ep.kernels.render import render
from plus_ep.rewrite import rewrite_detailed
from tests.emulated.ptx_harness import Device, module, plus_args
from tests.support.attention_models import GUARD, NONE, attention_model

_OPS = {"cdiv": lambda a, b: -(-a // b), "min": min, "max": max, "*": lambda a, b: a * b,
        "+": lambda a, b: a + b}


def _static(rpn: str) -> int:
    """A launch-plan expression over literals only (the model's shapes are static)."""
    stack = []
    for tok in rpn.split(","):
        if tok.lstrip("-").isdigit():
            stack.append(int(tok))
        else:
            b, a = stack.pop(), stack.pop()
            stack.append(_OPS[tok](a, b))
    (value,) = stack
    return value


@pytest.mark.parametrize("variant", [GUARD, NONE])
def test_fused_attention_masked_rows_match_ort(variant):
    model, feeds = attention_model(variant)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    r = rewrite_detailed(model)
    (sg,) = r.subgraphs
    assert sg.pattern.name == "attention"
    ins, outs = r.view.graph_index.boundary(sg.nodes)
    rd = render(r.view, sg, ins, outs, arch="sm_80", node_name=f"attention_{variant}")
    assert not rd.plan.syms
    dev = Device()
    ptrs = [dev.upload(feeds[t] if t in feeds else np.asarray(r.view.const(t))) for t in ins]
    got = np.full_like(want, 7.0)
    out = dev.upload(got)
    (route,) = rd.plan.routes
    (launch,) = route.launches
    kernel = module(rd.variants[launch.image].source, "sm_80", f"attention_{variant}").kernel(launch.entry)
    kernel.launch(grid=tuple(_static(g) for g in launch.grid), block=tuple(_static(b) for b in launch.block),
                  shared_bytes=_static(launch.smem), params=plus_args(ins=ptrs, outs=[out]), memory=dev.mem)
    got = dev.download(out, got)
    masked = np.isnan(want)
    if variant == NONE:
        assert masked.any(), "the model must have fully masked rows"
    assert np.array_equal(np.isnan(got), masked)
    np.testing.assert_allclose(got[~masked], want[~masked], rtol=1e-5, atol=1e-5)
    if variant == GUARD:
        assert not np.any(got[1])          # batch 1 is fully masked: 0 through the guard
