"""The gemm_rownorm template family's kernel half: a GEMM whose epilogue feeds a row normalisation (LayerNorm,
RMSNorm, softmax) on the gemm family's templates: its renderer (render: the two-kernel and one-launch plans)
and the one-kernel route over a thread-block cluster on sm_90a (tile)."""
from __future__ import annotations

from .. import KernelFamily
from ..gemm import KERNEL as GEMM_KERNEL
from ....warehouse.families.gemm_rownorm import GEMM_ROWNORM
from .render import render_gemm_rownorm

KERNEL = KernelFamily(GEMM_ROWNORM, render_gemm_rownorm, entries=GEMM_KERNEL.entries)
