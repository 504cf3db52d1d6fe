"""Compile many kernels at once: threads (NVRTC releases the GIL), the disk cache, resource checks.

    jobs = [Job("gemm_k1", src1, "sm_90", dynamic_smem=98304), Job("ln_k2", src2, "sm_90")]
    results = compile_all(jobs, cache=KernelCache(cache_dir))
    for job, r in zip(jobs, results):
        if isinstance(r, Exception): ...   # CompileError, ResourceError, CacheMiss, ValueError (bad arch)

Results come back in job order; a failing job never stops the others. Jobs with the same
(source, arch, options) compile once and share the result; the source's comment header (it names the
node) does not count, so one kernel rendered for every layer compiles once. Each job's source goes
through `sources.prepare` first: written to PLUS_EP_DUMP_DIR, replaced from PLUS_EP_OVERRIDE_DIR. Every result is checked with
`nvrtc.check_resources` against the job's dynamic shared memory; a spill or an over-limit block
puts a ResourceError in that job's slot.

Fallback for row and point-wise kernels: their launch bounds are `PLUS_BOUNDS(threads)`
(plus_common.cuh), under which ptxas may cap registers for full occupancy and spill (t5's embedding
gather on sm_80: 32 registers, 16 bytes spilled). When an entry declared that way spills, the job's
source is compiled once more for that arch with RELAXED_BOUNDS (one resident block per SM: the whole
register file), and that result is the job's (cached under its own key, so a warm start loads both).
Kernels with their own bounds (the GEMM and attention templates) fall back by configuration instead
(kernels/compile/stage.py).

Interrupting (Ctrl-C, or any exception in the calling thread while it waits) stops at once: no queued
job starts, and the call raises without waiting for the compiles in flight. NVRTC cannot be stopped
mid-compile, so those run on in daemon threads (`plus-nvrtc-*`) that never hold the process open; each
finishes its one kernel and stores a whole cache entry, or ends with the process before its entry's
meta.json is written (the cache reads such a folder as absent and removes it), so no partial entry is
ever read. Threads: PLUS_EP_COMPILE_THREADS, else min(CPU count, 8).
"""

from __future__ import annotations

import logging
import os
import queue
import re
import threading
import time
from dataclasses import dataclass

from ... import config
from ... import progress as _progress
from . import nvrtc, sources
from .cache import KernelCache
from .nvrtc import CompileError, CompileResult

log = logging.getLogger("plus_ep.kernels")

RELAXED_BOUNDS = ("-DPLUS_BOUNDS_MIN_BLOCKS=1",)
_BOUNDED = re.compile(r"\bPLUS_BOUNDS\(\s*\d+\s*\)\s+(\w+)\s*\(")


def bounded_entries(source: str | bytes) -> set:
    """Entry functions of `source` whose launch bounds are PLUS_BOUNDS (row and point-wise kernels)."""
    text = source.decode(errors="replace") if isinstance(source, bytes) else source
    return set(_BOUNDED.findall(text))


def spilling_entries(result: CompileResult) -> set:
    return {fn for fn, r in result.resources.items() if r.spill_stores or r.spill_loads}


@dataclass
class Job:
    name: str                 # file name NVRTC reports (e.g. "gemm_k1.cu"); also names the kernel in errors
    source: str
    arch: str
    options: tuple = ()
    dynamic_smem: int | dict = 0   # bytes for every entry, or {entry: bytes}


class ResourceError(CompileError):
    """The kernel compiled but spills registers or needs more shared memory than the arch allows.
    `problems` lists the sentences from check_resources; `result` is the compiled result."""

    def __init__(self, name: str, result: CompileResult, problems: list[str]):
        self.problems = problems
        self.result = result
        super().__init__(name, result.log, f"{name} ({result.arch}): " + "; ".join(problems))


def compile_all(jobs, cache=None, workers: int | None = None, progress: bool | None = None) -> list:
    """Compile `jobs`; returns one CompileResult or Exception per job, in job order.

    cache: a KernelCache; None uses KernelCache() (<cache root>/kernels, plus_ep/config.py);
    False compiles without any cache. workers: threads (default `compile_threads()`).
    progress: a bar on stderr (plus_ep/progress.py): None follows its mode (a bar when stderr is a
    terminal), True shows one anyway, False never.
    """
    jobs = list(jobs)
    if cache is None:
        cache = KernelCache()
    workers = workers or compile_threads()
    with _progress.bar("compiling kernels", total=len(jobs), unit="kernels", enabled=progress) as bar:
        return _compile_all(jobs, cache, workers, bar)


def compile_threads() -> int:
    """NVRTC threads: PLUS_EP_COMPILE_THREADS (at least 1), else min(CPU count, 8)."""
    n = config.integer("PLUS_EP_COMPILE_THREADS", min(os.cpu_count() or 1, 8))
    if n < 1:
        raise ValueError(f"PLUS_EP_COMPILE_THREADS={n}: use 1 or more compile threads")
    return n


def run_interruptibly(tasks: list, workers: int, done) -> None:
    """Call each of `tasks` (no-argument callables) on up to `workers` daemon threads and `done(k,
    outcome)` in the calling thread as each finishes (outcome: its return value or the exception it
    raised). An exception in the calling thread (KeyboardInterrupt while it waits) stops the queue and
    propagates at once, without waiting for the tasks in flight (see the module's docstring)."""
    if not tasks:
        return
    results: queue.SimpleQueue = queue.SimpleQueue()
    pending = iter(enumerate(tasks))
    take, stop = threading.Lock(), threading.Event()

    def worker():
        while not stop.is_set():
            with take:
                item = next(pending, None)
            if item is None:
                return
            k, task = item
            try:
                outcome = task()
            except Exception as e:  # noqa: BLE001 - CompileError, CacheMiss, OSError from the cache, ...
                outcome = e
            except BaseException as e:  # noqa: BLE001 - a result for every task, or the caller waits forever
                outcome = RuntimeError(f"compile thread stopped: {e!r}")
            results.put((k, outcome))

    for i in range(min(workers, len(tasks))):
        threading.Thread(target=worker, name=f"plus-nvrtc-{i}", daemon=True).start()
    try:
        left = len(tasks)
        while left:
            try:    # a short wait: a signal for this thread is acted on between two waits, whichever thread took it
                item = results.get(timeout=0.1)
            except queue.Empty:
                continue
            done(*item)
            left -= 1
    finally:
        stop.set()


def _compile_all(jobs, cache, workers, bar) -> list:
    t0 = time.perf_counter()

    # One compile per distinct (source, arch, options); a bad arch fails only its own jobs.
    results: list = [None] * len(jobs)
    unique: dict[tuple, list[int]] = {}
    first_source: dict[tuple, str] = {}     # the source compiled for an ident: its first job's (with its header)
    for i, job in enumerate(jobs):
        source = sources.prepare(job.name, job.source)
        try:
            ident = (sources.body(source), nvrtc.parse_arch(job.arch), tuple(str(o) for o in job.options))
        except ValueError as e:
            results[i] = e
            bar.update(note=str(job.arch))
            continue
        unique.setdefault(ident, []).append(i)
        first_source.setdefault(ident, source)

    def build(source, arch, options, name):
        if cache is False:
            return nvrtc.compile_cubin(source, arch, name=name, options=options)
        return cache.build(source, arch, options=options, name=name)

    def run(ident: tuple, first: Job):
        _, arch, options = ident
        source = first_source[ident]
        result = build(source, arch, options, first.name)
        spills = spilling_entries(result) & bounded_entries(source)
        if not spills or set(RELAXED_BOUNDS) <= set(options):
            return result
        relaxed = build(source, arch, options + RELAXED_BOUNDS, first.name)
        relaxed_idents.add(ident)
        log.info("%s (%s): %s spilled under PLUS_BOUNDS; compiled again with one block per SM (%s): %s",
                 first.name, arch, ", ".join(sorted(spills)), " ".join(RELAXED_BOUNDS),
                 "no spill" if not spilling_entries(relaxed) else "still spills")
        return relaxed

    relaxed_idents: set = set()
    idents = list(unique)
    counts = {"compiled": 0, "cached": 0}

    def finished(k: int, outcome) -> None:
        ident = idents[k]
        if isinstance(outcome, CompileResult):
            counts["cached" if outcome.cached else "compiled"] += 1
        for i in unique[ident]:
            results[i] = _checked(jobs[i], outcome, ident in relaxed_idents)
        bar.update(len(unique[ident]), note=f"{ident[1]}, {counts['compiled']} compiled, {counts['cached']} cached")

    run_interruptibly([lambda ident=ident: run(ident, jobs[unique[ident][0]]) for ident in idents], workers,
                      finished)
    n_compiled, n_cached = counts["compiled"], counts["cached"]
    if n_compiled and isinstance(cache, KernelCache):
        cache.evict()         # the size limit, once per batch (build() checks at most every few seconds)
    n_failed = sum(isinstance(r, Exception) for r in results)
    log.info("kernels: %d jobs, %d compiled, %d cached, %d failed, %d compiled again with one block per SM "
             "after a spill, in %.1fs", len(jobs), n_compiled, n_cached, n_failed, len(relaxed_idents),
             time.perf_counter() - t0)
    return results


def _checked(job: Job, outcome, relaxed: bool = False):
    if isinstance(outcome, Exception):
        return outcome
    problems = nvrtc.check_resources(outcome, job.dynamic_smem)
    if problems:
        if relaxed:
            problems.append(f"compiled with {' '.join(RELAXED_BOUNDS)} after a spill under PLUS_BOUNDS")
        return ResourceError(job.name, outcome, problems)
    return outcome
