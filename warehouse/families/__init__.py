"""The built-in template families' graph halves (registry): each module declares its family and registers its
patterns on import. The import order below is the patterns' priority (the first exact match wins); a family
whose module imports another's places its patterns with `before=`."""
from . import flash_attention, gemm_rownorm, gemm_gated, gemm, gemm_group, dynamic_range, row_reduce, axis_softmax, pointwise  # noqa: F401
