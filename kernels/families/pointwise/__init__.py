"""The pointwise template family's kernel half: every output of the subgraph as point-wise kernels (the shared
codegen, kernels/codegen/pointwise.py), grouped by shape, one variant for every shape."""
from __future__ import annotations

from ... import routes
from .. import KernelFamily
from ....warehouse.families.pointwise import POINTWISE


def render_pointwise(job) -> list:
    return [("pointwise", "", job.side_kernels(job.outputs), routes.ALWAYS)]


KERNEL = KernelFamily(POINTWISE, render_pointwise)
