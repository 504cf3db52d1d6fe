"""ONNX exports of the bench models with both torch exporters, fp32 and fp16, cached on disk.

    path = onnx_path("bert", "dynamo", "fp16", size="real")

fp32: ``torch.onnx.export`` of the fp32 wrapper (TorchScript: opset 17, ``dynamic_axes``; dynamo:
opset 18, ``dynamic_shapes``), local functions inlined by the zoo's post-processing.

fp16: the fp32 export converted by ``onnxruntime.transformers.float16.convert_float_to_float16``
(``keep_io_types=False``). Exporting the ``.half()`` torch model instead is not an option for both
exporters: the TorchScript exporter writes an invalid graph for it (LayerNormalization bound to
float and float16, checked with torch 2.13). Conversion gives both exporters the same fp16 route,
and it rounds weights to fp16 to nearest like torch's ``.half()``, so torch fp16 and ONNX fp16 run
the same weights. The cache folder is ``$PLUS_EP_BENCH_DIR`` or ``<zoo cache>/bench``.
"""
from __future__ import annotations

import hashlib
import os
import pathlib
import tempfile
import time
import warnings

import onnx

from plus_ep import config
from plus_ep.zoo import cache as zoo_cache
from plus_ep.zoo.exporters import EXAMPLE_BATCH, EXAMPLE_SEQ, OPSET, postprocess, publish, save

from bench.harness import model_set

EXPORTERS = ("torchscript", "dynamo")
FORMAT = 1                     # bump when the wrappers or this file change the produced graphs


def cache_dir() -> pathlib.Path:
    return config.path("PLUS_EP_BENCH_DIR") or zoo_cache.cache_dir() / "bench"


def _key(name, exporter, size, layers, cfg) -> str:
    blob = f"{zoo_cache.config_hash(cfg, OPSET[exporter])}|{name}|{FORMAT}".encode()
    return f"{name}-{exporter}-{size}-L{layers}-{hashlib.sha256(blob).hexdigest()[:10]}"


def _dynamic(spec):
    return {i.name: {a: d for a, d in enumerate(i.dims) if d in ("batch", "seq")} for i in spec.inputs}


def _export_torchscript(wrapper, args, spec, path):
    import torch
    dyn = {**_dynamic(spec), **spec.out_dims}
    torch.onnx.export(wrapper, args, path, dynamo=False, opset_version=OPSET["torchscript"],
                      input_names=[i.name for i in spec.inputs], output_names=list(spec.outputs),
                      dynamic_axes=dyn, do_constant_folding=True)


def _export_dynamo(wrapper, args, spec, path):
    import torch
    dims = {"batch": torch.export.Dim("batch", min=1, max=4096), "seq": torch.export.Dim("seq", min=2, max=4096)}
    shapes = {name: {a: dims[d] for a, d in axes.items()} for name, axes in _dynamic(spec).items()}
    program = torch.onnx.export(wrapper, args, dynamo=True, opset_version=OPSET["dynamo"],
                                input_names=[i.name for i in spec.inputs], output_names=list(spec.outputs),
                                dynamic_shapes=shapes, optimize=True, external_data=True, verbose=False)
    program.save(path, external_data=True)


def export_fp32(built: model_set.Built, exporter: str, target: pathlib.Path) -> None:
    import torch
    spec = built.spec
    feeds = model_set.make_feeds(spec, built.config, EXAMPLE_BATCH, EXAMPLE_SEQ)
    args = tuple(torch.from_numpy(feeds[i.name]) for i in spec.inputs)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".tmp-") as td:
        raw = os.path.join(td, "raw.onnx")
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            {"torchscript": _export_torchscript, "dynamo": _export_dynamo}[exporter](built.wrapper, args, spec, raw)
        model = postprocess(onnx.load(raw, load_external_data=True), spec.family)
        staged = pathlib.Path(td) / target.name
        save(model, staged)
        publish(staged, target)


def convert_fp16(src: pathlib.Path, target: pathlib.Path) -> None:
    from onnxruntime.transformers.float16 import convert_float_to_float16
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".tmp-") as td:
        inferred = pathlib.Path(td) / "inferred.onnx"
        onnx.shape_inference.infer_shapes_path(os.fspath(src), os.fspath(inferred))  # works past 2 GB
        model = onnx.load(os.fspath(inferred), load_external_data=False)
        onnx.external_data_helper.load_external_data_for_model(model, os.fspath(src.parent))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = convert_float_to_float16(model, keep_io_types=False, disable_shape_infer=True)
        staged = pathlib.Path(td) / target.name
        save(model, staged)
        publish(staged, target)


def onnx_path(name: str, exporter: str, dtype: str, size: str = "real", layers: int | None = None,
              built=None, log=None) -> pathlib.Path:
    """Cached export of ``name``; ``built()`` (returning the fp32 ``model_set.Built``) saves a rebuild
    on a miss.
    ``log(name, exporter, dtype, seconds)`` is called for every file made now."""
    if exporter not in EXPORTERS:
        raise ValueError(f"unknown exporter {exporter!r}; expected one of {EXPORTERS}")
    cfg = model_set.config(name, size, layers)
    n_layers = model_set.layers(model_set.SPECS[name], cfg)
    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    stem = _key(name, exporter, size, n_layers, cfg)
    fp32 = directory / f"{stem}-fp32.onnx"
    if not fp32.exists():
        t0 = time.perf_counter()
        export_fp32(built() if built else model_set.build(name, size, layers), exporter, fp32)
        if log:
            log(name, exporter, "fp32", time.perf_counter() - t0)
    if dtype == "fp32":
        return fp32
    if dtype != "fp16":
        raise ValueError(f"unknown dtype {dtype!r}; expected fp32 or fp16")
    fp16 = directory / f"{stem}-fp16.onnx"
    if not fp16.exists():
        t0 = time.perf_counter()
        convert_fp16(fp32, fp16)
        if log:
            log(name, exporter, "fp16", time.perf_counter() - t0)
    return fp16
