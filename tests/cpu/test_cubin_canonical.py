"""The canonical form verify's cubin check compares (kernels/compile/cubin.py: canonical): NVRTC's cubin and
the standalone ptxas's cubin of the same PTX are equal in it (only the tool note differs) and differ in
bytes; a changed byte of code, code hidden between sections, or a segment pointed elsewhere is not."""
from __future__ import annotations

import struct

import pytest

from plus_ep.kernels.compile import cubin as C
from plus_ep.kernels.compile import nvrtc
from plus_ep.verification import cubin_check

SRC = ('#include "plus_common.cuh"\nextern "C" __global__ void plus_k(const PlusArgs args) '
       '{ float* o = (float*)args.out[0]; o[threadIdx.x] = o[threadIdx.x] * 2.0f + 1.0f; }\n')


@pytest.fixture(scope="module")
def compiled():
    return nvrtc.compile_cubin(SRC, "sm_80", name="canonical.cu")


def _section(d: bytes, name: str) -> tuple[int, int]:
    _, secs, _ = C._sections(d)
    s = next(s for n, s, _ in secs if n == name)
    return s[4], s[5]


def test_nvrtc_and_ptxas_cubins_are_canonically_equal(compiled):
    ptxas = cubin_check.find_ptxas()
    if ptxas is None:
        pytest.skip("needs ptxas (CUDA toolkit or nvidia-cuda-nvcc)")
    local = cubin_check.assemble(ptxas, compiled.ptx, "sm_80")
    assert local != compiled.cubin                                  # never byte-identical (the tool note)
    assert C.canonical(local) == C.canonical(compiled.cubin)
    assert cubin_check.check_image(compiled.cubin, compiled.ptx, "sm_80", ptxas,
                                   cubin_check.ptxas_version(ptxas)) == ("match", "")
    note = C.tool_note(compiled.cubin)
    assert "ptxas" in note and any(s.startswith("Cuda compilation tools") for s in note)


def test_a_changed_code_byte_differs(compiled):
    d = bytearray(compiled.cubin)
    off, size = _section(bytes(d), ".text.plus_k")
    d[off + size // 2] ^= 0x40
    assert C.canonical(bytes(d)) != C.canonical(compiled.cubin)


def test_the_tool_note_is_left_out(compiled):
    d = bytearray(compiled.cubin)
    off, size = _section(bytes(d), C.TOOL_NOTE)
    at = bytes(d).index(b"-arch", off, off + size)
    d[at:at + 5] = b"-ARCH"
    assert C.canonical(bytes(d)) == C.canonical(compiled.cubin)


def test_code_hidden_between_sections_is_refused(compiled):
    d = bytearray(compiled.cubin)
    hdr, secs, _ = C._sections(bytes(d))
    spans = sorted([(s[4], s[4] + s[5]) for _, s, _ in secs if s[1] != 8 and s[5]]
                   + [(0, 64), (hdr[6], hdr[6] + hdr[11] * hdr[12]), (hdr[5], hdr[5] + hdr[9] * hdr[10])])
    ends = [max(hi for _, hi in spans[:i + 1]) for i in range(len(spans))]
    gap = next(end for end, (nlo, _) in zip(ends, spans[1:]) if nlo > end)
    d[gap] = 0xCC
    with pytest.raises(ValueError, match="nonzero bytes at offsets"):
        C.canonical(bytes(d))


def test_a_segment_pointed_elsewhere_differs(compiled):
    d = bytearray(compiled.cubin)
    hdr, _, phdrs = C._sections(bytes(d))
    k = next(i for i, p in enumerate(phdrs) if p[0] == 1 and p[2] != hdr[5])       # a PT_LOAD of a section
    off_text, _ = _section(bytes(d), ".text.plus_k")
    target = next(s[4] for _, s, _ in C._sections(bytes(d))[1] if s[1] == 1 and s[5] and s[4] != phdrs[k][2])
    struct.pack_into("<Q", d, hdr[5] + k * hdr[9] + 8, target if target != off_text else off_text)
    assert C.canonical(bytes(d)) != C.canonical(compiled.cubin)


def test_a_patched_instruction_is_a_mismatch(compiled):
    """verify's check of one image (cubin_check.check_image): the same cubin with one code byte changed."""
    ptxas = cubin_check.find_ptxas()
    if ptxas is None:
        pytest.skip("needs ptxas (CUDA toolkit or nvidia-cuda-nvcc)")
    d = bytearray(compiled.cubin)
    off, size = _section(bytes(d), ".text.plus_k")
    d[off + 16] ^= 0x01
    status, why = cubin_check.check_image(bytes(d), compiled.ptx, "sm_80", ptxas, cubin_check.ptxas_version(ptxas))
    assert status == "MISMATCH" and "not what its PTX assembles to" in why
