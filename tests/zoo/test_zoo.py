"""Tests for plus_ep.zoo: export every family with both exporters (small, 2 layers)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import pytest

pytestmark = pytest.mark.zoo
pytest.importorskip("torch")
pytest.importorskip("transformers")
ort = pytest.importorskip("onnxruntime")

from plus_ep import zoo  # noqa: E402
from plus_ep.zoo import exporters, models  # noqa: E402
from tests.support import zoo_models  # noqa: E402

LAYERS = 2
# the six transformer families; swin, resnet, whisper and clip: tests/zoo/test_wild_families.py; qwen2,
# phi3, deberta_v2: tests/zoo/test_gated_families.py
CASES = [(f, e) for f in zoo_models.FAMILIES for e in zoo.EXPORTERS]
SHAPES = [(2, 7), (1, 16)]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("zoo_cache")


@pytest.fixture(scope="module")
def built_models():
    return {}


def _torch_model(built_models, family):
    if family not in built_models:
        built_models[family] = models.build(family, "small", LAYERS)
    return built_models[family]


@pytest.mark.parametrize("family,exporter", CASES)
def test_export_runs_and_matches_torch(family, exporter, cache, built_models):
    path = zoo.export(family, exporter, "small", layers=LAYERS, cache_dir=cache, verify=False)
    assert path.exists() and path.suffix == ".onnx" and path.parent == cache
    assert f"{family}-{exporter}-small-L{LAYERS}-" in path.name

    model = onnx.load(str(path))
    onnx.checker.check_model(model)
    # plain ONNX: no local functions, no custom domains, no fused Attention op
    assert len(model.functions) == 0
    assert {n.domain for n in model.graph.node} <= {"", "ai.onnx"}
    op_types = {n.op_type for n in model.graph.node}
    assert "Attention" not in op_types and "MultiHeadAttention" not in op_types
    assert {"MatMul", "Softmax"} <= op_types
    opset = {o.domain: o.version for o in model.opset_import}[""]
    assert opset == zoo.OPSET[exporter]

    # batch / sequence dims are symbolic
    dims = {vi.name: [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]
            for vi in model.graph.input}
    assert list(dims) == list(models.INPUTS[family])
    for name, shape in dims.items():
        assert shape[0] == "batch", (name, shape)
        if name == "pixel_values":
            assert shape[1:] == [3, 32, 32]
        elif name == "decoder_input_ids":
            assert shape[1] == "dec_seq"
        else:
            assert shape[1] == "seq", (name, shape)

    meta = zoo.metadata(model)
    assert meta["family"] == family and meta["exporter"] == exporter
    assert meta["layers"] == str(LAYERS)

    # ORT CPU vs torch
    built = _torch_model(built_models, family)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for batch, seq in SHAPES:
        feeds = zoo.sample_inputs(path, batch=batch, seq=seq)
        got = sess.run(None, feeds)
        want = models.run_torch(built, feeds)
        assert len(got) == len(want) == len(models.OUTPUTS[family])
        for name, g, w in zip(models.OUTPUTS[family], got, want):
            assert g.shape == w.shape, (name, g.shape, w.shape)
            assert g.shape[0] == batch
            diff = float(np.max(np.abs(g - w)))
            assert diff <= 1e-4, f"{family}/{exporter} {name} b{batch} s{seq}: {diff}"


@pytest.mark.parametrize("family,exporter", CASES)
def test_second_export_hits_cache(family, exporter, cache, monkeypatch):
    first = zoo.export(family, exporter, "small", layers=LAYERS, cache_dir=cache, verify=False)
    mtime = first.stat().st_mtime_ns

    def boom(*a, **k):
        raise AssertionError("re-exported although cached")

    monkeypatch.setitem(exporters._EXPORTERS, exporter, boom)
    second = zoo.export(family, exporter, "small", layers=LAYERS, cache_dir=cache)
    assert second == first
    assert second.stat().st_mtime_ns == mtime
    assert not [p for p in cache.iterdir() if p.name.startswith(".tmp-")]


def test_load_and_env_cache_dir(cache, monkeypatch):
    monkeypatch.setenv("PLUS_EP_ZOO_DIR", str(cache))
    assert zoo.cache_dir() == cache
    path = zoo.export("bert", "torchscript", layers=LAYERS, verify=False)
    assert path.parent == cache
    model = zoo.load("bert", "torchscript", layers=LAYERS)
    assert isinstance(model, onnx.ModelProto)
    assert zoo.metadata(model)["family"] == "bert"


def test_cache_key_depends_on_layers_and_config():
    from plus_ep.zoo import cache as zcache

    c2 = zoo.config("bert", "small", layers=2)
    c3 = zoo.config("bert", "small", layers=3)
    assert c2.num_hidden_layers == 2 and c3.num_hidden_layers == 3
    n2 = zcache.file_name("bert", "dynamo", "small", 2, c2, 18)
    n3 = zcache.file_name("bert", "dynamo", "small", 3, c3, 18)
    assert n2 != n3
    assert zcache.file_name("bert", "dynamo", "small", 2, c2, 17) != n2
    assert n2 == zcache.file_name("bert", "dynamo", "small", 2, zoo.config("bert", "small", 2), 18)


def _attention_rows(family, built):
    """Every attention probability row of ``built`` (eager attention) on the zoo's example inputs."""
    import torch
    feeds = exporters.example_feeds(family, built.config, batch=2, seq=16)
    kwargs = {name: torch.from_numpy(feeds[name]) for name in models.INPUTS[family]}
    with torch.no_grad():
        out = built.model(**kwargs, output_attentions=True, **({"use_cache": False} if family == "t5" else {}))
    probs = (out.encoder_attentions + out.decoder_attentions) if family == "t5" else out.attentions
    return [p.double() for p in probs]


@pytest.mark.parametrize("family", zoo.FAMILIES)
def test_weights_are_not_transformers_init(family):
    """Every family's export weights (models.realistic_weights, named in the cache key): no bias all 0, no
    norm weight all 1, and (but ResNet) softmax rows far from uniform: normalised entropy < 0.9 (1.0 for
    transformers' init in every family but T5) and a mean row maximum > 2x uniform's."""
    import torch
    cfg = zoo.config(family, "small", layers=1)
    assert cfg.to_dict()["plus_ep_weights"] == zoo.configs.WEIGHTS_SCHEME      # so in the cache key
    cfg._attn_implementation = "eager"
    built = models.build(family, "small", 1, cfg=cfg)
    biases = {n: p for n, p in built.model.named_parameters() if n.endswith(".bias")}
    norms = {n: m.weight for n, m in built.model.named_modules()
             if (isinstance(m, torch.nn.modules.batchnorm._BatchNorm) or isinstance(m, torch.nn.LayerNorm)
                 or type(m).__name__.endswith(("RMSNorm", "LayerNorm"))) and getattr(m, "weight", None) is not None}
    assert norms and (biases or family in ("t5", "llama", "phi3"))      # Phi-3: no linear biases
    assert not [n for n, p in biases.items() if bool((p == 0).all())]
    assert not [n for n, w in norms.items() if bool((w == 1).all())]
    if family == "resnet":
        return
    rows = _attention_rows(family, built)
    assert rows
    for probs in rows:
        live = (probs > 1e-12).sum(-1).double()              # keys not masked out
        entropy = -(probs.clamp_min(1e-30).log() * probs).sum(-1) / live.clamp_min(2).log()
        several = live > 1
        assert float(entropy[several].mean()) < 0.9, family
        assert float((probs.max(-1).values * live)[several].mean()) > 2.0, family


def test_configs():
    for family in zoo.FAMILIES:
        for size in zoo.SIZES:
            zoo.config(family, size)
    llama = zoo.config("llama", "small")
    assert llama.num_hidden_layers == 4
    assert llama.num_key_value_heads < llama.num_attention_heads
    real = zoo.config("llama", "real")
    assert (real.hidden_size, real.num_attention_heads, real.num_key_value_heads,
            real.intermediate_size, real.vocab_size) == (2048, 32, 8, 8192, 128256)
    t5 = zoo.config("t5", "small")
    assert (t5.d_model, t5.d_kv, t5.num_heads, t5.d_ff, t5.num_layers,
            t5.num_decoder_layers) == (64, 16, 4, 128, 12, 12)
    vit = zoo.config("vit", "small")
    assert (vit.image_size // vit.patch_size) ** 2 + 1 == 17
    with pytest.raises(ValueError):
        zoo.config("convnext", "small")
    with pytest.raises(ValueError):
        zoo.export("bert", "onnxscript")


def test_sample_inputs(cache):
    path = zoo.export("t5", "dynamo", layers=LAYERS, cache_dir=cache, verify=False)
    feeds = zoo.sample_inputs(path, batch=3, seq=9)
    assert set(feeds) == {"input_ids", "attention_mask", "decoder_input_ids"}
    for name, arr in feeds.items():
        assert arr.dtype == np.int64 and arr.shape == (3, 9), name
    assert feeds["input_ids"].min() >= 0 and feeds["input_ids"].max() < 1000
    mask = feeds["attention_mask"]
    assert mask[0].all() and not mask[-1].all() and mask[-1, 0] == 1
    again = zoo.sample_inputs(onnx.load(str(path)), batch=3, seq=9)
    for name in feeds:
        np.testing.assert_array_equal(feeds[name], again[name])

    vit = zoo.export("vit", "torchscript", layers=LAYERS, cache_dir=cache, verify=False)
    pix = zoo.sample_inputs(vit, batch=2)["pixel_values"]
    assert pix.dtype == np.float32 and pix.shape == (2, 3, 32, 32)

    bert = zoo.export("bert", "torchscript", layers=LAYERS, cache_dir=cache, verify=False)
    tt = zoo.sample_inputs(bert)["token_type_ids"]
    assert set(np.unique(tt)) <= {0, 1}


def test_import_does_not_import_torch():
    code = "import sys, plus_ep.zoo; assert 'torch' not in sys.modules, 'torch imported'"
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_missing_torch_message(monkeypatch):
    from plus_ep.zoo import _deps

    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ImportError, match=r"install the models extra: pip install -e '\.\[models\]'"):
        _deps.torch()
