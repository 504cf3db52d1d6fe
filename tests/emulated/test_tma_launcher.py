"""Tensor maps end to end: a plan's `tmap` record (CONTRACT.md §3) parsed by the launcher, proved inside its
tensor when the run binds, encoded through the emulated driver's cuTensorMapEncodeTiled and passed as the
kernel's __grid_constant__ second parameter; an NVRTC-compiled sm_90a kernel copies its input box by box with
cp.async.bulk.tensor on the PTX interpreter, in an ORT CPU session (child process: the launcher reads
PLUS_EP_CUDA_LIBRARY once). Output compared with the input (float64 oracle: the identity), and the launcher's
refusals (a map one row past its tensor, a stride off 16 bytes) named per node."""
from __future__ import annotations

import json

import onnx
import pytest
from onnx import TensorProto, helper

from plus_ep.kernels.compile import nvrtc
from plus_ep.kernels.wire import pack
from plus_ep.kernels.wire.plan import parse
from tests.support.emulated_models import run_child
from tests.support.launcher_models import fused_node

SRC = r"""
#include "plus_common.cuh"
struct __align__(64) PlusTmap { unsigned long long w[16]; };
struct PlusTmaps1 { PlusTmap m[1]; };
// out[r][c] = in[r][c] (f32 [rows, cols]): one 16 x 32 box per CTA through TMA, zero-filled past the edges
extern "C" __global__ void __launch_bounds__(128) tma_copy(const PlusArgs args, const __grid_constant__ PlusTmaps1 maps) {
  __shared__ __align__(1024) float tile[16 * 32];
  __shared__ __align__(8) unsigned long long bar;
  const unsigned b = (unsigned)__cvta_generic_to_shared(&bar);
  const int c0 = blockIdx.x * 32, r0 = blockIdx.y * 16;
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(b) : "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(b), "r"(16 * 32 * 4) : "memory");
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                 :: "r"((unsigned)__cvta_generic_to_shared(tile)), "l"(&maps.m[0]), "r"(c0), "r"(r0), "r"(b) : "memory");
  }
  __syncthreads();
  unsigned done = 0;
  while (!done)
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\nselp.u32 %0, 1, 0, p;\n}"
                 : "=r"(done) : "r"(b) : "memory");
  const long long rows = args.v[0], cols = args.v[1];
  for (int i = threadIdx.x; i < 16 * 32; i += 128) {
    const long long r = r0 + i / 32, c = c0 + i % 32;
    if (r < rows && c < cols) ((float*)args.out[0])[r * cols + c] = tile[i];
  }
}
"""

PLAN = """plusplan 1
node fused_tma
sym 0 rows
sym 1 cols
in 0 1 2 s0 s1
out 0 1 2 s0 s1
extent in 0 s0,s1,*
extent out 0 s0,s1,*
val 0 s0
val 1 s1
route 0 1
kernel 0 0 tma_copy s1,32,cdiv s0,16,cdiv 1 128 1 1 0
tmap 1 2 in 0 0 DIMS s1 32 16 0
end
"""

RUNNER = r"""
import json, sys
import numpy as np, onnx, onnxruntime as ort
from plus_ep.verification.emulator import Emulator
from plus_ep.library import get_library_path
path, rows, cols = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
emu = Emulator.get()
emu.register_model(onnx.load(path))
emu.set_arch("sm_90a")
so = ort.SessionOptions()
so.register_custom_ops_library(get_library_path())
so.log_severity_level = 3
sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
x = (np.arange(rows * cols, dtype=np.float32).reshape(rows, cols) % 1009) - 500.0
out = {}
try:
    z = sess.run(None, {"X": x})[0]
    out["equal"] = bool(np.array_equal(z, x))
except Exception as e:
    out["error"] = str(e)
out["records"] = [[r.entry, list(r.grid), r.findings] for r in emu.records]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def image():
    r = nvrtc.compile_cubin(SRC, "sm_90a", name="tma_copy.cu")
    return pack.write([pack.Image(r.cubin, r.ptx)])


def _run(tmp_path, image, rows, cols, dims="s1 s0"):
    plan = PLAN.replace("DIMS", dims)
    assert parse(plan).text() == plan                         # the Python reader reads what the launcher does
    node = fused_node("fused_tma", ["X"], ["Z"], "t1", plan, {"sm_90a": image})
    fn = helper.make_function("ai.plus_ep", "Fused", ["A"], ["C"], [helper.make_node("Identity", ["A"], ["C"])],
                              [helper.make_opsetid("", 17)], overload="t1")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["r", "c"])],
                          [helper.make_tensor_value_info("Z", TensorProto.FLOAT, ["r", "c"])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.plus_ep", 1)],
                          functions=[fn], ir_version=10)
    path = tmp_path / "tma.onnx"
    onnx.save(m, path)
    return json.loads(run_child(RUNNER, [path, rows, cols]))


@pytest.mark.parametrize("rows,cols", [(16, 32), (37, 44), (5, 100)])
def test_tma_copy_through_the_launcher(tmp_path, image, rows, cols):
    res = _run(tmp_path, image, rows, cols)
    assert res.get("equal") is True, res
    grid = [-(-cols // 32), -(-rows // 16), 1]
    assert res["records"] == [["tma_copy", grid, []]]


def test_map_one_row_past_the_tensor_is_refused_before_launch(tmp_path, image):
    res = _run(tmp_path, image, 37, 44, dims="s1 s0,1,+")
    err = res["error"]
    assert "PlusEP node 'fused_tma'" in err and "tensor map 0 of kernel `tma_copy`" in err, err
    assert "would reach outside the tensor" in err and res["records"] == []


def test_row_stride_off_16_bytes_is_refused_before_launch(tmp_path, image):
    res = _run(tmp_path, image, 8, 37)                         # 37 floats per row: 148-byte stride
    err = res["error"]
    assert "PlusEP node 'fused_tma'" in err and "not a multiple of 16 bytes" in err, err
    assert res["records"] == []
