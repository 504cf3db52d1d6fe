"""The attention template's config menu compiled with NVRTC for every arch (no spills, menu shape,
hooks, bad parameters); the GPU half of these cases is tests/gpu/test_template_attention.py."""
from tests.support.template_attention_cases import (  # noqa: F401  (pytest collects these here)
    compiled, test_bad_parameters_are_rejected, test_config_compiles_without_spills, test_hooks_compile, test_menu_shape)
