"""The lease's install step: this checkout's plus_ep importable, whole namespace and launcher, by pip or without.

    python -m bench.lease.install pack CARRY               here (--prepare): what the step may need, into CARRY
    python -m bench.lease.install run CARRY [--path P]     the step: P = auto (pip, else source), pip or source
    python -m bench.lease.install rehearse CARRY WORK [--short]
                                                           here (--rehearse): both paths on purpose, in a fresh
                                                           environment made like the GPU machine's python3
                                                           (WORK/venv; the later steps use its python); --short
                                                           (CI): pip's --dry-run (metadata built, no compile)

pip     `pip install --no-deps --no-index -e .`: built in isolation from the carried setuptools wheel
        (CARRY/wheels) when there is one, else with this environment's setuptools (it needs >= 77).
source  no pip: the launcher and emulated driver carried prebuilt (CARRY/prebuilt; they link no libpython,
        so any CPython loads them) copied into plus_ep/ unless it has them, and a plus_ep dist-info at the
        checkout's root, so the version (a kernel-cache key) reads as when installed; the checkout imports from
        its folder (plus_ep/__init__.py puts graph_rewrites/, kernels/ and warehouse/ on its path).

Either way the step ends with an import of the whole namespace in a new process, run from another folder,
that must come from this checkout and load the launcher:

    >>> check_import(ROOT, source=True)["plus_ep"].startswith(str(ROOT))
    True
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import ROOT
from bench.lease import env as lease_env

LIBRARIES = ("_launcher", "_emucuda")
BUILD_REQUIREMENT = "setuptools>=77"          # pyproject.toml's [build-system] requires
DIST_INFO = "plus_ep-{version}.dist-info"
_CHECK = """
import ctypes, importlib.metadata, json, sys
import plus_ep, plus_ep.graph_rewrites, plus_ep.kernels, plus_ep.warehouse
lib = plus_ep.get_library_path()
ctypes.CDLL(lib)
print(json.dumps({"plus_ep": plus_ep.__file__, "kernels": plus_ep.kernels.__file__, "launcher": lib,
                  "version": plus_ep.__version__, "metadata": importlib.metadata.version("plus-ep"),
                  "python": sys.version.split()[0]}))
"""


def _tail(text: str, n: int = 300) -> str:
    return " ".join((text or "").split())[-n:]


def _why(pip_stderr: str) -> str:
    """setup.py's own one-line refusal when pip's output holds it, else the output's end."""
    ours = [line.strip() for line in (pip_stderr or "").splitlines() if line.strip().startswith("plus-ep:")]
    return ours[0] if ours else _tail(pip_stderr)


def _pip(python: str, *args: str, cwd: Path = ROOT, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([python, "-m", "pip", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


# ------------------------------------------------------------------------------------------------ carry
def pack(carry: Path) -> str:
    """The prebuilt libraries and the build requirement's wheel into the carry; says what it carried."""
    pre = carry / "prebuilt"
    pre.mkdir(parents=True, exist_ok=True)
    libs = [f for stem in LIBRARIES for f in sorted((ROOT / "plus_ep").glob(f"{stem}*.so"))[:1]]
    for f in libs:
        shutil.copy2(f, pre / f.name)
    wheels = carry / "wheels"
    try:
        r = _pip(sys.executable, "download", "-q", "--no-deps", "--only-binary=:all:", "-d", str(wheels),
                 BUILD_REQUIREMENT, timeout=120)
        why = _tail(r.stderr, 200)
    except subprocess.SubprocessError as e:
        why = f"{type(e).__name__}: {e}"
    got = sorted(p.name for p in wheels.glob("setuptools-*.whl"))
    return (f"prebuilt {', '.join(f.name for f in libs) or 'NOTHING (build the launcher first)'}; "
            + (f"build requirement {got[-1]}" if got else f"no {BUILD_REQUIREMENT} wheel ({why}): pip will build "
               "with the machine's own setuptools, else the source path"))


# -------------------------------------------------------------------------------------------------- paths
def install_pip(python: str, carry: Path, tree: Path = ROOT, dry_run: bool = False) -> tuple[bool, str]:
    """Editable install of `tree` into `python`'s environment, offline (dry_run: metadata built, nothing
    compiled or installed)."""
    wheels = sorted((carry / "wheels").glob("setuptools-*.whl"))
    dry = ["--dry-run"] if dry_run else []
    if wheels:
        how = f"pip install {'--dry-run ' * dry_run}-e . built in isolation from the carried {wheels[-1].name}"
        args = ["--find-links", str(carry / "wheels")]
    else:
        found = subprocess.run([python, "-c", "import setuptools; print(setuptools.__version__)"],
                               capture_output=True, text=True)
        how = (f"pip install {'--dry-run ' * dry_run}--no-build-isolation -e . with setuptools "
               f"{found.stdout.strip() or 'absent'}")
        args = ["--no-build-isolation"]
    r = _pip(python, "install", "-q", *dry, "--no-deps", "--no-index", *args, "-e", ".", cwd=tree)
    return r.returncode == 0, how if r.returncode == 0 else f"{how}: pip exit {r.returncode}: {_why(r.stderr)}"


def install_source(carry: Path, tree: Path = ROOT) -> tuple[bool, str]:
    """No pip: the carried libraries where the tree has none, and the package's metadata at its root."""
    copied = []
    for stem in LIBRARIES:
        if sorted((tree / "plus_ep").glob(f"{stem}*.so")):
            continue
        found = sorted((carry / "prebuilt").glob(f"{stem}*.so"))
        if not found:
            return False, f"no {stem}*.so in the tree or in {carry / 'prebuilt'}"
        shutil.copy2(found[0], tree / "plus_ep" / found[0].name)
        copied.append(found[0].name)
    version = _version(tree)
    dist = tree / DIST_INFO.format(version=version)
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: plus-ep\nVersion: {version}\n")
    (dist / "INSTALLER").write_text("bench.lease.install (source path: no files installed)\n")
    return True, (f"source path (no pip): {'the carried ' + ', '.join(copied) if copied else 'the tree own libraries'}"
                  f", {dist.name} at the checkout's root")


def _version(tree: Path) -> str:
    for line in (tree / "plus_ep" / "__init__.py").read_text().splitlines():
        if line.startswith("__version__"):
            return line.split("=", 1)[1].strip().strip("\"'")
    raise ValueError(f"no __version__ in {tree / 'plus_ep' / '__init__.py'}")


def check_import(tree: Path, source: bool, python: str = sys.executable) -> dict:
    """Import the whole namespace in a new process from an empty folder (with the tree on PYTHONPATH for
    the source path) and load the launcher: where each part came from. Raises when it fails or when the
    package comes from anywhere but `tree`."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if source:
        env["PYTHONPATH"] = str(tree)
    with tempfile.TemporaryDirectory(prefix="plus_ep_lease_import_") as empty:
        r = subprocess.run([python, "-c", _CHECK], cwd=empty, env=env, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"import failed: {_tail(r.stderr)}")
    got = json.loads(r.stdout.strip().splitlines()[-1])
    for part in ("plus_ep", "kernels", "launcher"):
        if not Path(got[part]).resolve().is_relative_to(tree.resolve()):
            raise RuntimeError(f"{part} imported from {got[part]}, not from {tree}")
    if got["metadata"] != got["version"]:
        raise RuntimeError(f"package metadata says {got['metadata']}, plus_ep.__version__ {got['version']}")
    return got


def install(carry: Path, path: str = "auto", python: str = sys.executable, tree: Path = ROOT,
            dry_run: bool = False) -> tuple[bool, str]:
    """One path (or auto: pip, then source when pip fails), then the import check (none after a dry run)."""
    notes = []
    if path in ("auto", "pip"):
        ok, how = install_pip(python, carry, tree, dry_run)
        notes.append(how)
        if ok and dry_run:
            return True, how
        if ok:
            try:
                got = check_import(tree, source=False, python=python)
                return True, f"{how}; python {got['python']}, plus_ep {got['version']}, {Path(got['launcher']).name}"
            except RuntimeError as e:
                notes[-1] += f"; {e}"
        if path == "pip":
            return False, "; ".join(notes)
    ok, how = install_source(carry, tree)
    notes.append(how)
    if ok:
        try:
            got = check_import(tree, source=True, python=python)
            return True, (f"{'; '.join(notes)}; python {got['python']}, plus_ep {got['version']}, "
                          f"{Path(got['launcher']).name}")
        except RuntimeError as e:
            notes[-1] += f"; {e}"
    return False, "; ".join(notes)


# ------------------------------------------------------------------------------------------- rehearsal
def fresh_venv(dest: Path, python: str = sys.executable) -> Path:
    """A new virtual environment (no pip of its own) that sees `python`'s packages after its own, as the GPU
    machine's python3 (a venv holding torch and onnxruntime) sees its own. `venv --system-site-packages`
    from inside a venv would give the base interpreter's packages instead. A .pth file adds the parent's
    site folders (their .pth files processed) and its prefixes to site.PREFIXES, so site.getsitepackages()
    lists them too (cuda-pathfinder finds NVRTC there). Returns the new python."""
    subprocess.run([python, "-m", "venv", "--without-pip", "--clear", str(dest)], check=True, capture_output=True,
                   timeout=300)
    new = dest / "bin" / "python"
    parent = json.loads(subprocess.run(
        [python, "-c", "import json, site; print(json.dumps([site.PREFIXES, site.getsitepackages()]))"],
        check=True, capture_output=True, text=True).stdout)
    own = subprocess.run([str(new), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], check=True,
                         capture_output=True, text=True).stdout.strip()
    # one line, no comprehension: a .pth line runs in site.addpackage's locals, invisible to nested scopes
    (Path(own) / "zz_lease_parent_environment.pth").write_text(
        f"import site, sys; site.PREFIXES.extend(filter(lambda p, k=list(site.PREFIXES): p not in k, {parent[0]!r}));"
        f" list(map(site.addsitedir, filter(lambda d, p=sys.path: d not in p, {parent[1]!r})))\n")
    return new


def tree_copy(dest: Path) -> Path:
    """The working tree as it would travel to the GPU machine: tracked and untracked-not-ignored files, no
    built libraries."""
    files = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for f in filter(None, files):
        src = ROOT / f
        if src.is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f)
    return dest


def rehearse(carry: Path, work: Path, short: bool = False) -> tuple[bool, str]:
    """Both paths on purpose in one fresh environment: the source path on a copy of the tree without its
    libraries (as it travels), then pip on this checkout (short: a dry run; the later steps use that
    environment)."""
    python = str(fresh_venv(work / "venv"))
    tree = tree_copy(work / "tree")
    ok_source, source = install(carry, "source", python, tree)
    shutil.rmtree(tree, ignore_errors=True)
    ok_pip, pip = install(carry, "pip", python, dry_run=short)
    return ok_source and ok_pip, f"source: {source} | pip: {pip}"


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("pack", "run", "rehearse"):
        print(__doc__, file=sys.stderr)
        return 2
    cmd, carry = argv[0], Path(argv[1] if len(argv) > 1 else ".gpu")
    if cmd == "pack":
        lease_env.say(f"prepare: {pack(carry)}")
        return 0
    st = lease_env.Status("install")
    if cmd == "rehearse":
        ok, detail = rehearse(carry, Path(argv[2]), "--short" in argv)
    else:
        ok, detail = install(carry, argv[argv.index("--path") + 1] if "--path" in argv else "auto")
    st.set("ok" if ok else "failed", detail)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
