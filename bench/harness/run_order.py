"""The order of the GPU run, most important first, so that a budget cut drops the least important.

A unit is one contender on one model, dtype and exporter at a list of shapes, in one session:
1. the first model (BERT-base) in the first dtype (fp16), batch 1 and 16 at seq 128, every contender
   but max-autotune, on the first exporter;
2. the other models likewise;
3. max-autotune on the first model;
4. the other dtypes (fp32), every model;
5. the other exporters (ONNX contenders only: torch does not read the export);
6. max-autotune on the rest;
7. the dynamic sweep (batch x seq in one session per contender), first dtype, models in order.
"""
from __future__ import annotations

from dataclasses import dataclass

from bench.harness.contenders import CONTENDERS

ORDER = ("ort", "plus_ep", "plus_ep_cuda_graph", "ort_cuda_graph", "ort_optimizer", "torch_eager",
         "torch_compile", "torch_compile_max_autotune")
LATE = ("torch_compile_max_autotune",)
SWEEP_CONTENDERS = ("ort", "plus_ep", "plus_ep_cuda_graph", "torch_eager", "torch_compile")
# Policy, not a measurement: a unit starts only while at least this much of the budget is left.
START_WITH_S = {"torch_compile": 60.0, "torch_compile_max_autotune": 240.0}
START_WITH_DEFAULT_S = 10.0


@dataclass(frozen=True)
class Unit:
    model: str
    dtype: str
    exporter: str | None       # None for torch contenders
    contender: str
    shapes: tuple              # ((batch, seq), ...)
    sweep: bool = False

    def start_with_s(self) -> float:
        return START_WITH_S.get(self.contender, START_WITH_DEFAULT_S)


def sweep_shapes(model: str, batches, seqs) -> tuple:
    """ViT's sequence is fixed by its image: sweep its batch only."""
    if model == "vit":
        return tuple((b, seqs[0]) for b in batches)
    return tuple((b, s) for s in seqs for b in batches)


def build(models, dtypes, exporters, contenders, shapes, sweep_batches=(), sweep_seqs=(),
          sweep_contenders=SWEEP_CONTENDERS, sweep_dtypes=None) -> list[Unit]:
    unknown = set(contenders) - set(CONTENDERS)
    if unknown:
        raise ValueError(f"unknown contender(s) {sorted(unknown)}; known: {list(CONTENDERS)}")
    cs = [c for c in ORDER if c in contenders]
    onnx = [c for c in cs if CONTENDERS[c].uses_onnx]
    early, late = [c for c in cs if c not in LATE], [c for c in cs if c in LATE]
    first, rest = list(models[:1]), list(models[1:])
    units = []

    def block(ms, dtype, exs, names, shp=tuple(shapes), sweep=False):
        for m in ms:
            for c in names:
                for ex in (exs if CONTENDERS[c].uses_onnx else [None]):
                    units.append(Unit(m, dtype, ex, c, tuple(shp) if not sweep else sweep_shapes(m, *shp), sweep))

    block(first, dtypes[0], exporters[:1], early)
    block(rest, dtypes[0], exporters[:1], early)
    block(first, dtypes[0], exporters[:1], late)
    for dt in dtypes[1:]:
        block(models, dt, exporters[:1], early)
    for dt in dtypes:
        block(models, dt, exporters[1:], onnx)
    block(rest, dtypes[0], exporters[:1], late)
    for dt in dtypes[1:]:
        block(models, dt, exporters[:1], late)
    if sweep_batches and sweep_seqs:
        for dt in (sweep_dtypes or dtypes[:1]):
            block(models, dt, exporters[:1], [c for c in cs if c in sweep_contenders],
                  (tuple(sweep_batches), tuple(sweep_seqs)), sweep=True)
    return units
