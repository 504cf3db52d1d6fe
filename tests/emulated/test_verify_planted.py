"""`plus-ep verify` with its defaults fails, naming the node, on each bug class planted in real kernels of a
one-layer BERT whose biases are all zero and LayerNorm weights one (tests/support/planted.py): at the
source level through the override folder (swapped A-fragment registers in QK^T, softmax in base 2, a
missed online-softmax rescale across key tiles, scale 1/d, a bias with the wrong sign or none), and in
the packs (cubins swapped between two GEMMs, a second PTX copy of one cubin that differs). The same
model without a planted bug passes."""
from __future__ import annotations

import json
import subprocess
import sys

import onnx
import pytest

import plus_ep
from tests.support import planted
from tests.support.emulated_models import ROOT, child_env

ATTN, FFN1, QKV = "plus_ep/attention/2", "plus_ep/gemm/4", "plus_ep/gemm_group/1"


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("planted")
    with pytest.MonkeyPatch.context() as mp:
        model = planted.rewrite(planted.zero_bias_bert(), mp, dump=tmp / "dump")
    names = [n.name for n in model.graph.node if n.domain == "ai.plus_ep"]
    assert {ATTN, FFN1, QKV} <= set(names), names
    path = tmp / "clean.plus.onnx"
    onnx.save(model, path)
    return tmp, model, path


def _failing_rows(rep) -> dict:
    return {r["node"]: r for r in rep["nodes"] if not r["ok"]}


def test_the_clean_model_passes_with_default_settings(clean):
    _, _, path = clean
    rep = plus_ep.verify(str(path))
    assert rep["ok"], plus_ep.verify_text(rep)
    # stress runs at the cheapest shapes spanning each node's tiles: the attention's keys need two tiles of 32
    assert all("(fixed)" in t for t in rep["tiles"]["not_spanned"]), rep["tiles"]   # N = 64 or 128 by BN 64
    assert rep["summary"]["worst_ratio"] < 0.5
    attn = next(r for r in rep["nodes"] if r["node"] == ATTN)
    assert attn["math"] == "tf32" and [o["run"] for o in attn["outputs"]] == [
        "model", "stress input_ids[2, 37], attention_mask[2, 37]"]
    assert sum(r["fused_nodes"] for r in rep["runs"]) == len(rep["nodes"])    # each node in one stress run


@pytest.mark.parametrize("bug,node,edit", [
    ("swapped A-fragment registers in QK^T", ATTN, planted.with_template(planted.SWAP_A_FRAGMENT)),
    ("softmax in base 2", ATTN, planted.with_template(planted.SOFTMAX_BASE_2)),
    ("online softmax not rescaled across key tiles", ATTN, planted.with_template(planted.NO_RESCALE)),
    ("scale 1/d instead of 1/sqrt(d)", ATTN, planted.replace_once("(s / 5.656854152679443f)", "(s / 32.0f)")),
    ("bias added with the wrong sign", FFN1, planted.replace_once("(acc + x1)", "(acc - x1)")),
    ("bias missing", FFN1, planted.replace_once("(acc + x1)", "(acc)")),
])
def test_a_planted_source_bug_fails_naming_the_node(clean, tmp_path, monkeypatch, bug, node, edit):
    tmp, _, _ = clean
    assert planted.plant(tmp / "dump", tmp_path / "override", node, edit) >= 1
    model = planted.rewrite(planted.zero_bias_bert(), monkeypatch, override=tmp_path / "override")
    monkeypatch.delenv("PLUS_EP_OVERRIDE_DIR")
    path = tmp_path / "bug.plus.onnx"
    onnx.save(model, path)
    rep = plus_ep.verify(str(path))
    bad = _failing_rows(rep)
    assert not rep["ok"] and list(bad) == [node], (bug, plus_ep.verify_text(rep))
    worst = max(o.get("ratio", 0) for o in bad[node]["outputs"])
    assert worst > 3, (bug, worst)             # clearly beyond the bound, not at its edge
    if bug.startswith("bias"):                 # the model's biases are zero: only the stress runs see it
        assert all(o["ok"] for o in bad[node]["outputs"] if o["run"] == "model")


def test_cubins_swapped_between_two_gemms_fail_naming_the_nodes(clean, tmp_path):
    _, model, _ = clean
    m = onnx.ModelProto()
    m.CopyFrom(model)
    planted.swap_cubins(m, FFN1, QKV)
    path = tmp_path / "swapped.plus.onnx"
    onnx.save(m, path)
    r = subprocess.run([sys.executable, "-m", "plus_ep", "verify", str(path), "--json"], capture_output=True,
                       text=True, cwd=str(ROOT), env=child_env(), timeout=300, check=False)
    assert r.returncode == 1, r.stderr[-2000:]
    rep = json.loads(r.stdout)
    # the cubin check (plus_ep/verification/cubin_check.py): each swapped cubin is not what its PTX assembles to
    bad = {(c["node"], c["arch"]): c["detail"] for c in rep["cubins"]["rows"] if c["status"] != "match"}
    assert not rep["ok"] and sorted(bad) == sorted([(FFN1, "sm_80"), (QKV, "sm_80")]), rep["errors"]
    assert all(d.startswith("image 0: its cubin is not what its PTX assembles to") for d in bad.values())


def test_a_second_differing_ptx_copy_of_one_cubin_fails_naming_the_node(clean, tmp_path):
    _, model, _ = clean
    m = onnx.ModelProto()
    m.CopyFrom(model)
    planted.second_copy_differs(m, FFN1, QKV)
    rep = plus_ep.verify(m)
    assert not rep["ok"]
    # the nodes register in graph order: the later one is named, with the earlier holder of the cubin
    assert any(e.startswith(f"node {FFN1}: pack sm_80 image 0: its cubin is also in node {QKV} ")
               and e.endswith("with a different PTX text: one cubin, two kernels") for e in rep["tie_errors"]), \
        rep["errors"]
    text = plus_ep.verify_text(rep)
    assert "FAILED" in text and QKV in text
