"""The mutation catalogue (bench/quality/mutants.py) stays applicable: every mutant's text occurs in its product file
exactly as often as the mutant expects (a rebase or a renovation that moves or rewrites the code makes a
mutant stale; this fails then, rather than the next hours-long mutation run), every subset names test files
that exist, and the catalogue still covers every family the issue asks for."""
from __future__ import annotations

from pathlib import Path

from bench.quality.mutants import CATALOGUE, SUBSETS

ROOT = Path(__file__).resolve().parents[2]


def test_every_mutant_applies_to_the_current_tree():
    stale = []
    for m in CATALOGUE:
        text = (ROOT / m.path).read_text()
        for old, new in m.edits:
            n = text.count(old)
            if n != m.count or old == new:
                stale.append(f"{m.id}: {old[:60]!r} occurs {n} times in {m.path}, expected {m.count}")
    assert not stale, "\n".join(stale)


def test_subsets_and_families():
    assert len({m.id for m in CATALOGUE}) == len(CATALOGUE) >= 30
    for name, parts in SUBSETS.items():
        for path, _ in parts:
            assert (ROOT / path).is_file(), (name, path)
    assert all(s in SUBSETS for m in CATALOGUE for s in m.subsets)
    families = {m.family for m in CATALOGUE}
    assert {"gemm_mma", "gemm_simt", "gemm_wgmma", "gemm_norm_cluster", "attention_f16", "attention_tf32",
            "attention_simt", "row", "pointwise", "render", "routes", "identify", "launcher",
            "interpreter"} <= families, families
