"""CI smoke run of the launcher's libFuzzer harnesses (tests/native/fuzz): each entry point is built with
clang (-fsanitize=fuzzer,address,undefined) and fuzzed for a few seconds from the committed seed corpus
(taken from real rewritten models); any crash, sanitizer report or leak fails. The regression inputs
(tests/native/fuzz/regressions/<entry>/: every crash a fuzzer ever found) are replayed first. The long
run is `python -m bench.quality.fuzz` (bench/results/*-fuzz.json).

clang and libFuzzer come from the distribution (`apt-get install clang libclang-rt-dev`; .ci/run
installs them); without them the test skips with the reason.
"""
from __future__ import annotations

import subprocess

import pytest

from tests.support import fuzz

SECONDS = 5      # per entry point: seven entry points + one build of everything stay under CI's 2-minute budget

pytestmark = pytest.mark.skipif(fuzz.clang() is None, reason=f"libFuzzer unavailable: {fuzz.why_unavailable()}")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("fuzzers")
    return fuzz.build_all(out, fuzz.clang())


@pytest.mark.parametrize("entry", list(fuzz.ENTRIES))
def test_regressions_replay(built, entry, tmp_path):
    """Every input that once crashed an entry point runs clean now."""
    cases = sorted((fuzz.FUZZ / "regressions" / entry).glob("*")) if (fuzz.FUZZ / "regressions" / entry).is_dir() else []
    if not cases:
        pytest.skip(f"no regression inputs for {entry}")
    r = subprocess.run(fuzz.own_peak_rss([built[entry], *cases]), capture_output=True, text=True, env=fuzz.env(entry != "trust"),
                       cwd=str(tmp_path), timeout=120)
    assert r.returncode == 0 and "ERROR:" not in r.stderr and "runtime error" not in r.stderr, r.stderr[-4000:]


@pytest.mark.parametrize("entry", list(fuzz.ENTRIES))
def test_fuzz_smoke(built, entry, tmp_path):
    r = fuzz.run(built[entry], entry, tmp_path, seconds=SECONDS)
    assert r.returncode == 0 and not r.crashes and not r.sanitizer_reports, (
        f"fuzz_{entry}: exit {r.returncode}, artifacts {r.crashes}\n{r.log_tail}")
    assert r.execs > 1000 and r.cov > 20, f"fuzz_{entry} barely ran: {r}"


_BIG_PARENT = r"""
import subprocess, sys
import numpy as np
from tests.support import fuzz
big = np.ones(50_000_000)          # 400 MB touched: this process's peak RSS
big += 1
probe = [sys.executable, "-c", "import resource; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)"]
print(subprocess.run(fuzz.own_peak_rss(probe), capture_output=True, text=True, check=True).stdout.strip())
"""


def test_a_fuzzer_started_from_a_big_process_has_its_own_peak_rss():
    """libFuzzer's -rss_limit_mb reads ru_maxrss, which Linux carries across fork and exec: started straight from
    a late, 3 GB pytest process every fuzzer stopped as out-of-memory on its first input."""
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, "-c", _BIG_PARENT], capture_output=True, text=True, cwd=str(root), timeout=120)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout.split()[-1]) < 200, f"the fuzzer's peak RSS is its parent's: {r.stdout.strip()} MB"
