"""Warehouse: ordered registry, pattern definitions, plugins from a folder and entry points."""
import inspect
import textwrap

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper as h

from plus_ep import warehouse
from plus_ep.rewrite import rewrite_detailed
from tests.support.paper_models import model

USER_PATTERN = '''
from plus_ep.warehouse import pattern

@pattern("gemm_softmax", before="gemm", family="gemm_rownorm")
def gemm_softmax(b):
    """GEMM with a softmax over N in its epilogue (PluS Fig. 6)."""
    return b.Softmax(b.MatMul(b.input("x", ["M", "K"]), b.input("w", ["K", "N"])), axis=-1)
'''


def gemm_softmax_model():
    return model([h.make_node("MatMul", ["x", "w"], ["y"]), h.make_node("Softmax", ["y"], ["z"], axis=-1)],
                 [("x", ["M", "K"]), ("w", ["K", "N"])], ["z"])


def test_builtin_order_and_size():
    names = [p.name for p in warehouse.load_warehouse(plugins=False)]
    assert names.index("attention") < names.index("gemm") < names.index("elementwise")
    assert names[-1] == "elementwise"
    for p in warehouse.load_warehouse(plugins=False):
        assert len(inspect.getsource(p.define).splitlines()) <= 20, p.name
        assert p.graph.loops(), p.name


def test_registry_rules():
    wh = warehouse.Warehouse()
    wh.add(warehouse.Pattern("a"))
    wh.add(warehouse.Pattern("b"), before="a")
    assert [p.name for p in wh] == ["b", "a"]
    with pytest.raises(ValueError, match="already"):
        wh.add(warehouse.Pattern("a"))
    with pytest.raises(ValueError, match="unknown pattern"):
        wh.without(["zzz"])
    assert [p.name for p in wh.without(["a"])] == ["b"]


def test_pattern_with_unknown_op_is_refused_with_its_name():
    p = warehouse.Pattern("bad", lambda b: b.FancyOp(b.input("x", ["M"])))
    with pytest.raises(ValueError, match="FancyOp"):
        _ = p.graph


def test_folder_plugin_adds_a_pattern(tmp_path):
    (tmp_path / "mine.py").write_text(textwrap.dedent(USER_PATTERN))
    wh = warehouse.load_warehouse(tmp_path, plugins=False)
    assert [p.name for p in wh].index("gemm_softmax") == [p.name for p in wh].index("gemm") - 1
    res = rewrite_detailed(gemm_softmax_model(), warehouse=wh)
    assert [sg.pattern.name for sg in res.subgraphs] == ["gemm_softmax"]
    # without the plugin the GEMM and the softmax stay apart
    res0 = rewrite_detailed(gemm_softmax_model(), warehouse=warehouse.load_warehouse(plugins=False))
    assert sorted(sg.pattern.name for sg in res0.subgraphs) == ["gemm", "softmax"]
    # the fused model still computes the same thing
    feeds = {"x": np.random.rand(3, 5).astype(np.float32), "w": np.random.rand(5, 4).astype(np.float32)}
    run = lambda m: ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]  # noqa: E731
    np.testing.assert_allclose(run(res.model), run(gemm_softmax_model()), atol=1e-6)


def test_env_folder_is_read(tmp_path, monkeypatch):
    (tmp_path / "mine.py").write_text(textwrap.dedent(USER_PATTERN))
    monkeypatch.setenv("PLUS_EP_WAREHOUSE", str(tmp_path))
    assert "gemm_softmax" in [p.name for p in warehouse.default_warehouse()]
    monkeypatch.delenv("PLUS_EP_WAREHOUSE")
    assert "gemm_softmax" not in [p.name for p in warehouse.default_warehouse()]


def test_broken_folder_file_warns_and_is_skipped(tmp_path, caplog):
    (tmp_path / "broken.py").write_text("raise RuntimeError('boom')\n")
    wh = warehouse.load_warehouse(tmp_path, plugins=False)
    assert "boom" in caplog.text and len(wh) == len(warehouse.load_warehouse(plugins=False))


def test_entry_point_plugin(monkeypatch):
    class FakeEP:
        name, value = "mine", "mine:register"

        def load(self):
            def register(wh):
                wh.add(warehouse.Pattern("ep_pattern", lambda b: b.Relu(b.input("x", ["M"]))))
            return register

    import importlib.metadata as md
    monkeypatch.setattr(md, "entry_points", lambda group=None: [FakeEP()] if group == "plus_ep.warehouse" else [])
    assert "ep_pattern" in [p.name for p in warehouse.load_warehouse()]


def test_check_refusal_reason_is_reported():
    p = warehouse.load_warehouse(plugins=False).get("attention")
    g = p.graph.copy()
    for _, loop in g.walk():
        if "dot" in loop.key_ops:
            loop.size = "D"
            break
    assert "not a compile-time integer" in p.check(g)


PICKY_PATTERN = USER_PATTERN + '''

def _picky_roles(view, members):
    return "the picky finder wants a bias"


@pattern("gemm_softmax_picky", before="gemm_softmax", family="gemm_rownorm", roles=_picky_roles)
def gemm_softmax_picky(b):
    """The same +Graph as gemm_softmax, ahead of it, with a role finder that refuses."""
    return b.Softmax(b.MatMul(b.input("x", ["M", "K"]), b.input("w", ["K", "N"])), axis=-1)
'''


def test_a_refused_exact_match_falls_through_to_the_next_pattern(tmp_path):
    (tmp_path / "mine.py").write_text(textwrap.dedent(PICKY_PATTERN))
    wh = warehouse.load_warehouse(tmp_path, plugins=False)
    names = [p.name for p in wh]
    assert names.index("gemm_softmax_picky") < names.index("gemm_softmax")
    res = rewrite_detailed(gemm_softmax_model(), warehouse=wh)
    assert [sg.pattern.name for sg in res.subgraphs] == ["gemm_softmax"]
    # the refusal is kept as the picky pattern's reason (plus-ep explain prints these)
    from plus_ep.graph_rewrites.identify import Identifier
    from plus_ep.graph_rewrites.graph import GraphView
    view = GraphView.build(gemm_softmax_model())
    ident = Identifier(view, wh)
    verdict = ident.evaluate(tuple(range(len(view.nodes))), 0)
    assert verdict.exact.name == "gemm_softmax"
    assert verdict.reasons["gemm_softmax_picky"] == "matched, but refused: the picky finder wants a bias"
