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
