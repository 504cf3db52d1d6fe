"""kernels/wire/plan.py is the one Python writer and reader of the launch-plan text (CONTRACT.md §3)."""
from __future__ import annotations

import pathlib
import re

import pytest

from plus_ep.kernels.wire import plan as P
from tests.support.imports import PACKAGE_DIRS, ROOT

GOLDEN = sorted((ROOT / "tests" / "golden").glob("*.plan"))


def _plan() -> P.Plan:
    p = P.Plan(node="plus_ep/gemm/3", inputs=[(1, ["s0", "s1", "64"]), (1, ["64", "128"])],
               outputs=[(1, ["s0", "s1", "128"])], syms=["batch", "seq"], scratch=["s0,4,*"],
               archs=["sm_80", "sm_90a"])
    r0 = P.Route("s0,s1,*,8192,<=", [P.Launch(0, "plus_gemm", ("128,64,cdiv", "1", "1"), ("128", "1", "1"), "13312")])
    r1 = P.Route("1", [P.Launch(1, "plus_gemm", ("1", "2", "1"), ("256", "1", "1"), "0"),
                       P.Launch(1, "plus_pointwise0", ("s0,255,+,256,/", "1", "1"), ("256", "1", "1"), "0")])
    p.routes = [r0, r1]
    return p


def test_written_plans_read_back():
    p = _plan()
    text = p.text()
    q = P.parse(text)
    assert q.text() == text
    assert (q.node, q.syms, q.archs, q.inputs, q.outputs, q.scratch) == \
        (p.node, p.syms, p.archs, p.inputs, p.outputs, p.scratch)
    assert [(r.cond, [(ln.image, ln.entry, tuple(ln.grid), tuple(ln.block), ln.smem) for ln in r.launches])
            for r in q.routes] == \
        [(r.cond, [(ln.image, ln.entry, tuple(ln.grid), tuple(ln.block), ln.smem) for ln in r.launches])
         for r in p.routes]
    assert q.vals == ["s0", "s1"] and P.node_of(text) == "plus_ep/gemm/3"


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.name)
def test_golden_plans_read_back(path):
    text = path.read_text()
    plan = P.parse(text)
    assert plan.text() == text and plan.node == path.stem and plan.routes


def test_shapev_records_round_trip():
    p = P.Plan(node="n", inputs=[(7, ["2"]), (1, ["*", "64"])], outputs=[(1, ["s0", "64"])], syms=["batch"],
               shapev=[(0, 0, 0)], routes=[P.Route("1", [P.Launch(0, "k", ("s0", "1", "1"), ("64", "1", "1"), "0")])])
    text = p.text()
    assert "in 1 1 2 * 64\nshapev s0 0 0\nout 0 " in text   # before the `out` lines that read it (plan.c)
    assert "\nval 0 s0\n" in text        # the symbol a shape tensor binds is a bound symbol
    assert P.parse(text).shapev == [(0, 0, 0)]
    p.shapev_zero = [(0, 0, "s1 infer")]         # what a 0 there binds (a Reshape copies its input's dim)
    assert "\nshapev s0 0 0 s1 infer\n" in p.text() and P.parse(p.text()).shapev_zero == [(0, 0, "s1 infer")]
    with pytest.raises(P.PlanSyntaxError, match="shapev <sK> <i> <j> \\[<zero> \\[infer\\]\\]"):
        P.parse(text.replace("shapev s0 0 0\n", "shapev s0 0 0 s1 other\n"))


def test_broadcast_and_equal_records_round_trip():
    p = P.Plan(node="n", inputs=[(1, ["s0", "s1"]), (1, ["s2", "s3"])], outputs=[(1, ["s0", "s1,s3,max"])],
               syms=["b", "n", "b_1", "t_1"], extents=[("in", 0, "s0,s1,*"), ("in", 1, "s2,s3,*")],
               bcast=[(1, 1, "s1,s3,max")], equal=[("s0", "s2", "Add node 'add' dim 0")],
               routes=[P.Route("1", [P.Launch(0, "k", ("1", "1", "1"), ("64", "1", "1"), "0")])])
    text = p.text()
    assert "\nbcast in 1 1 s1,s3,max\nequal s0 s2 Add node 'add' dim 0\nval 0 s0\n" in text
    q = P.parse(text)
    assert (q.bcast, q.equal) == (p.bcast, p.equal) and q.text() == text


@pytest.mark.parametrize("text, where, why", [
    ("", 0, "must end with one newline"),
    ("node x\nend\n", 1, "first line must be `plusplan 1`"),
    ("plusplan 1\nnode x\n", 2, "last line must be `end`"),
    ("plusplan 1\nnode x\nin 1 1 0\nend\n", 3, "index 1 out of order (expected 0)"),
    ("plusplan 1\nnode x\nin 0 1 2 s0\nend\n", 3, "rank 2 but 1 dims"),
    ("plusplan 1\nnode x\nsymbol 0 n\nend\n", 3, "unknown record `symbol`"),
    ("plusplan 1\nnode x\nkernel 0 0 k 1 1 1 1 1 1 0\nend\n", 3, "route 0 is not declared above"),
    ("plusplan 1\nnode x\nin x 1 0\nend\n", 3, "not a number"),
    ("plusplan 1\nnode x\nroute 0 1\nin 0 1 0\nend\n", 0, "out of the writer's order"),
])
def test_what_is_not_a_plan_is_named(text, where, why):
    with pytest.raises(P.PlanSyntaxError, match=re.escape(why)) as info:
        P.parse(text)
    assert info.value.line == where


def test_problem_reads_through_the_same_reader():
    good = _plan().text()
    assert P.problem(good) is None
    assert P.problem(good.replace("in 0 1 3 s0 s1 64", "in 0 1 3 s0 s1 -64")) == \
        "plan line 6 `in 0 1 3 s0 s1 -64`: negative dim -64"
    with pytest.raises(P.PlanSyntaxError):
        P.problem("in 0 1 1 -5\n")          # not a plan at all: an error, not "fine"


def test_no_other_python_reads_plan_text():
    """Reading the plan's records (`startswith("node ")`, splitting plan lines) happens in kernels/wire/plan.py
    only; tests and the bench go through parse()."""
    records = "(?:node|sym|in|out|val|route|kernel|archs|scratch|shapev)"
    reader = re.compile(rf"""startswith\(\s*\(?\s*["']{records} ["']|\bin\s+\(\s*["']{records}["']\s*,\s*["']{records}["']""")
    folders = [*PACKAGE_DIRS.values(), ROOT / "tests", ROOT / "bench"]
    offenders = [str(f.relative_to(ROOT)) for d in folders for f in pathlib.Path(d).rglob("*.py")
                 if f.name not in ("plan.py", "test_plan_text.py") and reader.search(f.read_text())]
    assert offenders == []


def test_merge_across_archs():
    """Two arch groups: the routes of each behind its `arch` record, scratch the larger of the two
    (0 where a group has none), and the merged text reads back."""
    a, b = _plan(), _plan()
    b.scratch = ["s0,8,*", "256"]
    b.routes = b.routes[1:]
    m = P.merge([(("sm_80",), a), (("sm_90a",), b)], ["sm_80", "sm_90a"])
    assert m.scratch == ["s0,4,*,s0,8,*,max", "0,256,max"]
    assert [r.archs for r in m.routes] == [("sm_80",), ("sm_80",), ("sm_90a",)]
    assert P.parse(m.text()).text() == m.text()
    assert "arch sm_80\n" in m.text() and "arch sm_90a\n" in m.text()
    one = P.merge([(("sm_80", "sm_90a"), a)], ["sm_80", "sm_90a"])
    assert one.text() == a.text()                                   # one group: no `arch` records
    b.syms = ["batch"]
    with pytest.raises(P.RenderError, match="disagree"):
        P.merge([(("sm_80",), a), (("sm_90a",), b)], ["sm_80", "sm_90a"])
