"""The emulated CUDA driver (plus_ep/_emucuda, plus_ep/verification/emulator.py) under the real launcher in ORT CPU
sessions: NVRTC-compiled kernels (real cubins, their PTX in PLUSIMG2 packs) run on the PTX interpreter.

Each case runs in a child process: the launcher reads PLUS_EP_CUDA_LIBRARY once per process (and
`import plus_ep` loads it). Covers image choice by the emulated device's arch (exact cubin, sm_90a on
9.0, an older arch's PTX on a newer device, never sm_90a PTX elsewhere), interpreter errors and checker
findings as ORT errors naming the node, 16 threads on one session, device memory released."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from plus_ep.kernels.compile import nvrtc
from plus_ep.kernels.wire import pack

from tests.support.emulated_models import run_child
from tests.support.launcher_models import PLAN, function, fused_node, model

SRC = r"""
#include "plus_common.cuh"
__device__ long long gid() { return blockIdx.x * (long long)blockDim.x + threadIdx.x; }
extern "C" __global__ void fake_add_marker(const PlusArgs args) {
  long long i = gid();
  if (i < args.v[0]) ((float*)args.out[0])[i] = ((const float*)args.in[0])[i] + ((const float*)args.in[1])[i] + 1000.0f;
}
extern "C" __global__ void fake_fill(const PlusArgs args) {
  long long i = gid();
  if (i < args.v[0]) ((float*)args.out[0])[i] = (float)args.v[1];
}
extern "C" __global__ void plus_oob(const PlusArgs args) {          // reads 1 MB past input 0
  long long i = gid();
  if (i < args.v[0]) ((float*)args.out[0])[i] = ((const float*)args.in[0])[i + (1 << 18)];
}
extern "C" __global__ void plus_uninit(const PlusArgs args) {       // reads shared memory never written
  extern __shared__ float s[];
  long long i = gid();
  if (i < args.v[0]) ((float*)args.out[0])[i] = s[threadIdx.x];
}
"""

RUNNER = r"""
import json, sys, threading
import numpy as np, onnx, onnxruntime as ort
from plus_ep.verification.emulator import Emulator
from plus_ep.library import get_library_path
path, mode, arch = sys.argv[1], sys.argv[2], sys.argv[3]
emu = Emulator.get()
emu.register_model(onnx.load(path))
emu.set_arch(arch)
so = ort.SessionOptions()
so.register_custom_ops_library(get_library_path())
so.log_severity_level = 3
sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
def feed(n, t=0):
    return {"X": np.arange(n, dtype=np.float32) + t, "Y": np.full(n, 2, np.float32)}
out = {}
try:
    if mode == "run":
        out["small"] = sess.run(None, feed(5))[0].tolist()
        out["large"] = sess.run(None, feed(3000))[0][:3].tolist()
    elif mode == "threads":
        res, errors = {}, []
        def work(t):
            try:
                res[t] = [sess.run(None, feed(40 + t, t))[0] for _ in range(int(sys.argv[4]))]
            except Exception as e:
                errors.append(str(e))
        ts = [threading.Thread(target=work, args=(t,)) for t in range(16)]
        [t.start() for t in ts]; [t.join() for t in ts]
        out["errors"] = errors[:3]
        out["bad"] = [t for t, o in res.items() if any(not np.array_equal(x, o[0]) for x in o)
                      or not np.array_equal(o[0], feed(40 + t, t)["X"] + 2 + 1000)]
        out["threads"] = len(res)
except Exception as e:
    out["error"] = str(e)
out["records"] = [[r.arch, r.entry, list(r.grid), r.node] for r in emu.records]
out["loads"] = [k[:4] for _, k in emu.load_order]
out["ptx_targets"] = sorted({m.module.text.split(".target", 1)[1].split()[0] for m in emu._modules.values()})
out["live_allocations"] = emu.live_allocations()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def images():
    out = {}
    for arch in ("sm_80", "sm_90a"):
        r = nvrtc.compile_cubin(SRC, arch, name="emu_test.cu")
        assert r.ptx and ".target" in r.ptx
        out[arch] = pack.Image(r.cubin, r.ptx)
    return out


def _save(tmp_path, packs, plan=PLAN) -> str:
    m = model([fused_node("fused_add", ["X", "Y"], ["Z"], "k1", plan, packs)], [function("k1", ["A", "B"], "Add")])
    path = tmp_path / "model.onnx"
    onnx.save(m, path)
    return str(path)


def _run(path, mode, arch, *extra):
    return json.loads(run_child(RUNNER, [path, mode, arch, *extra]))


def test_exact_arch_cubin_runs_its_ptx(tmp_path, images):
    path = _save(tmp_path, {"sm_80": pack.write([images["sm_80"]]), "sm_90a": pack.write([images["sm_90a"]])})
    res = _run(path, "run", "sm_80")
    assert res["small"] == [1002.0, 1003.0, 1004.0, 1005.0, 1006.0]   # x + y + 1000: the kernel ran
    assert res["large"] == [7.0, 7.0, 7.0]                             # route 1: fake_fill with v1 = 7
    assert [r[:3] for r in res["records"]] == [["sm_80", "fake_add_marker", [1, 1, 1]],
                                               ["sm_80", "fake_fill", [12, 1, 1]]]
    assert res["records"][0][3] == "fused_add" and res["ptx_targets"] == ["sm_80"]
    assert res["live_allocations"] == 0                                # staging freed every buffer
    res = _run(path, "run", "sm_90")                                   # 9.0 prefers the sm_90a pack
    assert {r[0] for r in res["records"]} == {"sm_90a"} and res["ptx_targets"] == ["sm_90a"]


def test_newer_device_jits_an_older_archs_ptx_never_sm90a(tmp_path, images):
    both = {"sm_80": pack.write([images["sm_80"]]), "sm_90a": pack.write([images["sm_90a"]])}
    res = _run(_save(tmp_path, both), "run", "sm_100")
    assert res["small"] == [1002.0, 1003.0, 1004.0, 1005.0, 1006.0]
    assert res["loads"] == ["ptx:"] and res["ptx_targets"] == ["sm_80"]   # the PTX image, not a cubin
    assert {r[0] for r in res["records"]} == {"ptx"}
    only_a = {"sm_90a": pack.write([images["sm_90a"]])}
    res = _run(_save(tmp_path, only_a), "run", "sm_100")
    assert "no kernel image for the device's arch sm_100" in res["error"] and res["records"] == []
    no_ptx = {"sm_80": pack.write([images["sm_80"].cubin])}            # a pack without PTX: nothing to JIT
    res = _run(_save(tmp_path, no_ptx), "run", "sm_100")
    assert "PlusEP node 'fused_add'" in res["error"] and "no kernel image" in res["error"]


def test_pack_without_ptx_is_an_error_naming_the_node(tmp_path, images):
    res = _run(_save(tmp_path, {"sm_80": pack.write([images["sm_80"].cubin])}), "run", "sm_80")
    assert "PlusEP node 'fused_add'" in res["error"] and "has no PTX registered with the emulator" in res["error"]


def test_interpreter_error_is_an_ort_error_naming_the_node(tmp_path, images):
    plan = PLAN.replace("fake_add_marker", "plus_oob")
    res = _run(_save(tmp_path, {"sm_80": pack.write([images["sm_80"]])}, plan), "run", "sm_80")
    err = res["error"]
    assert "PlusEP node 'fused_add'" in err and "cuLaunchKernel of 'plus_oob'" in err, err
    assert "CUDA_ERROR_LAUNCH_FAILED: PTX interpreter" in err, err
    assert res["live_allocations"] == 0


def test_checker_finding_is_an_ort_error_naming_the_node(tmp_path, images):
    plan = PLAN.replace("fake_add_marker", "plus_uninit").replace(" 256 1 1 0\n", " 256 1 1 1024\n", 1)
    res = _run(_save(tmp_path, {"sm_80": pack.write([images["sm_80"]])}, plan), "run", "sm_80")
    err = res["error"]
    assert "PlusEP node 'fused_add'" in err and "cuLaunchKernel of 'plus_uninit'" in err, err
    assert "PTX interpreter" in err and ("finding" in err or "uninitialised" in err or "uninitialized" in err), err


def test_sixteen_threads_one_session_identical_outputs(tmp_path, images):
    res = _run(_save(tmp_path, {"sm_80": pack.write([images["sm_80"]])}), "threads", "sm_80", 5)
    assert res["errors"] == [] and res["threads"] == 16 and res["bad"] == [], res
    assert len(res["records"]) == 16 * 5 and res["live_allocations"] == 0


def test_pack_format_round_trip_and_v1(images):
    blob = pack.write([images["sm_80"], images["sm_80"].cubin])
    back = pack.parse(blob)
    assert back[0] == images["sm_80"] and back[1] == pack.Image(images["sm_80"].cubin, None)
    assert pack.unpack_images(blob) == [images["sm_80"].cubin] * 2
    import struct
    v1 = b"PLUSIMG1" + struct.pack("<IQQ", 1, 28, 3) + b"abc"
    assert pack.parse(v1) == [pack.Image(b"abc", None)]
    with pytest.raises(pack.PackError, match="not NUL-terminated"):
        bad = bytearray(blob)
        (po, ps) = struct.unpack_from("<QQ", blob, 12 + 16)
        bad[po + ps - 1] = ord("x")
        pack.parse(bytes(bad))
    with pytest.raises(pack.PackError, match="does not start with"):
        pack.parse(b"PLUSIMG9" + bytes(8))
    assert np.frombuffer(blob, np.uint8).size % 16 == 0
