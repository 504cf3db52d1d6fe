"""The emulated CUDA driver at interpreter exit and across threads, through the real launcher and the
plugin EP (each case a child process: the launcher reads PLUS_EP_CUDA_LIBRARY once per process).

Sessions still alive when Python exits are destroyed during finalization (module teardown, the last
garbage collection); their kernels unload then, when the Emulator and its ctypes callbacks may already be
gone. The Emulator detaches from the driver at exit (an atexit hook), so those unloads no longer call
into Python: the child exits 0 with nothing on stderr, plain and with the driver built under ASan. A detach
waits for a launch in flight on another thread; after it, a launch fails naming the detached interpreter.
Function handles are freed with their module."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("onnxruntime")

from tests.support import sanitize  # noqa: E402
from tests.support.emulated_models import ROOT, child_env  # noqa: E402

SETUP = r"""
import gc, json, sys, threading, time
import numpy as np, onnxruntime as ort
from plus_ep.verification.emulator import Emulator
emu = Emulator.get()
import plus_ep
from tests.support.emulated_models import rewritten_tiny
model = rewritten_tiny(archs=("sm_90a",))
emu.register_model(model)
data = model.SerializeToString()
x = np.random.default_rng(0).standard_normal((1, 4, 32)).astype(np.float32)
def session():
    return ort.InferenceSession(data, providers=["PlusEP", "CPUExecutionProvider"])
"""

AT_EXIT = SETUP + r"""
class Holder:   # a reference cycle: only the last garbage collection of finalization frees these sessions
    pass
h = Holder(); h.me = h
h.sessions = [session() for _ in range(2)]
outs = []
def run(s):
    for _ in range(2):
        outs.append(s.run(None, {"X": x})[0])
ts = [threading.Thread(target=run, args=(s,)) for s in h.sessions]
[t.start() for t in ts]; [t.join() for t in ts]
assert all(np.array_equal(o, outs[0]) for o in outs)
print(json.dumps({"launches": len(emu.records), "errors": [r.error for r in emu.records if r.error]}))
"""


def _child(script: str, env: dict, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=str(ROOT),
                          timeout=timeout, check=False)


def _clean_exit(r: subprocess.CompletedProcess) -> dict:
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stderr[-6000:]}"
    noise = [ln for ln in r.stderr.splitlines() if any(w in ln for w in ("Exception ignored", "Traceback", "Error",
                                                                          "Sanitizer"))]
    assert not noise, r.stderr[-6000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_sessions_alive_at_exit_exit_cleanly():
    out = _clean_exit(_child(AT_EXIT, child_env()))
    assert out["launches"] == 8 and not out["errors"]     # 2 sessions x 2 runs x 2 kernels, all on the interpreter


def test_sessions_alive_at_exit_under_asan(tmp_path):
    cc = sanitize.gcc("address")
    if cc is None:
        pytest.skip(sanitize.why("address"))
    lib = sanitize.driver(tmp_path, cc)
    env = sanitize.preload_env(cc, child_env({"PLUS_EP_CUDA_LIBRARY": str(lib)}))
    out = _clean_exit(_child(AT_EXIT + "\nassert emu.path.endswith('libemucuda_asan.so')\n",
                             env, timeout=600))
    assert out["launches"] == 8 and not out["errors"]


DETACH = SETUP + r"""
from plus_ep.verification.emulator import _detach
gone = session()                     # function handles are freed with their module
gone.run(None, {"X": x})
functions = [emu.live_functions()]
del gone
gc.collect()
functions.append(emu.live_functions())
sess = session()
entered, left = threading.Event(), threading.Event()
def slow(rec):                       # the launch callback is in flight while this sleeps
    if not entered.is_set():
        entered.set(); time.sleep(1.0); left.set()
emu.progress = slow
t = threading.Thread(target=lambda: sess.run(None, {"X": x}))
t.start()
entered.wait(120)
_detach(emu.lib, ())                 # what the atexit hook does
waited = left.is_set()               # the detach returned only after the callback had finished
t.join()
emu.progress = None
try:
    sess.run(None, {"X": x})
    err = ""
except Exception as e:
    err = str(e)
print(json.dumps({"waited": waited, "attached": emu.attached(), "error": err, "functions": functions}))
"""


def test_detach_waits_for_a_launch_in_flight_and_functions_are_freed():
    r = _child(DETACH, child_env())
    assert r.returncode == 0, r.stderr[-4000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["waited"] and not out["attached"]
    assert "no PTX interpreter is attached to the emulated CUDA driver" in out["error"], out["error"]
    assert out["functions"][0] >= 2 and out["functions"][1] == 0, out["functions"]
