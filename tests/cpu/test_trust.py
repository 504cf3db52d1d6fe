"""The trust policy's Python half (plus_ep/trust.py) and its commands (`plus-ep trust`, `plus-ep keygen`,
`plus-ep rewrite --sign`): digests, the manifest a rewrite writes, the rebuild from function bodies and
its byte comparison, signatures. The launcher's half is tested in tests/native/test_launcher.py (the
same digest in C) and end to end in tests/emulated/test_trust_emulated.py."""
from __future__ import annotations

import json

import onnx
import pytest

from plus_ep import cli, rebuild, trust
from tests.support.emulated_models import rewritten_tiny, swap_first_images


@pytest.fixture
def fresh_manifest(tmp_path, monkeypatch):
    d = tmp_path / "trusted"
    monkeypatch.setenv("PLUS_EP_TRUST_DIR", str(d))
    monkeypatch.delenv("PLUS_EP_TRUSTED_KEYS", raising=False)
    monkeypatch.delenv("PLUS_EP_TRUST", raising=False)
    return d


@pytest.fixture(scope="module")
def tiny():
    return rewritten_tiny()


def test_digest_covers_plan_and_every_pack_in_arch_order():
    def key(plan, packs):
        return trust.NodeKey("ai.plus_ep", "Fused", "n", (True,), (True,), {"plus_plan": plan}, packs)
    packs = {"sm_90a": b"A" * 40, "sm_80": b"B" * 40}
    d = trust.digest(key(b"plan\n", packs))
    assert d == trust.digest(key(b"plan\n", dict(reversed(list(packs.items())))))
    assert d != trust.digest(key(b"plan \n", packs))
    assert d != trust.digest(key(b"plan\n", {"sm_90a": b"B" * 40, "sm_80": b"A" * 40}))
    assert d != trust.digest(key(b"plan\n", {**packs, "sm_100": b""}))
    assert len(d) == 32


def test_a_rewrite_binds_each_node_to_its_function_body(tiny):
    """Every node a rewrite built names its function body (plus_body); a changed body is refused by
    status (and no longer verifies), the bound attribute being part of the digest."""
    for n in trust.kernel_nodes(tiny):
        assert trust.body_problem(tiny, n) is None
        assert any(a.name == trust.BODY_ATTR and len(a.s) == 64 for a in n.attribute)
    m = onnx.ModelProto()
    m.CopyFrom(tiny)
    m.functions[0].node[0].attribute[0].i = 0                  # LayerNormalization's axis
    node = next(n for n in m.graph.node if n.overload == m.functions[0].overload)
    assert trust.body_problem(m, node) == "its function body is not the one its plus_body names (the body was changed)"
    assert [s.how for s in trust.status(m) if s.node == node.name] == [None]
    assert "body was changed" in next(s.why for s in trust.status(m) if s.node == node.name)


def test_a_rewrite_records_what_it_built(tiny, fresh_manifest, tmp_path):
    m = rewritten_tiny()                              # rewritten with this fixture's empty manifest
    assert [n.how for n in trust.status(m)] == ["manifest", "manifest"]
    meta = json.loads(next(p.value for p in m.metadata_props if p.key == trust.REWRITE_METADATA))
    assert meta == {"archs": ["sm_80", "sm_90a"], "fp32_math": "exact", "disable": []}
    assert sum(1 for f in fresh_manifest.rglob("*") if f.is_file()) == 2
    assert [n.how for n in trust.status(swap_first_images(m))] == [None, None]


def test_plus_ep_trust_rebuilds_and_compares(tiny, fresh_manifest, tmp_path, capsys):
    good, swapped, out = tmp_path / "good.onnx", tmp_path / "swapped.onnx", tmp_path / "local.onnx"
    onnx.save(tiny, good)                             # rewritten elsewhere: this manifest is empty
    onnx.save(swap_first_images(tiny), swapped)
    assert cli.main(["trust", str(good), "--status"]) == 1
    assert "0 of 2 fused nodes trusted here" in capsys.readouterr().out
    assert cli.main(["trust", str(good)]) == 0        # rebuilt byte-identical: trusted
    text = capsys.readouterr().out
    assert "plus_ep/layernorm/0  identical: trusted" in text and "2 of 2 fused nodes rebuilt byte-identical" in text
    assert cli.main(["trust", str(good), "--status"]) == 0
    assert cli.main(["trust", str(swapped)]) == 1
    cap = capsys.readouterr()
    assert "plus_ep/gemm/1       DIFFERS from the local build" in cap.out
    assert "2 fused node(s) differ" in cap.err and "plus-ep trust MODEL -o OUT" in cap.err
    assert cli.main(["trust", str(swapped), "-o", str(out)]) == 0
    assert "wrote the locally built model" in capsys.readouterr().out
    local = onnx.load(out)
    assert [n.how for n in trust.status(local)] == ["manifest", "manifest"]
    assert [trust.node_digest(n) for n in trust.kernel_nodes(local)] == [
        trust.node_digest(n) for n in trust.kernel_nodes(tiny)]


def test_accept_and_resolve(tiny, fresh_manifest, tmp_path, capsys):
    swapped = swap_first_images(tiny)
    onnx.save(swapped, tmp_path / "s.onnx")
    assert cli.main(["trust", str(tmp_path / "s.onnx"), "--accept"]) == 0
    assert "trusted as they are, unchecked" in capsys.readouterr().err
    assert all(n.how == "manifest" for n in trust.status(swapped))
    model, what = rebuild.resolve(swapped)
    assert model is swapped and what == "embedded kernels trusted"


def test_resolve_runs_the_local_build(tiny, fresh_manifest):
    model, what = rebuild.resolve(tiny)                 # identical: itself, recorded
    assert model is tiny and what.startswith("embedded kernels rebuilt here byte-identical (2 nodes")
    model, what = rebuild.resolve(swap_first_images(tiny))
    assert what.startswith("local build used: 2 of 2 nodes differed")
    assert [trust.node_digest(n) for n in trust.kernel_nodes(model)] == [
        trust.node_digest(n) for n in trust.kernel_nodes(tiny)]


def test_sign_and_keys(tiny, fresh_manifest, tmp_path, monkeypatch, capsys):
    pytest.importorskip("cryptography", reason="signing needs the [sign] extra (cryptography)")
    key = tmp_path / "release.pem"
    assert cli.main(["keygen", str(key)]) == 0
    line = capsys.readouterr().out.splitlines()[1]
    assert line.startswith("ed25519 ") and line.endswith(" release")
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    assert cli.main(["keygen", str(key)]) == 2        # never overwrites a key
    m = onnx.ModelProto()
    m.CopyFrom(tiny)
    assert trust.sign_model(m, key) == 2
    monkeypatch.setenv("PLUS_EP_TRUSTED_KEYS", str(key) + ".pub")
    kid = next(iter(trust.trusted_keys()))
    assert [n.how for n in trust.status(m)] == [f"signature {kid}"] * 2
    assert [n.how for n in trust.status(swap_first_images(m))] == [None, None]     # signatures no longer match
    (tmp_path / "bad.pub").write_text("ed25519 notbase64\n")
    monkeypatch.setenv("PLUS_EP_TRUSTED_KEYS", str(tmp_path / "bad.pub"))
    with pytest.raises(trust.TrustError, match="bad.pub line 1: the key is not the base64 of a 32-byte"):
        trust.trusted_keys()


def test_rewrite_sign(tmp_path, fresh_manifest, capsys):
    pytest.importorskip("cryptography", reason="signing needs the [sign] extra (cryptography)")
    from tests.support.emulated_models import tiny_model
    onnx.save(tiny_model(), tmp_path / "m.onnx")
    trust.keygen(tmp_path / "k.pem")
    assert cli.main(["rewrite", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.plus.onnx"), "--arch", "sm_80",
                     "--fp32-math", "exact", "--sign", str(tmp_path / "k.pem")]) == 0
    assert ", 2 nodes and the whole model signed" in capsys.readouterr().out
    signed = onnx.load(tmp_path / "m.plus.onnx")
    assert all(any(a.name == trust.SIGNATURE_ATTR for a in n.attribute) for n in trust.kernel_nodes(signed))


def test_a_model_signed_whole_is_recorded_by_plus_ep_trust(tmp_path, fresh_manifest, monkeypatch, capsys):
    """The whole-model signature (`plus-ep rewrite --sign`): checked by `plus-ep trust`, which records
    every node without a rebuild; it survives saving the weights in an external file; any change of the
    model (a weight, an output's name) breaks it, as a key that is not listed does."""
    pytest.importorskip("cryptography", reason="signing needs the [sign] extra (cryptography)")
    monkeypatch.setenv("PLUS_EP_TRUST_DIR", str(tmp_path / "the_build_machine"))
    m = rewritten_tiny(archs=("sm_80",))
    monkeypatch.setenv("PLUS_EP_TRUST_DIR", str(fresh_manifest))
    pub, _ = trust.keygen(tmp_path / "k.pem")
    trust.keygen(tmp_path / "other.pem")
    kid = trust.sign_whole_model(m, tmp_path / "k.pem")
    onnx.save(m, tmp_path / "s.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
              location="s.onnx.data", size_threshold=0)
    monkeypatch.setenv("PLUS_EP_TRUSTED_KEYS", str(pub))
    loaded = onnx.load(tmp_path / "s.onnx")
    assert trust.model_signer(loaded) == kid
    changed = onnx.ModelProto()
    changed.CopyFrom(loaded)
    changed.graph.initializer[0].raw_data = bytes(len(changed.graph.initializer[0].raw_data))
    assert trust.model_signer(changed) is None
    changed.CopyFrom(loaded)
    changed.graph.output[0].name = "renamed"
    assert trust.model_signer(changed) is None
    assert [n.how for n in trust.status(loaded)] == [None, None]
    assert cli.main(["trust", str(tmp_path / "s.onnx")]) == 0
    assert f"the whole model is signed by key {kid} (PLUS_EP_TRUSTED_KEYS lists it): 2 of 2 fused nodes recorded" \
        in capsys.readouterr().out
    assert [n.how for n in trust.status(loaded)] == ["manifest", "manifest"]
    monkeypatch.setenv("PLUS_EP_TRUSTED_KEYS", str(tmp_path / "other.pem.pub"))
    assert trust.model_signer(loaded) is None


def _gated_mlp():
    """Llama's MLP in small: the gate GEMM's epilogue multiplies by the up projection, so its fused
    node reads the up GEMM's and comes after it in the rewritten graph."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)

    def w(name, shape):
        return numpy_helper.from_array((rng.standard_normal(shape) / 6).astype(np.float32), name)
    nodes = [helper.make_node("MatMul", ["X", "Wg"], ["g"], name="gate"),
             helper.make_node("Sigmoid", ["g"], ["sg"], name="sig"),
             helper.make_node("Mul", ["g", "sg"], ["silu"], name="silu"),
             helper.make_node("MatMul", ["X", "Wu"], ["u"], name="up"),
             helper.make_node("Mul", ["silu", "u"], ["h"], name="mul"),
             helper.make_node("MatMul", ["h", "Wd"], ["Y"], name="down")]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", "seq", 32])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", "seq", 32])],
                          [w("Wg", (32, 64)), w("Wu", (32, 64)), w("Wd", (64, 32))])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def test_rebuild_restores_the_original_node_order(fresh_manifest):
    """The rebuild identifies the inlined graph in the order fuse() was given (metadata
    plus_ep.positions): inlined in the rewritten graph's order, the up GEMM would come first and
    take the gate's epilogue, so no node would come out byte-identical. Without the gated-MLP pattern
    (recorded in the rewrite options, which the rebuild reads), where gate and up are two nodes."""
    import plus_ep
    from plus_ep.graph_rewrites.fuse import inline_fused
    gated = plus_ep.rewrite(_gated_mlp(), archs=["sm_80"], fp32_math="exact")
    assert [n.name for n in gated.graph.node][:1] == ["plus_ep/gemm_gated/0"]   # one kernel for gate and up
    assert rebuild.rebuild(gated).identical
    rewritten = plus_ep.rewrite(_gated_mlp(), archs=["sm_80"], fp32_math="exact", disable=("gemm_gated",))
    assert [(n.name, list(n.input)) for n in rewritten.graph.node][:2] == [
        ("plus_ep/gemm/1", ["X", "Wu"]), ("plus_ep/gemm/0", ["X", "Wg", "u"])]
    assert rebuild.rebuild(rewritten).identical
    plain = plus_ep.rewrite(inline_fused(rewritten), archs=["sm_80"], fp32_math="exact", disable=("gemm_gated",))
    assert [list(n.input)[:2] for n in plain.graph.node][:2] == [["X", "Wg"], ["X", "Wu"]]   # the other partition
