"""Bugs planted in real kernels, for the tests of `plus-ep verify` (tests/emulated/test_verify_planted.py).

A one-layer BERT (hidden 64, 2 heads of 32, FFN 128, vocabulary 50) with every bias zero and every
LayerNorm weight one (a fresh initialisation), rewritten for sm_80 with TF32 math: its attention runs
the TF32 tensor-core template (mma.sync m16n8k8), its GEMMs the TF32 GEMM template. Bugs are planted:

* at the source level, through the override folder (PLUS_EP_OVERRIDE_DIR, kernels/compile/sources.py): the
  generated `.cu` of one node is edited, or the template it includes is inlined with an edit
  (swapped A-fragment registers in QK^T, softmax in base 2, a missed online-softmax rescale, the scale
  1/d instead of 1/sqrt(d), a bias added with the wrong sign or not at all), and the model rewritten,
  so the pack is a consistent build of a wrong kernel;
* in the packs: a cubin swapped between two GEMM nodes, or a second PTX copy of one cubin that differs.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from plus_ep.kernels.compile import nvrtc
from plus_ep.kernels.wire import pack
from tests.support.emulated_models import packs_of, set_pack



def zero_bias_bert() -> onnx.ModelProto:
    from plus_ep.demo_model import build_bert
    m = build_bert(layers=1, hidden=64, heads=2, intermediate=128, vocab=50, max_pos=128)
    for i, t in enumerate(m.graph.initializer):
        a = numpy_helper.to_array(t)
        if t.name.endswith("bias"):
            m.graph.initializer[i].CopyFrom(numpy_helper.from_array(np.zeros_like(a), t.name))
        elif t.name.endswith("LayerNorm.weight"):
            m.graph.initializer[i].CopyFrom(numpy_helper.from_array(np.ones_like(a), t.name))
    return m


def rewrite(model, monkeypatch, dump: Path | None = None, override: Path | None = None,
            fp32_math: str = "tf32") -> onnx.ModelProto:
    import plus_ep
    for var, folder in (("PLUS_EP_DUMP_DIR", dump), ("PLUS_EP_OVERRIDE_DIR", override)):
        if folder is None:
            monkeypatch.delenv(var, raising=False)
        else:
            monkeypatch.setenv(var, str(folder))
    r = plus_ep.rewrite_detailed(model, archs=["sm_80"], fp32_math=fp32_math)
    assert not r.kernels.failures, r.kernels.failures
    return r.model


def sources_of(dump: Path, node: str) -> list[Path]:
    """The dumped sources of one node (`plus_ep/gemm/4` -> plus_ep_gemm_4.*.cu), every variant."""
    stem = node.replace("/", "_") + "."
    return sorted(p for p in dump.iterdir() if p.name.startswith(stem))


def plant(dump: Path, override: Path, node: str, edit) -> int:
    """Write edit(text) of every source of `node` to the override folder; returns how many changed."""
    override.mkdir(parents=True, exist_ok=True)
    changed = 0
    for src in sources_of(dump, node):
        text = src.read_text()
        new = edit(text)
        if new != text:
            changed += 1
            (override / src.name).write_text(new)
    return changed


def with_template(edit_template):
    """An edit of a generated source that inlines its template (`#include "attention.cuh"`) edited."""
    def edit(text: str) -> str:
        m = re.search(r'#include "(attention|gemm)\.cuh"', text)
        if not m:
            return text
        template = nvrtc.template_files()[f"{m.group(1)}.cuh"].read_text()
        new = edit_template(template)
        assert new != template, "the template edit matched nothing"
        return text.replace(m.group(0), new)
    return edit


def replace_once(old: str, new: str):
    def edit(text: str) -> str:
        assert text.count(old) >= 1, f"{old!r} not in the text"
        return text.replace(old, new)
    return edit


# --- the template edits (kernels/families/flash_attention/attention.cuh, tensor-core path) ---
SWAP_A_FRAGMENT = replace_once(
    "        for (int np = 0; np < NKT / 2; ++np) {\n          unsigned bf[4];",
    "        { const unsigned t_ = a[1]; a[1] = a[2]; a[2] = t_; }\n"
    "        for (int np = 0; np < NKT / 2; ++np) {\n          unsigned bf[4];")
SOFTMAX_BASE_2 = replace_once("constexpr float LOG2E = 1.4426950408889634f;", "constexpr float LOG2E = 1.0f;")
NO_RESCALE = replace_once("      o[n][2 * rh] *= alpha;\n      o[n][2 * rh + 1] *= alpha;\n", "")


def swap_cubins(model: onnx.ModelProto, a: str, b: str, arch: str = "sm_80") -> None:
    """Swap image 0's cubin between the packs of nodes a and b; each PTX stays where it was."""
    na, nb = (next(n for n in model.graph.node if n.name == x) for x in (a, b))
    ia, ib = pack.parse(packs_of(na)[arch]), pack.parse(packs_of(nb)[arch])
    ia[0], ib[0] = pack.Image(ib[0].cubin, ia[0].ptx), pack.Image(ia[0].cubin, ib[0].ptx)
    set_pack(na, arch, pack.write(ia))
    set_pack(nb, arch, pack.write(ib))


def second_copy_differs(model: onnx.ModelProto, a: str, b: str, arch: str = "sm_80") -> None:
    """Node b's image 0 becomes node a's cubin with a PTX copy that differs in one instruction and is
    tied to that cubin (as a pack build bug would write it): one cubin, two different kernels."""
    na, nb = (next(n for n in model.graph.node if n.name == x) for x in (a, b))
    ia, ib = pack.parse(packs_of(na)[arch]), pack.parse(packs_of(nb)[arch])
    text = pack.untied(ia[0].ptx)
    edited = re.sub(r"\badd\.f32\b", "sub.f32", text, count=1)
    assert edited != text
    ib[0] = pack.Image(ia[0].cubin, pack.tie(ia[0].cubin, edited))
    set_pack(nb, arch, pack.write(ib))
