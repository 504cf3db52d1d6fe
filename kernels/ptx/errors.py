"""The one exception of the PTX interpreter."""
from __future__ import annotations


class PtxError(Exception):
    """A PTX form the interpreter does not implement, undefined behaviour met while running (an
    out-of-bounds access, a collective missing lanes), or checker findings raised on request.

    `form` names the opcode with modifiers (when one is involved), `line` the PTX line (1-based),
    `kernel` the entry function; `findings` is set by LaunchResult.raise_for_findings()."""

    def __init__(self, message: str, form: str | None = None, line: int | None = None,
                 kernel: str | None = None, findings=None):
        self.form, self.line, self.kernel = form, line, kernel
        self.findings = list(findings or [])
        where = []
        if kernel:
            where.append(f"kernel {kernel}")
        if line:
            where.append(f"PTX line {line}")
        if form:
            where.append(f"form {form}")
        super().__init__(f"{message}" + (f" ({', '.join(where)})" if where else ""))


def lanes(ids) -> str:
    """Thread ids for messages: the first eight and the count."""
    ids = [int(i) for i in ids]
    return ", ".join(map(str, ids[:8])) + (f" ... ({len(ids)} threads)" if len(ids) > 8 else "")


def with_findings(e: PtxError, checks) -> PtxError:
    """An error that stopped a launch, with the checker findings recorded before it (the root cause is
    often among them: a phase waited twice before the over-arrival it leads to)."""
    if checks is None or not checks.findings or e.findings:
        return e
    lines = "; ".join(str(f) for f in checks.findings[:5])
    more = f" ... {len(checks.findings) - 5} more" if len(checks.findings) > 5 else ""
    out = PtxError(f"{e.args[0]} [checker findings before it: {lines}{more}]", findings=checks.findings)
    out.form, out.line, out.kernel = e.form, e.line, e.kernel
    return out
