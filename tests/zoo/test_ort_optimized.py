"""Models ORT's transformers optimizer already optimized (plus_ep/zoo/ortopt.py): a random-weight BERT
export at Optimum's levels O1-O4 fuses into as many data kernels as the raw export (5 per layer + 1;
from O2 on one more, the mask index), the rewritten model computes what the ORT-optimized one computes
with ORT's own contrib kernels, and every fused subgraph runs on the +Graph interpreter. Kernels: tests/emulated/test_contrib_kernels.py."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import pytest

from plus_ep.report import report
from plus_ep.rewrite import rewrite_detailed
from tests.support import subgraph_check as sc
from tests.support.contrib_cases import rel_err, run_ort

pytest.importorskip("torch")
ortopt = pytest.importorskip("plus_ep.zoo.ortopt")

LAYERS = 2


@pytest.fixture(scope="module")
def raw_kernels():
    return report(rewrite_detailed(str(ortopt.bert_export(layers=LAYERS))))["data_kernels_after"]


def _feeds(batch=3, seq=7, lengths=(7, 4, 6), seed=0):
    r = np.random.default_rng(seed)
    mask = (np.arange(seq)[None, :] < np.asarray(lengths)[:, None]).astype(np.int64)   # right padding
    return {"input_ids": r.integers(0, 1000, (batch, seq)).astype(np.int64), "attention_mask": mask,
            "token_type_ids": r.integers(0, 2, (batch, seq)).astype(np.int64)}


@pytest.mark.parametrize("level", ["O1", "O2", "O3", "O4"])
def test_optimized_model_fuses_like_the_raw_export(level, raw_kernels):
    path = ortopt.bert_optimized(level, layers=LAYERS)
    r = rewrite_detailed(str(path))
    rep = report(r)
    # the raw export: 5 per layer + the embedding; its mask arithmetic folds into the attention kernels.
    # From O2 on, ORT's Attention takes a mask index (the mask's ReduceSum, kept by the contrib expansion):
    # one row reduction more, shared by all layers.
    assert raw_kernels == 5 * LAYERS + 1
    assert rep["data_kernels_after"] == raw_kernels + (level != "O1"), rep["patterns"]
    assert rep["patterns"].get("row_reduction", 0) == (level != "O1"), rep["patterns"]
    assert rep["patterns"]["attention"] == rep["patterns"]["gemm_group"] == LAYERS
    assert rep["patterns"]["gemm_layernorm"] == 2 * LAYERS
    if level != "O1":
        ops = {k: v for k, v in rep["ops_before"].items() if k.startswith("com.microsoft")}
        assert ops["com.microsoft::Attention"] == LAYERS and ops["com.microsoft::SkipLayerNormalization"] == 2 * LAYERS
        assert all(c["fused"] == c["expanded"] for c in rep["contrib_ops"].values()), rep["contrib_ops"]
        assert not any(n.domain == "com.microsoft" for n in r.model.graph.node)      # nothing left to ORT
    feeds = _feeds()
    want = run_ort(str(path), feeds)["last_hidden_state"]                              # ORT's contrib kernels
    got = run_ort(r.model, feeds)["last_hidden_state"]                                 # function bodies inlined
    tol = 2e-2 if level == "O4" else 1e-4
    assert rel_err(got, want) < tol
    view = r.view
    names = sorted({t for ins, outs in sc.boundaries(r) for t in ins + outs if t not in view.initializers})
    ref = run_ort(sc.with_outputs(view.model, names), feeds)
    checks = sc.check_subgraphs(r, {**feeds, **ref}, rtol=2e-2 if level == "O4" else 1e-3, atol=1e-3)
    bad = [c for c in checks if c.status != "passed"]
    assert not bad, [(c.pattern, c.reason, c.detail[:200]) for c in bad]


def test_o3_model_matches_its_torch_source():
    """The optimizer's output (and hence the rewritten model) still computes the torch model: FastGelu's
    tanh approximation is the only change, well below 1e-2 here."""
    torch = pytest.importorskip("torch")
    path = ortopt.bert_optimized("O3", layers=LAYERS)
    raw = ortopt.bert_export(layers=LAYERS)
    feeds = _feeds()
    a, b = run_ort(str(path), feeds)["last_hidden_state"], run_ort(str(raw), feeds)["last_hidden_state"]
    assert rel_err(a, b) < 1e-2
    del torch


def test_genai_form_matches_the_real_builder(tmp_path):
    """plus_ep.zoo.ortopt.genai_llama writes the graph onnxruntime-genai's model builder writes: the same
    graph inputs/outputs, op sequence and contrib attributes (weights differ: both random)."""
    pytest.importorskip("onnxruntime_genai.models.builder")
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    cfg = tf.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                         num_key_value_heads=2, num_hidden_layers=2, max_position_embeddings=128,
                         rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False)
    torch.manual_seed(0)
    tf.LlamaForCausalLM(cfg).save_pretrained(tmp_path / "hf")
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({f"t{i}": i for i in range(256)}, unk_token="t0"))
    tf.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="t1", eos_token="t2",
                               unk_token="t0").save_pretrained(tmp_path / "hf")
    subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-m", "tiny", "-i", str(tmp_path / "hf"),
                    "-o", str(tmp_path / "out"), "-p", "int4", "-e", "cuda", "-c", str(tmp_path / "c")],
                   check=True, capture_output=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=600)
    real = onnx.load(str(tmp_path / "out" / "model.onnx"), load_external_data=False)
    ours = onnx.load(str(ortopt.genai_llama(layers=2, max_len=128)), load_external_data=False)

    def sig(m):
        io = [(v.name, v.type.tensor_type.elem_type) for v in list(m.graph.input) + list(m.graph.output)]
        ops = [(n.domain, n.op_type) for n in m.graph.node if n.op_type != "Constant"]
        attrs = {n.op_type: sorted((a.name, onnx.helper.get_attribute_value(a)) for a in n.attribute
                                   if a.name not in ("scale",))
                 for n in m.graph.node if n.domain == "com.microsoft" and n.op_type != "MatMulNBits"}
        return io, ops, attrs
    assert sig(ours) == sig(real)


@pytest.mark.parametrize("which", ["O2", "O3", "genai-float16", "genai-float32"])
def test_plugin_ep_planner_claims_the_contrib_graph(which):
    """The plugin EP's planner claims every kernel the offline rewrite builds, contrib nodes included: an
    Attention's Q/K/V projections and attention (and the mask reduction its expansion shares with the next
    layer) become one group of several parts, a GroupQueryAttention's shape computations host parts;
    groups are disjoint sets of the model's own nodes (as ONNX Runtime holds it), and every com.microsoft
    node is in one."""
    from plus_ep.ep import ort_basic_graph, partition
    path = (ortopt.bert_optimized(which, layers=LAYERS) if which.startswith("O")
            else ortopt.genai_llama(layers=LAYERS, dtype=which.split("-")[1]))
    model = ort_basic_graph(str(path))
    r = rewrite_detailed(model, archs=[])
    for n in r.model.graph.node:          # partition() reads the launch plan's presence only
        if n.domain == "ai.plus_ep":
            n.attribute.append(onnx.helper.make_attribute("plus_plan", "plan"))
    fused = [n.name for n in r.model.graph.node if n.domain == "ai.plus_ep"]
    groups = partition(model, r.model)
    kernels = [p["node"] for g in groups for p in g["parts"] if p["kind"] == "kernel"]
    assert sorted(kernels) == sorted(fused), (kernels, fused)               # the offline rewrite's kernels, all
    members = [m for g in groups for m in g["members"]]
    assert len(members) == len(set(members))                                 # disjoint
    ops = {n.output[0]: n for n in model.graph.node}
    contrib = {n.output[0] for n in model.graph.node if n.domain == "com.microsoft"}
    assert contrib and contrib <= set(members), sorted(contrib - set(members))
    claimed_ops = {ops[m].op_type for m in members}
    assert ({"Attention", "SkipLayerNormalization"} if which.startswith("O") else
            {"GroupQueryAttention", "SkipSimplifiedLayerNormalization", "MatMulNBits"}) <= claimed_ops, claimed_ops
    if not which.startswith("O"):
        assert any(p["kind"] == "host" for g in groups for p in g["parts"])   # the GQA's shape computations


def test_explain_says_what_each_contrib_op_became():
    from plus_ep.explain import explain, format_explanation
    from plus_ep.warehouse import default_warehouse
    r = rewrite_detailed(str(ortopt.bert_optimized("O2", layers=LAYERS)))
    ex = explain(r, "attention", default_warehouse().get("attention"))
    att = [c for c in ex["contrib"] if c["op"] == "Attention"]
    assert len(att) == LAYERS and all("gemm_group" in c["detail"] and "attention" in c["detail"] for c in att)
    text = format_explanation(ex, "bert-O2.onnx")
    assert "contrib op BiasGelu" in text and "fused into gemm" in text
