"""The dynamic_range family's renderer: the hooks of dynamic_range.cuh from a subgraph's roles
(DynamicRangeRoles): x's elements pulled through its views into `plus_dr_x`, the scalar epilogue on the
ReduceMin and ReduceMax results stored by `plus_dr_finish`.

    x [B, S, H] -> Reshape [-1] -> ReduceMin, ReduceMax -> Min/Max with 0, scale, zero point
    becomes one launch: plus_dynamic_range over cdiv(B·S·H, 2048) CTAs (at most 1024), scratch 8 + 8·1024 bytes
"""
from __future__ import annotations

from ... import routes
from ...codegen import dtypes, symdim
from ...codegen.pull import RenderError
from ....warehouse.families.dynamic_range import DynamicRangeRoles

ENTRY = "plus_dynamic_range"          # the kernel dynamic_range.cuh defines
THREADS, PER_THREAD, MAX_GRID = 256, 8, 1024     # PLUS_DR_THREADS, elements a thread takes, PLUS_DR_MAX_GRID


def render_dynamic_range(job) -> list:
    """One variant for every shape: the template's kernel, its outputs computed from lo and hi."""
    roles = job.roles
    if not isinstance(roles, DynamicRangeRoles):
        raise RenderError(f"{job.node_name}: the dynamic range template needs the roles its family finds")
    nmin, nmax = job.view.nodes[roles.reduce_min], job.view.nodes[roles.reduce_max]
    em = job.emitter()
    shape = em.shape(roles.x)
    n = symdim.numel(shape)
    val, ct = em.value(roles.x, em.delinear("i", shape))
    hooks = (f"PLUS_DEV long long plus_dr_count(const PlusArgs& args) {{ return {em.c(n)}; }}\n"
             "PLUS_DEV float plus_dr_x(const PlusArgs& args, long long i) {\n"
             f"{em.take()}\n  return {dtypes.convert(val, ct, 'float')};\n}}\n")
    fin = job.emitter()
    fin.bound[nmin.output[0]] = lambda idx: ("lo", "float")
    fin.bound[nmax.output[0]] = lambda idx: ("hi", "float")
    dep = job.depends_on([nmin.output[0], nmax.output[0]])
    for t in job.outputs:
        if t not in dep or fin.shape(t):
            raise RenderError(f"{job.node_name}: output '{t}' is not a scalar computed from the range")
        ptr, dt = job.out_ptr(t)
        v, vt = fin.value(t, [])
        fin.emit(dtypes.store(dt, ptr, "0", dtypes.convert(v, vt, dtypes.compute(dt))))
    hooks += ("PLUS_DEV void plus_dr_finish(const PlusArgs& args, float lo, float hi) {\n"
              f"{fin.take()}\n}}\n")
    k = len(job.plan.scratch)
    job.plan.scratch.append(str(8 + 8 * MAX_GRID))
    prefix = f"#define PLUS_DR_SCRATCH {k}\n" + '#include "dynamic_range.cuh"\n' + hooks
    grid = (f"{job.syms.rpn(n)},{THREADS * PER_THREAD},cdiv,1,max,{MAX_GRID},min", "1", "1")
    return [("dynamic_range", prefix, [("", ENTRY, (grid, (str(THREADS), "1", "1"), "0"))], routes.ALWAYS)]
