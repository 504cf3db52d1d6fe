"""Export zoo models to ONNX with the TorchScript or the dynamo exporter."""

from __future__ import annotations

import os
import pathlib
import tempfile
import time
import warnings

import numpy as np
import onnx

from . import _deps, cache
from .configs import check_args, config as make_config, resolve_layers
from .. import progress
from ..feeds import META_PREFIX, random_feeds, sample_inputs
from . import models

OPSET = {"torchscript": 17, "dynamo": 18}
# Shapes of the example inputs used for tracing / torch.export. Deliberately
# not 0/1 and different from each other so nothing gets specialised.
EXAMPLE_BATCH, EXAMPLE_SEQ, EXAMPLE_DEC_SEQ = 2, 8, 5
_TWO_GB = 2**31 - 2**24  # protobuf limit with some headroom
STANDARD_DOMAINS = ("", "ai.onnx")


def example_feeds(family: str, cfg, batch=EXAMPLE_BATCH, seq=EXAMPLE_SEQ,
                  dec_seq=EXAMPLE_DEC_SEQ, seed=0) -> dict[str, np.ndarray]:
    specs = []
    for name in models.INPUTS[family]:
        if name == "pixel_values":
            specs.append((name, np.float32,
                          (batch, cfg.num_channels, cfg.image_size, cfg.image_size)))
        elif name == "input_features":
            specs.append((name, np.float32, (batch, cfg.num_mel_bins, 2 * cfg.max_source_positions)))
        elif name == "decoder_input_ids":
            specs.append((name, np.int64, (batch, dec_seq)))
        else:
            specs.append((name, np.int64, (batch, seq)))
    return random_feeds(specs, _meta_numbers(family, cfg), batch, seq, dec_seq, seed)


def _meta_numbers(family: str, cfg) -> dict[str, str]:
    meta = {}
    if hasattr(cfg, "vocab_size") and family not in ("vit", "whisper"):
        meta["vocab_size"] = str(cfg.vocab_size)
    if getattr(cfg, "type_vocab_size", None):
        meta["type_vocab_size"] = str(cfg.type_vocab_size)
    return meta


# --------------------------------------------------------------------------- exporters

def _export_torchscript(built, args, path: str, opset: int) -> None:
    torch = _deps.torch()
    family = built.family
    dyn = dict(models.input_dims(family))
    dyn.update(models.output_dims(family))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            built.wrapper, args, path,
            dynamo=False,
            opset_version=opset,
            input_names=list(models.INPUTS[family]),
            output_names=list(models.OUTPUTS[family]),
            dynamic_axes=dyn,
            do_constant_folding=True,
        )


def _export_dynamo(built, args, path: str, opset: int) -> None:
    torch = _deps.torch()
    family = built.family
    Dim = torch.export.Dim
    dims: dict[str, object] = {}

    def dim(name):
        if name not in dims:
            dims[name] = Dim(name, min=1, max=4096) if name == "batch" else Dim(name, min=2, max=4096)
        return dims[name]

    dynamic_shapes = {
        name: {axis: dim(n) for axis, n in axes.items()}
        for name, axes in models.input_dims(family).items()
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            built.wrapper, args,
            dynamo=True,
            opset_version=opset,
            input_names=list(models.INPUTS[family]),
            output_names=list(models.OUTPUTS[family]),
            dynamic_shapes=dynamic_shapes,
            optimize=True,
            external_data=True,
            verbose=False,
        )
    program.save(path, external_data=True)


_EXPORTERS = {"torchscript": _export_torchscript, "dynamo": _export_dynamo}


# ---------------------------------------------------------------------- post-processing

def _rename_dims(model: onnx.ModelProto, family: str) -> None:
    """Give the symbolic dims of the graph inputs the zoo names everywhere."""
    mapping: dict[str, str] = {}
    wanted = models.input_dims(family)
    for vi in model.graph.input:
        for axis, name in wanted.get(vi.name, {}).items():
            d = vi.type.tensor_type.shape.dim[axis]
            if d.HasField("dim_param") and d.dim_param and d.dim_param != name:
                mapping[d.dim_param] = name
    if not mapping:
        return
    vis = list(model.graph.input) + list(model.graph.output) + list(model.graph.value_info)
    for vi in vis:
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param in mapping:
                d.dim_param = mapping[d.dim_param]


def _drop_unused_opsets(model: onnx.ModelProto) -> None:
    used = {n.domain for n in model.graph.node}
    keep = [o for o in model.opset_import if o.domain in STANDARD_DOMAINS or o.domain in used]
    del model.opset_import[:]
    model.opset_import.extend(keep)


def _fix_output_dims(model: onnx.ModelProto, family: str, example_shapes) -> None:
    """Static output axes get their value; dynamic ones the zoo names (the
    TorchScript exporter invents names such as ``Reshapelast_hidden_state_dim_2``)."""
    wanted = models.output_dims(family)
    for vi, shape in zip(model.graph.output, example_shapes):
        dims = vi.type.tensor_type.shape.dim
        if len(dims) != len(shape):
            continue
        for axis, d in enumerate(dims):
            name = wanted.get(vi.name, {}).get(axis)
            if name is not None:
                d.dim_param = name
            else:
                d.dim_value = int(shape[axis])


def postprocess(model: onnx.ModelProto, family: str | None, example_shapes=None) -> onnx.ModelProto:
    """Local functions inlined, unused opsets dropped, the zoo's dim names (family None: names kept)."""
    if len(model.functions):
        model = onnx.inliner.inline_local_functions(model)
        del model.functions[:]
    _drop_unused_opsets(model)
    if family is not None:
        _rename_dims(model, family)
    if example_shapes is not None:
        _fix_output_dims(model, family, example_shapes)
    bad = sorted({f"{n.domain}::{n.op_type}" for n in model.graph.node
                  if n.domain not in STANDARD_DOMAINS})
    if bad:
        raise RuntimeError(f"export left non-standard ops: {bad}")
    return model


def _initializer_bytes(model: onnx.ModelProto) -> int:
    total = 0
    for t in model.graph.initializer:
        if t.HasField("raw_data"):
            total += len(t.raw_data)
        else:
            n = int(np.prod(t.dims)) if len(t.dims) else 1
            total += n * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
    return total


def save(model: onnx.ModelProto, path: pathlib.Path) -> None:
    """Write ``model``; weights go to ``<name>.data`` beside it when over protobuf's 2 GB."""
    if _initializer_bytes(model) < _TWO_GB:
        onnx.save_model(model, os.fspath(path))
    else:
        onnx.save_model(model, os.fspath(path), save_as_external_data=True,
                        all_tensors_to_one_file=True, location=path.name + ".data",
                        size_threshold=1024)


def check_symbolic_dims(model: onnx.ModelProto, family: str) -> None:
    wanted = models.input_dims(family)
    for vi in model.graph.input:
        for axis, name in wanted.get(vi.name, {}).items():
            d = vi.type.tensor_type.shape.dim[axis]
            if d.dim_param != name:
                raise RuntimeError(f"input {vi.name} axis {axis}: expected symbolic dim "
                                   f"{name!r}, got {d}")


# ------------------------------------------------------------------------ verification

def compare_with_torch(path, family: str, size: str = "small", layers: int | None = None,
                       shapes=((2, 7), (1, 16)), built=None, atol: float = 1e-4) -> float:
    """Run ORT CPU on ``path`` and the torch model; raise if max |diff| > atol."""
    import onnxruntime as ort

    built = built or models.build(family, size, layers)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(os.fspath(path), so, providers=["CPUExecutionProvider"])
    worst = 0.0
    for batch, seq in shapes:
        feeds = sample_inputs(path, batch=batch, seq=seq)
        got = sess.run(None, feeds)
        want = models.run_torch(built, feeds)
        for name, g, w in zip(models.OUTPUTS[family], got, want):
            if g.shape != w.shape:
                raise AssertionError(f"{family} {name} at b{batch} s{seq}: ORT shape "
                                     f"{g.shape} != torch {w.shape}")
            diff = float(np.max(np.abs(g.astype(np.float64) - w))) if g.size else 0.0
            worst = max(worst, diff)
            if not diff <= atol:
                raise AssertionError(f"{family} {name} at b{batch} s{seq}: max abs diff "
                                     f"{diff:.3g} > {atol}")
    return worst


# ------------------------------------------------------------------------------ export

def export(family: str, exporter: str, size: str = "small", layers: int | None = None,
           cache_dir=None, verify: bool | None = None, force: bool = False,
           overrides: dict | None = None) -> pathlib.Path:
    """Path of the cached ONNX export of ``family``, exporting it if needed.

    ``verify`` (default: True for size "small") compares ORT CPU with torch
    before the file is put into the cache. ``overrides``: config fields to change
    (e.g. a tinier width for a test); they are part of the cache key.
    """
    check_args(family, size, exporter)
    n_layers = resolve_layers(family, size, layers)
    cfg = make_config(family, size, n_layers, overrides)
    opset = OPSET[exporter]
    directory = cache.cache_dir(cache_dir)
    key_hash = cache.config_hash(cfg, opset)
    target = directory / cache.file_name(family, exporter, size, n_layers, cfg, opset)
    if target.exists() and not force:
        return target
    verify = (size == "small") if verify is None else verify

    torch = _deps.torch()
    directory.mkdir(parents=True, exist_ok=True)
    with progress.task(f"zoo: exporting {family} ({exporter}, {size}, {n_layers} layers)"):
        return _export(family, exporter, size, n_layers, cfg, opset, key_hash, directory, target, verify, torch)


def _export(family, exporter, size, n_layers, cfg, opset, key_hash, directory, target, verify, torch):
    built = models.build(family, size, n_layers, cfg=cfg)
    args = models.torch_inputs(family, example_feeds(family, cfg))
    with tempfile.TemporaryDirectory(dir=directory, prefix=".tmp-") as td:
        raw = os.path.join(td, "raw.onnx")
        t0 = time.perf_counter()
        with torch.no_grad():
            example_shapes = [tuple(o.shape) for o in built.wrapper(*args)]
            _EXPORTERS[exporter](built, args, raw, opset)
        model = onnx.load(raw, load_external_data=True)
        model = postprocess(model, family, example_shapes)
        seconds = time.perf_counter() - t0
        meta = {
            "family": family, "exporter": exporter, "size": size, "layers": str(n_layers),
            "opset": str(opset),
            "attn_implementation": str(getattr(built.model.config, "_attn_implementation", None)),
            "torch_version": torch.__version__,
            "transformers_version": _deps.transformers().__version__,
            "config_hash": key_hash,
            "export_seconds": f"{seconds:.2f}",
            **_meta_numbers(family, cfg),
        }
        for k, v in meta.items():
            model.metadata_props.add(key=META_PREFIX + k, value=v)
        check_symbolic_dims(model, family)
        staged = pathlib.Path(td) / target.name
        save(model, staged)
        del model
        onnx.checker.check_model(os.fspath(staged), full_check=False)
        if verify:
            compare_with_torch(staged, family, size, n_layers, built=built)
        publish(staged, target)
    return target


def publish(staged: pathlib.Path, target: pathlib.Path) -> None:
    """Move a model written by `save` (and its ``.data`` file, data first) from a staging folder to
    ``target``."""
    data = staged.with_name(staged.name + ".data")
    if data.exists():
        os.replace(data, target.with_name(target.name + ".data"))
    os.replace(staged, target)
