"""Benchmarks, acceptance runs, the GPU lease and quality tools (not part of the installed package).

Run every module from the repository root, e.g. `python -m bench.runs.ptx_speed`; bench/README.md maps
the folders. ROOT is the checkout, RESULTS the folder of dated result JSON:

    >>> (RESULTS / "..").resolve() == ROOT / "bench"
    True
"""
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
