"""Causal attentions whose mask the graph builds (tests/support/causal_attention_cases.py) rendered with the key-tile
skip (PLUS_HAS_ATTN_CAUSAL) and run on the CPU PTX interpreter, element by element against the graph in float64
with verify's bounds: odd lengths over several query and key tiles, past keys (Skv > Sq, a bottom-right diagonal),
left padding (-inf: a batch row's first queries see no key, the NaN guard gives 0) and a key at the float's lowest,
a folded constant mask (-inf, and fp32's lowest alone), on the f16 and TF32 mma.sync bodies and the exact SIMT
body."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, numpy_helper
from onnx.reference import ReferenceEvaluator

from plus_ep.kernels.render import render
from plus_ep.kernels.target import Target
from plus_ep.rewrite import rewrite_detailed
from plus_ep.verification.bounds import compare, evaluate
from tests.support import causal_attention_cases as C
from tests.support.run_rendered import run_rendered

CASES = [("equal", "fp16", 70, 70, 64), ("bool", "fp16", 129, 129, 64), ("equal", "fp16", 70, 129, 128),
         ("bool", "exact", 70, 129, 64), ("const", "fp16", 129, 129, 64), ("lowest", "tf32", 70, 129, 64)]


@pytest.mark.parametrize("form,math,sq,skv,d", CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_causal_skip_matches_the_graph(form, math, sq, skv, d):
    B, H = 2, 2
    dtype = TensorProto.FLOAT16 if math == "fp16" else TensorProto.FLOAT
    model = C.model(form, B, H, sq, skv, d, dtype)
    r = rewrite_detailed(model, archs=None)
    (sg,) = r.subgraphs
    assert sg.roles.causal == skv - sq
    ins, outs = r.view.graph_index.boundary(sg.nodes)
    rd = render(r.view, sg, ins, outs, Target("sm_80", "exact" if math == "exact" else "tf32"), node_name="causal")
    src = rd.variants[0].source
    assert "#define PLUS_HAS_ATTN_CAUSAL 1" in src and f"return {skv - sq}LL;" in src
    feeds = C.feeds(form, B, H, sq, skv, d, dtype, seed=sq + skv, pad_keys=skv - sq + 5)
    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    # the mask the graph computes before the subgraph, as ONNX's reference evaluator gives it
    outside = [t for t in ins if t not in feeds and t not in consts]
    if outside:
        ev = ReferenceEvaluator(model)
        consts.update(zip(outside, ev.run(outside, {i.name: feeds[i.name] for i in model.graph.input})))
    npdt = np.float16 if math == "fp16" else np.float32
    (got,) = run_rendered(rd, [feeds[t] if t in feeds else consts[t] for t in ins], [np.zeros((B, H, sq, d), npdt)],
                          name=f"causal_{form}_{math}_{sq}_{skv}")
    want = evaluate(model.graph, [feeds[i.name] for i in model.graph.input], math=math).outputs[0]
    c = compare(got, want)
    assert c["ok"], c
    if form != "lowest":
        assert not np.any(got[1, :, :5]), "batch row 1's first rows see only padded keys: 0 under the NaN guard"


@pytest.mark.parametrize("form", ["upper", "lowest_pad"])
def test_unprovable_masks_run_every_key_tile(form):
    """An upper Trilu (keys below the diagonal hidden) and fp32's lowest beside a padding term: no skip, and the
    kernel matches the graph (a skip bounded by the upper Trilu's k would drop every key a row sees)."""
    B, H, sq, skv, d = 2, 1, 70, 70, 64
    dtype = TensorProto.FLOAT16 if form == "upper" else TensorProto.FLOAT
    model = C.model(form, B, H, sq, skv, d, dtype, k=-1 if form == "upper" else None)
    r = rewrite_detailed(model, archs=None)
    (sg,) = r.subgraphs
    ins, outs = r.view.graph_index.boundary(sg.nodes)
    rd = render(r.view, sg, ins, outs, Target("sm_80", "tf32"), node_name=f"unproved_{form}")
    feeds = C.feeds(form, B, H, sq, skv, d, dtype, seed=3)
    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    outside = [t for t in ins if t not in feeds and t not in consts]
    if outside:
        consts.update(zip(outside, ReferenceEvaluator(model).run(outside, {i.name: feeds[i.name]
                                                                          for i in model.graph.input})))
    npdt = np.float16 if dtype == TensorProto.FLOAT16 else np.float32
    (got,) = run_rendered(rd, [feeds[t] if t in feeds else consts[t] for t in ins], [np.zeros((B, H, sq, d), npdt)],
                          name=f"unproved_{form}")
    want = evaluate(model.graph, [feeds[i.name] for i in model.graph.input],
                    math="fp16" if form == "upper" else "tf32").outputs[0]
    c = compare(got, want)
    assert c["ok"], c
    assert sg.roles.causal is None and "PLUS_HAS_ATTN_CAUSAL" not in rd.variants[0].source
