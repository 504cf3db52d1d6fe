"""A model file is data (plus_ep/trust.py, plus_ep/native/trust.c), end to end on the emulated CUDA driver:
the custom-op library and the plugin EP inside the stock onnxruntime session, on a machine whose kernel
cache and trust manifest are empty (a fresh PLUS_EP_CACHE_DIR per child):

- images swapped between the two fused nodes of the tiny model (cubin and PTX together, both valid
  code), or a foreign cubin in one node's pack: the session is refused with an error naming the node and
  the way out; rebuild.resolve() rebuilds the nodes from their function bodies and the local build runs
  with the right outputs on both paths, as plus_ep.InferenceSession does by itself;
- the same model signed with a key PLUS_EP_TRUSTED_KEYS lists runs unchanged; signed by another key it is
  refused;
- the opt-out (PLUS_EP_TRUST=any; the session option) runs an untrusted model and warns once per process.
Outputs are compared with the original model on ORT CPU (exact fp32 kernels: 1e-4)."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from plus_ep import trust  # noqa: E402
from plus_ep.kernels.wire import pack  # noqa: E402
from tests.support.emulated_models import (ROOT, child_env, packs_of, rewritten_tiny, set_pack,  # noqa: E402
                                           swap_first_images, tiny_model)

pytestmark = pytest.mark.skipif(
    tuple(int(p) for p in ort.__version__.split(".")[:2]) < (1, 25), reason="plugin EPs by name need onnxruntime >= 1.25")

WARNING = "run without a trust check"

RUNNER = r"""
import json, os, sys
spec = json.loads(sys.argv[1])
import numpy as np, onnx, onnxruntime as ort
from plus_ep.verification.emulator import Emulator
emu = Emulator.get()
import plus_ep
from plus_ep import rebuild
emu.set_arch("sm_90a")
feeds = dict(np.load(spec["feeds"]))
want = ort.InferenceSession(spec["reference"], providers=["CPUExecutionProvider"]).run(None, feeds)[0]

def run(path, how, config=()):
    emu.register_model(onnx.load(path))
    emu.reset_records()
    so = ort.SessionOptions()
    for k, v in config:
        so.add_session_config_entry(k, v)
    try:
        if how == "session":          # plus_ep.InferenceSession: rebuilds what it does not trust
            sess = plus_ep.InferenceSession(path, so, providers=[("PlusEP", {}), "CPUExecutionProvider"])
        elif how == "ep":
            sess = ort.InferenceSession(path, so, providers=["PlusEP", "CPUExecutionProvider"])
        else:
            so.register_custom_ops_library(plus_ep.get_library_path())
            sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        got = sess.run(None, feeds)[0]
    except Exception as e:
        return {"error": " ".join(str(e).split())}
    return {"maxdiff": float(np.max(np.abs(got - want))), "launches": len(emu.records)}

out = []
for step in spec["steps"]:
    os.environ.update(step.get("env", {}))
    if step.get("resolve"):
        model, what = rebuild.resolve(onnx.load(step["model"]))
        onnx.save(model, step["resolve"])
        out.append({"resolve": what})
        continue
    out.append(run(step["model"], step["how"], step.get("config", ())))
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("trust_models")
    good = rewritten_tiny()
    onnx.save(good, d / "good.onnx")
    onnx.save(tiny_model(), d / "reference.onnx")
    np.savez(d / "feeds.npz", X=np.random.default_rng(3).standard_normal((2, 5, 32)).astype(np.float32))

    onnx.save(swap_first_images(good), d / "swapped.onnx")   # image 0 swapped between the two nodes

    foreign = onnx.load(d / "good.onnx")        # a cubin compiled from someone else's source
    from plus_ep.kernels.compile import nvrtc
    src = ('#include "plus_common.cuh"\nextern "C" __global__ void plus_gemm(const PlusArgs args) '
           '{ ((float*)args.out[0])[threadIdx.x] = 42.0f; }\n')
    res = nvrtc.compile_cubin(src, "sm_90a", name="foreign.cu")
    node = trust.kernel_nodes(foreign)[1]
    images = pack.parse(packs_of(node)["sm_90a"])
    images[0] = pack.Image(res.cubin, res.ptx)
    set_pack(node, "sm_90a", pack.write(images))
    onnx.save(foreign, d / "foreign.onnx")
    return d


def _child(models, steps, env=None, tmp=None):
    spec = {"feeds": str(models / "feeds.npz"), "reference": str(models / "reference.onnx"), "steps": steps}
    e = child_env(env)
    for k in ("PLUS_EP_TRUST", "PLUS_EP_TRUST_DIR", "PLUS_EP_TRUSTED_KEYS"):
        e.pop(k, None)
    e["PLUS_EP_CACHE_DIR"] = str(tmp)           # an empty kernel cache and trust manifest
    e.update(env or {})
    r = subprocess.run([sys.executable, "-c", RUNNER, json.dumps(spec)], capture_output=True, text=True, env=e,
                       timeout=600, cwd=str(ROOT))
    assert r.returncode == 0, f"child exited {r.returncode}\n{r.stderr[-4000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


def _runs_right(res):
    assert "error" not in res, res
    assert res["launches"] >= 2 and res["maxdiff"] <= 1e-4, res


def test_swapped_or_foreign_images_are_refused_and_the_local_build_runs(models, tmp_path):
    local = tmp_path / "local.onnx"
    steps = [{"model": str(models / m), "how": how} for m in ("swapped.onnx", "foreign.onnx") for how in ("op", "ep")]
    steps += [{"model": str(models / "swapped.onnx"), "resolve": str(local)}]
    steps += [{"model": str(local), "how": how} for how in ("op", "ep")]
    steps += [{"model": str(models / "swapped.onnx"), "how": "session"}]
    # the manifest of the machine that rewrote the model (its good kernels recorded), an empty kernel cache
    res, stderr = _child(models, steps, env={"PLUS_EP_TRUST_DIR": str(trust.trust_dir())}, tmp=tmp_path / "cache")
    for r, node in zip(res[:4], ["plus_ep/layernorm/0"] * 2 + ["plus_ep/gemm/1"] * 2):
        assert f"PlusEP node '{node}': refusing its embedded kernel images" in r.get("error", ""), r
        assert "plus-ep trust MODEL" in r["error"] and "PLUS_EP_TRUST=any" in r["error"]
    for r, opt_out in zip(res[:4], ["session option plus_ep.trust=any", "provider option trust=any"] * 2):
        assert r["error"].endswith(f"PLUS_EP_TRUST=any, or the {opt_out}"), r     # each path names its own way out
    assert res[4]["resolve"].startswith("local build used: 2 of 2 nodes differed"), res[4]
    for r in res[5:]:                 # the local build on both paths; plus_ep.InferenceSession on its own
        _runs_right(r)
    assert len(list((tmp_path / "cache" / "kernels").rglob("kernel.cubin"))) >= 4   # compiled here, from empty


def test_a_fresh_machine_refuses_every_unverified_node(models, tmp_path):
    res, _ = _child(models, [{"model": str(models / "good.onnx"), "how": how} for how in ("op", "ep")],
                    tmp=tmp_path / "cache")
    for r in res:
        assert "PlusEP node 'plus_ep/layernorm/0': refusing its embedded kernel images" in r.get("error", ""), r
        assert f"in no trust manifest ({tmp_path / 'cache' / 'trusted'})" in r["error"]


def test_signed_model_runs_unchanged(models, tmp_path):
    pytest.importorskip("cryptography", reason="signing needs the [sign] extra (cryptography)")
    signed, other = tmp_path / "signed.onnx", tmp_path / "other.onnx"
    pub, _ = trust.keygen(tmp_path / "release.pem")
    trust.keygen(tmp_path / "stranger.pem")
    for path, key in ((signed, "release.pem"), (other, "stranger.pem")):
        m = onnx.load(models / "good.onnx")
        assert trust.sign_model(m, tmp_path / key) == 2
        onnx.save(m, path)
    steps = [{"model": str(p), "how": how} for p in (signed, other) for how in ("op", "ep")]
    res, _ = _child(models, steps, env={"PLUS_EP_TRUSTED_KEYS": str(pub)}, tmp=tmp_path / "cache")
    _runs_right(res[0])
    _runs_right(res[1])
    for r in res[2:]:
        assert "refusing its embedded kernel images" in r.get("error", "") and "which PLUS_EP_TRUSTED_KEYS=" in r["error"]


@pytest.mark.parametrize("how", ["env", "session"])
def test_opt_out_runs_and_warns_once(models, tmp_path, how):
    good = str(models / "good.onnx")
    if how == "env":
        steps, env = [{"model": good, "how": "op"}, {"model": good, "how": "ep"}], {"PLUS_EP_TRUST": "any"}
    else:
        steps = [{"model": good, "how": "op"}, {"model": good, "how": "op", "config": [["plus_ep.trust", "any"]]},
                 {"model": good, "how": "ep", "config": [["ep.plusep.trust", "any"]]}]
        env = {}
    res, stderr = _child(models, steps, env=env, tmp=tmp_path / "cache")
    if how == "session":
        assert "refusing its embedded kernel images" in res.pop(0).get("error", "")
    for r in res:
        _runs_right(r)
    assert stderr.count(WARNING) == 1, stderr[-3000:]
    assert ("PLUS_EP_TRUST=any: the embedded kernels" if how == "env" else
            "session option plus_ep.trust=any: the embedded kernels") in stderr


def _variant(models, tmp, name, edit):
    """A copy of the good (trusted) model with one node edited by `edit(model, node)`."""
    m = onnx.load(models / "good.onnx")
    edit(m, trust.kernel_nodes(m)[1])
    onnx.save(m, tmp / f"{name}.onnx")
    return str(tmp / f"{name}.onnx")


def _rename(m, node):
    node.name = "plus_ep/gemm/7"


def _retype(m, node):                   # the same kernels under FusedHost1, whose first input is read on the host
    f = next(f for f in m.functions if f.overload == node.overload)
    g = onnx.FunctionProto()
    g.CopyFrom(f)
    g.name = node.op_type = "FusedHost1"
    m.functions.append(g)


def _extra_input(m, node):              # one input more than the node was built with
    node.input.append("X")
    f = next(f for f in m.functions if f.overload == node.overload)
    f.input.append("x_extra")


def _unknown_attribute(m, node):
    node.attribute.append(onnx.helper.make_attribute("evil", "x"))


def _body(m, node):                     # another function body under the same node (Relu dropped)
    f = next(f for f in m.functions if f.overload == node.overload)
    relu = next(n for n in f.node if n.op_type == "Relu")
    out = relu.output[0]
    f.node.remove(relu)
    for n in f.node:
        n.output[:] = [out if o == relu.input[0] else o for o in n.output]


def test_a_trusted_node_renamed_retyped_or_rewired_is_refused(models, tmp_path):
    """Issue 34, case 4: the node digest binds the whole node, so the trusted GEMM renamed, run as
    FusedHost1 or given one input more is refused by both front ends, naming it; an unknown attribute by
    the plugin EP (the custom op cannot list attributes, and runs what it was trusted to run); a changed
    function body is refused by Python's status (the launcher never runs the body)."""
    edits = {"renamed": _rename, "retyped": _retype, "extra_input": _extra_input, "attribute": _unknown_attribute}
    paths = {k: _variant(models, tmp_path, k, e) for k, e in edits.items()}
    steps = [{"model": str(models / "good.onnx"), "how": how} for how in ("op", "ep")]
    steps += [{"model": paths[k], "how": how} for k in edits for how in ("op", "ep")]
    res, _ = _child(models, steps, env={"PLUS_EP_TRUST_DIR": str(trust.trust_dir())}, tmp=tmp_path / "cache")
    _runs_right(res[0])
    _runs_right(res[1])
    got = dict(zip([(k, how) for k in edits for how in ("op", "ep")], res[2:]))
    for k in ("renamed", "retyped", "extra_input"):
        for how in ("op", "ep"):
            err = got[(k, how)].get("error", "")
            node = "plus_ep/gemm/7" if k == "renamed" else "plus_ep/gemm/1"
            assert f"PlusEP node '{node}': refusing its embedded kernel images" in err, (k, how, got[(k, how)])
    assert "attribute 'evil' is not part of a fused node" in got[("attribute", "ep")].get("error", "")
    _runs_right(got[("attribute", "op")])
    m = onnx.load(_variant(models, tmp_path, "body", _body))
    st = {s.node: s for s in trust.status(m)}
    assert st["plus_ep/gemm/1"].how is None and "the body was changed" in st["plus_ep/gemm/1"].why
