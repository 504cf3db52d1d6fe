"""Which shapes `plus-ep verify` runs by default: a small one, and one that spans more than one tile,
with a ragged remainder, in every tiled dimension of every route the launcher chooses, and makes every grid
dimension that depends on the shapes larger than 1.

The tiles come from the plans (CONTRACT.md §3): a grid dimension `X,T,cdiv` tiles X by T (GEMM rows
M = batch * seq by BM and columns N by BN, attention queries by BQ, point-wise elements by the block), and
a launch's tiles that no grid dimension shows come from the template family that defines its kernel
(`KernelFamily.hidden_tiles`: an attention kernel's key tile, recovered from its route's dynamic shared
memory). Each candidate (batch, seq) is bound through the plan's
`in` records from the node inputs' shapes of a plain ORT run (cheap), the route condition is evaluated
as the launcher does, and the first candidate that spans every tile wins. Dims fixed by the model
(a GEMM's N set by its weights, marked "(fixed)"; a ViT's patch count) cannot be chosen: they are
reported. A GEMM's K is not in its grid (the kernel loops over it): it is not reported.

    spans = tiles_of(plan_text, arch, input_shapes)    # [(what, tile, extent)] of the chosen route
"""
from __future__ import annotations

_BIN = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "/": lambda a, b: a // b if b else 0, "%": lambda a, b: a % b if b else 0,
    "min": min, "max": max, "cdiv": lambda a, b: -(-a // b) if b else 0,
    "<": lambda a, b: int(a < b), "<=": lambda a, b: int(a <= b), ">": lambda a, b: int(a > b),
    ">=": lambda a, b: int(a >= b), "==": lambda a, b: int(a == b), "!=": lambda a, b: int(a != b),
    "&&": lambda a, b: int(bool(a and b)), "||": lambda a, b: int(bool(a or b)),
}
# the candidates for the multi-tile run: odd sequence lengths (ragged against every power-of-two tile)
SEQ_CANDIDATES = (17, 37, 67, 133, 259)
BATCH_LARGE = 2


def rpn(expr: str, s: dict, v: dict | None = None) -> int | None:
    """Evaluate one plan expression (RPN items joined by ','); None when a symbol is unknown."""
    st: list = []
    for t in expr.split(","):
        if t in _BIN:
            b, a = st.pop(), st.pop()
            if a is None or b is None:
                st.append(None)
            else:
                st.append(_BIN[t](a, b))
        elif t == "!":
            a = st.pop()
            st.append(None if a is None else int(not a))
        elif t == "?":
            c, b, a = st.pop(), st.pop(), st.pop()
            st.append(None if a is None else (b if a else c))
        elif t[0] == "s" and t[1:].isdigit():
            st.append(s.get(int(t[1:])))
        elif t[0] == "v" and t[1:].isdigit():
            st.append((v or {}).get(int(t[1:]), s.get(int(t[1:]))))
        else:
            st.append(int(t))
    return st[-1] if st else None


def bind(plan_text: str, shapes: list) -> dict:
    """{symbol index: value} from the node inputs' shapes (the plan's `in` records)."""
    s = {}
    for line in plan_text.splitlines():
        t = line.split()
        if t and t[0] == "in":
            i = int(t[1])
            dims = t[4:]
            if i < len(shapes) and shapes[i] is not None and len(shapes[i]) == len(dims):
                for d, n in zip(dims, shapes[i]):
                    if d.startswith("s") and d[1:].isdigit():
                        s.setdefault(int(d[1:]), int(n))
    return s


def _routes(plan_text: str, arch: str) -> list:
    """[(condition, [kernel tokens])] of the routes that serve `arch` (plan `arch` groups)."""
    routes, group = [], None
    for line in plan_text.splitlines():
        t = line.split()
        if not t:
            continue
        if t[0] == "arch":
            group = t[1:]
        elif t[0] == "route":
            routes.append((t[2], [], group))
        elif t[0] == "kernel" and routes:
            routes[-1][1].append(t)
    return [(c, k) for c, k, g in routes if g is None or arch in g]


def chosen_route(plan_text: str, arch: str, s: dict) -> tuple:
    """(index among the arch's routes, kernel lines) the launcher takes: the first non-zero condition."""
    for r, (cond, kernels) in enumerate(_routes(plan_text, arch)):
        c = rpn(cond, s)
        if c is None or c:
            return r, kernels
    return -1, []


def tiles_of(plan_text: str, arch: str, shapes: list, head_dim: int | None = None, math: str | None = None) -> list:
    """[(what, tile, extent)] of every tiled dimension of the route chosen for these input shapes, and of every
    grid dimension that depends on the shapes as (what "... > 1", 1, its value): spanned (`spanned`) when a
    tiled extent exceeds its tile with a ragged remainder, and when such a grid dimension exceeds 1 (so a
    launch that swaps or drops a grid dimension shows). head_dim, math: the node's head dimension and math
    mode (tolerances.node_math), which a family's hidden tiles may depend on (the attention key tile)."""
    from ..kernels.families import of_entry
    s = bind(plan_text, shapes)
    _, kernels = chosen_route(plan_text, arch, s)
    out = []
    for k in kernels:
        entry, grid = k[3], k[4:7]
        for axis, g in zip("xyz", grid):
            items = g.split(",")
            if any(x.startswith(("s", "v")) and x[1:].isdigit() for x in items):
                value = rpn(g, s)
                if value is not None:
                    out.append((f"{entry} grid.{axis} > 1", 1, int(value)))
            # `X,T,cdiv` (possibly capped: `X,T,cdiv,C,min`): X tiled by T; X fixed by the model when it
            # has no symbol (a GEMM's N)
            p = items.index("cdiv") if "cdiv" in items else -1
            if p >= 2 and items[p - 1].isdigit():
                extent = rpn(",".join(items[:p - 1]), s)
                fixed = not any(x.startswith(("s", "v")) for x in items[:p - 1])
                if extent is not None:
                    out.append((f"{entry} grid.{axis}{' (fixed)' if fixed else ''}", int(items[p - 1]), extent))
        family = of_entry(entry)
        if family is not None and family.hidden_tiles is not None:
            out += family.hidden_tiles(k, s, dict(_syms(plan_text)), head_dim, math)
    return out


def _syms(plan_text: str) -> list:
    return [(int(t[1]), t[2]) for t in (ln.split() for ln in plan_text.splitlines()) if len(t) == 3 and t[0] == "sym"]


def spanned(tile: int, extent: int) -> bool:
    """A tiled extent spans its tile more than once with a ragged remainder; a grid dimension (tile 1) is
    more than 1."""
    return extent > 1 if tile == 1 else extent > tile and extent % tile != 0


def spans(tiles: list) -> bool:
    """Every tile spanned (`spanned`)."""
    return all(spanned(tile, extent) for _, tile, extent in tiles)
