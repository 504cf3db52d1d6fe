"""The GPU architectures PlusEP builds for, and what the code generator and the route model know of them.

    from plus_ep.kernels import arch
    arch.parse("9.0")                 # "sm_90" (canonical name from "sm_90", "90", "9.0", "compute_90", 90)
    a = arch.get("sm_90a")            # Arch(name="sm_90a", major=9, minor=0, sms=132, ..., part="H100 SXM5")
    a.smem_per_block, a.wgmma         # 232448, True
    arch.for_device(9, 0)             # "sm_90a": the best target for a compute capability

One table for all of Python (NVRTC options and resource checks, the route model, the local-GPU probe,
the CLI). The C launcher knows arch *names* only (`KNOWN_ARCHS` in plus_ep/native/ort_op.c, probed when a
plan has no `archs` line) and asks the driver for limits; tests/cpu/test_arch.py checks that every arch
here is one it probes. Figures are CUDA's documented per-compute-capability limits; `sms` is the SM count
of the arch's reference part (`part`: A100 108, A40 84, GeForce RTX 4090 128, H100 SXM5 132), which the
route model plans waves for and the emulated CUDA driver reports (plus_ep/verification/emulator.py).
"""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Arch:
    name: str                     # "sm_90a"
    major: int
    minor: int
    sms: int                      # SMs of the reference part (route model: waves; the emulated device)
    smem_per_block: int           # bytes a block may use with the opt-in attribute (static + dynamic)
    smem_per_sm: int              # bytes of shared memory per SM (route model: blocks per SM)
    threads_per_sm: int           # resident threads per SM
    registers_per_sm: int = 65536
    registers_per_thread: int = 255
    wgmma: bool = False           # Hopper warpgroup MMA (only the arch-specific sm_90a target)
    part: str = ""                # the reference part `sms` counts

    @property
    def cc(self) -> tuple[int, int]:
        return self.major, self.minor

    @property
    def specific(self) -> bool:
        """An arch-specific target ("a" suffix): its SASS runs on exactly this compute capability."""
        return self.name.endswith("a")


TABLE: dict[str, Arch] = {a.name: a for a in [
    Arch("sm_80", 8, 0, sms=108, smem_per_block=166912, smem_per_sm=167936, threads_per_sm=2048, part="A100"),
    Arch("sm_86", 8, 6, sms=84, smem_per_block=101376, smem_per_sm=102400, threads_per_sm=1536, part="A40"),
    Arch("sm_89", 8, 9, sms=128, smem_per_block=101376, smem_per_sm=102400, threads_per_sm=1536,
         part="GeForce RTX 4090"),
    Arch("sm_90", 9, 0, sms=132, smem_per_block=232448, smem_per_sm=233472, threads_per_sm=2048, part="H100 SXM5"),
    Arch("sm_90a", 9, 0, sms=132, smem_per_block=232448, smem_per_sm=233472, threads_per_sm=2048, wgmma=True,
         part="H100 SXM5"),
]}
ARCHS = tuple(TABLE)

# sm_90 cubins count the 1 KB of system-reserved shared memory per block in `.nv.shared.<entry>`.
RESERVED_SMEM_PER_BLOCK = 1024


def parse(s) -> str:
    """Canonical arch name ("sm_90a") from "sm_90", "90", "sm_90a", "90a", "9.0", "compute_90" or 90."""
    text = str(s).strip().lower()
    m = (re.fullmatch(r"(?:sm_|compute_|sm)?(\d{1,2})(\d)(a?)", text)
         or re.fullmatch(r"(\d+)\.(\d)(a?)", text))
    if m:
        name = f"sm_{int(m.group(1))}{m.group(2)}{m.group(3)}"
        if name in TABLE:
            return name
        raise ValueError(f"unsupported GPU architecture {s!r} ({name}); PlusEP builds for {', '.join(ARCHS)}")
    raise ValueError(f"cannot read a GPU architecture from {s!r}; write it like 'sm_90', '90', 'sm_90a' or '9.0' "
                     f"(supported: {', '.join(ARCHS)})")


def get(s) -> Arch:
    return TABLE[parse(s)]


def for_device(major: int, minor: int) -> str:
    """The best target for a device of compute capability major.minor: the arch-specific one when there
    is one (9.0 -> sm_90a), else sm_XY, which may be an arch PlusEP does not build for ("sm_100")."""
    plain = f"sm_{major}{minor}"
    specific = plain + "a"
    return specific if specific in TABLE else plain
