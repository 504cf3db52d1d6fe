"""Acceptance on the model zoo: kernel counts, one attention node per layer, norms fused with
their residual add, rewritten models equal to the originals on ORT CPU, checker-clean output."""
import functools

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from plus_ep.report import data_kernels
from plus_ep.rewrite import rewrite_detailed
from tests.support.zoo_models import ATTENTION, CASES, PER_BLOCK, zoo_path

pytestmark = pytest.mark.zoo


@functools.lru_cache(maxsize=2)
def rewritten(family, exporter):
    path = zoo_path(family, exporter)
    return onnx.load(path), rewrite_detailed(path)


def run_cpu(model, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


@pytest.mark.parametrize("family,exporter", CASES)
def test_kernel_budget_and_attention(family, exporter):
    _, res = rewritten(family, exporter)
    blocks = ATTENTION[family]
    after = data_kernels(res.model)
    assert after <= PER_BLOCK.get(family, 7) * blocks + 6, after
    patterns = [sg.pattern.name for sg in res.subgraphs]
    assert patterns.count("attention") == blocks
    matmuls = [i for sg in res.subgraphs if sg.pattern.name == "attention" for i in sg.nodes
               if res.view.nodes[i].op_type == "MatMul"]
    assert len(matmuls) == 2 * blocks          # QKᵀ and ·V inside every attention node


def _norm_inputs(view):
    """(norm node, its input tensor) for LayerNormalization and decomposed LN/RMSNorm
    (ReduceMean of x·x or x^2)."""
    found = []
    for i, n in enumerate(view.nodes):
        if n.op_type in ("LayerNormalization", "RMSNormalization") and view.is_data_node(i):
            found.append((i, n.input[0]))
        elif n.op_type == "ReduceMean" and view.is_data_node(i):
            p = view.producer.get(n.input[0])
            src = view.nodes[p] if p is not None else None
            if src is not None and src.op_type in ("Pow", "Mul") and \
                    (src.op_type == "Pow" or src.input[0] == src.input[1]):
                x = src.input[0]
                q = view.producer.get(x)
                if q is not None and view.nodes[q].op_type == "Cast":   # T5: x.to(float32)
                    x = view.nodes[q].input[0]
                found.append((i, x))
    return found


@pytest.mark.parametrize("family,exporter", CASES)
def test_norms_fused_with_residual_add(family, exporter):
    _, res = rewritten(family, exporter)
    view = res.view
    where = {i: k for k, sg in enumerate(res.subgraphs) for i in sg.nodes}
    norms = _norm_inputs(view)
    assert norms
    residual = 0
    for i, x in norms:
        assert i in where, f"{view.node_label(i)} is not fused"
        p = view.producer.get(x)
        if p is not None and view.nodes[p].op_type == "Add" and view.is_data_node(p):
            residual += 1
            assert where.get(p) == where[i], f"{view.node_label(i)} not fused with its residual add"
    assert residual >= len(norms) - 2


@pytest.mark.parametrize("family,exporter", CASES)
def test_rewritten_matches_original_on_cpu(family, exporter):
    from plus_ep import zoo
    original, res = rewritten(family, exporter)
    onnx.checker.check_model(res.model, full_check=True)
    for batch, seq in ((2, 7), (1, 16)):
        feeds = zoo.sample_inputs(original, batch=batch, seq=seq, seed=batch)
        want, got = run_cpu(original, feeds), run_cpu(res.model, feeds)
        for w, g in zip(want, got):
            assert w.shape == g.shape
            assert np.max(np.abs(w.astype(np.float64) - g)) <= 1e-4


@pytest.mark.parametrize("family,exporter", CASES)
def test_symbolic_dims_preserved(family, exporter):
    original, res = rewritten(family, exporter)
    dims = lambda m: [[d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]  # noqa: E731
                      for i in list(m.graph.input) + list(m.graph.output)]
    assert dims(original) == dims(res.model)
    assert any(isinstance(d, str) for shape in dims(res.model) for d in shape)
