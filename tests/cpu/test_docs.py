"""The docs site (mkdocs.yml, docs/): it builds with no warning (`mkdocs build --strict`), its generated
pages are what tests/support/docs_pages.py writes from the code today, and every code block of the guide
runs with its shown output checked:

- ```python blocks run in order in one namespace per page, in a fresh folder;
- ```pycon blocks are doctests in that namespace (output checked, `...` matches anything);
- ```console blocks: each `$ command` runs in bash in that folder (`plus-ep` and `python` are this
  interpreter's) and its output (stdout and stderr) is checked like a doctest's;
- any other block says why it does not run, on the line before it: `<!-- not run: REASON -->`.

In CI (CI=true) nothing here skips: a missing mkdocs fails.
"""
from __future__ import annotations

import doctest
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import docs_pages

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
GUIDE = sorted((DOCS / "guide").glob("*.md")) + [DOCS / "index.md"]
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)
NOT_RUN = re.compile(r"<!-- not run: (?P<why>[^>]{10,}) -->\s*$")
RUN = ("python", "pycon", "console")
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _mkdocs():
    try:
        import material  # noqa: F401
        import mkdocs  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            raise AssertionError("mkdocs and mkdocs-material are missing: CI installs the [docs] extra") from None
        pytest.skip("mkdocs / mkdocs-material not installed (the [docs] extra)")


def test_generated_pages_match_the_code():
    stale = [rel for rel, text in docs_pages.pages().items()
             if not (DOCS / rel).exists() or (DOCS / rel).read_text() != text]
    assert stale == [], f"regenerate with `python -m tests.support.docs_pages`: {stale}"


def test_the_site_builds_without_a_warning(tmp_path):
    _mkdocs()
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")     # Material's end-of-life banner
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f", str(ROOT / "mkdocs.yml"),
                        "-d", str(tmp_path / "site")], capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert r.returncode == 0 and "WARNING" not in r.stderr, r.stderr[-4000:]
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").exists()


def blocks(page: Path) -> list[tuple[str, str, int, str | None]]:
    """(language, body, line, reason it does not run or None) of every fenced block of `page`."""
    text = page.read_text()
    out = []
    for m in FENCE.finditer(text):
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        why = NOT_RUN.search(before)
        body = "\n".join(ln[len(m.group("indent")):] for ln in m.group("body").splitlines())
        out.append((m.group("lang"), body, text[:m.start()].count("\n") + 1, why.group("why") if why else None))
    return out


def test_every_guide_block_runs_or_says_why_not():
    unmarked = [f"{p.relative_to(ROOT)}:{line} ```{lang}" for p in GUIDE for lang, _, line, why in blocks(p)
                if lang not in RUN and why is None]
    assert unmarked == [], "run these blocks (python, pycon, console) or mark them <!-- not run: REASON -->"


def _console(body: str) -> list[tuple[str, str]]:
    """[(command, expected output)] of a console block."""
    out, cmd, want = [], None, []
    lines = body.splitlines()
    i = 0
    while i < len(lines):
        ln = lines[i]
        if ln.startswith("$ "):
            if cmd is not None:
                out.append((cmd, "\n".join(want)))
            cmd, want = ln[2:], []
            while cmd.endswith("\\") and i + 1 < len(lines):
                i += 1
                cmd = cmd[:-1] + " " + lines[i].strip()
        else:
            want.append(ln)
        i += 1
    if cmd is not None:
        out.append((cmd, "\n".join(want)))
    return out


def _run_console(cmd: str, cwd: Path) -> str:
    exe = sys.executable
    shell = re.sub(r"(^|[;&|(]\s*|\s)plus-ep(?=\s)", lambda m: f"{m.group(1)}{exe} -m plus_ep", cmd)
    shell = re.sub(r"(^|[;&|(]\s*|\s)python(?=\s)", lambda m: f"{m.group(1)}{exe}", shell)
    # as a reader's shell, but with the cache root the page's python blocks used (tests/conftest.py's): a
    # model they rewrote is trusted there
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLUS_EP_") or k == "PLUS_EP_CACHE_DIR"}
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), COLUMNS="100")
    r = subprocess.run(["bash", "-c", shell], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    return (r.stdout + r.stderr).rstrip("\n")


@pytest.mark.parametrize("page", GUIDE, ids=lambda p: str(p.relative_to(DOCS)))
def test_guide_blocks_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(ROOT))
    namespace: dict = {"__name__": f"docs_{page.stem}"}
    checker = doctest.OutputChecker()
    ran = 0
    for lang, body, line, why in blocks(page):
        where = f"{page.relative_to(ROOT)}:{line}"
        if why is not None or lang not in RUN:
            continue
        ran += 1
        if lang == "python":
            exec(compile(body, where, "exec"), namespace)       # noqa: S102 - the guide's own code
        elif lang == "pycon":
            test = doctest.DocTestParser().get_doctest(body, namespace, where, where, line)
            runner = doctest.DocTestRunner(optionflags=FLAGS)
            runner.run(test, out=lambda s: None)
            result = runner.summarize(verbose=False)
            assert result.failed == 0, f"{where}: a doctest failed (run it: python -m doctest)"
            namespace.update(test.globs)
        else:
            for cmd, want in _console(body):
                got = _run_console(cmd, tmp_path)
                assert checker.check_output(want + "\n", got + "\n", FLAGS), \
                    f"{where}: `{cmd}` printed\n{got}\n--- the page shows\n{want}"
    if ran == 0:
        pytest.skip(f"{page.name} has no block to run")


def test_docs_extra_is_installed_by_ci():
    """The [docs] extra exists with pinned minimum versions, and .ci/run installs it."""
    import tomllib
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {re.split(r"[<>=!~ ]", d)[0]: d for d in extras["docs"]}
    assert {"mkdocs", "mkdocs-material"} <= set(names) and all(">=" in d for d in names.values())
    ci = (ROOT / ".ci" / "run").read_text()
    lines = [ln for ln in ci.splitlines() if "pip install" in ln and "-e" in ln and "[" in ln]
    assert any("docs" in re.search(r"\[([^\]]*)\]", ln).group(1).split(",") for ln in lines), lines


def test_site_dir_is_ignored():
    assert shutil.which("git") is None or subprocess.run(
        ["git", "check-ignore", "-q", "build/site/index.html"], cwd=ROOT).returncode == 0


def test_stated_default_archs_are_the_code_s():
    """The default archs the package page and the deployment guide state are options.DEFAULT_ARCHS."""
    from plus_ep import options
    assert f"else {' and '.join(options.DEFAULT_ARCHS)}" in (DOCS / "package.md").read_text()
    assert f"`{','.join(options.DEFAULT_ARCHS)}`" in (DOCS / "guide" / "deployment.md").read_text()
