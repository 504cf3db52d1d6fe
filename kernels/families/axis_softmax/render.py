"""The axis_softmax family's renderer: the hooks of axis_softmax.cuh from a subgraph's roles (AxisSoftmaxRoles),
the element-wise and index-only ops before the softmax pulled into `plus_axis_x`, those after it pushed forward
into `plus_axis_y`'s stores, outputs that do not depend on it as point-wise kernels."""
from __future__ import annotations

from ... import routes
from ...codegen import dtypes, symdim
from ...codegen.forward import bind_forward, emit_stores, forward_map
from ...codegen.pull import RenderError
from ....warehouse.families.axis_softmax import AxisSoftmaxRoles

ENTRY = "plus_axis_softmax"           # the kernel axis_softmax.cuh defines
THREADS, MAX_BLOCKS = 256, 8192       # PLUS_AXIS_THREADS; a grid-stride loop past MAX_BLOCKS blocks


def render_axis_softmax(job) -> list:
    """One variant for every shape: the template's kernel over outer x inner columns, then side kernels."""
    roles = job.roles
    if not isinstance(roles, AxisSoftmaxRoles):
        raise RenderError(f"{job.node_name}: the axis softmax template needs the roles its family finds")
    node = job.view.nodes[roles.softmax]
    x, y = node.input[0], node.output[0]
    em = job.emitter()
    shape = em.shape(x)
    outer, length, inner = symdim.numel(shape[:roles.axis]), shape[roles.axis], symdim.numel(shape[roles.axis + 1:])
    idx = em.delinear("o", shape[:roles.axis]) + ["r"] + em.delinear("i", shape[roles.axis + 1:])
    hooks = ("PLUS_DEV PlusAxisShape plus_axis_shape(const PlusArgs& args) {\n"
             f"  return PlusAxisShape{{{em.c(outer)}, {em.c(length)}, {em.c(inner)}}};\n}}\n")
    em.reset()
    val, ct = em.value(x, idx)
    hooks += ("PLUS_DEV float plus_axis_x(const PlusArgs& args, long long o, long long r, long long i) {\n"
              f"{em.take()}\n  return {dtypes.convert(val, ct, 'float')};\n}}\n")
    out = job.emitter()                 # y pushed forward to the outputs computed from it
    out.bound[y] = lambda index: ("y", "float")
    fwd = forward_map(out, y, idx)
    bind_forward(out, fwd, y)
    dep = job.depends_on([y])
    emit_stores(out, fwd, {t: (*job.out_ptr(t), out.shape(t)) for t in job.outputs if t in dep})
    hooks += ("PLUS_DEV void plus_axis_y(const PlusArgs& args, long long o, long long r, long long i, float y) {\n"
              f"{out.take()}\n}}\n")
    prefix = f"#define PLUS_AXIS_LOG {int(roles.log)}\n" + '#include "axis_softmax.cuh"\n' + hooks
    grid = (f"{job.syms.rpn(outer * inner)},{THREADS},cdiv,{MAX_BLOCKS},min", "1", "1")
    kernels = [("", ENTRY, (grid, (str(THREADS), "1", "1"), "0"))]
    kernels += job.side_kernels([t for t in job.outputs if t not in dep])
    return [("axis_softmax", prefix, kernels, routes.ALWAYS)]
