"""Building and running the launcher's libFuzzer harnesses (tests/native/fuzz): shared by the CI smoke
test (tests/native/test_fuzz_smoke.py) and the long run (bench/quality/fuzz.py).

    cc = fuzz.clang()                          # None (with fuzz.why_unavailable()) without clang + libFuzzer
    exe = fuzz.build("plan", out_dir, cc)      # -fsanitize=fuzzer,address,undefined
    r = fuzz.run(exe, "plan", work_dir, seconds=5)   # FuzzResult(execs, cov, ft, corpus, crashes, ...)

clang and libFuzzer come from the distribution: on Debian/Ubuntu `apt-get install clang libclang-rt-dev`
(libFuzzer and the sanitizer runtimes are in libclang-rt-<N>-dev; .ci/run installs both).
Each entry point links the launcher's own sources; `seeds/<entry>` in tests/native/fuzz is the
committed seed corpus (plans, expressions and packs taken from real rewritten models, see
tests/native/fuzz/make_seeds.py), `plus.dict` the plan and pack keywords.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.launcher_sources import LAUNCHER_SOURCES, ORT_OP_SOURCES

ROOT = Path(__file__).resolve().parents[2]
NATIVE = ROOT / "plus_ep" / "native"
FUZZ = ROOT / "tests" / "native" / "fuzz"
SEEDS = FUZZ / "seeds"
DICT = FUZZ / "plus.dict"

CORE = LAUNCHER_SOURCES
# entry point -> (harness, extra launcher sources, needs the stand-in driver library)
ENTRIES = {
    "plan": ("fuzz_plan.c", [], False),
    "expr": ("fuzz_expr.c", [], False),
    "pack": ("fuzz_pack.c", [], False),
    "bind": ("fuzz_bind.c", [], False),
    "kernel": ("fuzz_kernel.c", [], True),
    "ortop": ("fuzz_ortop.c", ORT_OP_SOURCES, True),
    "trust": ("fuzz_trust.c", [], False),
}
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", "-fno-omit-frame-pointer"]
FLAGS = ["-std=c11", "-g", "-O1", "-Wall", "-Wextra", "-Werror", "-Wno-unused-function", f"-I{NATIVE}", f"-I{FUZZ}"]


def _candidates():
    yield os.environ.get("CC_FUZZ") or "clang"
    for v in range(20, 13, -1):
        yield f"clang-{v}"


@functools.lru_cache(maxsize=1)
def _probe() -> tuple[str | None, str]:
    """(clang that links a libFuzzer + ASan + UBSan program, None) or (None, why not)."""
    why = "no clang on PATH (Debian/Ubuntu: apt-get install clang libclang-rt-dev)"
    for name in _candidates():
        cc = shutil.which(name)
        if not cc:
            continue
        with tempfile.TemporaryDirectory() as d:
            src = Path(d) / "probe.c"
            src.write_text("#include <stdint.h>\n#include <stddef.h>\n"
                           "int LLVMFuzzerTestOneInput(const uint8_t* d, size_t n) { (void)d; (void)n; return 0; }\n")
            r = subprocess.run([cc, "-fsanitize=fuzzer,address,undefined", str(src), "-o", str(Path(d) / "probe")],
                               capture_output=True, text=True)
            if r.returncode == 0:
                return cc, ""
            why = (f"{name} cannot link -fsanitize=fuzzer,address,undefined (install libclang-rt-dev): "
                   f"{(r.stderr.strip().splitlines() or ['?'])[-1]}")
    return None, why


def clang() -> str | None:
    return _probe()[0]


def why_unavailable() -> str:
    return _probe()[1]


def _compile(cc: str, src: Path, obj: Path) -> Path:
    # fuzzer-no-link: coverage instrumentation for libFuzzer without its main (linked once per entry point)
    subprocess.run([cc, *FLAGS, "-fsanitize=fuzzer-no-link", *SANITIZE, "-c", str(src), "-o", str(obj)], check=True)
    return obj


def build_all(out: Path, cc: str, entries=None) -> dict:
    """Every entry point (or `entries`): each source compiled once (two at a time), then linked per
    entry point. Returns {entry: executable}."""
    from concurrent.futures import ThreadPoolExecutor
    entries = list(entries or ENTRIES)
    out.mkdir(parents=True, exist_ok=True)
    srcs = {NATIVE / s for e in entries for s in CORE + ENTRIES[e][1]} | {FUZZ / ENTRIES[e][0] for e in entries}
    with ThreadPoolExecutor(2) as pool:
        objs = dict(zip(sorted(srcs), pool.map(lambda p: _compile(cc, p, out / f"{p.stem}.o"), sorted(srcs))))
        if any(ENTRIES[e][2] for e in entries):
            pool.submit(subprocess.run, [cc, *FLAGS, *SANITIZE, "-fPIC", "-shared", str(FUZZ / "fuzz_driver.c"),
                                         "-o", str(out / "libfuzz_driver.so")], check=True).result()

        def link(entry):
            harness, extra, _ = ENTRIES[entry]
            exe = out / f"fuzz_{entry}"
            parts = [objs[FUZZ / harness], *[objs[NATIVE / s] for s in CORE + extra]]
            subprocess.run([cc, "-fsanitize=fuzzer", *SANITIZE, *map(str, parts), "-o", str(exe), "-ldl", "-lpthread"],
                           check=True)
            return exe
        return dict(zip(entries, pool.map(link, entries)))


def build(entry: str, out: Path, cc: str) -> Path:
    """Compile one entry point (and, where it needs one, the stand-in driver beside it) into `out`."""
    return build_all(out, cc, [entry])[entry]


@dataclass
class FuzzResult:
    entry: str
    seconds: float
    execs: int = 0
    cov: int = 0               # covered edges (libFuzzer's `cov`)
    ft: int = 0                # features
    corpus: int = 0            # inputs in the corpus at the end
    crashes: list = field(default_factory=list)   # artifact files (crash-*, leak-*, timeout-*, oom-*)
    returncode: int = 0
    log_tail: str = ""
    sanitizer_reports: int = 0
    cpu_seconds: float = 0.0   # user + system time the fuzzer process got (under load, far below `seconds`)


def env(trust_any: bool = True) -> dict:
    e = {k: v for k, v in os.environ.items() if not k.startswith("PLUS_EP_")}
    # leaks are findings; the launcher's error paths must free what they took
    e["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=0:allocator_may_return_null=1"
    e["UBSAN_OPTIONS"] = "halt_on_error=1:print_stacktrace=1"
    if trust_any:   # the trust check has its own entry point; elsewhere fuzzed images must get through
        e["PLUS_EP_TRUST"] = "any"
    e["PLUS_EP_TRUST_DIR"] = "/nonexistent/plus_ep_fuzz_trust"
    return e


def own_peak_rss(args: list) -> list:
    """`args` behind a shell that forks it: Linux carries a process's peak RSS (ru_maxrss, which libFuzzer's
    -rss_limit_mb reads) across fork and exec, so a fuzzer started straight from a 3 GB pytest process reports
    "out-of-memory" on its first input. Forked from the small shell, its peak is its own.

    >>> own_peak_rss(["fuzz_plan", "-runs=1"])[:3]
    ['sh', '-c', '"$@"; exit $?']
    """
    return ["sh", "-c", '"$@"; exit $?', "sh", *map(str, args)]


def run(exe: Path, entry: str, work: Path, seconds: int | None = None, runs: int | None = None,
        jobs_log: Path | None = None, extra=()) -> FuzzResult:
    """Fuzz `exe` from the committed seeds of `entry` (copied into `work/corpus`, which grows) for
    `seconds` or `runs` executions; crash artifacts land in `work/artifacts`."""
    corpus, artifacts = work / "corpus", work / "artifacts"
    corpus.mkdir(parents=True, exist_ok=True)
    artifacts.mkdir(parents=True, exist_ok=True)
    seeds = SEEDS / entry
    args = [str(exe), "-print_final_stats=1", "-timeout=20", "-rss_limit_mb=3072", "-max_len=65536",
            f"-artifact_prefix={artifacts}/", f"-dict={DICT}"]
    if seconds is not None:
        args.append(f"-max_total_time={seconds}")
    if runs is not None:
        args.append(f"-runs={runs}")
    args += [*extra, str(corpus)] + ([str(seeds)] if seeds.is_dir() else [])
    import resource
    import time

    def cpu():
        u = resource.getrusage(resource.RUSAGE_CHILDREN)
        return u.ru_utime + u.ru_stime
    t0, c0 = time.monotonic(), cpu()
    r = subprocess.run(own_peak_rss(args), capture_output=True, text=True, env=env(entry != "trust"), cwd=str(work))
    log = r.stderr
    if jobs_log:
        jobs_log.write_text(log)
    res = FuzzResult(entry, time.monotonic() - t0, returncode=r.returncode, log_tail=log[-6000:],
                     cpu_seconds=cpu() - c0)
    m = re.search(r"stat::number_of_executed_units:\s*(\d+)", log)
    res.execs = int(m.group(1)) if m else 0
    last = re.findall(r"cov: (\d+) ft: (\d+) corp: (\d+)", log)
    if last:
        res.cov, res.ft, res.corpus = map(int, last[-1])
    res.crashes = sorted(str(p) for p in artifacts.iterdir())
    res.sanitizer_reports = len(re.findall(r"ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:", log))
    return res
