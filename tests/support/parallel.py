"""Compile-style jobs on a small thread pool (NVRTC releases the GIL), each job's exception kept as its
result so that the test of that job reports it."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor


def run_jobs(jobs, job_id, fn, workers: int = 2) -> dict:
    """{job_id(job): fn(job) or the exception it raised} for every job."""
    def one(job):
        try:
            return fn(job)
        except Exception as e:  # reported by the test of that job
            return e
    with ThreadPoolExecutor(max_workers=workers) as ex:
        return dict(zip(map(job_id, jobs), ex.map(one, jobs)))


def submit_selected(request, param: str, fn):
    """Generator body of a module-scoped fixture: `fn(value)` submitted on a few threads for each distinct
    value of the parametrize argument `param` among the tests of this module the session selected;
    yields {value: Future}, and shuts the pool down (pending jobs cancelled) at teardown."""
    wanted = []
    for item in request.session.items:
        cs = getattr(item, "callspec", None)
        if item.module is request.module and cs is not None and param in cs.params:
            wanted.append(cs.params[param])
    pool = ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1)))
    try:
        yield {v: pool.submit(fn, v) for v in dict.fromkeys(wanted)}
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
