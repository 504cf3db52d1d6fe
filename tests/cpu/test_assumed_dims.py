"""The plans' run-time dims against ONNX Runtime's (issue 37 item 4; kernels/codegen/assumed.py): for each
model of tests/support/broadcast_models.py, rewritten without compiling, and each feed, the launcher's
binding (simulated here from the plan text: symbols from the `in` lines, then `bcast` and `equal`) either
gives every output the shape ORT CPU gives on the original graph, or refuses where ORT refuses (or where
the plan says the kernels cannot follow ONNX: a computed operand broadcast, `(refused)` feeds)."""
from __future__ import annotations

import pytest

ort = pytest.importorskip("onnxruntime")

from plus_ep.kernels.wire.plan import parse  # noqa: E402
from tests.support.broadcast_models import FEEDS, MODELS  # noqa: E402
from tests.support.emulated_runs import oracle  # noqa: E402

_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a // b,
        "%": lambda a, b: a % b, "max": max, "min": min, "cdiv": lambda a, b: -(-a // b)}


def _eval(expr: str, sym: dict) -> int:
    """A plan expression (CONTRACT.md §3, the operators these plans use) over bound symbols."""
    stack = []
    for item in expr.split(","):
        if item in _OPS:
            b, a = stack.pop(), stack.pop()
            stack.append(_OPS[item](a, b))
        elif item.startswith("s"):
            stack.append(sym[int(item[1:])])
        else:
            stack.append(int(item))
    assert len(stack) == 1, expr
    return stack[0]


def _bind(plan, inputs, feeds, values=None):
    """(output shapes, None) or (None, why): what plus_bind would say of these shapes ({tensor: shape}) and
    shape tensors' values ({tensor: [ints]})."""
    sym = {}
    for (_, dims), t in zip(plan.inputs, inputs):
        for d, tok in enumerate(dims):
            actual = feeds[t][d]
            if tok.startswith("s") and "," not in tok:
                if sym.setdefault(int(tok[1:]), actual) != actual:
                    return None, f"input '{t}' dim {d}"
            elif tok.isdigit() and int(tok) != actual:
                return None, f"input '{t}' dim {d} literal"
    for k, i, j in plan.shapev:
        v = (values or {})[inputs[i]][j]
        if sym.setdefault(k, v) != v:
            return None, f"shapev s{k} {i} {j}"
    for i, d, e in plan.bcast:
        if feeds[inputs[i]][d] not in (1, _eval(e, sym)):
            return None, f"bcast in {i} {d}"
    for a, b, what in plan.equal:
        if _eval(a, sym) != _eval(b, sym):
            return None, f"equal ({what})"
    return [tuple(_eval(e, sym) for e in dims) for _, dims in plan.outputs], None


@pytest.fixture(scope="module")
def plans():
    import plus_ep
    out = {}
    for name, make in MODELS.items():
        r = plus_ep.rewrite_detailed(make(), archs=["sm_80"], compile_kernels=False)
        (node,) = [n for n in r.model.graph.node if n.domain == "ai.plus_ep"]
        out[name] = (node, parse(next(a.s.decode() for a in node.attribute if a.name == "plus_plan")))
    return out


@pytest.mark.parametrize("name", list(MODELS))
def test_bound_shapes_are_ort_shapes(plans, name):
    node, plan = plans[name]
    original = MODELS[name]()
    graph_outputs = [o.name for o in original.graph.output]
    inits = {t.name: tuple(t.dims) for t in original.graph.initializer}
    for label, feeds in FEEDS[name]:
        want, _ = oracle(original, feeds)
        got, why = _bind(plan, list(node.input), {**inits, **{k: v.shape for k, v in feeds.items()}})
        if want is None or label.endswith("(refused)"):
            assert got is None, (label, got)
            continue
        assert got is not None, (label, why)
        shapes = dict(zip(node.output, got))
        assert [shapes[o] for o in graph_outputs] == [w.shape for w in want], (label, got, [w.shape for w in want])


def test_merged_concat_becomes_its_parts():
    # Concat(p, q) + z: the kernels index the sum by n + m (not z's t), z broadcasts against it
    import plus_ep
    r = plus_ep.rewrite_detailed(MODELS["concat_add"](), archs=["sm_80"], compile_kernels=False)
    (node,) = [n for n in r.model.graph.node if n.domain == "ai.plus_ep"]
    plan = parse(next(a.s.decode() for a in node.attribute if a.name == "plus_plan"))
    names = dict(enumerate(plan.syms))
    n, m = (next(k for k, s in names.items() if s == x) for x in ("n", "m"))
    assert _eval(plan.outputs[0][1][1], {n: 3, m: 5, **{k: 1 for k in names if k not in (n, m)}}) == 8
    assert [(i, d) for i, d, _ in plan.bcast] == [(2, 0), (2, 1)] and not plan.equal


def test_shape_tensor_elements_are_checked():
    """GPT-2's Reshape(X2 @ W + B, Concat(Shape(mask), [96])): every element of the shape tensor the plan reads
    is tied to the rows of X2 (element 0 = batch_seq / seq), so a mask whose batch disagrees with X2 is refused
    as ORT's Reshape refuses it, not run into an output of the kernels' own dims."""
    import numpy as np
    import plus_ep
    from tests.support.shapev_models import gpt2_like
    original = gpt2_like()
    r = plus_ep.rewrite_detailed(original, archs=["sm_80"], compile_kernels=False)
    (node,) = [n for n in r.model.graph.node if n.domain == "ai.plus_ep"]
    plan = parse(next(a.s.decode() for a in node.attribute if a.name == "plus_plan"))
    inits = {t.name: tuple(t.dims) for t in original.graph.initializer}
    for rows, mask in ((25, (5, 1)), (6, (3, 2)), (6, (1, 6)), (12, (2, 3))):
        feeds = {"X2": np.ones((rows, 32), np.float32), "mask": np.ones(mask, np.int64)}
        want, _ = oracle(original, feeds)
        shapes = {**inits, "X2": (rows, 32), node.input[0]: (3,)}
        got, why = _bind(plan, list(node.input), shapes, {node.input[0]: [*mask, 96]})
        if want is not None:
            assert got == [want[0].shape], (rows, mask, got, why)
        else:        # refused by an `equal` record here, or by the `exact` division the simulation skips
            assert got is None or rows % mask[1], (rows, mask, got)
