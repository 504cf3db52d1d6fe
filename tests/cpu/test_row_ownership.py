"""The row kernel's row-ownership check (kernels/codegen/row_check.py, issue 23): an output element whose value
needs the statistics of another row than the one its thread block owns is refused with a reason instead
of being computed with the wrong row's mean/rstd. Render-level, no kernels run."""
import pytest

from plus_ep.graph_rewrites.graph import GraphView
from plus_ep.graph_rewrites.partition import Subgraph
from plus_ep.kernels.codegen import row as row_mod
from plus_ep.kernels.codegen.pull import RenderError
from plus_ep.kernels.render import clear_render_cache, render
from plus_ep.kernels.target import Target
from plus_ep.rewrite import rewrite_detailed
from plus_ep.warehouse import default_warehouse
from tests.support import row_layout_models as M


def _row_subgraph(model, pattern):
    """Every node of `model` as one subgraph of warehouse pattern `pattern` (what identification does
    not build by itself, e.g. a Mul of two layouts of the rows)."""
    view = GraphView.build(model)
    sg = Subgraph(nodes=tuple(range(len(view.nodes))), pattern=default_warehouse().get(pattern), pgraph=None, seed=0)
    ins, outs = view.graph_index.boundary(sg.nodes)
    return view, sg, ins, outs


def test_transposed_product_of_the_rows_is_refused():
    """Z = Y * Transpose(Y) over square rows: element (i, j) needs rows i and j."""
    view, sg, ins, outs = _row_subgraph(M.square_mixed("transposed_product"), "layernorm")
    with pytest.raises(RenderError, match=r"needs 'Y' of another row.*not fused"):
        render(view, sg, ins, outs, Target("sm_80"), node_name="rows")


def test_per_row_mean_broadcast_along_the_columns_is_refused():
    """X - ReduceMean(X, keepdims=0) over square X: numpy broadcasting subtracts mean[j] from column j."""
    view, sg, ins, outs = _row_subgraph(M.square_mixed("mean"), "row_reduction")
    with pytest.raises(RenderError, match=r"'mu' of another row"):
        render(view, sg, ins, outs, Target("sm_80"), node_name="rows")


def test_the_check_catches_the_old_store_order(monkeypatch):
    """With the old store order (each output at its own element (row, j)), the check refuses the transposed
    LayerNorm output that the kernel used to get wrong; with the fix it renders."""
    model = M.norm_transposed("ln")
    res = rewrite_detailed(model, archs=None)
    sg = next(s for s in res.subgraphs if s.pattern.family.name in ("row_reduce", "reduce"))
    ins, outs = res.view.graph_index.boundary(sg.nodes)
    assert set(outs) == {"Y", "YT"}
    render(res.view, sg, ins, outs, Target("sm_80"), node_name="rows")
    monkeypatch.setattr(row_mod.RowProgram, "store_index", lambda self, t: (self.index_of(t), []))
    clear_render_cache()       # renders are kept by the subgraph's canonical form: render it again, patched
    with pytest.raises(RenderError, match=r"output 'YT' needs 'Y' of another row"):
        render(res.view, sg, ins, outs, Target("sm_80"), node_name="rows")
