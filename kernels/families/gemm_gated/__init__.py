"""The gemm_gated template family's kernel half: a gated MLP's gate and up products of one A in one GEMM of
the gemm family's templates (PLUS_GATED), the epilogue getting both sums (render)."""
from __future__ import annotations

from .. import KernelFamily
from ..gemm import KERNEL as GEMM_KERNEL
from ....warehouse.families.gemm_gated import GEMM_GATED
from .render import render_gemm_gated

KERNEL = KernelFamily(GEMM_GATED, render_gemm_gated, entries=GEMM_KERNEL.entries)
