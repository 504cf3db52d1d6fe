"""A thread-block-cluster kernel under the real launcher on the emulated CUDA driver (ORT CPU session,
cuLaunchKernel -> plus_ep/verification/emulator.py -> Kernel.launch): the cluster shape comes from the PTX
(__cluster_dims__), the plan's grid is a multiple of it, and DSMEM stores between the two CTAs of each
cluster give the element-wise result; a grid that is not a multiple is an ORT error naming the node."""
from __future__ import annotations

import json

import onnx
import pytest
from plus_ep.kernels.compile import nvrtc
from plus_ep.kernels.wire import pack

from tests.support.emulated_models import run_child
from tests.support.launcher_models import function, fused_node, model

SRC = r"""
#include "plus_common.cuh"
// Z = X + Y + 1000, with X passed through the partner CTA of the cluster: CTA c stores its X slice in
// the shared memory of rank r ^ 1 (CTA c ^ 1), which after the cluster barrier writes those outputs.
extern "C" __global__ void __cluster_dims__(2, 1, 1) plus_cluster_add(const PlusArgs args) {
  __shared__ float s[256];
  unsigned r, a = (unsigned)__cvta_generic_to_shared(s + threadIdx.x), ra;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(a), "r"(r ^ 1u));
  const long long n = args.v[0];
  const long long mine = blockIdx.x * 256LL + threadIdx.x, theirs = (blockIdx.x ^ 1u) * 256LL + threadIdx.x;
  float x = mine < n ? ((const float*)args.in[0])[mine] : 0.0f;
  asm volatile("st.shared::cluster.f32 [%0], %1;" :: "r"(ra), "f"(x) : "memory");
  asm volatile("barrier.cluster.arrive.release.aligned; barrier.cluster.wait.acquire.aligned;" ::: "memory");
  if (theirs < n) ((float*)args.out[0])[theirs] = s[threadIdx.x] + ((const float*)args.in[1])[theirs] + 1000.0f;
}
"""

PLAN = """plusplan 1
node fused_add
in 0 1 1 s0
in 1 1 1 s0
sym 0 n
out 0 1 1 s0
val 0 s0
route 0 1
kernel 0 0 plus_cluster_add GRID 1 1 256 1 1 0
extent in 0 s0
extent in 1 s0
extent out 0 s0
end
"""

RUNNER = r"""
import json, sys
import numpy as np, onnx, onnxruntime as ort
from plus_ep.verification.emulator import Emulator
from plus_ep.library import get_library_path
path = sys.argv[1]
emu = Emulator.get()
emu.register_model(onnx.load(path))
emu.set_arch("sm_90a")
so = ort.SessionOptions()
so.register_custom_ops_library(get_library_path())
so.log_severity_level = 3
sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
out = {}
try:
    x, y = np.arange(700, dtype=np.float32), np.full(700, 2, np.float32)
    out["ok"] = bool(np.array_equal(sess.run(None, {"X": x, "Y": y})[0], x + y + 1000))
except Exception as e:
    out["error"] = str(e)
out["records"] = [[r.entry, list(r.grid), r.findings, r.counters.get("dsmem_st", {})] for r in emu.records]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def image():
    r = nvrtc.compile_cubin(SRC, "sm_90a", name="cluster_driver.cu")
    assert ".reqnctapercluster 2, 1, 1" in r.ptx
    return pack.Image(r.cubin, r.ptx)


def _run(tmp_path, image, grid):
    plan = PLAN.replace("GRID", grid)
    m = model([fused_node("fused_add", ["X", "Y"], ["Z"], "k1", plan, {"sm_90a": pack.write([image])})],
              [function("k1", ["A", "B"], "Add")])
    path = tmp_path / "model.onnx"
    onnx.save(m, path)
    return json.loads(run_child(RUNNER, [path]))


def test_cluster_kernel_through_the_launcher(tmp_path, image):
    res = _run(tmp_path, image, "s0,512,cdiv,2,*")             # 700 elements: 2 clusters of 2 CTAs
    assert res.get("ok") is True, res
    assert res["records"] == [["plus_cluster_add", [4, 1, 1], [], {"requests": 4 * 8, "bytes": 4 * 256 * 4}]]


def test_grid_not_a_multiple_of_the_cluster_is_an_ort_error(tmp_path, image):
    res = _run(tmp_path, image, "s0,256,cdiv")                # 3 CTAs
    err = res.get("error", "")
    assert "PlusEP node 'fused_add'" in err and "not a multiple of the cluster shape" in err, res
