"""Random but valid feeds for zoo models (numpy + onnx only, no torch)."""

from __future__ import annotations

import os
import re
from typing import Union

import numpy as np
import onnx

META_PREFIX = "plus_ep.zoo."
_SEQ_DIMS = ("seq", "dec_seq", "sequence", "sequence_length", "seq_len")
_INT_INPUTS_DEFAULT_VOCAB = 1000


def _load_graph_only(src) -> onnx.ModelProto:
    if isinstance(src, onnx.ModelProto):
        return src
    return onnx.load(os.fspath(src), load_external_data=False)


def metadata(model: onnx.ModelProto) -> dict[str, str]:
    """The ``plus_ep.zoo.*`` metadata written at export (prefix stripped)."""
    return {p.key[len(META_PREFIX):]: p.value for p in model.metadata_props
            if p.key.startswith(META_PREFIX)}


def _guess_vocab(model: onnx.ModelProto, input_name: str) -> int | None:
    """Rows of the embedding table gathered by ``input_name`` (1st consumer)."""
    inits = {i.name: i for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Gather" and len(node.input) > 1 and node.input[1] == input_name:
            init = inits.get(node.input[0])
            if init is not None and init.dims:
                return int(init.dims[0])
    return None


def _symbol(name: str, axis: int, batch: int, seq: int, dec_seq: int) -> int:
    if name == "dec_seq":
        return dec_seq
    if name in _SEQ_DIMS or (axis == 1 and name != "batch"):
        return seq
    return batch


_EXPR = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\s*[*+\-/]\s*([A-Za-z_][A-Za-z0-9_]*|[0-9]+))+$")


def _expression(text: str, axis: int, batch: int, seq: int, dec_seq: int) -> int | None:
    """A dim_param that is arithmetic over symbols (`batch*seq`, `seq+1`, `2*seq` written `seq*2`), as
    exporters and PlusEP's rewriter write them: each symbol gets its usual value, the result must be a
    positive whole number."""
    if not _EXPR.match(text.strip()):
        return None
    import sympy
    expr = sympy.sympify(text)
    values = {s: _symbol(str(s), -1, batch, seq, dec_seq) for s in expr.free_symbols}
    v = expr.subs(values)
    if not v.is_integer or int(v) < 1:
        raise ValueError(f"dimension {text!r} (axis {axis}) evaluates to {v} with batch={batch}, seq={seq}; "
                         "pass the inputs explicitly (--inputs)")
    return int(v)


def _shape(vi: onnx.ValueInfoProto, batch: int, seq: int, dec_seq: int) -> tuple[int, ...]:
    dims = []
    for i, d in enumerate(vi.type.tensor_type.shape.dim):
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
            continue
        value = _expression(d.dim_param, i, batch, seq, dec_seq) if d.dim_param else None
        dims.append(value if value is not None else _symbol(d.dim_param, i, batch, seq, dec_seq))
    return tuple(dims)


def random_feeds(specs, meta: dict[str, str], batch: int, seq: int,
                 dec_seq: int | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """``specs``: sequence of (name, numpy dtype, concrete shape)."""
    rng = np.random.default_rng(seed)
    vocab = int(meta.get("vocab_size", _INT_INPUTS_DEFAULT_VOCAB))
    type_vocab = int(meta.get("type_vocab_size", 2))
    feeds: dict[str, np.ndarray] = {}
    for name, dtype, shape in specs:
        dtype = np.dtype(dtype)
        if "mask" in name:
            arr = np.ones(shape, dtype=dtype)
            if len(shape) == 2 and shape[1] > 1:
                # right padding on the last row: zero out the tail (keep >= 1 token)
                pad = max(1, shape[1] // 3)
                arr[-1, shape[1] - pad:] = 0
        elif name == "token_type_ids":
            arr = rng.integers(0, type_vocab, size=shape).astype(dtype)
        elif np.issubdtype(dtype, np.integer):
            arr = rng.integers(0, vocab, size=shape).astype(dtype)
        elif np.issubdtype(dtype, np.floating):
            arr = rng.standard_normal(shape).astype(dtype)
        elif dtype == np.bool_:
            arr = np.ones(shape, dtype=dtype)
        else:
            raise TypeError(f"cannot make a random feed for {name!r} of dtype {dtype}")
        feeds[name] = arr
    return feeds


def sample_inputs(model_path_or_proto: Union[str, os.PathLike, onnx.ModelProto],
                  batch: int = 2, seq: int = 7, seed: int = 0,
                  dec_seq: int | None = None) -> dict[str, np.ndarray]:
    """Valid random feeds for every graph input of an ONNX model.

    int64 ids are drawn from ``[0, vocab)`` (vocab from the zoo metadata, else
    from the embedding table the ids index), attention masks are ones with the
    tail of the last row zeroed (right padding), ``pixel_values`` are standard
    normal float32. Symbolic dims named ``batch`` get ``batch``, ``dec_seq`` get
    ``dec_seq`` (default ``seq``), other symbolic dims get ``seq``.
    """
    model = _load_graph_only(model_path_or_proto)
    meta = metadata(model)
    initializer_names = {i.name for i in model.graph.initializer}
    dec_seq = seq if dec_seq is None else dec_seq
    specs = []
    for vi in model.graph.input:
        if vi.name in initializer_names:
            continue
        dtype = onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        specs.append((vi.name, dtype, _shape(vi, batch, seq, dec_seq)))
        if "vocab_size" not in meta and np.issubdtype(dtype, np.integer) and "mask" not in vi.name \
                and vi.name != "token_type_ids":
            v = _guess_vocab(model, vi.name)
            if v is not None:
                meta["vocab_size"] = str(v)
    return random_feeds(specs, meta, batch, seq, dec_seq, seed)
