"""The generated `.cu` file: its comment header, named symbols, and the dump and override folders.

    src = finish(raw, syms=["batch", "seq"], node="plus_ep/gemm/3", pattern="gemm", template="gemm",
                 route=(0, 3, "s0,s1,*,8192,<="), variant="bm64_bn128", pgraph=text)
    body(src)                  # the code without the comment header: what the kernel cache keys
    prepare("plus_ep/gemm/3:bm64_bn128:sm_90", src)   # dump, then the override's text if there is one

`finish` gives a rendered source the layout CONTRACT.md §2 promises: a `//` comment header (node,
pattern and template, route and its condition, variant, symbols, the +Graph), then the code, where
every function taking `PlusArgs args` declares the symbols it uses by name
(`const long long batch = args.v[0];`) instead of indexing `args.v` bare.

The comment header names the node, so the same kernel rendered for two nodes (every layer of a model)
differs only there: `body()` drops it, and the kernel cache and compile_all key on the body, so such
kernels still compile once.

With PLUS_EP_DUMP_DIR set, every source compiled through `kernels.compile.jobs.compile_all` is written there
as `file_name(job name)` (`plus_ep_gemm_3.bm64_bn128.sm_90.cu`); with PLUS_EP_OVERRIDE_DIR set, a file
of that name there replaces the generated source (a warning names it). The override is what is
compiled and keyed, so editing it recompiles and a cached generated kernel is never returned for it.
An override must keep the generated entry points and their launch geometry (the plan is not re-read).
"""
from __future__ import annotations

import keyword
import logging
import pathlib
import re

from ... import config
from .files import write_atomic

log = logging.getLogger("plus_ep.kernels")

COMMENT = "// "
_SYM_USE = re.compile(r"\bargs\.v\[(\d+)\]")
_FUNCTION = re.compile(r"\bPlusArgs\s*&?\s*args\s*[,)][^;{]*\{")
_WORD = re.compile(r"[A-Za-z_]\w*")
# C++ keywords and CUDA names a symbol must not shadow inside a kernel (a type used by the code, ...).
_RESERVED = frozenset("""
alignas alignof and asm auto bool break case catch char class const constexpr const_cast continue decltype
default delete do double dynamic_cast else enum explicit extern false float for friend goto if inline int long
mutable namespace new noexcept not nullptr operator or private protected public register reinterpret_cast
return short signed sizeof static static_assert static_cast struct switch template this throw true try typedef
typeid typename union unsigned using virtual void volatile while xor
half half2 nv_bfloat16 nv_bfloat162 size_t ptrdiff_t int64_t uint64_t int32_t uint32_t dim3 warpSize
threadIdx blockIdx blockDim gridDim min max abs fabs fminf fmaxf sqrt exp log pow args
""".split())


# ------------------------------------------------------------------------------------------ header
def header(node: str, pattern: str, template: str | None, route: tuple, variant: str, syms=(),
           pgraph: str | None = None) -> str:
    """The comment header (CONTRACT.md §2). route: (index, count, condition)."""
    r, count, cond = route
    lines = ["PlusEP generated kernel source (kernels/CONTRACT.md §2); edit a copy through PLUS_EP_OVERRIDE_DIR",
             f"node:    {node}",
             f"pattern: {pattern}" + (f" (template {template})" if template else ""),
             f"route:   {r} of {count}, taken when `{cond}` is the first non-zero condition",
             f"variant: {variant}"]
    if syms:
        lines.append("symbols: " + ", ".join(f"{s} = args.v[{k}]" for k, s in enumerate(syms)))
    if pgraph:
        lines.append("+Graph:")
        lines += ["  " + ln for ln in pgraph.rstrip("\n").splitlines()]
    # a `//` line ending in a backslash would continue onto the next (code) line
    return "".join(COMMENT + ln.rstrip().rstrip("\\") + "\n" for ln in lines)


def body(source: str | bytes) -> str | bytes:
    """`source` without its leading `//` comment header (the code the kernel cache keys)."""
    if isinstance(source, bytes):
        return body(source.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
    pos = 0
    while source.startswith("//", pos):
        end = source.find("\n", pos)
        if end < 0:
            return ""
        pos = end + 1
    return source[pos:]


# ------------------------------------------------------------------------------------------ symbols
def symbol_names(syms, source: str) -> list[str]:
    """A C identifier per symbol: its own name when that is safe (not reserved, not a word the source
    or the templates already use, not macro-like), else the name with its index appended."""
    taken = set(_WORD.findall(source)) | _template_words() | _RESERVED
    out = []
    for k, name in enumerate(syms):
        ident = re.sub(r"\W", "_", str(name)).strip("_") or "sym"
        if ident[0].isdigit():
            ident = "d_" + ident
        for cand in (ident, f"{ident}_{k}", f"plus_sym{k}"):
            if (cand not in taken and not keyword.iskeyword(cand) and not cand.startswith(("plus_", "PLUS_"))
                    and not re.fullmatch(r"[A-Z0-9_]{2,}", cand)) or cand == f"plus_sym{k}":
                break
        taken.add(cand)
        out.append(cand)
    return out


def name_symbols(source: str, syms) -> str:
    """Every function taking `PlusArgs args` declares the symbols it reads (`const long long batch =
    args.v[0];`) and uses the names; `args.v[K]` for K past `syms` (values the plan computes) stays."""
    names = symbol_names(syms, source)
    out, pos = [], 0
    for m in _FUNCTION.finditer(source):
        if m.start() < pos:
            continue
        open_ = m.end() - 1
        close = _matching_brace(source, open_)
        inner = source[open_ + 1:close]
        used = sorted({int(k) for k in _SYM_USE.findall(inner) if int(k) < len(names)})
        if not used:
            continue
        inner = _SYM_USE.sub(lambda u: names[int(u.group(1))] if int(u.group(1)) < len(names) else u.group(0), inner)
        decls = "".join(f"  const long long {names[k]} = args.v[{k}];\n" for k in used)
        if inner.startswith("\n"):
            inner = "\n" + decls + inner[1:]
        else:                                   # a one-line body: `{ return args.v[0] * 4; }`
            inner = "\n" + decls + " " + inner.lstrip()
        out.append(source[pos:open_ + 1] + inner)
        pos = close
    out.append(source[pos:])
    return "".join(out)


def _matching_brace(text: str, open_: int) -> int:
    depth = 0
    for i in range(open_, len(text)):
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
    raise ValueError("generated source has an unbalanced `{` (a codegen bug)")


_template_words_cache: dict = {}


def _template_words() -> set:
    """Names plus_common.cuh (included before the generated code) and the template headers it includes
    (plus_abi.h) declare: macros, functions, types. A local symbol must not shadow them; names of the
    templates included after the code do not matter."""
    from .nvrtc import TEMPLATES_DIR
    first = pathlib.Path(TEMPLATES_DIR) / "plus_common.cuh"
    text = first.read_text() if first.exists() else ""
    paths = [first] + [first.parent / n for n in re.findall(r'#\s*include\s+"([^"]+)"', text)]
    stamp = tuple(p.stat().st_mtime_ns if p.exists() else None for p in paths)
    if _template_words_cache.get("stamp") != stamp:
        text = "\n".join(p.read_text() for p in paths if p.exists())
        words = set(re.findall(r"#\s*define\s+(\w+)", text)) | set(re.findall(r"\b([A-Za-z_]\w*)\s*\(", text))
        words |= set(re.findall(r"\b(?:struct|class|using|typedef[^;]*?)\s+([A-Za-z_]\w*)\s*[;{=]", text))
        _template_words_cache.update(stamp=stamp, words=words)
    return _template_words_cache["words"]


def finish(source: str, syms, node: str, pattern: str, template: str | None, route: tuple, variant: str,
           pgraph: str | None = None) -> str:
    """The rendered `source` as it is compiled and shipped: comment header, then named symbols."""
    return header(node, pattern, template, route, variant, syms, pgraph) + name_symbols(source, syms)


# ------------------------------------------------------------------------------- dump and override
def file_name(job_name: str) -> str:
    """The file name of a compile job's source in the dump and override folders."""
    stem = job_name[:-3] if job_name.endswith(".cu") else job_name
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", stem.replace(":", "."))
    return stem + ".cu"


_warned_overrides: set = set()


def prepare(job_name: str, source: str) -> str:
    """Write `source` to the dump folder, and return the override folder's text for it when there is one."""
    name = file_name(job_name)
    dump = config.path("PLUS_EP_DUMP_DIR")
    if dump is not None:
        try:
            dump.mkdir(parents=True, exist_ok=True)
            target = dump / name
            if not target.exists() or target.read_text() != source:
                write_atomic(target, source.encode())
        except OSError as exc:
            log.warning("PLUS_EP_DUMP_DIR=%s: cannot write %s (%s)", dump, name, exc.strerror or exc)
    override = config.path("PLUS_EP_OVERRIDE_DIR")
    if override is not None and (override / name).is_file():
        text = (override / name).read_text()
        if (name, text) not in _warned_overrides:
            _warned_overrides.add((name, text))
            log.warning("kernel %s: compiling %s instead of the generated source (PLUS_EP_OVERRIDE_DIR)",
                        job_name, override / name)
        return text
    return source
