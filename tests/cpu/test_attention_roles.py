"""The pattern -> template contract for attention: roles found at identification, refusals with a
reason `plus-ep explain` shows, every node read by the renderer, masked rows as the graph says."""
from __future__ import annotations

import textwrap

import pytest

from plus_ep import warehouse
from plus_ep.explain import explain, format_explanation
from plus_ep.kernels import render as render_mod
from plus_ep.rewrite import rewrite_detailed
from plus_ep.kernels.target import Target
from tests.support.attention_models import (DROPOUT_EVAL, DROPOUT_TRAIN, GUARD, NONE, SPELLED, WHERE_KEEP,
                                            attention_model)


def _rewrite(variant):
    return rewrite_detailed(attention_model(variant)[0])


def _explained(result):
    return format_explanation(explain(result, "attention", result.identifier.warehouse[0]), "m.onnx")


def _render_all(result):
    """Every subgraph rendered: [(subgraph, inputs, rendered)]."""
    out = []
    for sg in result.subgraphs:
        ins, outs = result.view.graph_index.boundary(sg.nodes)
        out.append((sg, ins, render_mod.render(result.view, sg, ins, outs, Target("sm_80", "exact"))))
    return out


@pytest.mark.parametrize("variant,guard", [(GUARD, True), (NONE, False), (DROPOUT_EVAL, False)])
def test_attention_roles_are_found_at_identification(variant, guard):
    r = _rewrite(variant)
    (sg,) = r.subgraphs
    assert sg.pattern.name == "attention"
    nodes = r.view.nodes
    assert (nodes[sg.roles.qk].op_type, nodes[sg.roles.softmax].op_type,
            nodes[sg.roles.pv].op_type) == ("MatMul", "Softmax", "MatMul")
    assert (sg.roles.q, sg.roles.v, sg.roles.mask) == ("q", "v", ("mask",))
    assert sg.roles.nan_guard is guard


@pytest.mark.parametrize("variant,guard", [(GUARD, True), (NONE, False)])
def test_fully_masked_rows_follow_the_graph(variant, guard):
    """Without the NaN guard the graph's softmax over all -inf is NaN, and so is the kernel's row;
    with it, 0."""
    (_, _, rd), = _render_all(_rewrite(variant))
    for v in rd.variants:
        assert f"#define PLUS_MASKED_ROW_NAN {0 if guard else 1}\n" in v.source


def test_post_softmax_where_is_refused_and_explained():
    """Softmax -> Where(keep, p, 0) -> MatMul: the template cannot apply `keep`; the match is refused
    (it used to be fused and `keep` ignored: max error 1.12 against ORT)."""
    r = _rewrite(WHERE_KEEP)
    assert "attention" not in [sg.pattern.name for sg in r.subgraphs]
    where = next(i for i, n in enumerate(r.view.nodes) if n.op_type == "Where")
    assert any(where in sg.nodes and sg.pattern.name == "softmax" for sg in r.subgraphs)
    text = _explained(r)
    assert "stopped: step" in text and "is not the NaN guard Where(IsNaN(p), 0, p)" in text
    for sg, ins, rd in _render_all(r):      # what is fused instead reads `keep`
        if where in sg.nodes:
            assert f"args.in[{ins.index('keep')}]" in rd.variants[0].source


def test_spelled_out_softmax_refusal_is_explained():
    r = _rewrite(SPELLED)
    assert "attention" not in [sg.pattern.name for sg in r.subgraphs]
    assert "the softmax is spelled out" in _explained(r)


def test_dropout_in_training_mode_is_refused():
    r = _rewrite(DROPOUT_TRAIN)
    assert "attention" not in [sg.pattern.name for sg in r.subgraphs]
    assert "training_mode input that is not a constant false" in _explained(r)


def test_dropout_in_training_mode_stays_out_when_kernels_are_requested():
    from plus_ep.graph_rewrites.identify import Identifier
    r = _rewrite(DROPOUT_TRAIN)
    ident = Identifier(r.view, warehouse.load_warehouse(plugins=False), kernels=True)
    dropout = next(i for i, n in enumerate(r.view.nodes) if n.op_type == "Dropout")
    assert not any(dropout in sg.nodes for sg in ident.run())
    assert "training_mode" in ident.refused[dropout]


@pytest.mark.parametrize("variant", [GUARD, NONE, WHERE_KEEP, DROPOUT_EVAL, SPELLED])
def test_renderers_read_every_input_of_their_subgraph(variant):
    """Until kernels run end to end here: every subgraph input is loaded by the generated source
    (or is a constant the renderer inlines), so no node of a fused subgraph is silently ignored."""
    r = _rewrite(variant)
    for sg, ins, rd in _render_all(r):
        for k, t in enumerate(ins):
            assert r.view.const(t) is not None or all(f"args.in[{k}]" in v.source for v in rd.variants), \
                f"{sg.pattern.name}: input {k} '{t}' is never read"


def test_pattern_naming_a_missing_family_is_rejected_when_the_warehouse_loads(tmp_path, caplog):
    wh = warehouse.Warehouse()
    with pytest.raises(ValueError, match="no template family 'gemm_softmax'"):
        wh.add(warehouse.Pattern("gemm_softmax", family="gemm_softmax"))
    (tmp_path / "mine.py").write_text(textwrap.dedent('''
        from plus_ep.warehouse import pattern

        @pattern("gemm_softmax", before="gemm", family="gemm_softmax")
        def gemm_softmax(b):
            return b.Softmax(b.MatMul(b.input("x", ["M", "K"]), b.input("w", ["K", "N"])), axis=-1)
    '''))
    loaded = warehouse.load_warehouse(tmp_path, plugins=False)
    assert "gemm_softmax" not in [p.name for p in loaded]
    assert "no template family 'gemm_softmax'" in caplog.text


def test_every_subgraph_of_the_demo_bert_reads_every_input():
    """The same check over every pattern the demo BERT fuses (gemm, gemm_layernorm, attention,
    layernorm, elementwise): no subgraph input is left unread by its renderer."""
    from plus_ep.demo_model import build_bert
    r = rewrite_detailed(build_bert(layers=1, hidden=64, heads=2, intermediate=128, vocab=50))
    assert {"attention", "gemm"} <= {sg.pattern.name for sg in r.subgraphs}
    for sg, ins, rd in _render_all(r):
        for k, t in enumerate(ins):
            assert r.view.const(t) is not None or all(f"args.in[{k}]" in v.source for v in rd.variants), \
                f"{sg.pattern.name}: input {k} '{t}' is never read"


@pytest.mark.parametrize("variant,reason", [
    (WHERE_KEEP, "is not the NaN guard Where(IsNaN(p), 0, p)"),
    (SPELLED, "the softmax is spelled out"),
])
def test_cli_explain_shows_the_refusal(variant, reason, tmp_path, capsys):
    import onnx

    from plus_ep import cli
    path = tmp_path / f"{variant}.onnx"
    onnx.save(attention_model(variant)[0], str(path))
    assert cli.main(["explain", str(path), "--pattern", "attention"]) == 0
    out = capsys.readouterr().out
    assert "stopped: step" in out and reason in out
