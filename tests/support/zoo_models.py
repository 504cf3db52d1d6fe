"""The 12 model-zoo exports the acceptance tests run on (small width, full depth)."""
import pytest

FAMILIES = ("bert", "albert", "gpt2", "t5", "vit", "llama")
EXPORTERS = ("torchscript", "dynamo")
# transformer layers and attention blocks per family at the zoo's small size
LAYERS = {"bert": 12, "albert": 12, "gpt2": 12, "vit": 12, "t5": 24, "llama": 4}
ATTENTION = {"bert": 12, "albert": 12, "gpt2": 12, "vit": 12, "t5": 36, "llama": 4}
PER_BLOCK = {"llama": 10}          # data kernels allowed per attention block (+6 per model)

CASES = [pytest.param(f, e, id=f"{f}-{e}") for f in FAMILIES for e in EXPORTERS]


def zoo_path(family, exporter):
    zoo = pytest.importorskip("plus_ep.zoo")
    pytest.importorskip("torch")
    layers = 4 if family == "llama" else 12
    return zoo.export(family, exporter, "small", layers=layers)
