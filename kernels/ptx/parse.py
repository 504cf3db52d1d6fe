"""PTX text -> entry functions: parameters, registers, shared declarations, labels and statements.

Only the syntax NVRTC emits is read (PTX ISA 9.0): module directives, `.global`/`.shared` variables,
`.entry` functions with `.param` declarations, `.reg` declarations (also inside `{ }` scopes of inline
asm, renamed per scope so that an inner `p` never aliases an outer one), labels, guarded
instructions, and the `.local` arrays of an entry (the stack frame NVRTC gives sinf/cosf's slow argument
reduction: per-thread memory, `Function.local_vars`), and module-scope `.global` arrays with their
initializers (its 2/pi table, `global_bytes`). Anything else (a `.func`, `.const`) is a PtxError naming
the line.

Statements are returned raw (`Stmt`); `decode.py` turns each into an executable op once.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from .errors import PtxError

TYPE_BITS = {"pred": 1, "b8": 8, "u8": 8, "s8": 8, "b16": 16, "u16": 16, "s16": 16, "f16": 16, "bf16": 16,
             "b32": 32, "u32": 32, "s32": 32, "f32": 32, "f16x2": 32, "bf16x2": 32, "tf32": 32,
             "b64": 64, "u64": 64, "s64": 64, "f64": 64, "b128": 128}


# ------------------------------------------------------------------------------------------- operands
# ("reg", name) ("sreg", "%tid.x") ("imm", int) ("f32", bits) ("f64", bits) ("sym", name)
# ("vec", (ops...)) ("mem", base or None, offset) ("pair", reg, pred) ("not", reg)
# ("tensor", map operand, ("vec", coords)): cp.async.bulk.tensor's [tensorMap, {c0, ...}]

_SREG = re.compile(r"%(tid|ntid|ctaid|nctaid|cluster_ctaid|cluster_nctaid|clusterid|nclusterid)\.[xyz]$|"
                   r"%(laneid|warpid|nwarpid|smid|nsmid|gridid|clock|clock64|globaltimer|lanemask_\w+|"
                   r"dynamic_smem_size|total_smem_size|cluster_ctarank|cluster_nctarank|is_explicit_cluster)$")
_INT = re.compile(r"[+-]?(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)U?$")
_F32 = re.compile(r"0[fF]([0-9a-fA-F]{8})$")
_F64 = re.compile(r"0[dD]([0-9a-fA-F]{16})$")
_NAME = re.compile(r"[%$A-Za-z_][\w$.%]*$")


def _int(text: str) -> int:
    t = text.rstrip("U")
    neg = t.startswith("-")
    t = t.lstrip("+-")
    if t.lower().startswith("0x"):
        v = int(t, 16)
    elif len(t) > 1 and t.startswith("0"):
        v = int(t, 8)
    else:
        v = int(t)
    return -v if neg else v


def split_top(text: str, sep: str = ",") -> list[str]:
    """Split on `sep` outside brackets and braces."""
    out, depth, cur = [], 0, []
    for ch in text:
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        if ch == sep and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    last = "".join(cur).strip()
    if last or out:
        out.append(last)
    return out


def parse_operand(text: str, rename) -> tuple:
    t = text.strip()
    if t.startswith("{") and t.endswith("}"):
        return ("vec", tuple(parse_operand(x, rename) for x in split_top(t[1:-1])))
    if t.startswith("[") and t.endswith("]") and len(split_top(t[1:-1])) == 2:
        # a tensor operand [tensorMap, {c0, c1, ...}] (cp.async.bulk.tensor): ("tensor", map operand, coords)
        base, coords = split_top(t[1:-1])
        return ("tensor", parse_operand(base, rename), parse_operand(coords, rename))
    if t.startswith("[") and t.endswith("]"):
        inner = t[1:-1].replace(" ", "")
        m = re.fullmatch(r"(.+?)(\+-?\d+|-\d+)?", inner)
        base, off = m.group(1), m.group(2)
        offset = _int(off.lstrip("+")) if off else 0
        if _INT.match(base):
            return ("mem", None, _int(base) + offset)
        return ("mem", parse_operand(base, rename), offset)
    if "|" in t:
        a, b = t.split("|")
        return ("pair", parse_operand(a, rename), parse_operand(b, rename))
    if t.startswith("!"):
        return ("not", parse_operand(t[1:], rename))
    if _SREG.match(t):
        return ("sreg", t)
    m = _F32.match(t)
    if m:
        return ("f32", int(m.group(1), 16))
    m = _F64.match(t)
    if m:
        return ("f64", int(m.group(1), 16))
    if _INT.match(t):
        return ("imm", _int(t))
    if _NAME.match(t):
        name = rename(t)
        return ("reg", name) if name is not None else ("sym", t)
    raise ValueError(f"cannot read operand {text!r}")


# ------------------------------------------------------------------------------------------ structure

@dataclass
class Stmt:
    line: int                       # 1-based PTX line
    guard: tuple | None             # (pred register, negated) or None
    opcode: str                     # "ld.global.nc.v4.f32"
    operands: tuple                 # parsed operands
    text: str                       # the statement as written (for messages)

    @property
    def parts(self) -> list[str]:
        return self.opcode.split(".")


@dataclass
class LocalVar:
    """A `.local` array of an entry: one private copy per thread."""
    name: str
    align: int
    size: int


@dataclass
class SharedVar:
    name: str
    align: int
    size: int | None                # None: `.extern` (dynamic shared memory)


@dataclass
class Function:
    name: str
    params: list                    # [(name, size, align, offset)]
    regs: dict                      # register name -> PTX type ("b32", "pred", ...)
    stmts: list                     # [Stmt]
    labels: dict                    # label -> index into stmts
    shared_refs: set = field(default_factory=set)
    first_line: int = 0
    cluster: tuple | None = None    # .reqnctapercluster X, Y, Z (a compile-time cluster shape)
    explicit_cluster: bool = False  # .explicitcluster
    max_cluster_rank: int | None = None   # .maxclusterrank N


@dataclass
class ParsedModule:
    version: str
    target: str
    functions: dict                 # entry name -> Function
    shared: dict                    # module-scope shared name -> SharedVar
    globals: dict                   # module-scope .global name -> (align, size)
    global_init: dict = field(default_factory=dict)   # name -> (element type, initializer text or "")


def global_bytes(size: int, ty: str, init: str) -> bytes:
    """The bytes of a module-scope .global variable: its `= {...}` (or `= v`) initializer's elements of
    type `ty` (integers, or 0f/0d hex floats and decimals), zero after them; all zero without one."""
    import struct
    out = bytearray(size)
    text = init.strip().strip("{}")
    if not text.strip():
        return bytes(out)
    bits = TYPE_BITS.get(ty, 8)
    width = max(bits // 8, 1)
    for k, tok in enumerate(t.strip() for t in text.split(",")):
        if (k + 1) * width > size:
            raise PtxError(f"initializer of {size} bytes has more elements than fit")
        if tok.lower().startswith(("0f", "0d")) and ty[0] == "f":
            raw = int(tok[2:], 16).to_bytes(width, "little")
        elif ty[0] == "f":
            raw = struct.pack("<f" if width == 4 else "<d", float(tok))
        else:
            raw = (int(tok, 0) & ((1 << (8 * width)) - 1)).to_bytes(width, "little")
        out[k * width:(k + 1) * width] = raw
    return bytes(out)


_PARAM = re.compile(r"\.param\s+(?:\.align\s+(\d+)\s+)?\.(\w+)\s+([\w$]+)(?:\[(\d+)\])?")
_VAR = re.compile(r"^(?:\.(?:extern|visible|weak)\s+)*\.(shared|global|const|local)\s+(?:\.align\s+(\d+)\s+)?"
                  r"(?:\.v(\d)\s+)?\.(\w+)\s+([\w$]+)(\[(\d*)\])?")


_BLOCK = re.compile(r"/\*.*?\*/", re.S)


def _strip_comments(text: str) -> list[str]:
    """Lines without // and /* */ comments (block comments keep their line breaks)."""
    if "/*" in text:
        text = _BLOCK.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return [ln.split("//", 1)[0] if "//" in ln else ln for ln in text.split("\n")]


def parse(text: str) -> ParsedModule:
    lines = _strip_comments(text)
    version = target = ""
    functions: dict = {}
    shared: dict = {}
    globs: dict = {}
    init: dict = {}
    i, n = 0, len(lines)
    while i < n:
        ln = lines[i].strip()
        if not ln:
            i += 1
            continue
        if ln.startswith(".version"):
            version = ln.split()[1]
        elif ln.startswith(".target"):
            target = ln.split()[1].rstrip(",")
        elif ln.startswith(".address_size"):
            if ln.split()[1] != "64":
                raise PtxError("only .address_size 64 is supported", line=i + 1)
        elif re.match(r"(\.(visible|weak|extern)\s+)*\.(entry|func)\b", ln):
            fn, i = _parse_function(lines, i)
            functions[fn.name] = fn
            continue
        else:
            m = _VAR.match(ln)
            if m:
                space, align, vec, ty, name, arr, count = m.groups()
                elem = TYPE_BITS.get(ty, 8) // 8 * (int(vec) if vec else 1)
                size = None if (arr is not None and count == "") else elem * (int(count) if count else 1)
                if space == "shared":
                    shared[name] = SharedVar(name, int(align or max(elem, 1)), size)
                elif space == "global":
                    globs[name] = (int(align or 1), size)
                    init[name] = (ty, ln.split("=", 1)[1].rstrip(";") if "=" in ln else "")
                else:
                    raise PtxError(f"module-scope .{space} variables are not supported", form=f".{space}",
                                   line=i + 1)
            elif not ln.startswith((".file", ".loc", ".section", "@@")):
                raise PtxError(f"unexpected module-level statement {ln!r}", line=i + 1)
        i += 1
    return ParsedModule(version, target, functions, shared, globs, init)


def _parse_function(lines: list[str], start: int):
    # header: up to the opening brace of the body
    header, i = [], start
    while True:
        if i >= len(lines):
            raise PtxError("function without a body", line=start + 1)
        ln = lines[i].rstrip()
        if ln.strip().endswith("{"):
            header.append(ln.strip()[:-1])
            break
        header.append(ln)
        i += 1
    head = " ".join(header)
    m = re.search(r"\.(entry|func)\s+(?:\([^)]*\)\s*)?([\w$]+)\s*\((.*?)\)", head, re.S)
    if not m:
        m2 = re.search(r"\.(entry|func)\s+([\w$]+)", head)
        if not m2:
            raise PtxError("cannot read a function header", line=start + 1)
        kind, name, plist = m2.group(1), m2.group(2), ""
    else:
        kind, name, plist = m.group(1), m.group(2), m.group(3)
    if kind == "func":
        raise PtxError(f"device function {name}: .func (calls) are not supported", form=".func", line=start + 1)
    params, off = [], 0
    for p in split_top(plist):
        if not p:
            continue
        pm = _PARAM.search(p)
        if not pm:
            raise PtxError(f"cannot read parameter {p!r}", line=start + 1)
        align, ty, pname, count = pm.groups()
        elem = max(TYPE_BITS[ty] // 8, 1)
        size = elem * (int(count) if count else 1)
        align = int(align) if align else elem
        off = -(-off // align) * align
        params.append((pname, size, align, off))
        off += size

    regs: dict = {}
    stmts: list = []
    labels: dict = {}
    shared_local: dict = {}
    scopes: list[dict] = [{}]      # PTX name -> unique name
    counter = [0]

    def declare(ty: str, name: str):
        mm = re.fullmatch(r"([%\w$]+)<(\d+)>", name)
        names = [f"{mm.group(1)}{k}" for k in range(int(mm.group(2)))] if mm else [name]
        for nm in names:
            if len(scopes) == 1:
                uniq = nm
            else:
                counter[0] += 1
                uniq = f"{nm}@{counter[0]}"
            scopes[-1][nm] = uniq
            regs[uniq] = ty

    def rename(nm: str):
        for sc in reversed(scopes):
            if nm in sc:
                return sc[nm]
        return None

    depth = 1
    i += 1
    buf, buf_line, closed = "", 0, False
    while i < len(lines) and not closed:
        ln = lines[i]
        lineno = i + 1
        i += 1
        if not buf:                                   # fast path: one plain statement on the line
            st = ln.strip()
            if not st:
                continue
            if st.endswith(";") and st.count(";") == 1 and "{" not in st and "}" not in st and ":" not in st:
                _statement(st[:-1].strip(), lineno, regs, stmts, declare, rename, shared_local)
                continue
        for ch in ln:
            if not buf.strip():
                if ch == "{":
                    scopes.append({})
                    depth += 1
                    buf = ""
                    continue
                if ch == "}":
                    depth -= 1
                    buf = ""
                    if depth == 0:
                        closed = True
                        break
                    scopes.pop()
                    continue
                if not buf:
                    buf_line = lineno
            if ch == ";":
                st = buf.strip()
                buf = ""
                if st:
                    _statement(st, buf_line, regs, stmts, declare, rename, shared_local)
                continue
            if ch == ":" and re.fullmatch(r"\s*[\w$]+", buf):
                labels[buf.strip()] = len(stmts)
                buf = ""
                continue
            buf += ch
        if buf.strip():
            buf += " "
    if not closed:
        raise PtxError(f"function {name}: body not closed", line=start + 1)
    fn = Function(name, params, regs, stmts, labels, first_line=start + 1)
    _cluster_directives(fn, head, start + 1)
    fn.shared_local = {k: v for k, v in shared_local.items() if isinstance(v, SharedVar)}
    fn.local_vars = {k: v for k, v in shared_local.items() if isinstance(v, LocalVar)}
    return fn, i


_REQ_CLUSTER = re.compile(r"\.reqnctapercluster\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?")
_MAX_RANK = re.compile(r"\.maxclusterrank\s+(\d+)")


def _cluster_directives(fn: Function, head: str, line: int) -> None:
    """Entry directives of thread-block clusters (between the parameter list and the body)."""
    tail = head[head.rfind(")") + 1:] if ")" in head else head
    fn.explicit_cluster = ".explicitcluster" in tail
    m = _REQ_CLUSTER.search(tail)
    if m:
        dims = tuple(int(g) if g else 1 for g in m.groups())
        if min(dims) < 1:
            raise PtxError(f"function {fn.name}: .reqnctapercluster {dims} has a zero extent",
                           form=".reqnctapercluster", line=line)
        fn.cluster = dims
    m = _MAX_RANK.search(tail)
    if m:
        fn.max_cluster_rank = int(m.group(1))


def _statement(st: str, line: int, regs, stmts, declare, rename, shared_local):
    if st.startswith("."):
        if st.startswith(".reg"):
            m = re.match(r"\.reg\s+(?:\.v\d\s+)?\.(\w+)\s+(.*)", st)
            for nm in split_top(m.group(2)):
                declare(m.group(1), nm.strip())
            return
        m = _VAR.match(st)
        if m and m.group(1) in ("shared", "local"):
            space, align, vec, ty, name, arr, count = m.groups()
            elem = TYPE_BITS.get(ty, 8) // 8 * (int(vec) if vec else 1)
            size = None if (arr is not None and count == "") else elem * (int(count) if count else 1)
            if space == "local":
                if size is None:
                    raise PtxError(f".local array {name} without a size", form=".local", line=line)
                shared_local[name] = LocalVar(name, int(align or elem), size)
            else:
                shared_local[name] = SharedVar(name, int(align or elem), size)
            return
        if st.startswith((".pragma", ".loc", ".maxntid", ".reqntid", ".minnctapersm", ".maxnreg")):
            return
        raise PtxError(f"unsupported directive {st.split()[0]}", form=st.split()[0], line=line)
    guard = None
    if st.startswith("@"):
        g, _, st = st.partition(" ")
        neg = g.startswith("@!")
        gname = rename(g[2:] if neg else g[1:])
        if gname is None:
            raise PtxError(f"unknown guard predicate {g}", line=line)
        guard = (gname, neg)
        st = st.strip()
    parts = st.split(None, 1)
    opcode = parts[0]
    ops = ()
    if len(parts) > 1:
        try:
            ops = tuple(parse_operand(x, rename) for x in split_top(parts[1]))
        except ValueError as e:
            raise PtxError(str(e), form=opcode, line=line) from None
    stmts.append(Stmt(line, guard, opcode, ops, st))
