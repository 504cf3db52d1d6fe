"""Compile-style jobs on a small thread pool (NVRTC releases the GIL), each job's exception kept as its
result so that the test of that job reports it."""
from __future__ import annotations

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
