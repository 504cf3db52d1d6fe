"""The PluS paper's worked examples: Fig. 5 primitives, Fig. 6 walk-through, §4.2 partial match."""
from onnx import helper as h

from plus_ep.graph_rewrites import match
from plus_ep.graph_rewrites.primitives import pgraph_of_model
from tests.support.paper_models import axes, fig6_model, model


def tree(m, canonical=True):
    g = pgraph_of_model(m)
    return (g.canonical() if canonical else g).render(tensors=False)


def test_primitive1_merge_without_altering_properties():
    """Fig. 5(1): MatmulOp [M,N,K] + AddOp [M,N]: M and N merge, nothing changes."""
    m = model([h.make_node("MatMul", ["a", "b"], ["c"]), h.make_node("Add", ["c", "bias"], ["d"])],
              [("a", ["M", "K"]), ("b", ["K", "N"]), ("bias", ["N"])], ["d"])
    assert tree(m) == ("loop0 [M, para]\n"
                       "  loop1 [N, para, (add)]\n"
                       "    loop2 [K, non-para, (dot)]")


def test_primitive2_merge_with_parallelism_modification():
    """Fig. 5(2): AddOp [M,N] then ReduceOp over N: the N loops merge and become non-para."""
    m = model([h.make_node("MatMul", ["p", "q"], ["a"]),
               h.make_node("Add", ["a", "b"], ["c"]), h.make_node("ReduceSum", ["c", "ax"], ["d"], keepdims=1)],
              [("p", ["M", "K"]), ("q", ["K", "N"]), ("b", ["M", "N"])], ["d"], [axes("ax", [1])])
    g = tree(m)
    assert "loop1 [N, non-para, (add, reduceSum)]" in g


def test_primitive3_transition_to_new_loop():
    """Fig. 5(3): ReduceOp [M,N] then AddOp [M,N]: the reduced N loop is non-para, so Add's N axis
    becomes a new loop."""
    m = model([h.make_node("ReduceSum", ["a", "ax"], ["r"], keepdims=1),
               h.make_node("Exp", ["r"], ["e"]),                 # keeps the reduce in the subgraph
               h.make_node("Add", ["a", "e"], ["d"])],
              [("a", ["M", "N"])], ["d"], [axes("ax", [1])])
    assert tree(m) == ("loop0 [M, para, (exp)]\n"
                       "  loop1 [N, non-para, (reduceSum)]\n"
                       "  loop2 [N, para, (add)]")


def test_primitive4_collapses_batch_loops():
    """BatchMatmulOp [B, L, M, N, D] -> [B x L, M, N, D]: B and L index every input."""
    m = model([h.make_node("MatMul", ["a", "b"], ["c"])],
              [("a", ["B", "L", "M", "D"]), ("b", ["B", "L", "D", "N"])], ["c"])
    assert tree(m, canonical=False).count("para") == 5
    assert tree(m) == ("loop0 [B*L, para]\n"
                       "  loop1 [M, para]\n"
                       "    loop2 [N, para]\n"
                       "      loop3 [D, non-para, (dot)]")


def test_primitive4_keeps_loops_with_different_inputs():
    """Third condition: M is only in the first input, N only in the second: no collapse."""
    m = model([h.make_node("MatMul", ["a", "b"], ["c"])], [("a", ["M", "K"]), ("b", ["K", "N"])], ["c"])
    assert tree(m).count("loop") == 3


FIG6_STEPS = {
    1: """loop0 [M, para]
  loop1 [N, para]
    loop2 [K, non-para, (dot)]""",
    2: """loop0 [M, para]
  loop1 [N, non-para, (reduceMax)]
    loop2 [K, non-para, (dot)]""",
    3: """loop0 [M, para]
  loop1 [N, non-para, (reduceMax)]
    loop2 [K, non-para, (dot)]
  loop3 [N, para, (sub)]""",
    4: """loop0 [M, para]
  loop1 [N, non-para, (reduceMax)]
    loop2 [K, non-para, (dot)]
  loop3 [N, para, (sub, exp)]""",
    5: """loop0 [M, para]
  loop1 [N, non-para, (reduceMax)]
    loop2 [K, non-para, (dot)]
  loop3 [N, non-para, (sub, exp, reduceSum)]""",
    6: """loop0 [M, para]
  loop1 [N, non-para, (reduceMax)]
    loop2 [K, non-para, (dot)]
  loop3 [N, non-para, (sub, exp, reduceSum)]
  loop4 [N, para, (div)]""",
}


def test_fig6_walkthrough_every_step():
    for step, expected in FIG6_STEPS.items():
        assert tree(fig6_model(step)) == expected, f"after fusing op {step}"


def test_fig8_loop_bodies_inputs_and_outputs():
    """Fig. 8: loop2 (dot) reads x0,x1 and writes x2; loop4 (div) writes the subgraph output."""
    g = pgraph_of_model(fig6_model()).canonical().render()
    lines = g.splitlines()
    assert lines[0] == "loop0 [M, para] {x0,x1}:{x7}"
    assert lines[2].strip() == "loop2 [K, non-para, (dot)] {x0,x1}:{x2}"
    assert lines[4].strip().startswith("loop4 [N, para, (div)]") and lines[4].endswith(":{x7}")


def test_section42_partial_state():
    """+Graph0 (Fig. 6(d): Matmul, ReduceMax, Sub) is a partial state of +Graph1 (Fig. 6(g))."""
    g1 = pgraph_of_model(fig6_model(6)).canonical()
    g0 = pgraph_of_model(fig6_model(3)).canonical()
    assert match.exact(g1, g0) is not None
    assert match.partial(g1, g0) is None
    assert match.exact(g1, pgraph_of_model(fig6_model(6)).canonical()) is None
    for step in range(1, 6):          # every intermediate state is partial, none exact
        gi = pgraph_of_model(fig6_model(step)).canonical()
        assert match.partial(g1, gi) is None
        assert match.exact(g1, gi) is not None


def test_partial_match_criteria_refuse():
    g1 = pgraph_of_model(fig6_model(6)).canonical()
    # criterion 4: an operation the pattern lacks (reduceMax where the pattern has a para loop)
    two_reductions = model([h.make_node("MatMul", ["x0", "x1"], ["x2"]),
                            h.make_node("ReduceMax", ["x2"], ["x3"], axes=[1], keepdims=1),
                            h.make_node("Sub", ["x2", "x3"], ["x4"]),
                            h.make_node("ReduceMin", ["x4"], ["x5"], axes=[1], keepdims=1)],
                           [("x0", ["M", "K"]), ("x1", ["K", "N"])], ["x5"])
    why = match.partial(g1, pgraph_of_model(two_reductions).canonical())
    assert why and "reduceMin" in why
    # criterion 3: more nested loops than the pattern has
    extra = fig6_model(6)
    extra.graph.node.append(h.make_node("ReduceMax", ["x7"], ["x8"], axes=[1], keepdims=1))
    extra.graph.node.append(h.make_node("Sub", ["x7", "x8"], ["x9"]))
    extra.graph.output[0].name = "x9"
    why = match.partial(g1, pgraph_of_model(extra).canonical())
    assert why and "nests" in why
    # criterion 1: a parallel pattern loop cannot take a non-parallel one
    only_reduce = model([h.make_node("ReduceMax", ["a"], ["b"], axes=[0, 1], keepdims=0)],
                        [("a", ["M", "N"])], ["b"])
    why = match.partial(g1, pgraph_of_model(only_reduce).canonical())
    assert why and "non-para" in why


def test_structural_hash_ignores_names_and_sizes():
    a = pgraph_of_model(fig6_model()).canonical()
    m = fig6_model()
    for vi in m.graph.input:
        for d in vi.type.tensor_type.shape.dim:
            d.dim_param = d.dim_param.lower() + "_other"
    b = pgraph_of_model(m).canonical()
    assert a.render() != b.render()
    assert a.structural_hash() == b.structural_hash()
    assert a.structural_hash() != pgraph_of_model(fig6_model(3)).canonical().structural_hash()
