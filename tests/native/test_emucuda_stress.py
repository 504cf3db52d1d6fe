"""The emulated CUDA driver's thread safety under sanitizers, without Python: tests/native/emucuda_stress.c
(C callbacks standing in for the PTX interpreter) runs launches on streams that other threads destroy,
waits that run every stream's work, and attach/detach cycles that free the callbacks' state right after
a detach, linked with plus_ep/native/emucuda.c under AddressSanitizer (use after free, leaks: every
function handle is freed with its module) and ThreadSanitizer (a stream freed while another thread runs
it, a detach returning while a callback is in flight). A few seconds each."""
from __future__ import annotations

import os
import re
import subprocess

import pytest

from tests.support import sanitize


@pytest.mark.parametrize("kind", ["address", "thread"])
def test_driver_threads_under_sanitizer(tmp_path, kind):
    cc = sanitize.gcc(kind)
    if cc is None:
        pytest.skip(sanitize.why(kind))
    exe = sanitize.stress(tmp_path, cc, kind)
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0", TSAN_OPTIONS="halt_on_error=1",
               UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
    r = subprocess.run([str(exe), "2"], capture_output=True, text=True, env=env, timeout=180)
    assert r.returncode == 0 and "Sanitizer" not in r.stderr, r.stderr[-6000:]
    counts = dict((k, int(v)) for k, v in re.findall(r"(\w+) (\d+)", r.stdout))
    # every path ran: launches through attached callbacks, detaches, streams destroyed with queued work
    assert counts["launched"] > 20 and counts["detaches"] > 20 and counts["streams"] > 50, r.stdout
