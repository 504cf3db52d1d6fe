"""Built-in patterns. Import order is priority order: the first exact match wins."""
from . import flash_attention, gemm_rownorm, gemm_gated, gemm, gemm_group, row_reduce, reduce, elementwise  # noqa: F401
