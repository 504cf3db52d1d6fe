"""The attention template executed by the PTX interpreter (cases in tests/support/ptx_attention_cases.py,
shared with the mutation tests)."""
from tests.support.ptx_attention_cases import (  # noqa: F401  (pytest collects these here)
    test_attention_bshd_hooks_mask_on_interpreter, test_attention_key_bias_and_side_outputs_on_interpreter,
    test_attention_menu_extra_on_interpreter, test_attention_on_interpreter)
