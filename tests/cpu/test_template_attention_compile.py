"""The attention template's menu shape, hooks and bad parameters, compiled with NVRTC; the GPU half of these
cases is tests/gpu/test_template_attention.py. Every config's spill check runs in
tests/cpu/test_attention_menu_spills.py, with the generated-style hooks that cost more registers
(PLUS_ATTN_FULL=1 runs the hook-free product here as well)."""
from tests.support.template_attention_cases import (  # noqa: F401  (pytest collects these here)
    FULL, test_bad_parameters_are_rejected, test_hooks_compile, test_menu_shape)

if FULL:
    from tests.support.template_attention_cases import compiled, test_config_compiles_without_spills  # noqa: F401
