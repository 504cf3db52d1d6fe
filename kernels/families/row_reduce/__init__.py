"""The row_reduce template family's kernel half: one block per row (the shared codegen's row program,
kernels/codegen/row.py), the outputs that do not depend on the rows as point-wise kernels."""
from __future__ import annotations

from ... import routes
from ...codegen.pull import RenderError
from ...codegen.row import ROW_OPS
from .. import KernelFamily
from ....warehouse.families.row_reduce import ROW_REDUCE


def render_rows(job) -> list:
    row_nodes = [n for n in job.nodes if n.op_type in ROW_OPS]
    if not row_nodes:
        raise RenderError(f"{job.node_name}: a row-reduce subgraph without a reduction")
    dep = job.depends_on([o for n in row_nodes for o in n.output])
    row_out = [t for t in job.outputs if t in dep]
    side = [t for t in job.outputs if t not in dep]
    src, entry, launch, _ = job.row_kernel(row_nodes, {t: job.out_ptr(t) for t in row_out})
    kernels = [(src, entry, launch)] + job.side_kernels(side)
    return [("row", "", kernels, routes.ALWAYS)]


KERNEL = KernelFamily(ROW_REDUCE, render_rows)
