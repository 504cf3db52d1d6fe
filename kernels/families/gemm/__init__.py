"""The gemm template family's kernel half (gemm.cuh, gemm_sm90a.cuh, gemm_sm90a_ws.cuh with the parameters both
sm_90a templates read in gemm_sm90a_params.cuh, gemm_hooks.cuh): the renderer of GEMM nodes (render), the hooks
it writes into the templates (hooks), MatMulNBits weights decoded in the mainloop (nbits), the config menus for
sm_80 and sm_90a (configs, sm90a_configs), the tensor maps of the TMA tiles (tma) and the shape routes that
choose among them (routes). The gemm_rownorm, gemm_group and gemm_gated families render into the same
templates."""
from __future__ import annotations

from .. import KernelFamily
from ....warehouse.families.gemm import GEMM
from .render import ENTRY, SPLITK_ENTRY, render_gemm

KERNEL = KernelFamily(GEMM, render_gemm, entries=(ENTRY, SPLITK_ENTRY))
