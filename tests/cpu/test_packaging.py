"""Packaging: no onnxruntime distribution is a hard dependency (the gpu and cpu extras bring one); every
install command of the README and the docs names one of them; the README's fresh-machine commands are what .ci/run runs,
verbatim, in a virtual environment it creates; setup.py refuses a setuptools too old for pyproject.toml with
one line naming the fix."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib

from tests.support.imports import ROOT

ORT_EXTRAS = {"gpu": "onnxruntime-gpu", "cpu": "onnxruntime"}


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower()


def _installs(path) -> list[str]:
    """A page's shell lines that install this checkout (`pip install ... -e ...`), comments stripped."""
    text = path.read_text()
    lines = [line.split("  #")[0].strip() for block in re.findall(r"```(?:bash|sh)\n(.*?)```", text, re.S)
             for line in block.splitlines()]
    return [line for line in lines if line.startswith("pip install") and re.search(r"\s-e\s", line)]


def _readme_installs() -> list[str]:
    return _installs(ROOT / "README.md")


def test_no_onnxruntime_distribution_is_required():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if _name(d).startswith("onnxruntime")]
    extras = project["optional-dependencies"]
    for extra, dist in ORT_EXTRAS.items():
        assert [_name(d) for d in extras[extra]] == [dist]
    assert {re.sub(r"^[\w-]+", "", d) for e in ORT_EXTRAS for d in extras[e]} == {">=1.25"}   # one floor
    # the clients extra (client libraries, used with the cpu extra) brings the CPU build through them
    others = [d for e, deps in extras.items() if e not in {*ORT_EXTRAS, "clients"} for d in deps]
    assert not [d for d in others if _name(d).startswith("onnxruntime")], others


def test_every_install_command_names_one_onnxruntime_extra():
    installs = [line for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))] for line in _installs(page)]
    assert len(installs) >= 4
    for line in installs:
        extras = set(re.findall(r'-e\s+["\']?\.\[([\w,]+)\]', line)[0].split(",")) if "[" in line else set()
        assert len(extras & set(ORT_EXTRAS)) == 1, line


def test_readme_fresh_machine_commands_are_what_ci_runs():
    fresh = [line for line in _readme_installs() if " && " in line]
    assert len(fresh) == 2, fresh               # the demo, the tests
    ci = (ROOT / ".ci" / "run").read_text()
    for line in fresh:
        assert f"readme '{line}'" in ci, line
    venv, activate, first = ci.index("-m venv"), ci.index("/bin/activate"), ci.index("readme '")
    assert venv < activate < first


def test_setup_py_names_the_fix_for_an_old_setuptools(tmp_path):
    (tmp_path / "setuptools").mkdir()
    (tmp_path / "setuptools" / "__init__.py").write_text("__version__ = '65.5.0'\n")   # as a Python 3.11 venv has
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    r = subprocess.run([sys.executable, "setup.py", "--version"], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == ["plus-ep: setuptools 65.5.0 is too old to build it (needs >= 77): "
                                             "pip install 'setuptools>=77', or drop --no-build-isolation"]
