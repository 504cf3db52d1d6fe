"""`ruff check .` passes on the tree with pyproject's configuration (part of the [test] extra)."""
from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib

import pytest

from tests.support.imports import ROOT


def _ruff() -> list[str]:
    try:
        import ruff  # noqa: F401
        return [sys.executable, "-m", "ruff"]
    except ImportError:
        exe = shutil.which("ruff")
        if exe is None:
            pytest.skip("ruff is not installed (pip install -e '.[test]')")
        return [exe]


def test_the_configuration_is_the_one_in_pyproject():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert any(d.startswith("ruff") for d in cfg["project"]["optional-dependencies"]["test"])
    lint = cfg["tool"]["ruff"]["lint"]
    assert {"F", "E9", "E501"} <= set(lint["select"])      # undefined names, syntax errors, line length


def test_ruff_check_passes():
    proc = subprocess.run([*_ruff(), "check", "--no-cache", "--output-format", "concise", "."], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
