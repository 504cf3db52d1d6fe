"""The one owner of PlusEP's configuration: every `PLUS_EP_*` environment variable and the cache layout.

    from plus_ep import config
    config.cache_root()            # $PLUS_EP_CACHE_DIR or ~/.cache/plus_ep
    config.kernel_cache_dir()      # <root>/kernels   (compiled cubins, kernels/compile/cache.py)
    config.model_cache_dir()       # <root>/models    (rewritten models, plus_ep.InferenceSession)
    config.zoo_dir()               # $PLUS_EP_ZOO_DIR or <root>/zoo   (exported zoo models)
    config.flag("PLUS_EP_ASSERT_CACHED"), config.get("PLUS_EP_WAREHOUSE"), config.integer(...)

A leaf module: it imports only the standard library and nothing from plus_ep, so the compiler core
(`plus_ep.kernels`, `plus_ep.graph_rewrites`, `plus_ep.warehouse`) may import it. `VARIABLES` lists
every variable the project reads, in Python, in C (`plus_ep/native/*.c` read them with getenv; they are
documented here too) and in the bench shell script; `get`/`flag`/`integer` refuse a name not listed, and
`tests/cpu/test_config.py` checks that no source reads or names an unlisted one, and the docs site's
docs/reference/environment.md is generated from this table. Values are read from the environment on every call (tests change them).

`source_digest()` is the digest of PlusEP's own sources (every .py, .cuh, .c and .h of the installed
`plus_ep` namespace), computed once per process: the rewritten-model cache key includes it, so a
changed rewriter never returns a stale rewritten model (Triton's `triton_key()` does the same).
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import pathlib
from dataclasses import dataclass

__all__ = ["VARIABLES", "Variable", "cache_root", "kernel_cache_dir", "model_cache_dir", "zoo_dir", "CACHE_KINDS",
           "get", "flag", "integer", "size", "path", "source_digest", "package_roots", "markdown_table"]


@dataclass(frozen=True)
class Variable:
    name: str
    default: str          # what an unset variable means, in words
    read_by: str          # who reads it (Python module, C file, script)
    doc: str


VARIABLES: dict[str, Variable] = {v.name: v for v in [
    # ---- caches and state on disk
    Variable("PLUS_EP_CACHE_DIR", "`~/.cache/plus_ep`", "`plus_ep.config`",
             "Cache root: compiled kernels in `<root>/kernels`, rewritten models in `<root>/models`, "
             "zoo exports in `<root>/zoo`. The same root for the CLI, `InferenceSession` and the zoo "
             "(the session's `cache_dir` option overrides it for that session)."),
    Variable("PLUS_EP_ZOO_DIR", "`<cache root>/zoo`", "`plus_ep.zoo.cache`",
             "Folder of exported zoo models, when they should live apart from the cache root."),
    Variable("PLUS_EP_BENCH_DIR", "`<zoo folder>/bench`", "`bench/harness/export.py`",
             "Folder of the benchmark's exports."),
    Variable("PLUS_EP_KERNEL_CACHE_LIMIT", "`2G`", "`plus_ep.kernels.compile.cache`",
             "Size limit of the kernel cache (`500M`, `2G`, bytes; `0`: none): past it, the entries used "
             "longest ago are removed after a store (to 90% of the limit)."),
    Variable("PLUS_EP_MODEL_CACHE_LIMIT", "`8G`", "`plus_ep.model_cache`",
             "Size limit of the rewritten-model cache, read and applied as the kernel cache's "
             "(the entry just stored always stays)."),
    Variable("PLUS_EP_ASSERT_CACHED", "off", "`plus_ep.kernels.compile.cache`",
             "`1`: a kernel-cache miss raises `CacheMiss` instead of compiling (proves a warm start "
             "compiles nothing)."),
    # ---- code generation and compilation
    Variable("PLUS_EP_WAREHOUSE", "none", "`plus_ep.warehouse.registry`",
             "Folder whose `*.py` files add user patterns (`@pattern`) after the built-in ones and "
             "entry-point plugins."),
    Variable("PLUS_EP_DUMP_DIR", "none", "`plus_ep.kernels.compile.sources`",
             "Folder where every generated kernel source is written, under the name NVRTC compiles it "
             "with (`<node>.<variant>.<arch>.cu`)."),
    Variable("PLUS_EP_OVERRIDE_DIR", "none", "`plus_ep.kernels.compile.sources`",
             "Folder of hand-edited kernel sources: a file with a generated source's name replaces that "
             "source (with a warning); the override is part of the kernel cache key."),
    Variable("PLUS_EP_COMPILE_THREADS", "min(CPU count, 8)", "`plus_ep.kernels.compile.jobs`",
             "Threads compiling kernels with NVRTC at once (at least 1); fewer on a shared machine."),
    Variable("PLUS_EP_GEMM_TILES", "none", "`plus_ep.kernels.families.gemm.routes`",
             "Comma-separated name patterns (`ws_*`): the sm_90a GEMM tiles the route model may pick are only "
             "those matching (others are excluded as if they had failed to compile), to verify a kernel "
             "family on every GEMM it can serve. Not for production."),
    Variable("PLUS_EP_LINEINFO", "off", "`plus_ep.kernels.compile.nvrtc`",
             "`1`: compile with `-lineinfo` (source lines in Nsight Compute; larger models)."),
    # ---- the native launcher and the plugin EP (read in C)
    Variable("PLUS_EP_REGISTER", "on", "`plus_ep.ep`",
             "`0`: `import plus_ep` registers nothing with ONNX Runtime (no plugin EP)."),
    Variable("PLUS_EP_DISABLE", "off", "`plus_ep/native/ort_op.c`, `ep_factory.c`",
             "`1`: the launcher registers nothing (fused nodes run their function bodies) and the "
             "plugin EP offers no device."),
    Variable("PLUS_EP_VERBOSE", "off", "`plus_ep/native/ort_op.c`",
             "`1`: the launcher prints why it registered nothing at every registration (without it: one "
             "warning per process when no CUDA driver is usable, none for `PLUS_EP_DISABLE=1`)."),
    Variable("PLUS_EP_CUDA_LIBRARY", "`libcuda.so.1`", "`plus_ep/native/driver.c`, `ep_factory.c`, "
             "`ep_memory.c`", "Another CUDA driver library (the emulated driver, the tests' stand-in)."),
    Variable("PLUS_EP_VIRTUAL_GPU", "off", "`plus_ep/native/ep_factory.c`",
             "`1`: the plugin EP describes the driver's devices as GPUs itself when ORT found none "
             "(tests of the GPU path with a stand-in driver)."),
    # ---- the trust policy for embedded kernels (plus_ep/trust.py; enforced in plus_ep/native/trust.c)
    Variable("PLUS_EP_TRUST", "`verify`", "`plus_ep/native/trust.c`, `plus_ep.trust`",
             "`any`: run every model's embedded kernel images without a trust check (one warning per process); "
             "`verify` (the default): only images this installation built or rebuilt (trust manifest) or that a "
             "key of `PLUS_EP_TRUSTED_KEYS` signed."),
    Variable("PLUS_EP_TRUST_DIR", "`<cache root>/trusted`", "`plus_ep/native/trust.c`, `plus_ep.trust`",
             "The trust manifest: digests of the fused nodes whose kernels this installation built or rebuilt "
             "byte-identical (`plus-ep rewrite`, `plus-ep trust`). Servers: a read-only folder filled at deploy "
             "time."),
    Variable("PLUS_EP_TRUSTED_KEYS", "none", "`plus_ep/native/trust.c`, `plus_ep.trust`",
             "File of Ed25519 public keys (`ed25519 <base64> [comment]` lines, from `plus-ep keygen`) whose "
             "signatures (`plus-ep rewrite MODEL -o OUT --sign KEY`) make a model's kernels run."),
    # ---- tests and benchmarks
    Variable("PLUS_EP_SLOW_TESTS", "off", "`tests/conftest.py`",
             "`1`: also run the tests marked `slow` (the zoo-wide `plus-ep verify` matrix, about 10 minutes on 2 "
             "cores; `bench/runs/verify_emulated.py` records the same matrix); CI leaves it off."),
    Variable("PLUS_EP_CLIENTS_PYTHON", "this interpreter", "`tests/support/client_models.py`",
             "Interpreter of an environment holding the client libraries (sentence-transformers, Optimum, "
             "onnxruntime-genai: the `clients` extra) for `tests/emulated/test_clients.py`; Optimum caps "
             "transformers below the zoo's version, so `.ci/run` gives them a venv of their own."),
    Variable("PLUS_EP_FUZZ_EXAMPLES", "`100`", "`tests/cpu/test_fuzz.py`", "Hypothesis examples per fuzz test."),
    Variable("PLUS_EP_FUZZ_RANDOM", "off", "`tests/cpu/test_fuzz.py`",
             "`1`: random (not derandomized) fuzzing."),
    Variable("PLUS_EP_FUZZ_SEED", "none", "`tests/cpu/test_fuzz.py`", "A reproducible fuzz run of its own."),
    Variable("PLUS_EP_FUZZ_SAVE", "none", "`tests/cpu/test_fuzz.py`",
             "File each fuzz model is written to before it is checked (survives an ORT crash)."),
    Variable("PLUS_EP_ONNX_TESTDATA", "`/usr/share/libonnx-testdata/data`", "`tests/support/onnx_backend_suite.py`",
             "Debian's ONNX backend test data."),
    Variable("PLUS_EP_REQUIRE_ONNX_TESTDATA", "off", "`tests/cpu/test_onnx_backend.py`",
             "`1`: fail (not skip) when that test data is missing (CI)."),
    Variable("PLUS_EP_BACKEND_JOBS", "CPU count", "`tests/support/onnx_backend_suite.py`",
             "Processes of the ONNX backend suite."),
]}

DEFAULT_ROOT = "~/.cache/plus_ep"
KERNELS, MODELS, ZOO = "kernels", "models", "zoo"        # the folders under the cache root
TRUSTED = "trusted"     # the trust manifest's folder under the root (plus_ep/trust.py): policy, not a cache
CACHE_KINDS = (KERNELS, MODELS, ZOO)                      # `plus-ep cache info/clear`
# the size limits of the two caches that evict (the zoo keeps its exports until cleared)
CACHE_LIMITS = {KERNELS: ("PLUS_EP_KERNEL_CACHE_LIMIT", 2 << 30), MODELS: ("PLUS_EP_MODEL_CACHE_LIMIT", 8 << 30)}


def _known(name: str) -> str:
    if name not in VARIABLES:
        raise KeyError(f"{name} is not a PlusEP variable; add it to plus_ep/config.py's VARIABLES "
                       f"(then python -m tests.support.docs_pages) first")
    return name


def get(name: str) -> str | None:
    """The variable's value, or None when it is unset or empty."""
    return os.environ.get(_known(name)) or None


def flag(name: str) -> bool:
    """True for 1/true/yes/on (any case)."""
    return (get(name) or "").strip().lower() in ("1", "true", "yes", "on")


def integer(name: str, default: int) -> int:
    value = get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r}: expected an integer") from None


_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
          "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}


def parse_size(text: str) -> int:
    """Bytes from "2G", "500M", "1.5GiB", "123" (binary units); ValueError otherwise."""
    import re
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"{text!r} is not a size: write it like 500M, 2G or a byte count")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def size(name: str, default: int) -> int:
    """A size variable in bytes (`parse_size`); 0 means no limit."""
    value = get(name)
    if value is None:
        return default
    try:
        return parse_size(value)
    except ValueError as e:
        raise ValueError(f"{name}={value!r}: {e}") from None


def cache_limit(kind: str) -> int:
    """The size limit of the kernel or model cache in bytes (0: none)."""
    name, default = CACHE_LIMITS[kind]
    return size(name, default)


def path(name: str) -> pathlib.Path | None:
    value = get(name)
    return pathlib.Path(value).expanduser() if value else None


# ------------------------------------------------------------------------------------- cache layout
def cache_root(override: str | os.PathLike | None = None) -> pathlib.Path:
    """`override` (a `cache_dir` option), else $PLUS_EP_CACHE_DIR, else ~/.cache/plus_ep."""
    return pathlib.Path(override or get("PLUS_EP_CACHE_DIR") or DEFAULT_ROOT).expanduser()


def kernel_cache_dir(root: str | os.PathLike | None = None) -> pathlib.Path:
    return cache_root(root) / KERNELS


def model_cache_dir(root: str | os.PathLike | None = None) -> pathlib.Path:
    return cache_root(root) / MODELS


def zoo_dir() -> pathlib.Path:
    return path("PLUS_EP_ZOO_DIR") or cache_root() / ZOO


# ----------------------------------------------------------------------------------- source digest
SUBPACKAGES = ("graph_rewrites", "kernels", "warehouse")   # mapped from other folders (pyproject's package-dir)
SOURCE_SUFFIXES = (".py", ".cuh", ".c", ".h")


def package_roots() -> dict[str, pathlib.Path]:
    """Where the installed namespace lives: {"plus_ep": folder, "plus_ep.kernels": folder, ...}."""
    out = {"plus_ep": pathlib.Path(__file__).resolve().parent}
    for sub in SUBPACKAGES:
        spec = importlib.util.find_spec(f"plus_ep.{sub}")
        if spec is None or not spec.submodule_search_locations:
            raise RuntimeError(f"plus_ep.{sub} is not installed; reinstall PlusEP (pip install -e .)")
        out[f"plus_ep.{sub}"] = pathlib.Path(list(spec.submodule_search_locations)[0]).resolve()
    return out


def source_files(roots: dict[str, pathlib.Path]) -> list[tuple[str, pathlib.Path]]:
    """(name inside the namespace, file) of every source the digest covers, sorted by name. A root
    nested in another (an installed plus_ep/kernels inside plus_ep/) keeps its own files."""
    out = []
    for pkg, folder in roots.items():
        nested = [r for r in roots.values() if r != folder and folder in r.parents]
        for f in folder.rglob("*"):
            if f.suffix not in SOURCE_SUFFIXES or not f.is_file() or "__pycache__" in f.parts:
                continue
            if any(r == p for r in nested for p in f.parents):
                continue
            out.append((f"{pkg}/{f.relative_to(folder).as_posix()}", f))
    return sorted(out)


def digest_of(roots: dict[str, pathlib.Path]) -> str:
    """sha256 over the names and contents of `source_files(roots)` (not their absolute paths)."""
    h = hashlib.sha256()
    for name, f in source_files(roots):
        h.update(name.encode() + b"\0" + hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def source_digest() -> str:
    """Digest of the installed PlusEP sources, computed once per process."""
    return digest_of(package_roots())


# -------------------------------------------------------------------------------------------- docs
def markdown_table() -> str:
    """The table of variables of docs/reference/environment.md (tests/support/docs_pages.py)."""
    rows = ["| Variable | Default | Read by | Meaning |", "|---|---|---|---|"]
    rows += [f"| `{v.name}` | {v.default} | {v.read_by} | {v.doc} |" for v in VARIABLES.values()]
    return "\n".join(rows) + "\n"
