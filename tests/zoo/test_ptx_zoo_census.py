"""Census of the generated kernels: every subgraph of every zoo model (six families x two exporters,
small, 2 layers) rendered for sm_80 and sm_90a as the rewrite renders it (its fp32_math), compiled to
PTX, and every opcode-with-modifiers form NVRTC emits is implemented by the PTX interpreter. The list of
forms is generated from the PTX, never typed.

The row and point-wise kernels are compiled in full (each has one variant); of a GEMM or attention
subgraph the first variant of its route menu is compiled (its hooks: the prologue / epilogue code this
subgraph adds), since the template x config x dtype x arch matrix itself is the census of
tests/emulated/test_ptx_census.py. Sources that differ only in comments are compiled once per arch."""
from __future__ import annotations

import time
from collections import Counter

import pytest

from plus_ep.kernels.ptx.census import census
from plus_ep.kernels.target import Target
from tests.support import zoo_models
from tests.support.ptx_sources import compile_all

pytestmark = pytest.mark.zoo

ARCHS = ("sm_80", "sm_90a")


def _body(source: str) -> str:
    return "\n".join(ln for ln in source.splitlines() if not ln.lstrip().startswith("//"))


def zoo_sources():
    """[(name, source, arch)] and Counter of templates rendered (every subgraph, every arch)."""
    from plus_ep import zoo
    from plus_ep.kernels.render import render
    from plus_ep.rewrite import rewrite_detailed
    jobs, seen, templates = [], set(), Counter()
    for family in zoo_models.FAMILIES:         # the six transformer families (the census's reference set)
        for exporter in zoo.EXPORTERS:
            r = rewrite_detailed(zoo.load(family, exporter, "small", layers=2))
            assert r.subgraphs, (family, exporter)
            for i, sg in enumerate(r.subgraphs):
                ins, outs = r.view.graph_index.boundary(sg.nodes)
                for arch in ARCHS:
                    rd = render(r.view, sg, ins, outs, Target(arch, r.fp32_math), node_name="census")
                    templates[rd.template] += 1
                    variants = rd.variants if rd.template in ("pointwise", "row_reduce") \
                        else rd.variants[:1]
                    for v in variants:
                        key = (_body(v.source), arch)
                        if key in seen:
                            continue
                        seen.add(key)
                        jobs.append((f"{family}-{exporter}-{i}-{sg.pattern.name}-{v.name}", v.source, arch))
    return jobs, templates


def test_every_form_of_the_zoo_kernels_is_implemented():
    pytest.importorskip("torch", reason="zoo exports need the [models] extra (torch, transformers)")
    pytest.importorskip("transformers", reason="zoo exports need the [models] extra (torch, transformers)")
    t0 = time.perf_counter()
    jobs, templates = zoo_sources()
    # the zoo renders all kinds of generated kernels: row, point-wise, GEMM (with row norms) and attention
    assert {"pointwise", "row_reduce", "gemm", "flash_attention"} <= set(templates), templates
    texts = compile_all(jobs, workers=2)
    failed = [(j[0], j[2], t) for j, t in zip(jobs, texts) if isinstance(t, Exception)]
    assert not failed, f"sources that do not compile: {failed[:5]}"
    total, lacking = Counter(), {}
    for (name, _, arch), text in zip(jobs, texts):
        found, lacking_here = census(text)
        total.update(found)
        for form, (line, why) in lacking_here.items():
            lacking.setdefault(form, (f"{name} [{arch}] PTX line {line}", why))
    assert len(total) > 50, total
    assert not lacking, "forms the interpreter lacks:\n" + "\n".join(
        f"  {f}: first at {where} ({why})" for f, (where, why) in sorted(lacking.items()))
    print(f"zoo census: {sum(templates.values())} renders, {len(jobs)} compiles, {len(total)} forms, "
          f"{time.perf_counter() - t0:.1f}s")
