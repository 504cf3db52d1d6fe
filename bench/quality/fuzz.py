"""The long fuzz run of the launcher's parsers (issue 27): every libFuzzer entry point of
tests/native/fuzz (ASan + UBSan, leaks are findings) one after another, each until it has executed
`--runs` inputs (default 10 million) or `--max-seconds` passed, from the committed seeds plus the
corpus earlier runs left in `--work`. The JSON (written after each entry point, so a stopped run keeps
what it finished) records per entry point: executions, edges covered (`cov`), features (`ft`), corpus
size, crash/leak/timeout artifacts, sanitizer reports, seconds, executions per second, and the CPU
seconds the fuzzer got (a niced run on a loaded machine gets a small share of a core: its wall-clock
rate says little about the harness, its rate per CPU second does). `--total-seconds` shares one
wall-clock budget: each entry point gets what is left divided by the entry points still to run.

    nice -n 19 python -m bench.quality.fuzz [--entries plan,expr,...] [--runs 10000000] [--max-seconds 3600]
                                            [--total-seconds S] [--work /tmp/plus_ep_fuzz]
                                            [--out bench/results/DATE-fuzz.json]

Needs clang with libFuzzer (`apt-get install clang libclang-rt-dev`). Seconds and rates are this
machine's under whatever else runs on it (recorded: load averages before and after).
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import pathlib
import subprocess
import sys
import time

from bench import RESULTS, ROOT
from bench.harness.env_info import env_info
from tests.support import fuzz


def _source() -> dict:
    """The commit whose C sources were fuzzed, and whether plus_ep/native or tests/native/fuzz had
    uncommitted changes."""
    def git(*a):
        try:
            return subprocess.run(["git", "-C", str(ROOT), *a], capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None
    return {"commit": git("rev-parse", "HEAD"),
            "dirty": bool(git("status", "--porcelain", "--", "plus_ep/native", "tests/native/fuzz"))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entries", default=",".join(fuzz.ENTRIES))
    ap.add_argument("--runs", type=int, default=10_000_000)
    ap.add_argument("--max-seconds", type=int, default=4 * 3600, help="per entry point")
    ap.add_argument("--total-seconds", type=int, default=None, help="one budget shared by all entry points")
    ap.add_argument("--work", default="/tmp/plus_ep_fuzz")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    cc = fuzz.clang()
    if cc is None:
        print(f"bench.quality.fuzz: {fuzz.why_unavailable()}", file=sys.stderr)
        return 2
    entries = [e for e in args.entries.split(",") if e]
    work = pathlib.Path(args.work)
    day = datetime.date.today().isoformat()
    out = pathlib.Path(args.out) if args.out else RESULTS / f"{day}-fuzz.json"
    exes = fuzz.build_all(work / "bin", cc, entries)
    record = {
        "what": "libFuzzer long run of the launcher's parsers (tests/native/fuzz): ASan + UBSan, leaks are "
                "findings; from the committed seeds plus the corpus earlier runs left",
        "env": {**env_info(), "clang": cc, "nice": os.nice(0), "load_average_1_5_15_before": list(os.getloadavg())},
        "source": _source(),
        "runs_per_entry": args.runs, "max_seconds_per_entry": args.max_seconds, "entries": {},
    }
    start = time.monotonic()
    for i, entry in enumerate(entries):
        t0 = time.time()
        seconds = args.max_seconds
        if args.total_seconds is not None:
            left = args.total_seconds - (time.monotonic() - start)
            seconds = max(1, min(seconds, int(left / (len(entries) - i))))
        r = fuzz.run(exes[entry], entry, work / entry, seconds=seconds, runs=args.runs,
                     jobs_log=work / f"{entry}.log")
        row = {k: v for k, v in dataclasses.asdict(r).items() if k not in ("log_tail", "entry")}
        row["seconds"] = round(r.seconds, 1)
        row["execs_per_second"] = round(r.execs / r.seconds) if r.seconds else 0
        row["cpu_seconds"] = round(r.cpu_seconds, 1)
        row["execs_per_cpu_second"] = round(r.execs / r.cpu_seconds) if r.cpu_seconds else 0
        row["crashes"] = [os.path.basename(c) for c in r.crashes]
        row["max_seconds"] = seconds
        row["started"] = datetime.datetime.fromtimestamp(t0, datetime.timezone.utc).isoformat(timespec="seconds")
        row["reached_runs"] = r.execs >= args.runs
        record["entries"][entry] = row
        record["env"]["load_average_1_5_15_after"] = list(os.getloadavg())
        out.write_text(json.dumps(record, indent=1) + "\n")
        print(f"{entry}: {r.execs} executions in {r.seconds:.0f}s, cov {r.cov}, ft {r.ft}, corpus {r.corpus}, "
              f"{len(r.crashes)} artifacts, {r.sanitizer_reports} sanitizer reports (exit {r.returncode})", flush=True)
    print(f"wrote {out}")
    return 0 if all(not v["crashes"] and not v["sanitizer_reports"] and v["returncode"] == 0
                    for v in record["entries"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
