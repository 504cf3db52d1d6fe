"""The tree's pointers to tests hold: every `tests/...py` path named in a source, document or config
file of the repository exists (a renamed or moved test leaves no stale reference behind)."""
from __future__ import annotations

import re
import subprocess

from tests.support.imports import ROOT

PATH = re.compile(r"(?<![\w./-])tests/[\w/]+\.py\b")
# generated sources; dated benchmark records (history) and their index, generated from them
SKIP = ("tests/golden/", "bench/results/", "docs/benchmarks/index.md")


def _files():
    try:
        out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):     # not a git checkout: every file under the root
        out = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file() and ".git" not in p.parts]
    return [f for f in out if not f.startswith(SKIP) and (ROOT / f).is_file()]


def test_every_named_test_path_exists():
    missing = []
    for f in _files():
        try:
            text = (ROOT / f).read_text()
        except (UnicodeDecodeError, OSError):
            continue
        for n, line in enumerate(text.splitlines(), 1):
            missing += [f"{f}:{n}: {p}" for p in PATH.findall(line) if not (ROOT / p).is_file()]
    assert missing == []


def test_the_check_finds_paths():
    assert PATH.findall("see tests/cpu/test_layout.py and (tests/support/imports.py)") == \
        ["tests/cpu/test_layout.py", "tests/support/imports.py"]
    assert PATH.findall("plus_ep/tests/x.py or mytests/x.py") == []
