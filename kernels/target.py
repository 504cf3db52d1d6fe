"""What a kernel is rendered for: the arch, the math of fp32 GEMMs and attention, and the configs not
to use. Every renderer and the route model read it from the job (`job.target`); nothing travels as
ambient state.

    target = Target("sm_90a", fp32_math="tf32")
    target.without({"tf32_128x128x32_w64x32_s3"})      # the same target minus configs that spilled

fp32_math is the one vocabulary of the fp32 math, here because the kernels decide with it; the run
options (plus_ep/options.py: CLI, InferenceSession, plugin EP) take it from here. "tf32": TF32 tensor
cores for fp32 GEMMs and attention, fp32 in memory and in the accumulators; "exact": SIMT fp32. The
default follows ONNX Runtime's CUDA EP, whose `use_tf32` provider option defaults to 1 (TF32 for float
GEMM/MatMul and cuDNN convolutions), so PlusEP never picks slower math than the CUDA EP does by
default; "exact" stays available as an option.
"""
from __future__ import annotations

from dataclasses import dataclass, field

FP32_MATHS = ("exact", "tf32")
FP32_MATH_DEFAULT = "tf32"


@dataclass(frozen=True)
class Target:
    arch: str
    fp32_math: str = FP32_MATH_DEFAULT
    excluded: frozenset = field(default_factory=frozenset)     # config names the route model never picks

    def __post_init__(self):
        if self.fp32_math not in FP32_MATHS:
            raise ValueError(f"fp32_math {self.fp32_math!r}: use one of {', '.join(FP32_MATHS)}")
        object.__setattr__(self, "excluded", frozenset(self.excluded))

    def without(self, names) -> Target:
        """This target, also excluding the configs named in `names`."""
        return Target(self.arch, self.fp32_math, self.excluded | frozenset(names))
