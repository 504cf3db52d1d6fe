"""The emulated CUDA driver behaves like a GPU where the plugin EP's GPU-device path depends on it:
stream order (work queued on a stream runs only when waited for; the legacy stream waits for blocking
streams, not for non-blocking ones), stream capture and graphs with CUDA's restrictions, copies that
refuse host memory as device memory, and a kernel handed a host pointer failing at cuLaunchKernel.

The driver is called directly (ctypes) in a child process, with one NVRTC kernel `twice`
(out[0][i] = 2 * in[0][i]) run on the PTX interpreter; cheap (about 10 s)."""
from __future__ import annotations

import json

import pytest
from plus_ep.kernels.compile import nvrtc

from tests.support.emulated_models import run_child

SRC = r"""
#include "plus_common.cuh"
extern "C" __global__ void twice(const PlusArgs args) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < args.v[0]) ((float*)args.out[0])[i] = 2.0f * ((const float*)args.in[0])[i];
}
"""

RUNNER = r"""
import ctypes as C, json, sys
import numpy as np
from plus_ep.verification.emulator import Emulator
emu = Emulator.get()
lib = emu.lib
ptx = open(sys.argv[1]).read().encode() + b"\0"
out = {}
def ck(r, what):
    if r:
        s = C.c_char_p(); lib.cuGetErrorName(r, C.byref(s))
        raise RuntimeError(f"{what}: {r} {s.value.decode()}")
def err(r):
    s = C.c_char_p(); lib.cuGetErrorName(r, C.byref(s))
    return [r, s.value.decode() if s.value else ""]
for f in ("cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuMemFree_v2", "cuMemAlloc_v2"):
    getattr(lib, f).argtypes = None
ck(lib.cuInit(0), "init")
dev = C.c_int(); ck(lib.cuDeviceGet(C.byref(dev), 0), "dev")
ctx = C.c_void_p(); ck(lib.cuDevicePrimaryCtxRetain(C.byref(ctx), dev), "ctx")
ck(lib.cuCtxPushCurrent_v2(ctx), "push")
mod = C.c_void_p(); ck(lib.cuModuleLoadData(C.byref(mod), C.c_char_p(ptx)), "load")
fn = C.c_void_p(); ck(lib.cuModuleGetFunction(C.byref(fn), mod, b"twice"), "fn")
N = 64
class Args(C.Structure):
    _fields_ = [("inp", C.c_void_p * 64), ("out", C.c_void_p * 8), ("scratch", C.c_void_p * 4), ("v", C.c_longlong * 32)]
def alloc(n):
    p = C.c_ulonglong(); ck(lib.cuMemAlloc_v2(C.byref(p), C.c_size_t(n)), "alloc"); return p.value
x, y = alloc(4 * N), alloc(4 * N)
host = np.arange(N, dtype=np.float32)
ck(lib.cuMemcpyHtoD_v2(C.c_ulonglong(x), host.ctypes.data_as(C.c_void_p), C.c_size_t(4 * N)), "htod")
def launch(stream, src=x, dst=y):
    a = Args(); a.inp[0] = src; a.out[0] = dst; a.v[0] = N
    params = (C.c_void_p * 1)(C.cast(C.pointer(a), C.c_void_p))
    return lib.cuLaunchKernel(fn, 1, 1, 1, N, 1, 1, 0, C.c_void_p(stream), params, None)
def read(p=y):
    h = np.zeros(N, np.float32)
    r = lib.cuMemcpyDtoH_v2(h.ctypes.data_as(C.c_void_p), C.c_ulonglong(p), C.c_size_t(4 * N))
    return r, h
def stream(flags):
    s = C.c_void_p(); ck(lib.cuStreamCreate(C.byref(s), flags), "stream"); return s.value

# a blocking stream: the legacy DtoH waits for it
s = stream(0)
ck(launch(s), "launch s")
out["pending_after_launch"] = emu.pending()
r, h = read()
out["blocking"] = [r, bool(np.array_equal(h, 2 * host)), emu.pending()]
# a non-blocking stream: the legacy DtoH does not wait; cuStreamSynchronize does
ns = stream(1)
z = alloc(4 * N)
ck(launch(ns, dst=z), "launch ns")
r, h = read(z)
out["nonblocking_before_sync"] = [r, bool(np.isnan(h).all())]
ck(lib.cuStreamSynchronize(C.c_void_p(ns)), "sync ns")
r, h = read(z)
out["nonblocking_after_sync"] = [r, bool(np.array_equal(h, 2 * host))]
# a host pointer as a kernel argument: refused at cuLaunchKernel, naming the word
r = launch(s, src=host.ctypes.data)
out["host_pointer"] = err(r)
out["host_pointer_record"] = [emu.records[-1].entry, len(emu.records[-1].findings)]
# copies refuse host memory as device memory
other = np.zeros(N, np.float32)
out["htod_to_host"] = err(lib.cuMemcpyHtoD_v2(C.c_ulonglong(other.ctypes.data), host.ctypes.data_as(C.c_void_p),
                                              C.c_size_t(4 * N)))
# capture: recorded, not run; a legacy-stream copy invalidates it
ck(lib.cuStreamBeginCapture_v2(C.c_void_p(s), 2), "begin")
ck(launch(s), "launch captured")
out["pending_while_capturing"] = emu.pending()
out["legacy_copy_while_capturing"] = err(read()[0])
g = C.c_void_p()
out["end_invalidated"] = err(lib.cuStreamEndCapture(C.c_void_p(s), C.byref(g)))
# global mode: cuMemAlloc refused while capturing
ck(lib.cuStreamBeginCapture_v2(C.c_void_p(s), 0), "begin global")
p = C.c_ulonglong()
out["alloc_while_capturing"] = err(lib.cuMemAlloc_v2(C.byref(p), C.c_size_t(16)))
lib.cuStreamEndCapture(C.c_void_p(s), C.byref(g))
# a good capture: the graph reads the input at launch time (not when captured)
ck(lib.cuStreamBeginCapture_v2(C.c_void_p(s), 2), "begin good")
ck(launch(s), "launch captured")
ck(lib.cuStreamEndCapture(C.c_void_p(s), C.byref(g)), "end")
ex = C.c_void_p(); ck(lib.cuGraphInstantiateWithFlags(C.byref(ex), g, C.c_ulonglong(0)), "instantiate")
host2 = np.full(N, 3.5, np.float32)
ck(lib.cuMemcpyHtoD_v2(C.c_ulonglong(x), host2.ctypes.data_as(C.c_void_p), C.c_size_t(4 * N)), "htod2")
ck(lib.cuGraphLaunch(ex, C.c_void_p(s)), "graph launch")
out["pending_after_graph_launch"] = emu.pending()
ck(lib.cuStreamSynchronize(C.c_void_p(s)), "sync")
r, h = read()
out["graph_replay"] = [r, bool(np.array_equal(h, 2 * host2))]
ck(lib.cuGraphExecDestroy(ex), "exec destroy"); ck(lib.cuGraphDestroy(g), "graph destroy")
for p in (x, y, z):
    ck(lib.cuMemFree_v2(C.c_ulonglong(p)), "free")
ck(lib.cuStreamDestroy_v2(C.c_void_p(s)), "destroy"); ck(lib.cuStreamDestroy_v2(C.c_void_p(ns)), "destroy")
out["live"] = emu.live_allocations()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def ptx(tmp_path_factory):
    r = nvrtc.compile_cubin(SRC, "sm_90a", name="streams.cu")
    path = tmp_path_factory.mktemp("streams") / "twice.ptx"
    path.write_text(r.ptx)
    return str(path)


def test_stream_order_capture_and_host_pointers(ptx):
    out = json.loads(run_child(RUNNER, [ptx]))
    assert out["pending_after_launch"] == 1                       # queued, not run
    assert out["blocking"] == [0, True, 0]                        # the legacy copy waited for the blocking stream
    assert out["nonblocking_before_sync"] == [0, True]            # ... not for a non-blocking one: still poisoned
    assert out["nonblocking_after_sync"] == [0, True]
    code, msg = out["host_pointer"]
    assert code == 700 and "CUDA_ERROR_ILLEGAL_ADDRESS" in msg and "host address outside every device allocation" in msg
    assert out["host_pointer_record"] == ["twice", 1]             # recorded as a finding of that kernel
    assert out["htod_to_host"][0] == 1 and "not inside one device allocation" in out["htod_to_host"][1]
    assert out["pending_while_capturing"] == 0                    # recorded into the graph
    assert out["legacy_copy_while_capturing"][0] == 906           # CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
    assert out["end_invalidated"][0] == 901                       # ... which invalidated the capture
    assert out["alloc_while_capturing"][0] == 900                 # global mode: no cuMemAlloc
    assert out["pending_after_graph_launch"] == 1
    assert out["graph_replay"] == [0, True]                       # the input as it is at replay time
    assert out["live"] == 0
