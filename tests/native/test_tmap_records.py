"""The launcher's `tmap` record (plus_ep/native/tmap.c, CONTRACT.md §3) through the native harness's plan parser,
plain and under AddressSanitizer + UBSan: good records parse (and the Python reader agrees), each malformed one is
refused naming the line and the rule. Binding and encoding run end to end in tests/emulated/test_tma_launcher.py."""
from __future__ import annotations

import pytest

from plus_ep.kernels.wire.plan import parse
from tests.native.test_launcher import GCC, SANITIZE, Harness, build, one_pack

PLAN = """plusplan 1
node tm
sym 0 m
sym 1 k
in 0 10 2 s0 s1
out 0 10 2 s0 s1
val 0 s0
route 0 1
kernel 0 0 fake_add s1,64,cdiv s0,128,cdiv 1 384 1 1 1024
TMAP
end
"""
GOOD = "tmap 10 2 in 0 0 s1 s0 s1 64 128 128"

pytestmark = pytest.mark.skipif(GCC is None, reason="needs a C compiler")


@pytest.fixture(scope="module", params=["plain", "asan"])
def h(request, tmp_path_factory):
    base = tmp_path_factory.mktemp(f"tmap_{request.param}")
    exe, fake = build(base, SANITIZE if request.param == "asan" else [])
    return Harness(exe, fake, base)


def _create(h, text):
    """Create a kernel object from the plan (the launcher parses `tmap` records then), run it on the
    stand-in driver; returns the harness's error."""
    return h.err("run", h.file(text), "--pack", "sm_90a=" + h.file(one_pack("sm_90a"), ".bin"), "--in", "10:4x8")


def test_good_records_parse(h):
    text = PLAN.replace("TMAP", GOOD + "\n" + "tmap 10 2 out 0 0 s1 s0 s1 8 4 0")
    assert "kernels=1" in h.ok("parse", h.file(text))
    assert parse(text).text() == text
    assert len(parse(text).routes[0].launches[0].tmaps) == 2
    # the stand-in driver has no cuTensorMapEncodeTiled: the launch that needs one says so
    assert "needs tensor maps but the CUDA driver lacks cuTensorMapEncodeTiled" in _create(h, text)


@pytest.mark.parametrize("record,why", [
    ("tmap 10 2 in 0 0 s1 s0 s1 64 128", "rank 2 takes 12 fields"),
    ("tmap 8 2 in 0 0 s1 s0 s1 64 128 128", "dtype `8` has no tensor-map element type"),
    ("tmap 1 2 in 0 0 s1 s0 s1 64 128 128", "dtype differs from input 0's"),
    ("tmap 10 6 in 0 0 s1 s0 s1 64 128 128", "rank `6` must be 1 to 5"),
    ("tmap 10 2 ins 0 0 s1 s0 s1 64 128 128", "expected `in`, `out` or `scratch`"),
    ("tmap 10 2 in 1 0 s1 s0 s1 64 128 128", "in index `1` names no declared tensor"),
    ("tmap 10 2 in 0 0 s1 s0 s1 64 257 128", "box dim 1 `257` must be 1 to 256"),
    ("tmap 10 2 in 0 0 s1 s0 s1 4 128 0", "not a multiple of 16"),
    ("tmap 10 2 in 0 0 s1 s0 s1 64 128 48", "swizzle `48` must be 0, 32, 64 or 128"),
    ("tmap 10 2 in 0 0 s1 s0 s1 64 128 64", "exceeds the 64-byte swizzle"),
    ("tmap 10 2 in 0 0 s1 s9 s1 64 128 128", "symbol s9"),
])
def test_malformed_records_are_refused(h, record, why):
    msg = _create(h, PLAN.replace("TMAP", record))
    assert msg.startswith("PlusEP node 'tm': plus_plan line 10 `tmap"), msg
    assert why in msg, msg


def test_record_needs_a_kernel_line_above(h):
    text = PLAN.replace("kernel 0 0 fake_add s1,64,cdiv s0,128,cdiv 1 384 1 1 1024\nTMAP", GOOD)
    assert "belongs to the `kernel` line above it" in h.err("parse", h.file(text))


def test_at_most_eight_maps_per_kernel_line(h):
    msg = _create(h, PLAN.replace("TMAP", "\n".join([GOOD] * 9)))
    assert "more than 8 tmap records for one kernel line" in msg
