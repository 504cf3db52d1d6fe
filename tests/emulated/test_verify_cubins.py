"""`plus-ep verify` checks what a GPU would load (plus_ep/verification/cubin_check.py): each image's PTX
is assembled here with ptxas and compared with its cubin, so a model whose cubin was replaced by other
code, with the benign PTX re-tied to it (kernels/wire/pack.py tie: unkeyed), fails naming the node,
where the interpreter alone (it executes the PTX) passed it; the report says what it checked and each
node's trust status. On the tiny model (LayerNorm row kernel, GEMM; sm_80)."""
from __future__ import annotations

import json
import subprocess
import sys

import onnx
import pytest

import plus_ep
from plus_ep import trust
from plus_ep.kernels.wire import pack
from plus_ep.verification import cubin_check
from tests.support.emulated_models import ROOT, packs_of, rewritten_tiny, set_pack

pytestmark = pytest.mark.skipif(cubin_check.find_ptxas() is None, reason="needs ptxas (CUDA toolkit or nvidia-cuda-nvcc)")

GEMM = "plus_ep/gemm/1"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("cubins")
    good = rewritten_tiny(archs=("sm_80",))
    onnx.save(good, d / "good.onnx")
    bad = onnx.ModelProto()
    bad.CopyFrom(good)
    from plus_ep.kernels.compile import nvrtc
    src = ('#include "plus_common.cuh"\nextern "C" __global__ void plus_gemm(const PlusArgs args) '
           '{ ((float*)args.out[0])[threadIdx.x] = 42.0f; }\n')
    foreign = nvrtc.compile_cubin(src, "sm_80", name="foreign.cu").cubin
    node = next(n for n in bad.graph.node if n.name == GEMM)
    images = pack.parse(packs_of(node)["sm_80"])
    images[0] = pack.Image(foreign, pack.tie(foreign, images[0].ptx))   # the first route's cubin, re-tied
    set_pack(node, "sm_80", pack.write(images))
    onnx.save(bad, d / "bad.onnx")
    return d


def _verify(path, *flags):
    r = subprocess.run([sys.executable, "-m", "plus_ep", "verify", str(path), "--batch", "2", "--seq", "3",
                        "--no-stress", *flags], capture_output=True, text=True, cwd=str(ROOT), timeout=600, check=False)
    return r.returncode, r.stdout, r.stderr


def test_replaced_cubins_with_the_benign_ptx_retied_fail_naming_the_node(models):
    rc, out, err = _verify(models / "bad.onnx", "--json")
    assert rc == 1, err[-3000:]
    rep = json.loads(out)
    rows = {(c["node"], c["arch"]): c for c in rep["cubins"]["rows"]}
    assert rows[(GEMM, "sm_80")]["status"] == "MISMATCH" and rows[(GEMM, "sm_80")]["images"] == 3
    assert rows[(GEMM, "sm_80")]["detail"].startswith("image 0: its cubin is not what its PTX assembles to")
    assert rows[("plus_ep/layernorm/0", "sm_80")]["status"] == "match"
    assert all(o["ok"] for r in rep["nodes"] for o in r["outputs"])      # the PTX itself is benign
    assert any(e.startswith(f"[sm_80] node {GEMM}: cubin MISMATCH") for e in rep["errors"])
    rc, text, _ = _verify(models / "bad.onnx")
    assert rc == 1 and "FAILED" in text and "cubins 1/2 match" in text
    assert next(ln for ln in text.splitlines() if ln.startswith(GEMM)).split()[-2:] == ["DIFFERS", "ERROR"]
    rc, text, _ = _verify(models / "bad.onnx", "--no-cubin-check")     # what the interpreter alone says
    assert rc == 0 and "cubins NOT checked" in text and "PASSED" in text


def test_the_good_model_passes_and_the_report_says_what_it_checked(models, tmp_path, monkeypatch):
    monkeypatch.setenv("PLUS_EP_TRUST_DIR", str(tmp_path / "trusted"))     # this machine vouches for nothing
    rep = plus_ep.verify(str(models / "good.onnx"), batch=2, seq=3, stress=False)
    text = plus_ep.verify_text(rep)
    assert rep["ok"], text
    assert [c["status"] for c in rep["cubins"]["rows"]] == ["match", "match"]
    assert f"with ptxas ({cubin_check.ptxas_version(cubin_check.find_ptxas())}) and compared section by section" in text
    assert f"trust {GEMM}: NOT TRUSTED here: in no trust manifest" in text
    trust.record_model(onnx.load(models / "good.onnx"), "test")
    text = plus_ep.verify_text(plus_ep.verify(str(models / "good.onnx"), batch=2, seq=3, stress=False))
    assert f"trust {GEMM}: manifest (digest " in text and "cubins 2/2 match" in text


def test_without_ptxas_the_cubins_are_not_checked_and_verify_fails(models, monkeypatch):
    monkeypatch.setattr(cubin_check, "find_ptxas", lambda: None)
    rep = plus_ep.verify(str(models / "good.onnx"), batch=2, seq=3, stress=False)
    assert not rep["ok"]
    assert all(c["status"] == "not checked" and "no ptxas found" in c["detail"] for c in rep["cubins"]["rows"])
    assert "UNCHECKED" in plus_ep.verify_text(rep)
