"""The README is the front door: at most 12 KB, and its quickstart runs and prints what it shows (numbers
may differ in their digits: every float of the shown output matches any float)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
FLOAT = r"\d+\.\d+(?:e[+-]\d+)?|\d+e[+-]\d+"        # a float; integers (counts) must match exactly


def _quickstart() -> tuple[str, str]:
    section = README.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    code, shown = re.findall(r"```python\n(.*?)```", section, re.S)[0], re.findall(r"```text\n(.*?)```", section, re.S)[0]
    return code, shown


def test_readme_is_short():
    assert len(README.encode()) <= 12 * 1024, f"README.md is {len(README.encode())} bytes; move guides to docs/"
    assert len(_quickstart()[0].strip().splitlines()) <= 12


def test_readme_links_resolve():
    for target in re.findall(r"\]\(([^)#]+)\)", README):
        if not target.startswith("http"):
            assert (ROOT / target).exists(), target


def test_quickstart_runs_and_prints_what_it_shows(tmp_path):
    code, shown = _quickstart()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLUS_EP_")}     # as a newcomer's shell
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    from plus_ep import options
    from plus_ep.kernels.compile import nvrtc
    if nvrtc.local_arch() is not None:          # a GPU machine builds for its own arch only: other counts
        return
    assert len(options.DEFAULT_ARCHS) == 2      # the shown counts are for the two default archs
    pattern = "".join(f"(?:{FLOAT})" if re.fullmatch(FLOAT, part) else re.escape(part)
                      for part in re.split(f"({FLOAT})", shown.strip()))
    assert re.fullmatch(pattern, r.stdout.strip()), f"the quickstart printed\n{r.stdout}\nthe README shows\n{shown}"
