"""The gemm_group template family's kernel half: sibling GEMMs reading one A (a layer's Q, K and V
projections) in one launch of the gemm family's templates, the group index as an outer batch index (render)."""
from __future__ import annotations

from .. import KernelFamily
from ..gemm import KERNEL as GEMM_KERNEL
from ....warehouse.families.gemm_group import GEMM_GROUP
from .render import render_gemm_group

KERNEL = KernelFamily(GEMM_GROUP, render_gemm_group, entries=GEMM_KERNEL.entries)
