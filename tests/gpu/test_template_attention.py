"""The attention template on an NVIDIA GPU against torch SDPA and with BSHD hooks (cases in
tests/support/template_attention_cases.py; tests/emulated/test_ptx_gpu_backend.py runs the hooks case on the
PTX interpreter)."""
from tests.support.template_attention_cases import (  # noqa: F401  (pytest collects these here)
    gpu, test_attention_hooks_on_gpu, test_attention_matches_sdpa)
