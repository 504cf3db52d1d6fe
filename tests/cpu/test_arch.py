"""kernels/arch.py is the one arch table of Python, and it agrees with the C launcher's."""
from __future__ import annotations

import re

import pytest

from plus_ep.kernels import arch, routes
from plus_ep.kernels.compile import nvrtc
from tests.support.imports import PACKAGE_DIRS, ROOT

NATIVE = PACKAGE_DIRS["plus_ep"] / "native"


def _c_known_archs() -> list[str]:
    """The arch names the launcher probes (`KNOWN_ARCHS[] = {...}` in plus_ep/native)."""
    for f in sorted(NATIVE.glob("*.c")) + sorted(NATIVE.glob("*.h")):
        m = re.search(r"KNOWN_ARCHS\s*\[\s*\]\s*=\s*\{(.*?)\};", f.read_text(), re.S)
        if m:
            return re.findall(r'"(sm_\d+a?)"', m.group(1))
    raise AssertionError("no KNOWN_ARCHS table in plus_ep/native: the launcher's arch table moved")


def test_every_arch_we_build_for_is_one_the_launcher_probes():
    known = _c_known_archs()
    assert len(known) >= len(arch.ARCHS)
    assert [a for a in arch.ARCHS if a not in known] == []


def test_compute_capability_agrees_with_the_names_the_launcher_reads():
    """pack.c reads "sm_XYa" as major X, minor Y (the last digit), suffix a: so must the table."""
    for a in arch.TABLE.values():
        m = re.fullmatch(r"sm_(\d+)(\d)(a?)", a.name)
        assert (int(m.group(1)), int(m.group(2))) == a.cc
        assert a.specific == bool(m.group(3))
        assert arch.parse(f"{a.major}.{a.minor}{'a' if a.specific else ''}") == a.name


def test_table_facts():
    for a in arch.TABLE.values():
        assert a.smem_per_block <= a.smem_per_sm - arch.RESERVED_SMEM_PER_BLOCK
        assert a.registers_per_sm == 65536 and a.registers_per_thread == 255
        assert a.wgmma == (a.name == "sm_90a")     # wgmma needs the arch-specific Hopper target
        plain = arch.TABLE.get(a.name.rstrip("a"))
        if a.specific and plain:            # sm_90a is sm_90 plus features: same limits
            assert (a.sms, a.smem_per_block, a.smem_per_sm, a.threads_per_sm) == \
                (plain.sms, plain.smem_per_block, plain.smem_per_sm, plain.threads_per_sm)


def test_everything_reads_the_table():
    assert nvrtc.ARCHS == arch.ARCHS and nvrtc.parse_arch is arch.parse
    assert [nvrtc.smem_limit(a) for a in arch.ARCHS] == [arch.get(a).smem_per_block for a in arch.ARCHS]
    assert [routes.sm_count(a) for a in arch.ARCHS] == [arch.get(a).sms for a in arch.ARCHS]
    assert (arch.for_device(9, 0), arch.for_device(8, 6), arch.for_device(10, 0)) == ("sm_90a", "sm_86", "sm_100")
    with pytest.raises(ValueError, match="unsupported GPU architecture"):
        arch.get("sm_100")


def test_no_second_arch_table_in_python():
    """Arch facts (the opt-in shared-memory sizes, per-arch dicts) live in kernels/arch.py only."""
    facts = re.compile(r"\b(166912|101376|232448|167936|233472)\b|\{\s*\"sm_\d+a?\"\s*:")
    offenders = [str(f.relative_to(ROOT)) for d in PACKAGE_DIRS.values() for f in d.rglob("*.py")
                 if f.name != "arch.py" and facts.search(f.read_text())]
    assert offenders == []
