"""bench.harness.fusion (CPU mode): the JSON record of every stage, consistent counts, the markdown table and
its regeneration from the JSON; the kernel-compile record on the torch-free demo BERT."""
from __future__ import annotations

import datetime
import json

import pytest

from bench.harness import fusion
from bench.charts import fusion_table

FAMILIES = ("bert", "gpt2")         # encoder and decoder; both go through ORT's transformers optimizer
EXPORTERS = ("dynamo",)             # the smaller graphs: ORT's optimizer takes ~3x longer on TorchScript's
STAGES = ("original", "ort_all", "ort_transformers", "plus_ep")
COUNT_KEYS = {"nodes", "data_kernels", "data_kernels_per_layer"}


def _check_counts(rec: dict, blocks: int) -> None:
    assert COUNT_KEYS <= set(rec), rec
    assert isinstance(rec["nodes"], int) and isinstance(rec["data_kernels"], int)
    assert 0 < rec["data_kernels"] <= rec["nodes"]
    assert rec["data_kernels_per_layer"] == round(rec["data_kernels"] / blocks, 2)


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    out = tmp_path_factory.mktemp("bench")
    # The zoo's default depth: the same exports tests/zoo/test_models.py uses (shared cache, exported once).
    rc = fusion.main(["--size", "small", "--families", *FAMILIES, "--exporters", *EXPORTERS,
                      "--out", str(out)])
    path = out / f"{datetime.date.today().isoformat()}-fusion-small.json"
    return rc, path


@pytest.mark.zoo
def test_json_records_every_stage(result):
    rc, path = result
    assert rc == 0
    data = json.loads(path.read_text())
    assert data["schema"] == fusion.SCHEMA and data["kind"] == "fusion"
    assert {"date", "device", "onnxruntime", "torch", "plus_ep", "ort_cuda_ep"} <= set(data["env"])
    cuda = data["env"]["ort_cuda_ep"]["available"]
    assert data["settings"]["size"] == "small" and data["settings"]["layers"] is None
    assert data["settings"]["ort_transformers"]["use_gpu"] is False
    assert [(r["family"], r["exporter"]) for r in data["runs"]] == \
        [(f, e) for f in FAMILIES for e in EXPORTERS]
    for r in data["runs"]:
        assert "error" not in r, r["error"]
        assert r["layers"] == 12 and r["blocks"] == 12
        for stage in STAGES:
            rec = r[stage]
            if stage == "ort_transformers" and "error" in rec:   # recorded, never raised
                assert isinstance(rec["error"], str) and rec["model_type"] == r["family"]
                continue
            _check_counts(rec, r["blocks"])
        assert r["ort_all"]["ep"] == ("CUDAExecutionProvider" if cuda else "CPUExecutionProvider")
        tf = r["ort_transformers"]
        if "error" not in tf:
            assert tf["model_type"] == r["family"] and tf["opt_level"] == 1
            assert any(op.startswith("com.microsoft::") for op in tf["fused_ops"])   # it fused something
            assert tf["fp16"]["data_kernels"] >= tf["data_kernels"]    # fp16 only adds Casts
        pe = r["plus_ep"]
        assert pe["data_kernels"] < r["original"]["data_kernels"]
        assert pe["data_kernels"] < r["original"]["data_kernels"] / 3
        assert sum(pe["patterns"].values()) == pe["subgraphs"] > 0
        assert pe["patterns"].get("attention") == r["blocks"]
        assert pe["seconds"] > 0 and len(pe["seconds_all"]) == 1
        assert "compile" not in r


@pytest.mark.zoo
def test_markdown_has_every_row_and_regenerates(result, tmp_path):
    _, path = result
    md = path.with_suffix(".md").read_text()
    data = json.loads(path.read_text())
    table = md.split("## Data kernels (per layer)")[1].split("##")[0]
    for r in data["runs"]:
        pe = r["plus_ep"]
        assert f"| {r['family']} | {r['exporter']} | {r['blocks']} | " in table
        assert f"{pe['data_kernels']} ({pe['data_kernels_per_layer']:.1f})" in table
    assert "CPU EP" in md or "CUDA EP" in md
    again = tmp_path / "again.md"
    assert fusion_table.main([str(path), "-o", str(again)]) == 0
    assert again.read_text() == md
    assert fusion_table.render(data) == md


def test_compile_record_cold_then_warm():
    """The --compile-arch stage on the torch-free demo BERT: compiles into an empty cache, then a
    warm rebuild compiles nothing."""
    pytest.importorskip("cuda.bindings.nvrtc")
    from plus_ep.demo_model import build_bert

    model = build_bert(layers=1, hidden=64, heads=2, intermediate=128, vocab=100, max_pos=64)
    rec = fusion._compile(model, 1, "sm_90")
    _check_counts(rec, 1)
    assert rec["arch"] == "sm_90" and 0 < rec["compiles"] <= rec["images"] and rec["cold_s"] > 0
    assert rec["warm_compiles"] == 0 and rec["warm_s"] < rec["cold_s"]
    assert rec["unfused"] == sum(rec["unfused_reasons"].values())
    assert rec["subgraphs"] + rec["unfused"] >= 4       # attention, gemm, gemm_layernorm, ...


def test_table_script_reports_bad_input(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert fusion_table.main([str(bad)]) == 2
    assert "bad.json" in capsys.readouterr().err
    assert not bad.with_suffix(".md").exists()


def test_unfused_reasons_are_grouped_without_node_numbers():
    failures = [(3, "plus_ep/attention/3", "kernel compile failed: plus_ep/attention/3:simt:sm_90: spills"),
                (9, "plus_ep/attention/9", "kernel compile failed: plus_ep/attention/9:simt:sm_90: spills"),
                (4, "plus_ep/gemm/4", "plus_ep/gemm/4: dimension 'seq' is not bound")]
    assert fusion._reasons(failures) == {
        "attention: kernel compile failed: attention:simt:sm_90: spills": 2,
        "gemm: dimension 'seq' is not bound": 1}


def test_attention_choice_is_set_for_the_run_and_restored():
    from plus_ep.zoo import configs

    before = dict(configs.ATTN_IMPLEMENTATION)
    with fusion.attention_implementation("eager", ["bert"]):
        assert configs.ATTN_IMPLEMENTATION["bert"] == "eager"
        assert configs.ATTN_IMPLEMENTATION["gpt2"] == before["gpt2"]
    assert configs.ATTN_IMPLEMENTATION == before
    assert fusion.output_stem("real", None, "eager", date="2026-01-02") == "2026-01-02-fusion-real-eager"
    assert fusion.output_stem("small", 2, date="2026-01-02") == "2026-01-02-fusion-small-L2"
